/* `ternctl cluster members|moves|drain|decommission|rebalance|remove`: the cluster as this node's
 * metastore replica knows it (GET /v1/cluster/members, GET
 * /v1/cluster/moves; admin only), and the graceful drain of one member by
 * its id, reached at the API address the members list gives (what
 * `ternctl drain` does to the node it is pointed at). moves lists the
 * partition moves under way and the last finished ones (`ternctl
 * partitions move` starts one); decommission marks a member draining and
 * follows its replicas off it; rebalance spreads replicas over the
 * members; remove takes an empty member out of the metastore (DELETE
 * /v1/cluster/members/{id}). */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"

#include <getopt.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>

#define CMD "cluster"

void tn__ctl_print_members(yajl_val members)
{
    tn_ctl_table_t t;
    tn_ctl_table_init(&t, 9);
    const char *head[] = {"ID",         "STATUS",   "LEADER",         "API ADDRESS", "RAFT ADDRESS",
                          "PARTITIONS", "DRAINING", "LAST HEARTBEAT", "LAST HEARD"};
    tn_ctl_table_row(&t, head);
    int64_t now_ms = (int64_t)time(NULL) * 1000;
    size_t n = YAJL_IS_ARRAY(members) ? members->u.array.len : 0;
    for (size_t i = 0; i < n; i++) {
        yajl_val m = members->u.array.values[i];
        bool leader = false, draining = false;
        int64_t parts = 0, hb = 0, heard = 0;
        tn_ctl_get_bool(m, "leader", &leader);
        tn_ctl_get_bool(m, "draining", &draining);
        tn_ctl_get_int(m, "owned_partitions", &parts);
        tn_ctl_get_int(m, "last_heartbeat_ms", &hb);
        char ps[24], age[32], ago[40], hage[32], hago[40];
        snprintf(ps, sizeof(ps), "%" PRId64, parts);
        const char *api = tn_ctl_get_str(m, "api_addr");
        if (hb > 0)
            snprintf(ago, sizeof(ago), "%s ago", tn_ctl_fmt_ms(now_ms - hb, age, sizeof(age)));
        else
            snprintf(ago, sizeof(ago), "never");
        /* The leader's Raft contact: only the leader answers it. */
        if (tn_ctl_get_int(m, "last_heard_ms_ago", &heard))
            snprintf(hago, sizeof(hago), "%s ago", tn_ctl_fmt_ms(heard, hage, sizeof(hage)));
        else
            snprintf(hago, sizeof(hago), "-");
        const char *row[] = {tn_ctl_get_str(m, "id"),
                             tn_ctl_get_str(m, "status"),
                             leader ? "yes" : "no",
                             api != NULL && api[0] != '\0' ? api : "-",
                             tn_ctl_get_str(m, "raft_addr"),
                             ps,
                             draining ? "yes" : "no",
                             ago,
                             hago};
        tn_ctl_table_row(&t, row);
    }
    tn_ctl_table_print(&t, stdout);
    tn_ctl_table_fini(&t);
}

static int get_json(tn_ctl_t *c, const char *path, const char *what, tn_ctl_resp_t *r, yajl_val *v)
{
    *v = NULL;
    if (tn_ctl_call(c, "GET", path, NULL, 0, r) != 0)
        return TN_CTL_FAIL;
    if (r->status != 200) {
        int rc = tn_ctl_fail(r, what);
        tn_ctl_resp_fini(r);
        return rc;
    }
    *v = tn_ctl_parse(r, what);
    if (*v == NULL) {
        tn_ctl_resp_fini(r);
        return TN_CTL_FAIL;
    }
    return TN_CTL_OK;
}

static int members(tn_ctl_t *c, int argc, char **argv)
{
    if (argc > 1)
        return tn_ctl_usage(CMD, "members takes no arguments");
    tn_ctl_resp_t r;
    yajl_val v;
    int rc = get_json(c, "/v1/cluster/members", "cluster members", &r, &v);
    if (rc != TN_CTL_OK)
        return rc;
    yajl_val ml = tn_ctl_get(v, "members");
    if (!YAJL_IS_ARRAY(ml)) {
        fprintf(stderr, "ternctl: cluster members: the answer has no members array\n");
        rc = TN_CTL_FAIL;
    } else if (tn_ctl_json(c)) {
        tn_ctl_print_json(r.body, r.len);
    } else {
        tn__ctl_print_members(ml);
    }
    yajl_tree_free(v);
    tn_ctl_resp_fini(&r);
    return rc;
}

/* A JSON list of member ids as "2,4,3" into buf. */
static const char *id_list(yajl_val v, char *buf, size_t cap)
{
    buf[0] = '\0';
    size_t at = 0;
    for (size_t i = 0; YAJL_IS_ARRAY(v) && i < v->u.array.len && at < cap; i++) {
        const char *s = YAJL_IS_STRING(v->u.array.values[i]) ? v->u.array.values[i]->u.string : "?";
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i > 0 ? "," : "", s);
    }
    return buf;
}

void tn__ctl_print_moves(yajl_val ml)
{
    tn_ctl_table_t t;
    tn_ctl_table_init(&t, 9);
    const char *head[] = {"ID",    "TOPIC",  "PARTITION", "FROM", "TO",
                          "STATE", "COPIED", "LAG",       "ERROR"};
    tn_ctl_table_row(&t, head);
    for (size_t i = 0; i < ml->u.array.len; i++) {
        yajl_val m = ml->u.array.values[i];
        int64_t p = 0, lag = 0, copied = 0, total = 0;
        char ps[24], lags[24], from[96], to[96], cb[24], tb[24], copy[56];
        tn_ctl_get_int(m, "partition", &p);
        snprintf(ps, sizeof(ps), "%" PRId64, p);
        if (tn_ctl_get_int(m, "lag_records", &lag))
            snprintf(lags, sizeof(lags), "%" PRId64, lag);
        else
            snprintf(lags, sizeof(lags), "-");
        /* bytes_copied/bytes_total: known on the partition's leader only */
        if (tn_ctl_get_int(m, "bytes_copied", &copied) && tn_ctl_get_int(m, "bytes_total", &total))
            snprintf(copy, sizeof(copy), "%s/%s",
                     tn_ctl_fmt_bytes((uint64_t)copied, cb, sizeof(cb)),
                     tn_ctl_fmt_bytes((uint64_t)total, tb, sizeof(tb)));
        else
            snprintf(copy, sizeof(copy), "-");
        const char *err = tn_ctl_get_str(m, "error");
        const char *row[] = {tn_ctl_get_str(m, "id"),
                             tn_ctl_get_str(m, "topic"),
                             ps,
                             id_list(tn_ctl_get(m, "from"), from, sizeof(from)),
                             id_list(tn_ctl_get(m, "to"), to, sizeof(to)),
                             tn_ctl_get_str(m, "state"),
                             copy,
                             lags,
                             err != NULL ? err : "-"};
        tn_ctl_table_row(&t, row);
    }
    tn_ctl_table_print(&t, stdout);
    tn_ctl_table_fini(&t);
}

static int moves(tn_ctl_t *c, int argc, char **argv)
{
    if (argc > 1)
        return tn_ctl_usage(CMD, "moves takes no arguments");
    tn_ctl_resp_t r;
    yajl_val v;
    int rc = get_json(c, "/v1/cluster/moves", "cluster moves", &r, &v);
    if (rc != TN_CTL_OK)
        return rc;
    yajl_val ml = tn_ctl_get(v, "moves");
    if (!YAJL_IS_ARRAY(ml)) {
        fprintf(stderr, "ternctl: cluster moves: the answer has no moves array\n");
        rc = TN_CTL_FAIL;
    } else if (tn_ctl_json(c)) {
        tn_ctl_print_json(r.body, r.len);
    } else if (ml->u.array.len == 0) {
        printf("no partition moves, under way or recently finished (`ternctl partitions move`\n"
               "starts one)\n");
    } else {
        tn__ctl_print_moves(ml);
    }
    yajl_tree_free(v);
    tn_ctl_resp_fini(&r);
    return rc;
}

/* `cluster drain ID [drain's options]`: find ID's API address in the
 * members list, then drain that node as `ternctl drain` would, over the
 * same scheme (http or https) and credentials. */
static int drain_member(tn_ctl_t *c, int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-')
        return tn_ctl_usage(CMD, "drain needs a member id (ternctl cluster members lists them)");
    tn_ctl_resp_t r;
    yajl_val v;
    int rc = get_json(c, "/v1/cluster/members", "cluster drain", &r, &v);
    if (rc != TN_CTL_OK)
        return rc;
    yajl_val ml = tn_ctl_get(v, "members");
    const char *api = NULL, *status = NULL;
    for (size_t i = 0; YAJL_IS_ARRAY(ml) && i < ml->u.array.len; i++) {
        const char *id = tn_ctl_get_str(ml->u.array.values[i], "id");
        if (id != NULL && strcmp(id, argv[1]) == 0) {
            api = tn_ctl_get_str(ml->u.array.values[i], "api_addr");
            status = tn_ctl_get_str(ml->u.array.values[i], "status");
        }
    }
    char url[320] = "";
    if (api == NULL) {
        fprintf(stderr,
                "ternctl: cluster drain: no member %s (ternctl cluster members lists them)\n",
                argv[1]);
        rc = TN_CTL_FAIL;
    } else if (api[0] == '\0') {
        fprintf(stderr, "ternctl: cluster drain: member %s has no API address on record\n",
                argv[1]);
        rc = TN_CTL_FAIL;
    } else if (status != NULL && strcmp(status, "alive") != 0) {
        fprintf(stderr, "ternctl: cluster drain: member %s is %s: nothing to drain\n", argv[1],
                status);
        rc = TN_CTL_FAIL;
    } else {
        const char *base = tn_ctl_base_url(c);
        snprintf(url, sizeof(url), "%s%s",
                 strncmp(base, "https://", 8) == 0 ? "https://" : "http://", api);
    }
    yajl_tree_free(v);
    tn_ctl_resp_fini(&r);
    if (rc != TN_CTL_OK)
        return rc;
    if (!tn_ctl_json(c))
        printf("member %s at %s:\n", argv[1], url);
    return tn__ctl_drain(c, url, CMD, argc - 1, argv + 1);
}

#define DECOM_POLL_MS 1000

/* One member's entry of GET /v1/cluster/members: its replica_partitions,
 * owned_partitions, outbound_moves and decommissioned. TN_CTL_OK, or
 * TN_CTL_FAIL (printed) when the list has no such member. */
static int decom_progress(tn_ctl_t *c, const char *id, int64_t *held, int64_t *owned,
                          int64_t *moving, bool *done)
{
    tn_ctl_resp_t r;
    yajl_val v;
    int rc = get_json(c, "/v1/cluster/members", "cluster decommission", &r, &v);
    if (rc != TN_CTL_OK)
        return rc;
    yajl_val ml = tn_ctl_get(v, "members");
    rc = TN_CTL_FAIL;
    for (size_t i = 0; YAJL_IS_ARRAY(ml) && i < ml->u.array.len; i++) {
        yajl_val m = ml->u.array.values[i];
        const char *mid = tn_ctl_get_str(m, "id");
        if (mid == NULL || strcmp(mid, id) != 0)
            continue;
        *held = *owned = *moving = 0;
        *done = false;
        tn_ctl_get_int(m, "replica_partitions", held);
        tn_ctl_get_int(m, "owned_partitions", owned);
        tn_ctl_get_int(m, "outbound_moves", moving);
        tn_ctl_get_bool(m, "decommissioned", done);
        rc = TN_CTL_OK;
    }
    if (rc != TN_CTL_OK)
        fprintf(stderr, "ternctl: cluster decommission: no member %s\n", id);
    yajl_tree_free(v);
    tn_ctl_resp_fini(&r);
    return rc;
}

/* The options of a command that takes only --wait and --wait-timeout D
 * (default an hour): TN_CTL_OK with optind at the first operand, or the
 * usage error printed and its code. */
static int wait_opts(const char *cmd, int argc, char **argv, bool *wait, int64_t *wait_ms)
{
    static const struct option longopts[] = {{"wait", no_argument, NULL, 'w'},
                                             {"wait-timeout", required_argument, NULL, 't'},
                                             {NULL, 0, NULL, 0}};
    *wait = false;
    *wait_ms = 3600 * 1000;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int rc;
        if (!tn_ctl_wait_opt(cmd, ch, wait, wait_ms, &rc))
            return tn_ctl_usage(cmd, "unknown option or missing value \"%s\"", argv[optind - 1]);
        if (rc != TN_CTL_OK)
            return rc;
    }
    return TN_CTL_OK;
}

/* decommission --wait: what the last look saw, and what was last printed
 * (progress prints when it changes). */
typedef struct {
    const char *id;
    int64_t held, owned; /* replicated and owned partitions left */
    int64_t last_held, last_moving;
} decom_wait_t;

static int decom_look(tn_ctl_t *c, void *arg, bool *more)
{
    decom_wait_t *w = arg;
    int64_t moving;
    bool done;
    int rc = decom_progress(c, w->id, &w->held, &w->owned, &moving, &done);
    if (rc != TN_CTL_OK)
        return rc;
    if (done) {
        if (!tn_ctl_json(c))
            printf("member %s holds no partition: decommissioned\n", w->id);
        return TN_CTL_OK;
    }
    /* Factor-1 partitions move too (one at a time per member, as
     * replicas do): what it owns counts until the last has left. */
    if ((w->held + w->owned != w->last_held || moving != w->last_moving) && !tn_ctl_json(c))
        printf("member %s: %" PRId64 " replicated partition(s) and %" PRId64
               " owned partition(s) left, %" PRId64 " move(s) off it under way\n",
               w->id, w->held, w->owned, moving);
    w->last_held = w->held + w->owned;
    w->last_moving = moving;
    *more = true;
    return TN_CTL_OK;
}

static void decom_expired(void *arg)
{
    const decom_wait_t *w = arg;
    fprintf(stderr,
            "ternctl: cluster decommission: member %s still holds %" PRId64
            " replicated and %" PRId64 " owned partition(s) after --wait-timeout\n",
            w->id, w->held, w->owned);
}

/* `cluster decommission ID [--wait] [--wait-timeout D]`: mark the member
 * draining (POST /v1/cluster/members/{id}/decommission): the metastore
 * leader moves its replicas of replicated partitions to the others. With
 * --wait, follow the members list until it holds nothing. */
static int decommission(tn_ctl_t *c, int argc, char **argv)
{
    static const char cmd[] = "cluster decommission";
    bool wait;
    int64_t wait_ms;
    int rc = wait_opts(cmd, argc, argv, &wait, &wait_ms);
    if (rc != TN_CTL_OK)
        return rc;
    if (argc - optind != 1)
        return tn_ctl_usage(cmd, "needs a member id (ternctl cluster members lists them)");
    const char *id = argv[optind];
    if (id[0] == '\0' || strspn(id, "0123456789") != strlen(id) || strlen(id) > 19)
        return tn_ctl_usage(cmd, "\"%s\" is not a member id", id);
    char path[96];
    snprintf(path, sizeof(path), "/v1/cluster/members/%s/decommission", id);
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "POST", path, NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    if (r.status != 204) {
        rc = tn_ctl_fail(&r, cmd);
        tn_ctl_resp_fini(&r);
        return rc;
    }
    tn_ctl_resp_fini(&r);
    if (!tn_ctl_json(c))
        printf("member %s is draining: its replicas move to the other members\n", id);
    if (!wait)
        return TN_CTL_OK;
    decom_wait_t dw = {id, 0, 0, -1, -1};
    return tn_ctl_wait_for(c, wait_ms, DECOM_POLL_MS, decom_look, decom_expired, &dw);
}

/* GET /v1/cluster/rebalance: whether one runs, the moves under way, the
 * moves its plan has left, and the most minus the fewest replicas over the
 * alive, non-draining members. */
static int rebal_progress(tn_ctl_t *c, bool *running, int64_t *moving, int64_t *left,
                          int64_t *spread)
{
    tn_ctl_resp_t r;
    yajl_val v;
    int rc = get_json(c, "/v1/cluster/rebalance", "cluster rebalance", &r, &v);
    if (rc != TN_CTL_OK)
        return rc;
    *running = false;
    *moving = *left = 0;
    tn_ctl_get_bool(v, "running", running);
    tn_ctl_get_int(v, "moves_under_way", moving);
    tn_ctl_get_int(tn_ctl_get(v, "left"), "moves", left);
    yajl_val ml = tn_ctl_get(v, "members");
    int64_t lo = INT64_MAX, hi = 0;
    for (size_t i = 0; YAJL_IS_ARRAY(ml) && i < ml->u.array.len; i++) {
        yajl_val m = ml->u.array.values[i];
        bool alive = false, draining = false;
        int64_t n = 0;
        tn_ctl_get_bool(m, "alive", &alive);
        tn_ctl_get_bool(m, "draining", &draining);
        tn_ctl_get_int(m, "replicas", &n);
        if (alive && !draining) {
            lo = n < lo ? n : lo;
            hi = n > hi ? n : hi;
        }
    }
    *spread = hi >= lo ? hi - lo : 0;
    yajl_tree_free(v);
    tn_ctl_resp_fini(&r);
    return TN_CTL_OK;
}

/* rebalance --wait: the moves under way at the last look, and what was
 * last printed (progress prints when it changes). */
typedef struct {
    int64_t moving;
    int64_t last_moving, last_left;
} rebal_wait_t;

static int rebal_look(tn_ctl_t *c, void *arg, bool *more)
{
    rebal_wait_t *w = arg;
    bool running;
    int64_t left, spread;
    int rc = rebal_progress(c, &running, &w->moving, &left, &spread);
    if (rc != TN_CTL_OK)
        return rc;
    if (!running && w->moving == 0) {
        if (spread > 1) {
            fprintf(stderr,
                    "ternctl: cluster rebalance: over with replica counts %" PRId64
                    " apart (a member of a new list was not alive: the metastore leader's "
                    "log says which)\n",
                    spread);
            return TN_CTL_FAIL;
        }
        if (!tn_ctl_json(c))
            printf("rebalanced: the members' replica counts are within one\n");
        return TN_CTL_OK;
    }
    if ((w->moving != w->last_moving || left != w->last_left) && !tn_ctl_json(c))
        printf("%" PRId64 " move(s) under way, %" PRId64 " more to begin\n", w->moving, left);
    w->last_moving = w->moving;
    w->last_left = left;
    *more = true;
    return TN_CTL_OK;
}

static void rebal_expired(void *arg)
{
    const rebal_wait_t *w = arg;
    fprintf(stderr,
            "ternctl: cluster rebalance: still running after --wait-timeout (%" PRId64
            " move(s) under way)\n",
            w->moving);
}

/* `cluster rebalance [--wait] [--wait-timeout D]`: ask the metastore
 * leader to spread replicas and preferred leaders over the members (POST
 * /v1/cluster/rebalance). With --wait, follow GET /v1/cluster/rebalance
 * until no rebalance runs, no move is under way and the alive members'
 * replica counts are within one. */
static int rebalance(tn_ctl_t *c, int argc, char **argv)
{
    static const char cmd[] = "cluster rebalance";
    bool wait;
    int64_t wait_ms;
    int rc = wait_opts(cmd, argc, argv, &wait, &wait_ms);
    if (rc != TN_CTL_OK)
        return rc;
    if (argc - optind != 0)
        return tn_ctl_usage(cmd, "takes no arguments, only --wait and --wait-timeout");
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "POST", "/v1/cluster/rebalance", NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    if (r.status != 200 && r.status != 202) {
        rc = tn_ctl_fail(&r, cmd);
        tn_ctl_resp_fini(&r);
        return rc;
    }
    yajl_val v = tn_ctl_parse(&r, cmd);
    if (v == NULL) {
        tn_ctl_resp_fini(&r);
        return TN_CTL_FAIL;
    }
    int64_t moves = 0, reorders = 0;
    tn_ctl_get_int(v, "moves", &moves);
    tn_ctl_get_int(v, "reorders", &reorders);
    if (tn_ctl_json(c))
        tn_ctl_print_json(r.body, r.len);
    else if (r.status == 200)
        printf("the members are balanced already: nothing to move\n");
    else
        printf("rebalance %s begun: %" PRId64 " replica move(s), %" PRId64
               " preferred-leader reorder(s)\n",
               tn_ctl_get_str(v, "id") != NULL ? tn_ctl_get_str(v, "id") : "?", moves, reorders);
    bool begun = r.status == 202;
    yajl_tree_free(v);
    tn_ctl_resp_fini(&r);
    if (!wait || !begun)
        return TN_CTL_OK;
    rebal_wait_t rw = {0, -1, -1};
    return tn_ctl_wait_for(c, wait_ms, DECOM_POLL_MS, rebal_look, rebal_expired, &rw);
}

/* `cluster remove ID`: DELETE /v1/cluster/members/{id}. 200: the member is
 * out of the members and of the Raft configuration; 202: out of the
 * members, the configuration change under way. */
static int remove_member(tn_ctl_t *c, int argc, char **argv)
{
    static const char cmd[] = "cluster remove";
    if (argc != 2)
        return tn_ctl_usage(cmd, "needs a member id (ternctl cluster members lists them)");
    const char *id = argv[1];
    if (id[0] == '\0' || strspn(id, "0123456789") != strlen(id) || strlen(id) > 19)
        return tn_ctl_usage(cmd, "\"%s\" is not a member id", id);
    char path[96];
    snprintf(path, sizeof(path), "/v1/cluster/members/%s", id);
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "DELETE", path, NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    if (r.status != 200 && r.status != 202) {
        int rc = tn_ctl_fail(&r, cmd);
        tn_ctl_resp_fini(&r);
        return rc;
    }
    if (tn_ctl_json(c))
        tn_ctl_print_json(r.body, r.len);
    else if (r.status == 200)
        printf("member %s removed: out of the members and the metastore's voters\n", id);
    else
        printf("member %s removed from the members; the metastore leader is taking it out of "
               "the Raft configuration (ternctl cluster members shows the voters)\n",
               id);
    tn_ctl_resp_fini(&r);
    return TN_CTL_OK;
}

static int run(tn_ctl_t *c, int argc, char **argv)
{
    if (argc < 2)
        return tn_ctl_usage(CMD,
                            "which one: members, moves, drain, decommission, rebalance or remove?");
    if (strcmp(argv[1], "members") == 0)
        return members(c, argc - 1, argv + 1);
    if (strcmp(argv[1], "moves") == 0)
        return moves(c, argc - 1, argv + 1);
    if (strcmp(argv[1], "drain") == 0)
        return drain_member(c, argc - 1, argv + 1);
    if (strcmp(argv[1], "decommission") == 0)
        return decommission(c, argc - 1, argv + 1);
    if (strcmp(argv[1], "rebalance") == 0)
        return rebalance(c, argc - 1, argv + 1);
    if (strcmp(argv[1], "remove") == 0)
        return remove_member(c, argc - 1, argv + 1);
    return tn_ctl_usage(
        CMD, "unknown subcommand \"%s\" (members, moves, drain, decommission, rebalance, remove)",
        argv[1]);
}

const tn_ctl_cmd_t tn_ctl_cmd_cluster = {
    .name = "cluster",
    .summary = "the cluster's members and partition moves; drain, decommission, rebalance",
    .help = "usage: ternctl cluster members\n"
            "       ternctl cluster moves\n"
            "       ternctl cluster drain ID [--wait] [--drain-timeout D]\n"
            "       ternctl cluster decommission ID [--wait] [--wait-timeout D]\n"
            "       ternctl cluster rebalance [--wait] [--wait-timeout D]\n"
            "       ternctl cluster remove ID\n"
            "\n"
            "members  every member as this node's metastore replica knows it: id, alive or\n"
            "         dead, the metastore leader, API and Raft addresses, partitions owned,\n"
            "         draining, how long ago it last registered, and (asked of the metastore\n"
            "         leader; \"-\" elsewhere) how long ago the leader last heard from it over\n"
            "         Raft (GET /v1/cluster/members)\n"
            "moves    partition moves under way and the last finished ones (GET\n"
            "         /v1/cluster/moves): id, topic, partition, the replicas before and after,\n"
            "         copying | catching_up | handing_over | done | aborted | failed, the\n"
            "         bytes the farthest-behind target holds of the leader's log, how many\n"
            "         records it lacks (\"-\": no node could tell) and why an aborted or\n"
            "         failed one ended. `ternctl partitions move` starts one\n"
            "drain    the graceful drain of member ID (as `ternctl drain`, sent to the API\n"
            "         address the members list gives for it; the same options): one node of\n"
            "         a rolling restart, from any node\n"
            "decommission  mark member ID draining: the metastore leader moves its replicas\n"
            "         and its factor-1 partitions to the least loaded other members, at most\n"
            "         max-moves-per-node (2) touching a member at a time (POST\n"
            "         /v1/cluster/members/{id}/decommission). --wait follows\n"
            "         it until the member holds nothing (exit 0), or fails after\n"
            "         --wait-timeout (default 1h)\n"
            "rebalance  spread replicas and preferred leaders of replicated partitions so every\n"
            "         alive, non-draining member holds the same number within one, moving as\n"
            "         few replicas as can be (POST /v1/cluster/rebalance; 409 while one runs).\n"
            "         --wait follows it (GET /v1/cluster/rebalance) until no move is under way\n"
            "         and the replica counts are within one (exit 0), or after --wait-timeout\n"
            "remove   take member ID, which holds no partition (decommission it first), out\n"
            "         of the members and the metastore's voters (DELETE\n"
            "         /v1/cluster/members/{id}); refused (409) while it holds partitions or\n"
            "         when fewer than three members would be left. The removed node stops\n"
            "         by itself; its data directory does not start again\n"
            "\n"
            "All need admin rights. --json prints the server's JSON.\n"
            "\n"
            "Examples:\n"
            "  ternctl cluster members\n"
            "  ternctl cluster drain 2 --wait\n"
            "  ternctl cluster decommission 4 --wait\n"
            "  ternctl cluster rebalance --wait\n"
            "  ternctl cluster remove 4\n",
    .run = run,
};
