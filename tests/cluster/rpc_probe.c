/* tern-rpc-probe: node RPC from outside a cluster, for the cluster tests.
 * It calls NODE_STATUS on a node COUNT times at once from a client of its
 * own, proving the secret read from a file (the cluster's, or a wrong one),
 * and prints one line:
 *   ok N failed M [first error]
 * then, for a call that succeeded, the node's status JSON. Exit 0 when
 * every call succeeded, 3 when none did, 4 when some did.
 *
 * With a wrong secret this is a flood of unauthenticated streams: each
 * call opens a stream whose proof the node refuses.
 *
 * Usage: tern-rpc-probe ADDR SECRET_FILE [COUNT] */
#include "core/platform.h"

#include "cluster/rpc.h"
#include "cluster/wire.h"
#include "core/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned ok, failed, open_calls;
static char first_error[256];
static char status_json[1024];

static void on_reply(void *arg, int status, const tn_wire_reply_t *reply, const char *err)
{
    (void)arg;
    open_calls--;
    if (status == 0 && reply->status == 200) {
        ok++;
        size_t n =
            reply->body_len < sizeof(status_json) - 1 ? reply->body_len : sizeof(status_json) - 1;
        memcpy(status_json, reply->body, n);
        status_json[n] = '\0';
        return;
    }
    failed++;
    if (first_error[0] == '\0') {
        if (status != 0)
            snprintf(first_error, sizeof(first_error), "%s: %s", tn_err_name(status),
                     err != NULL ? err : tn_strerror(status));
        else
            snprintf(first_error, sizeof(first_error), "status %u", reply->status);
    }
}

static void on_closed(void *arg)
{
    *(bool *)arg = true;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s ADDR SECRET_FILE [COUNT]\n", argv[0]);
        return 2;
    }
    unsigned count = argc == 4 ? (unsigned)strtoul(argv[3], NULL, 10) : 1;
    FILE *f = fopen(argv[2], "rb");
    if (f == NULL) {
        fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[2]);
        return 2;
    }
    uint8_t secret[1024];
    size_t len = fread(secret, 1, sizeof(secret), f);
    fclose(f);
    if (len > 0 && secret[len - 1] == '\n')
        len--; /* as ternd reads a secret file */
    if (len == 0 || count == 0) {
        fprintf(stderr, "%s: empty secret or count 0\n", argv[0]);
        return 2;
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_rpc_opts_t o;
    memset(&o, 0, sizeof(o));
    o.bind = "127.0.0.1:0";
    o.secret = secret;
    o.secret_len = len;
    tn_rpc_t *r = NULL;
    char err[256];
    if (tn_rpc_open(&loop, &o, &r, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err);
        return 2;
    }
    for (unsigned i = 0; i < count; i++) {
        int rc = tn_rpc_call(r, argv[1], TN_OP_NODE_STATUS, NULL, 0, 5000, on_reply, NULL, NULL);
        if (rc == 0) {
            open_calls++;
        } else {
            failed++;
            if (first_error[0] == '\0')
                snprintf(first_error, sizeof(first_error), "%s: %s", tn_err_name(rc),
                         tn_strerror(rc));
        }
    }
    while (open_calls > 0)
        uv_run(&loop, UV_RUN_ONCE);
    bool closed = false;
    tn_rpc_close(r, on_closed, &closed);
    while (!closed)
        uv_run(&loop, UV_RUN_ONCE);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    printf("ok %u failed %u%s%s\n", ok, failed, first_error[0] ? " " : "", first_error);
    if (ok > 0)
        printf("%s\n", status_json);
    return failed == 0 ? 0 : ok == 0 ? 3 : 4;
}
