/* `ternctl stats`: a refreshing table of topics and channels, as nsq_stat
 * shows them: depth, in flight, deferred, requeued, timed out, messages and
 * the message rate since the last sample, every --interval. The numbers
 * are nsqd's GET /stats?format=json (the /v1 API has no channel counts),
 * so they are the asked node's. */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CMD "stats"

typedef struct {
    char *key; /* "topic\0channel" as "topic/channel" ("topic/" for the topic row) */
    int64_t messages;
} prev_t;

typedef struct {
    prev_t *v;
    size_t n;
} prevs_t;

static bool prev_find(const prevs_t *p, const char *key, int64_t *out)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->v[i].key, key) == 0) {
            *out = p->v[i].messages;
            return true;
        }
    return false;
}

static void prevs_free(prevs_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->v[i].key);
    free(p->v);
    memset(p, 0, sizeof(*p));
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct {
    const char *topic;
    const char *channel; /* NULL: the topic's own row */
    int64_t depth, in_flight, deferred, requeued, timeouts, messages, consumers;
    bool paused;
} row_t;

static int64_t geti(yajl_val o, const char *k)
{
    int64_t v = 0;
    tn_ctl_get_int(o, k, &v);
    return v;
}

/* One sample: print it, and replace *prev with its counts. */
static int sample(tn_ctl_t *c, const char *path, prevs_t *prev, int64_t *prev_ms, bool clear,
                  bool first)
{
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "GET", path, NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    int64_t t = now_ms();
    if (r.status != 200) {
        int rc = tn_ctl_fail(&r, "stats");
        tn_ctl_resp_fini(&r);
        return rc;
    }
    yajl_val v = tn_ctl_parse(&r, "stats");
    tn_ctl_resp_fini(&r);
    if (v == NULL)
        return TN_CTL_FAIL;
    yajl_val topics = tn_ctl_get(v, "topics");
    size_t nrows = 0, cap = 0;
    row_t *rows = NULL;
    for (size_t i = 0; YAJL_IS_ARRAY(topics) && i < topics->u.array.len; i++) {
        yajl_val tp = topics->u.array.values[i];
        yajl_val chans = tn_ctl_get(tp, "channels");
        size_t nc = YAJL_IS_ARRAY(chans) ? chans->u.array.len : 0;
        if (nrows + nc + 1 > cap) {
            cap = (nrows + nc + 1) * 2;
            row_t *n = realloc(rows, cap * sizeof(*rows));
            if (n == NULL) {
                free(rows);
                yajl_tree_free(v);
                fprintf(stderr, "ternctl: out of memory\n");
                return TN_CTL_FAIL;
            }
            rows = n;
        }
        row_t *tr = &rows[nrows++];
        memset(tr, 0, sizeof(*tr));
        tr->topic = tn_ctl_get_str(tp, "topic_name");
        tr->depth = geti(tp, "depth");
        tr->messages = geti(tp, "message_count");
        tn_ctl_get_bool(tp, "paused", &tr->paused);
        for (size_t k = 0; k < nc; k++) {
            yajl_val ch = chans->u.array.values[k];
            row_t *cr = &rows[nrows++];
            memset(cr, 0, sizeof(*cr));
            cr->topic = tr->topic;
            cr->channel = tn_ctl_get_str(ch, "channel_name");
            cr->depth = geti(ch, "depth");
            cr->in_flight = geti(ch, "in_flight_count");
            cr->deferred = geti(ch, "deferred_count");
            cr->requeued = geti(ch, "requeue_count");
            cr->timeouts = geti(ch, "timeout_count");
            cr->messages = geti(ch, "message_count");
            cr->consumers = geti(ch, "client_count");
            tn_ctl_get_bool(ch, "paused", &cr->paused);
        }
    }
    double secs = first ? 0 : (double)(t - *prev_ms) / 1000.0;
    prevs_t next = {calloc(nrows ? nrows : 1, sizeof(prev_t)), 0};
    tn_ctl_table_t tb;
    tn_ctl_table_init(&tb, 11);
    const char *head[] = {"TOPIC",    "CHANNEL",  "DEPTH",  "IN FLIGHT", "DEFERRED", "REQUEUED",
                          "TIMEOUTS", "MESSAGES", "MSGS/S", "CONSUMERS", "PAUSED"};
    tn_ctl_table_row(&tb, head);
    tn_buf_t js;
    tn_buf_init(&js);
    char hdr[64];
    int hl = snprintf(hdr, sizeof(hdr), "{\"time\":%lld,\"rows\":[", (long long)time(NULL));
    tn_buf_append(&js, hdr, (size_t)hl);
    for (size_t i = 0; i < nrows; i++) {
        row_t *w = &rows[i];
        char key[1200];
        snprintf(key, sizeof(key), "%s/%s", w->topic ? w->topic : "", w->channel ? w->channel : "");
        int64_t before = 0;
        bool have = !first && secs > 0 && prev_find(prev, key, &before);
        double rate = have ? (double)(w->messages - before) / secs : 0;
        if (next.v != NULL) {
            next.v[next.n].key = strdup(key);
            next.v[next.n].messages = w->messages;
            if (next.v[next.n].key != NULL)
                next.n++;
        }
        char d[24], f[24], df[24], rq[24], to[24], m[24], rt[32], cs[24];
        snprintf(d, sizeof(d), "%" PRId64, w->depth);
        snprintf(f, sizeof(f), "%" PRId64, w->in_flight);
        snprintf(df, sizeof(df), "%" PRId64, w->deferred);
        snprintf(rq, sizeof(rq), "%" PRId64, w->requeued);
        snprintf(to, sizeof(to), "%" PRId64, w->timeouts);
        snprintf(m, sizeof(m), "%" PRId64, w->messages);
        snprintf(cs, sizeof(cs), "%" PRId64, w->consumers);
        if (have)
            snprintf(rt, sizeof(rt), "%.1f", rate);
        else
            snprintf(rt, sizeof(rt), "-");
        bool is_topic = w->channel == NULL;
        const char *row[] = {w->topic,
                             is_topic ? "(topic)" : w->channel,
                             d,
                             is_topic ? NULL : f,
                             is_topic ? NULL : df,
                             is_topic ? NULL : rq,
                             is_topic ? NULL : to,
                             m,
                             rt,
                             is_topic ? NULL : cs,
                             w->paused ? "yes" : "no"};
        tn_ctl_table_row(&tb, row);
        /* The JSON row. */
        tn_buf_append(&js, i ? ",{\"topic\":\"" : "{\"topic\":\"", i ? 11 : 10);
        tn_buf_json_escape(&js, w->topic ? w->topic : "");
        tn_buf_append(&js, "\",\"channel\":", 12);
        if (is_topic) {
            tn_buf_append(&js, "null", 4);
        } else {
            tn_buf_append(&js, "\"", 1);
            tn_buf_json_escape(&js, w->channel ? w->channel : "");
            tn_buf_append(&js, "\"", 1);
        }
        char nums[400];
        int nl = snprintf(nums, sizeof(nums),
                          ",\"depth\":%" PRId64 ",\"in_flight\":%" PRId64 ",\"deferred\":%" PRId64
                          ",\"requeued\":%" PRId64 ",\"timeouts\":%" PRId64 ",\"messages\":%" PRId64
                          ",\"consumers\":%" PRId64 ",\"paused\":%s",
                          w->depth, w->in_flight, w->deferred, w->requeued, w->timeouts,
                          w->messages, w->consumers, w->paused ? "true" : "false");
        tn_buf_append(&js, nums, (size_t)nl);
        if (have)
            nl = snprintf(nums, sizeof(nums), ",\"rate\":%.3f}", rate);
        else
            nl = snprintf(nums, sizeof(nums), ",\"rate\":null}");
        tn_buf_append(&js, nums, (size_t)nl);
    }
    tn_buf_append(&js, "]}", 2);
    if (tn_ctl_json(c)) {
        tn_ctl_print_json(tn_buf_data(&js), tn_buf_size(&js));
    } else {
        char when[40];
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
        if (clear)
            fputs("\033[H\033[2J", stdout);
        else if (!first)
            fputc('\n', stdout);
        printf("%s  %s\n", tn_ctl_base_url(c), when);
        if (nrows == 0)
            printf("no topics\n");
        else
            tn_ctl_table_print(&tb, stdout);
    }
    fflush(stdout);
    tn_buf_fini(&js);
    tn_ctl_table_fini(&tb);
    free(rows);
    yajl_tree_free(v);
    prevs_free(prev);
    *prev = next;
    *prev_ms = t;
    return TN_CTL_OK;
}

static int run(tn_ctl_t *c, int argc, char **argv)
{
    enum { O_TOPIC = 1000, O_CHANNEL, O_INTERVAL, O_COUNT };
    static const struct option longs[] = {{"topic", required_argument, NULL, O_TOPIC},
                                          {"channel", required_argument, NULL, O_CHANNEL},
                                          {"interval", required_argument, NULL, O_INTERVAL},
                                          {"count", required_argument, NULL, O_COUNT},
                                          {NULL, 0, NULL, 0}};
    const char *topic = NULL, *channel = NULL;
    int64_t interval = 2000, count = 0;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (ch) {
        case O_TOPIC:
            topic = optarg;
            break;
        case O_CHANNEL:
            channel = optarg;
            break;
        case O_INTERVAL:
            if (tn_ctl_opt_ms(CMD, "--interval", optarg, 100, 86400000, &interval) != 0)
                return TN_CTL_USAGE;
            break;
        case O_COUNT:
            if (tn_ctl_opt_int(CMD, "--count", optarg, 1, INT32_MAX, &count) != 0)
                return TN_CTL_USAGE;
            break;
        default:
            return tn_ctl_usage(CMD, "unknown option %s", argv[optind - 1]);
        }
    }
    if (optind != argc)
        return tn_ctl_usage(CMD, "takes no arguments (got \"%s\")", argv[optind]);
    char path[2048], et[800], ec[800];
    int n = snprintf(path, sizeof(path), "/stats?format=json&include_clients=false");
    if (topic != NULL)
        n += snprintf(path + n, sizeof(path) - (size_t)n, "&topic=%s",
                      tn_ctl_esc(topic, et, sizeof(et)));
    if (channel != NULL)
        snprintf(path + n, sizeof(path) - (size_t)n, "&channel=%s",
                 tn_ctl_esc(channel, ec, sizeof(ec)));
    bool clear = !tn_ctl_json(c) && isatty(1) && count != 1;
    prevs_t prev = {0};
    int64_t prev_ms = 0;
    int rc = TN_CTL_OK;
    for (int64_t i = 0; rc == TN_CTL_OK && (count == 0 || i < count); i++) {
        if (i > 0)
            usleep((useconds_t)(interval * 1000));
        rc = sample(c, path, &prev, &prev_ms, clear, i == 0);
    }
    prevs_free(&prev);
    return rc;
}

const tn_ctl_cmd_t tn_ctl_cmd_stats = {
    .name = "stats",
    .summary = "a refreshing table of topic and channel depths and rates (like nsq_stat)",
    .help = "usage: ternctl stats [--topic T] [--channel C] [--interval D] [--count N]\n"
            "\n"
            "Every --interval (default 2s) prints each topic (its own row, `(topic)`) and\n"
            "each of its channels: depth (ready messages), in flight, deferred, requeued,\n"
            "timed out, messages (ever), the message rate since the previous sample\n"
            "(`-` on the first), consumers and whether paused. On a terminal the table\n"
            "redraws in place; otherwise samples follow each other. --count N stops after N\n"
            "samples (for scripts); without it, stats runs until interrupted.\n"
            "\n"
            "The numbers are nsqd's GET /stats?format=json (the /v1 API has no channel\n"
            "counts), so they are the asked node's (in a cluster, ask each node).\n"
            "--json prints a sample a line: {\"time\":<unix s>,\"rows\":[{\"topic\":...,\n"
            "\"channel\":... (null for the topic row),\"depth\":N,\"in_flight\":N,\n"
            "\"deferred\":N,\"requeued\":N,\"timeouts\":N,\"messages\":N,\"consumers\":N,\n"
            "\"paused\":false,\"rate\":R (null on the first sample)}]}.\n"
            "\n"
            "Examples:\n"
            "  ternctl stats --topic orders --interval 1s\n"
            "  ternctl stats --count 2 --interval 5s --json\n",
    .run = run,
};
