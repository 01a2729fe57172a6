/* Fuzz target: the NSQ V2 command parser over an arbitrary byte stream,
 * parsed command after command as a connection would. Checks: a command
 * never claims more bytes than it was given, its borrowed spans lie inside
 * the input, MPUB's messages add up to its body, `need` is beyond what was
 * given, and every error has a code and a text. IDENTIFY bodies go
 * through the JSON decoder: it accepts (settings stay in range) or refuses
 * with a code and a text, and never touches the settings when it refuses. */
#include "core/platform.h"

#include "core/err.h"
#include "proto/nsq/codec.h"
#include "proto/nsq/identify.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void inside(const tn_iov_t *v, const char *base, size_t len)
{
    if (v->len > 0 && (v->base < base || v->base + v->len > base + len))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const tn_nsq_limits_t lim = {
        .max_line = 256,
        .max_msg_size = 512,
        .max_body_size = 4096,
        .max_mpub_count = 64,
        .max_rdy_count = 2500,
        .max_defer_ms = 3600000,
    };
    const char *buf = (const char *)data;
    size_t off = 0;
    while (off < size) {
        tn_nsq_cmd_t cmd;
        size_t used = 0;
        int rc = tn_nsq_parse(buf + off, size - off, &lim, &cmd, &used);
        if (rc == TN_ESHORT) {
            if (cmd.need != 0 && cmd.need <= size - off)
                abort();
            break;
        }
        if (rc == TN_EPROTO) {
            if (cmd.err == TN_NSQ_E_NONE || cmd.errmsg[0] == '\0')
                abort();
            break;
        }
        if (rc != 0 || used == 0 || used > size - off)
            abort();
        inside(&cmd.topic, buf + off, used);
        inside(&cmd.channel, buf + off, used);
        inside(&cmd.id, buf + off, used);
        inside(&cmd.body, buf + off, used);
        if (cmd.op == TN_NSQ_IDENTIFY) {
            static const tn_nsq_server_opts_t srv = {60000, 65536, 25,   30000, 900000, 2500,
                                                     6,     true,  true, true,  false};
            tn_nsq_client_opts_t c, before;
            tn_nsq_client_defaults(&c, 60000);
            before = c;
            int err = 0;
            char msg[256] = "";
            int irc =
                tn_nsq_identify(cmd.body.base, cmd.body.len, &srv, &c, &err, msg, sizeof(msg));
            if (irc == 0) {
                if (c.heartbeat_ms < 0 || c.heartbeat_ms > 60000 || c.sample_rate < 0 ||
                    c.sample_rate > 99 || c.msg_timeout_ms < 1000 || c.deflate_level < 1 ||
                    c.deflate_level > 6 || (c.deflate && c.snappy) ||
                    strlen(c.user_agent) >= TN_NSQ_CLIENT_STR)
                    abort();
            } else if (irc != TN_EPROTO || err == 0 || msg[0] == '\0' ||
                       memcmp(&c, &before, sizeof(c)) != 0) {
                abort();
            }
        }
        if (cmd.op == TN_NSQ_MPUB) {
            size_t pos = 0, total = 4;
            uint32_t n = 0;
            tn_iov_t m;
            while (tn_nsq_mpub_next(&cmd, &pos, &m)) {
                inside(&m, cmd.body.base, cmd.body.len);
                if (m.len == 0 || m.len > lim.max_msg_size)
                    abort();
                total += 4 + m.len;
                n++;
            }
            if (n != cmd.nmsgs || total != cmd.body.len)
                abort();
        }
        off += used;
    }
    return 0;
}
