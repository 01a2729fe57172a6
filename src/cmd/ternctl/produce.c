/* `ternctl produce`: publish a message (the argument, a file or stdin), or
 * with --lines one message per input line.
 *
 *   - one message: POST /v1/topics/T/produce[?key=][&partition=];
 *   - --lines: POST /v1/topics/T/produce/batch, up to 1000 lines or about
 *     8 MiB of JSON a request (each batch is all or nothing); empty lines
 *     are skipped (a message has at least one byte);
 *   - --delay: /v1 has no deferred produce, so nsqd's POST /pub?defer=
 *     (one message) or /mpub?defer= (lines); no key or partition then. */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CMD             "produce"
#define INPUT_MAX       (256 * TN_MIB)
#define BATCH_MAX       1000
#define BATCH_MAX_BYTES (8 * TN_MIB)

/* The whole of fd into b. */
static int slurp(int fd, const char *name, tn_buf_t *b)
{
    for (;;) {
        if (tn_buf_reserve(b, 65536) != 0) {
            fprintf(stderr, "ternctl: out of memory reading %s\n", name);
            return TN_CTL_FAIL;
        }
        ssize_t r = read(fd, b->base + b->len, 65536);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            fprintf(stderr, "ternctl: cannot read %s: %s\n", name, strerror(errno));
            return TN_CTL_FAIL;
        }
        if (r == 0)
            return TN_CTL_OK;
        b->len += (size_t)r;
        if (tn_buf_size(b) > INPUT_MAX) {
            fprintf(stderr, "ternctl: %s is larger than %llu MiB\n", name,
                    (unsigned long long)(INPUT_MAX / TN_MIB));
            return TN_CTL_FAIL;
        }
    }
}

typedef struct {
    tn_ctl_t *c;
    const char *topic;
    const char *key;
    int64_t partition; /* -1: none */
    int64_t delay_ms;  /* -1: none */
    char topic_esc[800];
    uint64_t produced;
} job_t;

static int post(job_t *j, const char *path, const char *body, size_t len, int want, uint64_t n)
{
    tn_ctl_resp_t r;
    if (tn_ctl_call(j->c, "POST", path, body, len, &r) != 0)
        return TN_CTL_FAIL;
    int rc = TN_CTL_OK;
    if (r.status != want) {
        char what[600];
        if (j->produced > 0)
            snprintf(what, sizeof(what), "produce to %s (after %" PRIu64 " messages went in)",
                     j->topic, j->produced);
        else
            snprintf(what, sizeof(what), "produce to %s", j->topic);
        rc = tn_ctl_fail(&r, what);
    } else {
        j->produced += n;
    }
    tn_ctl_resp_fini(&r);
    return rc;
}

static int one(job_t *j, const char *msg, size_t len)
{
    char path[2048], ek[3200];
    if (j->delay_ms >= 0) {
        snprintf(path, sizeof(path), "/pub?topic=%s&defer=%" PRId64, j->topic_esc, j->delay_ms);
        return post(j, path, msg, len, 200, 1);
    }
    int n = snprintf(path, sizeof(path), "/v1/topics/%s/produce", j->topic_esc);
    const char *sep = "?";
    if (j->key != NULL) {
        n += snprintf(path + n, sizeof(path) - (size_t)n, "%skey=%s", sep,
                      tn_ctl_esc(j->key, ek, sizeof(ek)));
        sep = "&";
    }
    if (j->partition >= 0)
        snprintf(path + n, sizeof(path) - (size_t)n, "%spartition=%" PRId64, sep, j->partition);
    return post(j, path, msg, len, 202, 1);
}

/* Append one batch element for line [p, p+len). */
static int element(job_t *j, tn_buf_t *b, const char *p, size_t len)
{
    int rc = tn_buf_append(b, tn_buf_size(b) > 1 ? ",{\"payload\":\"" : "{\"payload\":\"",
                           tn_buf_size(b) > 1 ? 13 : 12);
    if (tn_utf8_valid(p, len)) {
        rc = rc ? rc : tn_buf_json_escape_n(b, p, len);
        rc = rc ? rc : tn_buf_append(b, "\"", 1);
    } else {
        size_t need = 4 * ((len + 2) / 3) + 1;
        rc = rc ? rc : tn_buf_reserve(b, need);
        if (rc == 0)
            b->len += (size_t)EVP_EncodeBlock((unsigned char *)b->base + b->len,
                                              (const unsigned char *)p, (int)len);
        rc = rc ? rc : tn_buf_append(b, "\",\"payload_encoding\":\"base64\"", 29);
    }
    if (j->key != NULL) {
        rc = rc ? rc : tn_buf_append(b, ",\"key\":\"", 8);
        rc = rc ? rc : tn_buf_json_escape(b, j->key);
        rc = rc ? rc : tn_buf_append(b, "\"", 1);
    }
    if (j->partition >= 0) {
        char s[40];
        int n = snprintf(s, sizeof(s), ",\"partition\":%" PRId64, j->partition);
        rc = rc ? rc : tn_buf_append(b, s, (size_t)n);
    }
    rc = rc ? rc : tn_buf_append(b, "}", 1);
    return rc;
}

static int lines(job_t *j, const char *data, size_t len)
{
    tn_buf_t b;
    tn_buf_init(&b);
    char path[1024];
    if (j->delay_ms >= 0)
        snprintf(path, sizeof(path), "/mpub?topic=%s&defer=%" PRId64, j->topic_esc, j->delay_ms);
    else
        snprintf(path, sizeof(path), "/v1/topics/%s/produce/batch", j->topic_esc);
    int rc = TN_CTL_OK;
    uint64_t in_batch = 0;
    size_t off = 0;
    while (rc == TN_CTL_OK && off <= len) {
        const char *p = data + off;
        const char *nl = off < len ? memchr(p, '\n', len - off) : NULL;
        size_t ll = nl ? (size_t)(nl - p) : len - off;
        off += ll + 1;
        if (ll > 0) {
            if (in_batch == 0)
                tn_buf_append(&b, j->delay_ms >= 0 ? "" : "[", j->delay_ms >= 0 ? 0 : 1);
            int e;
            if (j->delay_ms >= 0) {
                e = in_batch > 0 ? tn_buf_append(&b, "\n", 1) : 0;
                e = e ? e : tn_buf_append(&b, p, ll);
            } else {
                e = element(j, &b, p, ll);
            }
            if (e != 0) {
                fprintf(stderr, "ternctl: out of memory\n");
                rc = TN_CTL_FAIL;
                break;
            }
            in_batch++;
        }
        bool last = off > len;
        if (in_batch > 0 && (last || in_batch == BATCH_MAX || tn_buf_size(&b) >= BATCH_MAX_BYTES)) {
            if (j->delay_ms < 0)
                tn_buf_append(&b, "]", 1);
            rc = post(j, path, tn_buf_data(&b), tn_buf_size(&b), j->delay_ms >= 0 ? 200 : 202,
                      in_batch);
            tn_buf_reset(&b);
            in_batch = 0;
        }
    }
    tn_buf_fini(&b);
    return rc;
}

static int run(tn_ctl_t *c, int argc, char **argv)
{
    enum { O_FILE = 1000, O_LINES, O_KEY, O_PARTITION, O_DELAY };
    static const struct option longs[] = {{"file", required_argument, NULL, O_FILE},
                                          {"lines", no_argument, NULL, O_LINES},
                                          {"key", required_argument, NULL, O_KEY},
                                          {"partition", required_argument, NULL, O_PARTITION},
                                          {"delay", required_argument, NULL, O_DELAY},
                                          {NULL, 0, NULL, 0}};
    job_t j = {.c = c, .partition = -1, .delay_ms = -1};
    const char *file = NULL;
    bool by_line = false;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (ch) {
        case O_FILE:
            file = optarg;
            break;
        case O_LINES:
            by_line = true;
            break;
        case O_KEY:
            j.key = optarg;
            break;
        case O_PARTITION:
            if (tn_ctl_opt_int(CMD, "--partition", optarg, 0, 65535, &j.partition) != 0)
                return TN_CTL_USAGE;
            break;
        case O_DELAY:
            if (tn_ctl_opt_ms(CMD, "--delay", optarg, 0, 3600000, &j.delay_ms) != 0)
                return TN_CTL_USAGE;
            break;
        default:
            return tn_ctl_usage(CMD, "unknown option %s", argv[optind - 1]);
        }
    }
    int npos = argc - optind;
    if (npos < 1 || npos > 2)
        return tn_ctl_usage(CMD, "give a topic, and a message unless --file or stdin has it");
    if (npos == 2 && file != NULL)
        return tn_ctl_usage(CMD, "give the message as an argument or --file, not both");
    if (j.delay_ms >= 0 && (j.key != NULL || j.partition >= 0))
        return tn_ctl_usage(CMD, "--delay goes through nsqd's /pub, which takes no --key or "
                                 "--partition");
    if (j.key != NULL && j.partition >= 0)
        return tn_ctl_usage(CMD, "--key picks the partition; give --key or --partition");
    j.topic = argv[optind];
    tn_ctl_esc(j.topic, j.topic_esc, sizeof(j.topic_esc));
    tn_buf_t in;
    tn_buf_init(&in);
    const char *data;
    size_t len;
    int rc = TN_CTL_OK;
    if (npos == 2) {
        data = argv[optind + 1];
        len = strlen(data);
    } else {
        int fd = 0;
        if (file != NULL && (fd = open(file, O_RDONLY | O_CLOEXEC)) < 0) {
            fprintf(stderr, "ternctl: cannot open %s: %s\n", file, strerror(errno));
            return TN_CTL_FAIL;
        }
        rc = slurp(fd, file ? file : "stdin", &in);
        if (fd != 0)
            close(fd);
        data = tn_buf_data(&in) ? tn_buf_data(&in) : "";
        len = tn_buf_size(&in);
    }
    if (rc == TN_CTL_OK && len == 0) {
        fprintf(stderr, "ternctl: nothing to produce: the message is empty\n");
        rc = TN_CTL_FAIL;
    }
    if (rc == TN_CTL_OK)
        rc = by_line ? lines(&j, data, len) : one(&j, data, len);
    tn_buf_fini(&in);
    if (rc == TN_CTL_OK) {
        if (tn_ctl_json(c)) {
            tn_buf_t b;
            tn_buf_init(&b);
            tn_buf_append(&b, "{\"topic\":\"", 10);
            tn_buf_json_escape(&b, j.topic);
            char s[64];
            int n = snprintf(s, sizeof(s), "\",\"produced\":%" PRIu64 "}", j.produced);
            tn_buf_append(&b, s, (size_t)n);
            tn_ctl_print_json(tn_buf_data(&b), tn_buf_size(&b));
            tn_buf_fini(&b);
        } else {
            printf("produced %" PRIu64 " message%s to %s\n", j.produced, j.produced == 1 ? "" : "s",
                   j.topic);
        }
    }
    return rc;
}

const tn_ctl_cmd_t tn_ctl_cmd_produce = {
    .name = "produce",
    .summary = "publish a message (argument, --file or stdin), or one per line",
    .help = "usage: ternctl produce TOPIC [MESSAGE] [--file F] [--lines] [--key K]\n"
            "                       [--partition N] [--delay D]\n"
            "\n"
            "The message is MESSAGE, else the contents of --file F, else stdin; the whole\n"
            "input is one message (bytes as they are) unless --lines makes each line one\n"
            "(empty lines skipped; sent as batches of up to 1000, each all or nothing).\n"
            "\n"
            "  --key K        the message's key: picks the partition by hash, so a key's\n"
            "                 messages keep their order\n"
            "  --partition N  pin the partition\n"
            "  --delay D      deliver no sooner than D from now (at most 1h); goes through\n"
            "                 nsqd's /pub?defer= or /mpub?defer= (the /v1 API has no delay),\n"
            "                 without --key or --partition\n"
            "\n"
            "Prints \"produced N messages to TOPIC\" once the server acknowledged them at the\n"
            "topic's durability boundary; --json: {\"topic\":...,\"produced\":N}. A failure\n"
            "part-way through --lines says how many went in before it.\n"
            "\n"
            "Examples:\n"
            "  ternctl produce orders 'order 1234 paid' --key customer-42\n"
            "  ternctl produce orders --file invoice.json\n"
            "  tail -n 100 events.log | ternctl produce events --lines\n",
    .run = run,
};
