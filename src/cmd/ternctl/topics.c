/* `ternctl topics list|get|create|alter|delete`: topic records through
 * /v1/topics (every page of the list; the record with partition_stats for
 * get; POST to create, PATCH to alter, DELETE). */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define CMD "topics"

static const char *num(yajl_val o, const char *key, char *buf, size_t cap)
{
    int64_t v = 0;
    if (!tn_ctl_get_int(o, key, &v))
        return NULL;
    snprintf(buf, cap, "%" PRId64, v);
    return buf;
}

static const char *dur(yajl_val o, const char *key, const char *zero, char *buf, size_t cap)
{
    int64_t v = 0;
    if (!tn_ctl_get_int(o, key, &v))
        return NULL;
    return v == 0 && zero != NULL ? zero : tn_ctl_fmt_dur(v, buf, cap);
}

/* The channel names of a record, comma-separated into buf. */
static const char *channels(yajl_val o, char *buf, size_t cap)
{
    yajl_val ch = tn_ctl_get(o, "channels");
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; YAJL_IS_ARRAY(ch) && i < ch->u.array.len; i++) {
        const char *name = YAJL_GET_STRING(ch->u.array.values[i]);
        if (name != NULL && n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? "," : "", name);
    }
    return buf[0] ? buf : "-";
}

static int list(tn_ctl_t *c, int argc, char **argv)
{
    static const struct option longs[] = {{"page-size", required_argument, NULL, 'p'},
                                          {NULL, 0, NULL, 0}};
    int64_t page = 1000;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        if (ch != 'p')
            return tn_ctl_usage(CMD, "list: unknown option %s", argv[optind - 1]);
        if (tn_ctl_opt_int(CMD, "--page-size", optarg, 1, 1000, &page) != 0)
            return TN_CTL_USAGE;
    }
    if (optind < argc)
        return tn_ctl_usage(CMD, "list takes no arguments (got \"%s\")", argv[optind]);
    tn_ctl_table_t t;
    tn_ctl_table_init(&t, 8);
    const char *head[] = {"NAME",     "PARTITIONS", "RETENTION", "DURABILITY",
                          "DELIVERY", "ROLE",       "OWNER",     "CHANNELS"};
    tn_ctl_table_row(&t, head);
    tn_buf_t all;
    tn_buf_init(&all);
    tn_buf_append(&all, "{\"topics\":[", 11);
    size_t count = 0;
    char token[800] = "";
    int rc = TN_CTL_OK;
    for (;;) {
        char path[1024], esc[800];
        snprintf(path, sizeof(path), "/v1/topics?limit=%" PRId64 "%s%s", page,
                 token[0] ? "&page_token=" : "",
                 token[0] ? tn_ctl_esc(token, esc, sizeof(esc)) : "");
        tn_ctl_resp_t r;
        if (tn_ctl_call(c, "GET", path, NULL, 0, &r) != 0) {
            rc = TN_CTL_FAIL;
            break;
        }
        if (r.status != 200) {
            rc = tn_ctl_fail(&r, "list topics");
            tn_ctl_resp_fini(&r);
            break;
        }
        yajl_val v = tn_ctl_parse(&r, "list topics");
        yajl_val topics = tn_ctl_get(v, "topics");
        if (!YAJL_IS_ARRAY(topics)) {
            if (v != NULL)
                yajl_tree_free(v);
            tn_ctl_resp_fini(&r);
            rc = TN_CTL_FAIL;
            break;
        }
        for (size_t i = 0; i < topics->u.array.len; i++) {
            yajl_val o = topics->u.array.values[i];
            if (count++ > 0)
                tn_buf_append(&all, ",", 1);
            tn_ctl_json_write(&all, o);
            char p[24], ret[32], chs[2048];
            const char *row[] = {tn_ctl_get_str(o, "name"),
                                 num(o, "partitions", p, sizeof(p)),
                                 dur(o, "retention_ms", "none", ret, sizeof(ret)),
                                 tn_ctl_get_str(o, "durability"),
                                 tn_ctl_get_str(o, "delivery_mode"),
                                 tn_ctl_get_str(o, "role"),
                                 tn_ctl_get_str(o, "owner"),
                                 channels(o, chs, sizeof(chs))};
            tn_ctl_table_row(&t, row);
        }
        const char *next = tn_ctl_get_str(v, "next_page_token");
        snprintf(token, sizeof(token), "%s", next ? next : "");
        yajl_tree_free(v);
        tn_ctl_resp_fini(&r);
        if (token[0] == '\0')
            break;
    }
    if (rc == TN_CTL_OK) {
        tn_buf_append(&all, "]}", 2);
        if (tn_ctl_json(c))
            tn_ctl_print_json(tn_buf_data(&all), tn_buf_size(&all));
        else if (count == 0)
            printf("no topics\n");
        else
            tn_ctl_table_print(&t, stdout);
    }
    tn_buf_fini(&all);
    tn_ctl_table_fini(&t);
    return rc;
}

/* The ids of a JSON array of strings, comma-separated, into out[cap]
 * ("-" when empty or absent). */
static const char *id_list(yajl_val p, const char *key, char *out, size_t cap)
{
    yajl_val a = tn_ctl_get(p, key);
    size_t at = 0;
    out[0] = '\0';
    if (YAJL_IS_ARRAY(a))
        for (size_t i = 0; i < a->u.array.len && at + 1 < cap; i++) {
            const char *id =
                YAJL_IS_STRING(a->u.array.values[i]) ? YAJL_GET_STRING(a->u.array.values[i]) : "?";
            int n = snprintf(out + at, cap - at, "%s%s", i > 0 ? "," : "", id);
            at = n < 0 ? at : TN_MIN(at + (size_t)n, cap - 1);
        }
    if (out[0] == '\0')
        snprintf(out, cap, "-");
    return out;
}

/* The ERROR cell of a replicated partition: its error, else the append
 * errors its leader holds of members ("3: no space left on device",
 * replica_errors: every node's answer has them, asked of the leader),
 * else NULL. */
static const char *repl_error(yajl_val p, char *out, size_t cap)
{
    const char *e = tn_ctl_get_str(p, "error");
    yajl_val re = tn_ctl_get(p, "replica_errors");
    if (e != NULL || !YAJL_IS_OBJECT(re) || re->u.object.len == 0)
        return e;
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < re->u.object.len && at + 1 < cap; i++) {
        yajl_val v = re->u.object.values[i];
        int n = snprintf(out + at, cap - at, "%s%s: %s", i > 0 ? "; " : "", re->u.object.keys[i],
                         YAJL_IS_STRING(v) ? YAJL_GET_STRING(v) : "?");
        at = n < 0 ? at : TN_MIN(at + (size_t)n, cap - 1);
    }
    return out;
}

/* One row per partition. A replicated topic's partitions (their entries
 * carry "isr") add the leader, the replicas (the preferred leader first),
 * the in-sync replicas, the leader epoch and a state: ok,
 * under-replicated, offline, with "unclean" when the epoch began with a
 * forced unclean election. NEXT is the leader's log end; HWM what
 * consumers may see. ERROR: repl_error's. */
static void partition_table(yajl_val ps)
{
    bool repl = false;
    for (size_t i = 0; i < ps->u.array.len; i++)
        repl = repl || tn_ctl_get(ps->u.array.values[i], "isr") != NULL;
    printf("\n");
    tn_ctl_table_t t;
    tn_ctl_table_init(&t, repl ? 13 : 9);
    const char *head[] = {"PARTITION", "OWNER",    "SEGMENTS", "OLDEST", "NEXT",
                          "HWM",       "MESSAGES", "SIZE",     "ERROR"};
    const char *rhead[] = {"PARTITION", "LEADER",   "REPLICAS", "ISR",  "EPOCH",
                           "STATE",     "SEGMENTS", "OLDEST",   "NEXT", "HWM",
                           "MESSAGES",  "SIZE",     "ERROR"};
    tn_ctl_table_row(&t, repl ? rhead : head);
    for (size_t i = 0; i < ps->u.array.len; i++) {
        yajl_val p = ps->u.array.values[i];
        char ix[24], sg[24], ol[24], nx[24], hw[24], mc[24], sz[32], rp[96], is[96], ep[24], st[48],
            er[512];
        int64_t size = 0;
        bool has_size = tn_ctl_get_int(p, "size_bytes", &size);
        const char *szs = has_size ? tn_ctl_fmt_bytes((uint64_t)size, sz, sizeof(sz)) : NULL;
        if (!repl) {
            const char *row[] = {num(p, "index", ix, sizeof(ix)),
                                 tn_ctl_get_str(p, "owner_node"),
                                 num(p, "segments", sg, sizeof(sg)),
                                 num(p, "oldest_offset", ol, sizeof(ol)),
                                 num(p, "next_offset", nx, sizeof(nx)),
                                 num(p, "high_watermark", hw, sizeof(hw)),
                                 num(p, "message_count", mc, sizeof(mc)),
                                 szs,
                                 tn_ctl_get_str(p, "error")};
            tn_ctl_table_row(&t, row);
            continue;
        }
        bool under = false, offline = false, unclean = false;
        tn_ctl_get_bool(p, "under_replicated", &under);
        tn_ctl_get_bool(p, "offline", &offline);
        tn_ctl_get_bool(p, "unclean", &unclean);
        snprintf(st, sizeof(st), "%s%s",
                 tn_ctl_get(p, "isr") == NULL ? "-"
                 : offline                    ? "offline"
                 : under                      ? "under-replicated"
                                              : "ok",
                 unclean ? ",unclean" : "");
        const char *leader = tn_ctl_get_str(p, "leader");
        const char *row[] = {num(p, "index", ix, sizeof(ix)),
                             leader != NULL ? leader : (offline ? "none" : NULL),
                             id_list(p, "replicas", rp, sizeof(rp)),
                             id_list(p, "isr", is, sizeof(is)),
                             num(p, "leader_epoch", ep, sizeof(ep)),
                             st,
                             num(p, "segments", sg, sizeof(sg)),
                             num(p, "oldest_offset", ol, sizeof(ol)),
                             num(p, "next_offset", nx, sizeof(nx)),
                             num(p, "high_watermark", hw, sizeof(hw)),
                             num(p, "message_count", mc, sizeof(mc)),
                             szs,
                             repl_error(p, er, sizeof(er))};
        tn_ctl_table_row(&t, row);
    }
    tn_ctl_table_print(&t, stdout);
    tn_ctl_table_fini(&t);
}

static int get(tn_ctl_t *c, int argc, char **argv)
{
    static const struct option longs[] = {{"partition", required_argument, NULL, 'p'},
                                          {NULL, 0, NULL, 0}};
    const char *partition = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        if (ch == 'p')
            partition = optarg;
        else
            return tn_ctl_usage(CMD, "get: unknown option");
    }
    if (argc - optind != 1)
        return tn_ctl_usage(CMD, "get takes one topic name");
    const char *name = argv[optind];
    char esc[800], path[1024], what[400];
    int64_t pn = 0;
    if (partition != NULL && tn_ctl_opt_int(CMD, "--partition", partition, 0, 65535, &pn) != 0)
        return TN_CTL_USAGE;
    if (partition != NULL)
        snprintf(path, sizeof(path), "/v1/topics/%s?partition=%" PRId64,
                 tn_ctl_esc(name, esc, sizeof(esc)), pn);
    else
        snprintf(path, sizeof(path), "/v1/topics/%s", tn_ctl_esc(name, esc, sizeof(esc)));
    snprintf(what, sizeof(what), "get topic %s", name);
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "GET", path, NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    if (r.status != 200) {
        int rc = tn_ctl_fail(&r, what);
        tn_ctl_resp_fini(&r);
        return rc;
    }
    yajl_val v = tn_ctl_parse(&r, what);
    if (v == NULL) {
        tn_ctl_resp_fini(&r);
        return TN_CTL_FAIL;
    }
    if (tn_ctl_json(c)) {
        tn_ctl_print_json(r.body, r.len);
    } else {
        /* The record's fields, one a line, then the partitions. */
        char b1[64], chs[4096];
        static const char *const ints[] = {"partitions", "max_in_flight_per_partition",
                                           "max_acked_ahead_per_partition", "max_attempts"};
        printf("%-32s %s\n", "name", tn_ctl_get_str(v, "name") ? tn_ctl_get_str(v, "name") : "?");
        for (size_t i = 0; i < TN_ARRAY_SIZE(ints); i++) {
            const char *s = num(v, ints[i], b1, sizeof(b1));
            printf("%-32s %s\n", ints[i], s ? s : "-");
        }
        const char *s = dur(v, "retention_ms", "none (no age limit)", b1, sizeof(b1));
        printf("%-32s %s\n", "retention", s ? s : "-");
        s = dur(v, "visibility_timeout_ms", NULL, b1, sizeof(b1));
        printf("%-32s %s\n", "visibility_timeout", s ? s : "-");
        static const char *const strs[] = {"delivery_mode", "durability", "owner", "role",
                                           "parent"};
        for (size_t i = 0; i < TN_ARRAY_SIZE(strs); i++)
            if (tn_ctl_get_str(v, strs[i]) != NULL)
                printf("%-32s %s\n", strs[i], tn_ctl_get_str(v, strs[i]));
        int64_t ttl = 0;
        if (tn_ctl_get_int(v, "ttl_ms", &ttl) && ttl > 0)
            printf("%-32s %s\n", "ttl", tn_ctl_fmt_dur(ttl, b1, sizeof(b1)));
        yajl_val kids = tn_ctl_get(v, "children");
        if (YAJL_IS_ARRAY(kids)) {
            tn_buf_t kb;
            tn_buf_init(&kb);
            tn_ctl_json_write(&kb, kids);
            printf("%-32s %.*s\n", "children", (int)tn_buf_size(&kb), tn_buf_data(&kb));
            tn_buf_fini(&kb);
        }
        printf("%-32s %s\n", "channels", channels(v, chs, sizeof(chs)));
        yajl_val ps = tn_ctl_get(v, "partition_stats");
        if (YAJL_IS_ARRAY(ps))
            partition_table(ps);
    }
    yajl_tree_free(v);
    tn_ctl_resp_fini(&r);
    return TN_CTL_OK;
}

/* The settings flags create and alter share: each appends its field. */
enum {
    O_PARTITIONS = 1000,
    O_RETENTION,
    O_VIS,
    O_MIF,
    O_MAA,
    O_MODE,
    O_TTL,
    O_ATTEMPTS,
    O_DUR,
    O_PARENT,
    O_FANOUT_DELAY,
    O_FACTOR,
    O_MIN_INSYNC,
    O_OWNER
};

static int add_field(tn_buf_t *b, const char *name, const char *json_value)
{
    tn_buf_append(b, tn_buf_size(b) > 1 ? ",\"" : "\"", tn_buf_size(b) > 1 ? 2 : 1);
    tn_buf_append(b, name, strlen(name));
    tn_buf_append(b, "\":", 2);
    return tn_buf_append(b, json_value, strlen(json_value));
}

static int add_str(tn_buf_t *b, const char *name, const char *v)
{
    tn_buf_t q;
    tn_buf_init(&q);
    tn_buf_append(&q, "\"", 1);
    tn_buf_json_escape(&q, v);
    tn_buf_append(&q, "\"", 2); /* the quote and a NUL: q is a C string for add_field */
    int rc = add_field(b, name, tn_buf_data(&q));
    tn_buf_fini(&q);
    return rc;
}

static int add_num(tn_buf_t *b, const char *name, int64_t v)
{
    char s[32];
    snprintf(s, sizeof(s), "%" PRId64, v);
    return add_field(b, name, s);
}

/* Parse create's or alter's flags into the JSON body b. */
static int settings(int argc, char **argv, bool create, tn_buf_t *b)
{
    static const struct option create_opts[] = {
        {"partitions", required_argument, NULL, O_PARTITIONS},
        {"retention", required_argument, NULL, O_RETENTION},
        {"visibility-timeout", required_argument, NULL, O_VIS},
        {"max-in-flight", required_argument, NULL, O_MIF},
        {"max-acked-ahead", required_argument, NULL, O_MAA},
        {"delivery-mode", required_argument, NULL, O_MODE},
        {"ttl", required_argument, NULL, O_TTL},
        {"max-attempts", required_argument, NULL, O_ATTEMPTS},
        {"durability", required_argument, NULL, O_DUR},
        {"parent", required_argument, NULL, O_PARENT},
        {"fanout-delay", required_argument, NULL, O_FANOUT_DELAY},
        {"replication-factor", required_argument, NULL, O_FACTOR},
        {"min-insync", required_argument, NULL, O_MIN_INSYNC},
        {NULL, 0, NULL, 0}};
    static const struct option alter_opts[] = {
        {"partitions", required_argument, NULL, O_PARTITIONS},
        {"retention", required_argument, NULL, O_RETENTION},
        {"visibility-timeout", required_argument, NULL, O_VIS},
        {"max-in-flight", required_argument, NULL, O_MIF},
        {"max-acked-ahead", required_argument, NULL, O_MAA},
        {"owner", required_argument, NULL, O_OWNER},
        {"replication-factor", required_argument, NULL, O_FACTOR},
        {"min-insync", required_argument, NULL, O_MIN_INSYNC},
        {NULL, 0, NULL, 0}};
    const char *sub = create ? "create" : "alter";
    int ch;
    int64_t v = 0;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", create ? create_opts : alter_opts, NULL)) != -1) {
        int rc = TN_CTL_OK;
        switch (ch) {
        case O_PARTITIONS:
            rc = tn_ctl_opt_int(CMD, "--partitions", optarg, 1, 65535, &v);
            if (rc == 0)
                add_num(b, "partitions", v);
            break;
        case O_RETENTION:
            rc = tn_ctl_opt_ms(CMD, "--retention", optarg, 0, INT64_MAX / 2, &v);
            if (rc == 0)
                add_num(b, "retention_ms", v);
            break;
        case O_VIS:
            rc = tn_ctl_opt_ms(CMD, "--visibility-timeout", optarg, 0, INT64_MAX / 2, &v);
            if (rc == 0)
                add_num(b, "visibility_timeout_ms", v);
            break;
        case O_MIF:
            rc = tn_ctl_opt_int(CMD, "--max-in-flight", optarg, 0, INT32_MAX, &v);
            if (rc == 0)
                add_num(b, "max_in_flight_per_partition", v);
            break;
        case O_MAA:
            rc = tn_ctl_opt_int(CMD, "--max-acked-ahead", optarg, 0, INT32_MAX, &v);
            if (rc == 0)
                add_num(b, "max_acked_ahead_per_partition", v);
            break;
        case O_MODE:
            add_str(b, "delivery_mode", optarg);
            break;
        case O_TTL:
            rc = tn_ctl_opt_ms(CMD, "--ttl", optarg, 0, INT64_MAX / 2, &v);
            if (rc == 0)
                add_num(b, "ttl_ms", v);
            break;
        case O_ATTEMPTS:
            rc = tn_ctl_opt_int(CMD, "--max-attempts", optarg, 0, 65535, &v);
            if (rc == 0)
                add_num(b, "max_attempts", v);
            break;
        case O_DUR:
            add_str(b, "durability", optarg);
            break;
        case O_PARENT:
            add_str(b, "parent", optarg);
            break;
        case O_FANOUT_DELAY:
            rc = tn_ctl_opt_ms(CMD, "--fanout-delay", optarg, 0, INT64_MAX / 2, &v);
            if (rc == 0)
                add_num(b, "fanout_delay_ms", v);
            break;
        case O_OWNER:
            add_str(b, "owner", optarg);
            break;
        case O_FACTOR:
            rc = tn_ctl_opt_int(CMD, "--replication-factor", optarg, 1, 5, &v);
            if (rc == 0)
                add_num(b, "replication_factor", v);
            break;
        case O_MIN_INSYNC:
            rc = tn_ctl_opt_int(CMD, "--min-insync", optarg, 1, 5, &v);
            if (rc == 0)
                add_num(b, "min_insync_replicas", v);
            break;
        default:
            return tn_ctl_usage(CMD, "%s: unknown option %s", sub, argv[optind - 1]);
        }
        if (rc != TN_CTL_OK)
            return rc;
    }
    return TN_CTL_OK;
}

static int create_or_alter(tn_ctl_t *c, int argc, char **argv, bool create)
{
    const char *sub = create ? "create" : "alter";
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{", 1);
    int rc = settings(argc, argv, create, &b);
    if (rc == TN_CTL_OK && argc - optind != 1)
        rc = tn_ctl_usage(CMD, "%s takes one topic name (and options)", sub);
    if (rc == TN_CTL_OK && !create && tn_buf_size(&b) == 1)
        rc = tn_ctl_usage(CMD, "alter: give at least one setting to change");
    if (rc != TN_CTL_OK) {
        tn_buf_fini(&b);
        return rc;
    }
    const char *name = argv[optind];
    char esc[800], path[1024], what[400];
    if (create) {
        add_str(&b, "name", name);
        snprintf(path, sizeof(path), "/v1/topics");
    } else {
        snprintf(path, sizeof(path), "/v1/topics/%s", tn_ctl_esc(name, esc, sizeof(esc)));
    }
    tn_buf_append(&b, "}", 1);
    snprintf(what, sizeof(what), "%s topic %s", sub, name);
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, create ? "POST" : "PATCH", path, tn_buf_data(&b), tn_buf_size(&b), &r) !=
        0) {
        tn_buf_fini(&b);
        return TN_CTL_FAIL;
    }
    tn_buf_fini(&b);
    if (r.status != (create ? 201 : 200)) {
        rc = tn_ctl_fail(&r, what);
    } else if (tn_ctl_json(c)) {
        tn_ctl_print_json(r.body, r.len);
    } else {
        yajl_val v = tn_ctl_parse(&r, what);
        int64_t parts = 0;
        tn_ctl_get_int(v, "partitions", &parts);
        printf("%s topic %s (%" PRId64 " partition%s)\n", create ? "created" : "altered", name,
               parts, parts == 1 ? "" : "s");
        if (v != NULL)
            yajl_tree_free(v);
    }
    tn_ctl_resp_fini(&r);
    return rc;
}

static int delete_topic(tn_ctl_t *c, int argc, char **argv)
{
    if (argc != 2)
        return tn_ctl_usage(CMD, "delete takes one topic name");
    char esc[800], path[1024], what[400];
    snprintf(path, sizeof(path), "/v1/topics/%s", tn_ctl_esc(argv[1], esc, sizeof(esc)));
    snprintf(what, sizeof(what), "delete topic %s", argv[1]);
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "DELETE", path, NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    int rc = TN_CTL_OK;
    if (r.status != 204)
        rc = tn_ctl_fail(&r, what);
    else if (tn_ctl_json(c))
        printf("{\"deleted\":true}\n");
    else
        printf("deleted topic %s\n", argv[1]);
    tn_ctl_resp_fini(&r);
    return rc;
}

static int run(tn_ctl_t *c, int argc, char **argv)
{
    if (argc < 2)
        return tn_ctl_usage(CMD, "which one: list, get, create, alter or delete?");
    const char *sub = argv[1];
    if (strcmp(sub, "list") == 0)
        return list(c, argc - 1, argv + 1);
    if (strcmp(sub, "get") == 0)
        return get(c, argc - 1, argv + 1);
    if (strcmp(sub, "create") == 0)
        return create_or_alter(c, argc - 1, argv + 1, true);
    if (strcmp(sub, "alter") == 0)
        return create_or_alter(c, argc - 1, argv + 1, false);
    if (strcmp(sub, "delete") == 0)
        return delete_topic(c, argc - 1, argv + 1);
    return tn_ctl_usage(CMD, "unknown subcommand \"%s\" (list, get, create, alter, delete)", sub);
}

const tn_ctl_cmd_t tn_ctl_cmd_topics = {
    .name = "topics",
    .summary = "list, show, create, alter and delete topics",
    .help =
        "usage: ternctl topics list [--page-size N]\n"
        "       ternctl topics get NAME [--partition N]\n"
        "       ternctl topics create NAME [settings]\n"
        "       ternctl topics alter NAME [settings]\n"
        "       ternctl topics delete NAME\n"
        "\n"
        "list     every topic you may read (all pages of GET /v1/topics, --page-size topics\n"
        "         a request, default and at most 1000)\n"
        "get      the record and per-partition log numbers (GET /v1/topics/NAME); --partition N\n"
        "         shows only that partition\n"
        "create   POST /v1/topics; settings:\n"
        "           --partitions N           (default 3; with --parent, the parent's)\n"
        "           --retention D            (0: no age limit, else at least 1h; default the\n"
        "                                     server's, 7 days)\n"
        "           --visibility-timeout D   lease length (default 30s)\n"
        "           --max-in-flight N        leases out per partition (default 1024)\n"
        "           --max-acked-ahead N      acks past the oldest unacked (default 1024)\n"
        "           --delivery-mode M        reliable (default) or ttl_discard (needs --ttl)\n"
        "           --ttl D                  with ttl_discard\n"
        "           --max-attempts N         deliveries before the dead-letter topic (0: off)\n"
        "           --durability M           durable (default), write_ack or relaxed\n"
        "           --parent P               create as a child topic of P\n"
        "           --fanout-delay D         with --parent: a delayed child\n"
        "           --replication-factor N   copies of each partition, 1..5 (default the\n"
        "                                    server's, 3; clamped to the members alive)\n"
        "           --min-insync N           copies an acknowledgement needs (default 2,\n"
        "                                    at most the factor)\n"
        "alter    PATCH /v1/topics/NAME with any of --partitions (only grows), --retention,\n"
        "         --visibility-timeout, --max-in-flight, --max-acked-ahead, --owner USER\n"
        "         (admins; \"\" gives the topic back to the NSQ doors), --min-insync N;\n"
        "         or --replication-factor N (admins; alone or with --min-insync): every\n"
        "         partition is moved online to N replicas\n"
        "delete   DELETE /v1/topics/NAME: the record, data and channels\n"
        "\n"
        "Durations are Go's (250ms, 90s, 1h30m, 168h). --json prints the server's JSON\n"
        "(list: {\"topics\":[...]} over every page; delete: {\"deleted\":true}).\n"
        "\n"
        "Examples:\n"
        "  ternctl topics create orders --partitions 6 --retention 24h\n"
        "  ternctl topics alter orders --partitions 12\n"
        "  ternctl topics get orders\n",
    .run = run,
};
