/* `ternctl stats`: a refreshing table of topics and channels, as nsq_stat
 * shows them: depth, in flight, deferred, requeued, timed out, messages and
 * the message rate since the last sample, every --interval. The numbers
 * are nsqd's GET /stats?format=json (the /v1 API has no channel counts),
 * the asked node's; with --all-nodes every alive member's (from
 * /v1/cluster/members, asked again at every sample), summed per topic and
 * channel as nsq_stat sums its nsqd nodes. */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"
#include "core/err.h"

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

typedef struct {
    row_t *v;
    size_t n, cap;
} rows_t;

/* The row of topic/channel (channel NULL: the topic's own), added zeroed
 * when new; NULL when out of memory. */
static row_t *row_for(rows_t *rs, const char *topic, const char *channel)
{
    for (size_t i = 0; i < rs->n; i++) {
        row_t *w = &rs->v[i];
        if (strcmp(w->topic, topic) == 0 && (w->channel == NULL) == (channel == NULL) &&
            (channel == NULL || strcmp(w->channel, channel) == 0))
            return w;
    }
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 64;
        row_t *n = realloc(rs->v, cap * sizeof(*n));
        if (n == NULL)
            return NULL;
        rs->v = n;
        rs->cap = cap;
    }
    row_t *w = &rs->v[rs->n++];
    memset(w, 0, sizeof(*w));
    w->topic = topic;
    w->channel = channel;
    return w;
}

/* Add one node's /stats numbers (v, which must outlive rs) to rs. */
static int merge(rows_t *rs, yajl_val v)
{
    yajl_val topics = tn_ctl_get(v, "topics");
    for (size_t i = 0; YAJL_IS_ARRAY(topics) && i < topics->u.array.len; i++) {
        yajl_val tp = topics->u.array.values[i];
        const char *name = tn_ctl_get_str(tp, "topic_name");
        row_t *tr = name ? row_for(rs, name, NULL) : NULL;
        if (tr == NULL)
            return name ? UV_ENOMEM : 0;
        bool paused = false;
        tr->depth += geti(tp, "depth");
        tr->messages += geti(tp, "message_count");
        tn_ctl_get_bool(tp, "paused", &paused);
        tr->paused = tr->paused || paused;
        yajl_val chans = tn_ctl_get(tp, "channels");
        for (size_t k = 0; YAJL_IS_ARRAY(chans) && k < chans->u.array.len; k++) {
            yajl_val ch = chans->u.array.values[k];
            const char *cn = tn_ctl_get_str(ch, "channel_name");
            row_t *cr = cn ? row_for(rs, name, cn) : NULL;
            if (cn != NULL && cr == NULL)
                return UV_ENOMEM;
            if (cr == NULL)
                continue;
            cr->depth += geti(ch, "depth");
            cr->in_flight += geti(ch, "in_flight_count");
            cr->deferred += geti(ch, "deferred_count");
            cr->requeued += geti(ch, "requeue_count");
            cr->timeouts += geti(ch, "timeout_count");
            cr->messages += geti(ch, "message_count");
            cr->consumers += geti(ch, "client_count");
            paused = false;
            tn_ctl_get_bool(ch, "paused", &paused);
            cr->paused = cr->paused || paused;
        }
    }
    return 0;
}

/* Topics by name, each topic's own row first, then its channels by name. */
static int cmp_rows(const void *a, const void *b)
{
    const row_t *x = a, *y = b;
    int c = strcmp(x->topic, y->topic);
    if (c != 0)
        return c;
    if (x->channel == NULL || y->channel == NULL)
        return (x->channel != NULL) - (y->channel != NULL);
    return strcmp(x->channel, y->channel);
}

/* The base URLs of the cluster's alive members that advertise an API
 * address, in the scheme of the URL asked (owned strings; *n of them). */
static int member_urls(tn_ctl_t *c, char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "GET", "/v1/cluster/members", NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    if (r.status != 200) {
        int rc = tn_ctl_fail(&r, "stats --all-nodes: GET /v1/cluster/members");
        tn_ctl_resp_fini(&r);
        return rc;
    }
    yajl_val v = tn_ctl_parse(&r, "stats --all-nodes: GET /v1/cluster/members");
    tn_ctl_resp_fini(&r);
    yajl_val ml = tn_ctl_get(v, "members");
    size_t len = YAJL_IS_ARRAY(ml) ? ml->u.array.len : 0;
    char **urls = calloc(len ? len : 1, sizeof(char *));
    const char *scheme = strncmp(tn_ctl_base_url(c), "https:", 6) == 0 ? "https" : "http";
    for (size_t i = 0; urls != NULL && i < len; i++) {
        yajl_val m = ml->u.array.values[i];
        const char *api = tn_ctl_get_str(m, "api_addr");
        const char *st = tn_ctl_get_str(m, "status");
        if (api == NULL || api[0] == '\0' || st == NULL || strcmp(st, "alive") != 0)
            continue;
        size_t ul = strlen(scheme) + 3 + strlen(api) + 1;
        urls[*n] = malloc(ul);
        if (urls[*n] != NULL)
            snprintf(urls[(*n)++], ul, "%s://%s", scheme, api);
    }
    if (v != NULL)
        yajl_tree_free(v);
    *out = urls;
    if (urls == NULL || *n == 0) {
        fprintf(stderr, "ternctl: stats --all-nodes: no alive member advertises an API "
                        "address\n");
        return TN_CTL_FAIL;
    }
    return TN_CTL_OK;
}

/* One sample (of this node, or with all_nodes of every alive member,
 * summed): print it, and replace *prev with its counts. */
static int sample(tn_ctl_t *c, const char *path, bool all_nodes, prevs_t *prev, int64_t *prev_ms,
                  bool clear, bool first)
{
    char **urls = NULL;
    size_t nurls = 0;
    char *self[1] = {(char *)tn_ctl_base_url(c)};
    if (all_nodes) {
        int e = member_urls(c, &urls, &nurls);
        if (e != TN_CTL_OK) {
            for (size_t i = 0; i < nurls; i++)
                free(urls[i]);
            free(urls);
            return e;
        }
    }
    char **bases = all_nodes ? urls : self;
    size_t nbases = all_nodes ? nurls : 1;
    yajl_val *trees = calloc(nbases ? nbases : 1, sizeof(yajl_val));
    rows_t rs = {0};
    size_t answered = 0;
    int rc = trees ? TN_CTL_OK : TN_CTL_FAIL;
    int64_t t = now_ms();
    for (size_t i = 0; rc == TN_CTL_OK && i < nbases; i++) {
        tn_ctl_resp_t r;
        char what[600];
        snprintf(what, sizeof(what), "stats from %s", bases[i]);
        if (tn_ctl_call_url(c, bases[i], "GET", path, NULL, 0, &r) != 0)
            continue; /* the reason is printed; the others still count */
        if (r.status != 200) {
            tn_ctl_fail(&r, what);
        } else if ((trees[i] = tn_ctl_parse(&r, what)) != NULL) {
            answered++;
            if (merge(&rs, trees[i]) != 0) {
                fprintf(stderr, "ternctl: out of memory\n");
                rc = TN_CTL_FAIL;
            }
        }
        tn_ctl_resp_fini(&r);
    }
    if (rc == TN_CTL_OK && answered == 0)
        rc = TN_CTL_FAIL;
    if (rc != TN_CTL_OK) {
        for (size_t i = 0; trees != NULL && i < nbases; i++)
            if (trees[i] != NULL)
                yajl_tree_free(trees[i]);
        free(trees);
        free(rs.v);
        for (size_t i = 0; i < nurls; i++)
            free(urls[i]);
        free(urls);
        return rc;
    }
    qsort(rs.v, rs.n, sizeof(row_t), cmp_rows);
    row_t *rows = rs.v;
    size_t nrows = rs.n;
    double secs = first ? 0 : (double)(t - *prev_ms) / 1000.0;
    prevs_t next = {calloc(nrows ? nrows : 1, sizeof(prev_t)), 0};
    tn_ctl_table_t tb;
    tn_ctl_table_init(&tb, 11);
    const char *head[] = {"TOPIC",    "CHANNEL",  "DEPTH",  "IN FLIGHT", "DEFERRED", "REQUEUED",
                          "TIMEOUTS", "MESSAGES", "MSGS/S", "CONSUMERS", "PAUSED"};
    tn_ctl_table_row(&tb, head);
    tn_buf_t js;
    tn_buf_init(&js);
    char hdr[128];
    int hl = snprintf(hdr, sizeof(hdr), "{\"time\":%lld,\"nodes\":%zu,\"answered\":%zu,\"rows\":[",
                      (long long)time(NULL), nbases, answered);
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
        if (all_nodes)
            printf("all nodes (members as %s knows them): %zu of %zu answered  %s\n",
                   tn_ctl_base_url(c), answered, nbases, when);
        else
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
    for (size_t i = 0; i < nbases; i++)
        if (trees[i] != NULL)
            yajl_tree_free(trees[i]);
    free(trees);
    for (size_t i = 0; i < nurls; i++)
        free(urls[i]);
    free(urls);
    prevs_free(prev);
    *prev = next;
    *prev_ms = t;
    return TN_CTL_OK;
}

static int run(tn_ctl_t *c, int argc, char **argv)
{
    enum { O_TOPIC = 1000, O_CHANNEL, O_INTERVAL, O_COUNT, O_ALL };
    static const struct option longs[] = {{"topic", required_argument, NULL, O_TOPIC},
                                          {"channel", required_argument, NULL, O_CHANNEL},
                                          {"interval", required_argument, NULL, O_INTERVAL},
                                          {"count", required_argument, NULL, O_COUNT},
                                          {"all-nodes", no_argument, NULL, O_ALL},
                                          {NULL, 0, NULL, 0}};
    const char *topic = NULL, *channel = NULL;
    int64_t interval = 2000, count = 0;
    bool all_nodes = false;
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
        case O_ALL:
            all_nodes = true;
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
        rc = sample(c, path, all_nodes, &prev, &prev_ms, clear, i == 0);
    }
    prevs_free(&prev);
    return rc;
}

const tn_ctl_cmd_t tn_ctl_cmd_stats = {
    .name = "stats",
    .summary = "a refreshing table of topic and channel depths and rates (like nsq_stat)",
    .help = "usage: ternctl stats [--topic T] [--channel C] [--interval D] [--count N]\n"
            "                     [--all-nodes]\n"
            "\n"
            "Every --interval (default 2s) prints each topic (its own row, `(topic)`) and\n"
            "each of its channels: depth (ready messages), in flight, deferred, requeued,\n"
            "timed out, messages (ever), the message rate since the previous sample\n"
            "(`-` on the first), consumers and whether paused. On a terminal the table\n"
            "redraws in place; otherwise samples follow each other. --count N stops after N\n"
            "samples (for scripts); without it, stats runs until interrupted.\n"
            "\n"
            "The numbers are nsqd's GET /stats?format=json (the /v1 API has no channel\n"
            "counts), so they are the asked node's. --all-nodes sums every alive cluster\n"
            "member's (admin: it reads /v1/cluster/members at every sample); a member\n"
            "that does not answer is left out of that sample, and the header says so.\n"
            "--json prints a sample a line: {\"time\":<unix s>,\"nodes\":N,\"answered\":N,\n"
            "\"rows\":[{\"topic\":...,\n"
            "\"channel\":... (null for the topic row),\"depth\":N,\"in_flight\":N,\n"
            "\"deferred\":N,\"requeued\":N,\"timeouts\":N,\"messages\":N,\"consumers\":N,\n"
            "\"paused\":false,\"rate\":R (null on the first sample)}]}.\n"
            "\n"
            "Examples:\n"
            "  ternctl stats --topic orders --interval 1s\n"
            "  ternctl stats --count 2 --interval 5s --json\n"
            "  ternctl stats --all-nodes\n",
    .run = run,
};
