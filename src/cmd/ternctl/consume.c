/* `ternctl consume` and `ternctl tail`: read messages and print them.
 *
 * consume takes N messages from a channel (GET /v1/topics/T/consume with
 * max= up to 100 a request), prints them, then acks them
 * (POST .../ack/batch). --peek releases them instead (a nack: extend=0),
 * once all N are printed, so they stay queued; the /v1 API has no
 * non-leasing queue read, so a peeked message's attempts count goes up by
 * one. --partition P --offset O is a replay read that leases nothing.
 *
 * tail prints what arrives: as a consumer of the channel, acking (the
 * default), or with --peek by following every partition's log through
 * replay reads from its high watermark (or the oldest retained offset
 * with --from-start), which takes nothing from any channel. Without -f it
 * stops when nothing more is there; with -f it runs until interrupted.
 *
 * Output: each message's payload on a line (a string as its text, base64
 * payloads decoded, JSON values compact); --json prints the server's
 * message objects, one a line. */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    tn_ctl_t *c;
    const char *cmd;
    const char *topic;
    char topic_esc[800];
    char channel_esc[800];
    int64_t wait_ms;
    char **handles; /* receipt handles to settle (owned) */
    size_t nhandles;
    size_t cap;
} reader_t;

static void print_message(const reader_t *rd, yajl_val m)
{
    if (tn_ctl_json(rd->c)) {
        tn_buf_t b;
        tn_buf_init(&b);
        tn_ctl_json_write(&b, m);
        tn_ctl_print_json(tn_buf_data(&b), tn_buf_size(&b));
        tn_buf_fini(&b);
        return;
    }
    yajl_val p = tn_ctl_get(m, "payload");
    const char *enc = tn_ctl_get_str(m, "payload_encoding");
    if (YAJL_IS_STRING(p) && enc != NULL && strcmp(enc, "base64") == 0) {
        const char *s = YAJL_GET_STRING(p);
        size_t n = strlen(s), out = 0;
        unsigned char *raw = malloc(n + 1);
        if (raw != NULL && tn_base64_decode(s, n, raw, n + 1, &out) == 0)
            fwrite(raw, 1, out, stdout);
        free(raw);
    } else if (YAJL_IS_STRING(p)) {
        const char *text = YAJL_GET_STRING(p);
        fputs(text ? text : "", stdout);
    } else {
        tn_buf_t b;
        tn_buf_init(&b);
        tn_ctl_json_write(&b, p);
        fwrite(tn_buf_data(&b), 1, tn_buf_size(&b), stdout);
        tn_buf_fini(&b);
    }
    fputc('\n', stdout);
}

static void keep_handle(reader_t *rd, yajl_val m)
{
    const char *h = tn_ctl_get_str(m, "receipt_handle");
    if (h == NULL)
        return;
    if (rd->nhandles == rd->cap) {
        size_t cap = rd->cap ? rd->cap * 2 : 128;
        char **n = realloc(rd->handles, cap * sizeof(char *));
        if (n == NULL) {
            fprintf(stderr, "ternctl: out of memory\n");
            exit(TN_CTL_FAIL);
        }
        rd->handles = n;
        rd->cap = cap;
    }
    rd->handles[rd->nhandles] = strdup(h);
    if (rd->handles[rd->nhandles] == NULL) {
        fprintf(stderr, "ternctl: out of memory\n");
        exit(TN_CTL_FAIL);
    }
    rd->nhandles++;
}

/* Ack (or with release, nack) the kept handles in batches of 100. */
static int settle(reader_t *rd, bool release)
{
    if (rd->nhandles == 0)
        return TN_CTL_OK;
    size_t n = rd->nhandles;
    int rc = TN_CTL_OK;
    char path[2048], what[600];
    snprintf(path, sizeof(path), "/v1/topics/%s/ack/batch?channel=%s%s", rd->topic_esc,
             rd->channel_esc, release ? "&extend=0" : "");
    snprintf(what, sizeof(what), "%s messages of %s", release ? "release" : "ack", rd->topic);
    for (size_t off = 0; off < n; off += 100) {
        tn_buf_t b;
        tn_buf_init(&b);
        tn_buf_append(&b, "[", 1);
        for (size_t i = off; i < n && i < off + 100; i++) {
            tn_buf_append(&b, i > off ? ",\"" : "\"", i > off ? 2 : 1);
            tn_buf_json_escape(&b, rd->handles[i]);
            tn_buf_append(&b, "\"", 1);
        }
        tn_buf_append(&b, "]", 1);
        tn_ctl_resp_t r;
        int e = tn_ctl_call(rd->c, "POST", path, tn_buf_data(&b), tn_buf_size(&b), &r);
        tn_buf_fini(&b);
        if (e != 0) {
            rc = TN_CTL_FAIL;
            break;
        }
        if (r.status != 200) {
            rc = tn_ctl_fail(&r, what);
        } else {
            yajl_val v = tn_ctl_parse(&r, what);
            yajl_val res = tn_ctl_get(v, "results");
            for (size_t i = 0; YAJL_IS_ARRAY(res) && i < res->u.array.len; i++) {
                yajl_val x = res->u.array.values[i];
                int64_t st = 0;
                tn_ctl_get_int(x, "status", &st);
                if (st != 204) {
                    const char *err = tn_ctl_get_str(x, "error");
                    fprintf(stderr, "ternctl: %s: handle %s: %" PRId64 " %s\n", what,
                            tn_ctl_get_str(x, "receipt_handle"), st, err ? err : "");
                    rc = TN_CTL_FAIL;
                }
            }
            if (!YAJL_IS_ARRAY(res))
                rc = TN_CTL_FAIL;
            if (v != NULL)
                yajl_tree_free(v);
        }
        tn_ctl_resp_fini(&r);
    }
    for (size_t i = 0; i < n; i++)
        free(rd->handles[i]);
    rd->nhandles = 0;
    return rc;
}

/* One consume request for up to max messages. *got: how many came (0 on a
 * 204); each is printed and its handle kept. */
static int take(reader_t *rd, int64_t max, const char *partition, size_t *got)
{
    char path[2400], what[600];
    int n = snprintf(path, sizeof(path), "/v1/topics/%s/consume?channel=%s&wait=%" PRId64 "ms",
                     rd->topic_esc, rd->channel_esc, rd->wait_ms);
    if (max > 1)
        n += snprintf(path + n, sizeof(path) - (size_t)n, "&max=%" PRId64, max);
    if (partition != NULL)
        snprintf(path + n, sizeof(path) - (size_t)n, "&partition=%s", partition);
    snprintf(what, sizeof(what), "consume from %s", rd->topic);
    *got = 0;
    tn_ctl_resp_t r;
    if (tn_ctl_call(rd->c, "GET", path, NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    int rc = TN_CTL_OK;
    if (r.status == 204) {
        /* nothing within the wait */
    } else if (r.status != 200) {
        rc = tn_ctl_fail(&r, what);
    } else {
        yajl_val v = tn_ctl_parse(&r, what);
        yajl_val list = tn_ctl_get(v, "messages");
        if (v == NULL) {
            rc = TN_CTL_FAIL;
        } else if (YAJL_IS_ARRAY(list)) {
            for (size_t i = 0; i < list->u.array.len; i++) {
                print_message(rd, list->u.array.values[i]);
                keep_handle(rd, list->u.array.values[i]);
            }
            *got = list->u.array.len;
        } else {
            print_message(rd, v);
            keep_handle(rd, v);
            *got = 1;
        }
        if (v != NULL)
            yajl_tree_free(v);
    }
    fflush(stdout);
    tn_ctl_resp_fini(&r);
    return rc;
}

/* A replay read of partition p at *offset: 200 prints it and advances,
 * 204 sets *none. 410 for an aged-out offset jumps to the oldest retained
 * one; for an offset without a record it steps over it. */
static int replay(reader_t *rd, int64_t p, int64_t *offset, bool *none)
{
    char path[1200], what[600];
    snprintf(path, sizeof(path), "/v1/topics/%s/consume?partition=%" PRId64 "&offset=%" PRId64,
             rd->topic_esc, p, *offset);
    snprintf(what, sizeof(what), "read %s partition %" PRId64 " offset %" PRId64, rd->topic, p,
             *offset);
    *none = false;
    tn_ctl_resp_t r;
    if (tn_ctl_call(rd->c, "GET", path, NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    int rc = TN_CTL_OK;
    if (r.status == 204) {
        *none = true;
    } else if (r.status == 410) {
        const char *o = r.body ? strstr(r.body, "oldest retained: ") : NULL;
        int64_t oldest = o ? strtoll(o + 17, NULL, 10) : 0;
        *offset = oldest > *offset ? oldest : *offset + 1;
    } else if (r.status != 200) {
        rc = tn_ctl_fail(&r, what);
    } else {
        yajl_val v = tn_ctl_parse(&r, what);
        if (v == NULL) {
            rc = TN_CTL_FAIL;
        } else {
            print_message(rd, v);
            yajl_tree_free(v);
            (*offset)++;
        }
        fflush(stdout);
    }
    tn_ctl_resp_fini(&r);
    return rc;
}

static int reader_init(reader_t *rd, tn_ctl_t *c, const char *cmd, const char *topic,
                       const char *channel)
{
    memset(rd, 0, sizeof(*rd));
    rd->c = c;
    rd->cmd = cmd;
    rd->topic = topic;
    tn_ctl_esc(topic, rd->topic_esc, sizeof(rd->topic_esc));
    tn_ctl_esc(channel, rd->channel_esc, sizeof(rd->channel_esc));
    /* A long poll must end well inside the request bound. */
    int64_t bound = tn_ctl_timeout_ms(c) - 1000;
    rd->wait_ms = bound < 1000 ? 0 : TN_MIN((int64_t)5000, bound);
    return 0;
}

static int consume_run(tn_ctl_t *c, int argc, char **argv)
{
    enum { O_CHANNEL = 1000, O_WAIT, O_PEEK, O_PARTITION, O_OFFSET };
    static const struct option longs[] = {{"count", required_argument, NULL, 'n'},
                                          {"channel", required_argument, NULL, O_CHANNEL},
                                          {"wait", required_argument, NULL, O_WAIT},
                                          {"peek", no_argument, NULL, O_PEEK},
                                          {"partition", required_argument, NULL, O_PARTITION},
                                          {"offset", required_argument, NULL, O_OFFSET},
                                          {NULL, 0, NULL, 0}};
    const char *cmd = "consume", *channel = "default", *partition = NULL, *wait = NULL;
    int64_t count = 1, offset = -1, pn = -1;
    bool peek = false;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "n:", longs, NULL)) != -1) {
        switch (ch) {
        case 'n':
            if (tn_ctl_opt_int(cmd, "--count", optarg, 1, 1000000, &count) != 0)
                return TN_CTL_USAGE;
            break;
        case O_CHANNEL:
            channel = optarg;
            break;
        case O_WAIT:
            wait = optarg;
            break;
        case O_PEEK:
            peek = true;
            break;
        case O_PARTITION:
            if (tn_ctl_opt_int(cmd, "--partition", optarg, 0, 65535, &pn) != 0)
                return TN_CTL_USAGE;
            partition = optarg;
            break;
        case O_OFFSET:
            if (tn_ctl_opt_int(cmd, "--offset", optarg, 0, INT64_MAX, &offset) != 0)
                return TN_CTL_USAGE;
            break;
        default:
            return tn_ctl_usage(cmd, "unknown option %s", argv[optind - 1]);
        }
    }
    if (argc - optind != 1)
        return tn_ctl_usage(cmd, "give one topic");
    if (offset >= 0 && partition == NULL)
        return tn_ctl_usage(cmd, "--offset needs --partition (a replay read of one partition)");
    reader_t rd;
    reader_init(&rd, c, cmd, argv[optind], channel);
    if (wait != NULL) {
        int64_t w = 0;
        if (tn_ctl_opt_ms(cmd, "--wait", wait, 0, 600000, &w) != 0)
            return TN_CTL_USAGE;
        if (w >= tn_ctl_timeout_ms(c))
            return tn_ctl_usage(cmd, "--wait must be shorter than --timeout (%d ms)",
                                tn_ctl_timeout_ms(c));
        rd.wait_ms = w;
    } else {
        rd.wait_ms = TN_MIN(rd.wait_ms, (int64_t)1000);
    }
    int rc = TN_CTL_OK;
    int64_t got = 0;
    if (offset >= 0) {
        for (; rc == TN_CTL_OK && got < count; got++) {
            bool none = false;
            int64_t before = offset;
            rc = replay(&rd, pn, &offset, &none);
            if (none)
                break;
            if (offset != before + 1)
                got--; /* a jump over a gap printed nothing */
        }
    } else {
        while (rc == TN_CTL_OK && got < count) {
            size_t n = 0;
            rc = take(&rd, TN_MIN(count - got, (int64_t)100), partition, &n);
            if (n == 0)
                break;
            got += (int64_t)n;
            if (!peek) {
                int s = settle(&rd, false);
                rc = rc ? rc : s;
            }
        }
        if (peek) {
            int s = settle(&rd, true);
            rc = rc ? rc : s;
        }
    }
    if (rc == TN_CTL_OK && got == 0 && !tn_ctl_json(c))
        fprintf(stderr, "ternctl: no message in %s within %" PRId64 " ms\n", rd.topic,
                offset >= 0 ? (int64_t)0 : rd.wait_ms);
    free(rd.handles);
    return rc;
}

/* Follow every partition by replay reads. */
static int tail_peek(reader_t *rd, bool follow, bool from_start)
{
    char path[1200], what[600];
    snprintf(path, sizeof(path), "/v1/topics/%s", rd->topic_esc);
    snprintf(what, sizeof(what), "get topic %s", rd->topic);
    tn_ctl_resp_t r;
    if (tn_ctl_call(rd->c, "GET", path, NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    if (r.status != 200) {
        int rc = tn_ctl_fail(&r, what);
        tn_ctl_resp_fini(&r);
        return rc;
    }
    yajl_val v = tn_ctl_parse(&r, what);
    yajl_val ps = tn_ctl_get(v, "partition_stats");
    size_t np = YAJL_IS_ARRAY(ps) ? ps->u.array.len : 0;
    int64_t *next = calloc(np ? np : 1, sizeof(int64_t));
    int64_t *index = calloc(np ? np : 1, sizeof(int64_t));
    for (size_t i = 0; i < np && next != NULL && index != NULL; i++) {
        yajl_val p = ps->u.array.values[i];
        tn_ctl_get_int(p, "index", &index[i]);
        if (!tn_ctl_get_int(p, from_start ? "oldest_offset" : "high_watermark", &next[i])) {
            const char *err = tn_ctl_get_str(p, "error");
            fprintf(stderr, "ternctl: tail %s: partition %" PRId64 " has no log numbers (%s)\n",
                    rd->topic, index[i], err ? err : "not open yet");
            next[i] = 0;
        }
    }
    if (v != NULL)
        yajl_tree_free(v);
    tn_ctl_resp_fini(&r);
    int rc = next && index ? TN_CTL_OK : TN_CTL_FAIL;
    while (rc == TN_CTL_OK) {
        bool any = false;
        for (size_t i = 0; rc == TN_CTL_OK && i < np; i++) {
            for (;;) {
                bool none = false;
                int64_t before = next[i];
                rc = replay(rd, index[i], &next[i], &none);
                if (rc != TN_CTL_OK || none)
                    break;
                any = any || next[i] == before + 1;
            }
        }
        if (!follow)
            break;
        if (!any)
            usleep(300 * 1000);
    }
    free(next);
    free(index);
    return rc;
}

static int tail_run(tn_ctl_t *c, int argc, char **argv)
{
    enum { O_CHANNEL = 1000, O_PEEK, O_FROM_START };
    static const struct option longs[] = {{"follow", no_argument, NULL, 'f'},
                                          {"channel", required_argument, NULL, O_CHANNEL},
                                          {"peek", no_argument, NULL, O_PEEK},
                                          {"from-start", no_argument, NULL, O_FROM_START},
                                          {NULL, 0, NULL, 0}};
    const char *cmd = "tail", *channel = "default";
    bool follow = false, peek = false, from_start = false;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "f", longs, NULL)) != -1) {
        switch (ch) {
        case 'f':
            follow = true;
            break;
        case O_CHANNEL:
            channel = optarg;
            break;
        case O_PEEK:
            peek = true;
            break;
        case O_FROM_START:
            from_start = true;
            break;
        default:
            return tn_ctl_usage(cmd, "unknown option %s", argv[optind - 1]);
        }
    }
    if (argc - optind != 1)
        return tn_ctl_usage(cmd, "give one topic");
    if (from_start && !peek)
        return tn_ctl_usage(cmd, "--from-start goes with --peek (a channel starts where it is)");
    reader_t rd;
    reader_init(&rd, c, cmd, argv[optind], channel);
    int rc = TN_CTL_OK;
    if (peek) {
        rc = tail_peek(&rd, follow, from_start);
    } else {
        if (!follow)
            rd.wait_ms = 0;
        while (rc == TN_CTL_OK) {
            size_t n = 0;
            rc = take(&rd, 100, NULL, &n);
            int s = settle(&rd, false);
            rc = rc ? rc : s;
            if (n == 0 && !follow)
                break;
        }
    }
    free(rd.handles);
    return rc;
}

const tn_ctl_cmd_t tn_ctl_cmd_consume = {
    .name = "consume",
    .summary = "take N messages from a channel, print and ack them (or --peek)",
    .help = "usage: ternctl consume TOPIC [-n N] [--channel C] [--wait D] [--peek]\n"
            "       ternctl consume TOPIC --partition P --offset O [-n N]\n"
            "\n"
            "Takes up to N messages (default 1) from channel C (default `default`), waiting\n"
            "up to --wait (default 1s, at most the server's 10s) for them, prints each, then\n"
            "acks them. Fewer than N is not an error: it stops when none came within the\n"
            "wait.\n"
            "\n"
            "  -n, --count N    how many messages\n"
            "  --channel C      the channel (created as an NSQ SUB would, if missing)\n"
            "  --wait D         how long to wait for the first message of each request\n"
            "  --peek           do not ack: once all are printed, release them (a nack), so\n"
            "                   they stay queued. The /v1 API has no queue read that leases\n"
            "                   nothing, so each peeked message's attempts count goes up by\n"
            "                   one (and counts toward max_attempts)\n"
            "  --partition P    take only from partition P\n"
            "  --offset O       with --partition: a replay read of offsets O, O+1, ... that\n"
            "                   leases and acks nothing (a true peek)\n"
            "\n"
            "Output: each payload on a line (strings as text, base64 payloads decoded, JSON\n"
            "values compact). --json: the server's message objects, one a line.\n"
            "\n"
            "Examples:\n"
            "  ternctl consume orders -n 10\n"
            "  ternctl consume orders --peek --json\n"
            "  ternctl consume orders --partition 0 --offset 0 -n 5\n",
    .run = consume_run,
};

const tn_ctl_cmd_t tn_ctl_cmd_tail = {
    .name = "tail",
    .summary = "print messages as they arrive (-f follows), acking or --peek",
    .help = "usage: ternctl tail TOPIC [-f] [--channel C]\n"
            "       ternctl tail TOPIC [-f] --peek [--from-start]\n"
            "\n"
            "Prints the topic's messages as they come. Without -f it stops once nothing more\n"
            "is there; with -f (--follow) it runs until interrupted.\n"
            "\n"
            "By default tail is a consumer of channel C (default `default`): it takes the\n"
            "messages and acks each batch once printed, as any consumer would (a message\n"
            "printed but not yet acked when tail is interrupted goes out again after its\n"
            "visibility timeout).\n"
            "\n"
            "With --peek it takes nothing from any channel: it follows every partition's log\n"
            "through replay reads from its high watermark (what arrives from now on), or\n"
            "with --from-start from the oldest retained message. The partitions are the\n"
            "ones the topic had when tail started.\n"
            "\n"
            "Output as for consume (--json: one message object a line).\n"
            "\n"
            "Examples:\n"
            "  ternctl tail -f orders --channel audit\n"
            "  ternctl tail -f orders --peek\n",
    .run = tail_run,
};
