/* `ternctl partitions move TOPIC P --replicas 2,4,3 [--wait]`: reassign a
 * replicated partition's replicas online (PATCH /v1/topics/{t}/partitions/{p};
 * docs/cluster.md "Partition moves"); with --wait, follow it (GET
 * /v1/cluster/moves every 500 ms) until it is done (exit 0) or aborted or failed
 * (exit 1).
 * `ternctl partitions force-leader TOPIC P NODE [--unclean]`: an admin's
 * one-shot election of a replicated partition's leader (POST
 * /v1/topics/{t}/partitions/{p}/leader). Clean, it moves leadership to
 * another eligible in-sync replica; --unclean lets a replica outside the
 * ISR lead a partition that has no live in-sync replica, losing whatever
 * it lacks (the answer says how many records when the node can tell).
 * docs/replication.md, "What an operator sees and does". */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOVE_POLL_MS 500

static bool all_digits(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

static int force_leader(tn_ctl_t *c, int argc, char **argv)
{
    static const char cmd[] = "partitions force-leader";
    static const struct option longopts[] = {{"unclean", no_argument, NULL, 'u'},
                                             {NULL, 0, NULL, 0}};
    bool unclean = false;
    optind = 1;
    opterr = 0;
    int ch;
    /* Options may follow the operands ("... 0 3 --unclean"). */
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (ch == 'u')
            unclean = true;
        else
            return tn_ctl_usage(cmd, "unknown option \"%s\"", argv[optind - 1]);
    }
    if (argc - optind != 3)
        return tn_ctl_usage(cmd, "needs TOPIC PARTITION NODE");
    const char *topic = argv[optind], *part = argv[optind + 1], *node = argv[optind + 2];
    if (!all_digits(part) || strlen(part) > 10)
        return tn_ctl_usage(cmd, "PARTITION \"%s\" is not a partition number", part);
    if (!all_digits(node) || strlen(node) > 10 || strtoull(node, NULL, 10) == 0)
        return tn_ctl_usage(cmd, "NODE \"%s\" is not a member id", node);
    char esc[3 * 256 + 1], path[1024], body[96];
    tn_ctl_esc(topic, esc, sizeof(esc));
    snprintf(path, sizeof(path), "/v1/topics/%s/partitions/%s/leader", esc, part);
    snprintf(body, sizeof(body), "{\"node\":\"%s\",\"unclean\":%s}", node,
             unclean ? "true" : "false");
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "POST", path, body, strlen(body), &r) != 0)
        return TN_CTL_FAIL;
    if (r.status != 200) {
        int rc = tn_ctl_fail(&r, "partitions force-leader");
        tn_ctl_resp_fini(&r);
        return rc;
    }
    if (tn_ctl_json(c)) {
        size_t n = r.len;
        while (n > 0 && (r.body[n - 1] == '\n' || r.body[n - 1] == '\r'))
            n--;
        tn_ctl_print_json(r.body, n);
        tn_ctl_resp_fini(&r);
        return TN_CTL_OK;
    }
    yajl_val v = tn_ctl_parse(&r, "partitions force-leader");
    tn_ctl_resp_fini(&r);
    if (v == NULL)
        return TN_CTL_FAIL;
    const char *leader = tn_ctl_get_str(v, "leader");
    int64_t epoch = 0, risk = 0;
    tn_ctl_get_int(v, "leader_epoch", &epoch);
    printf("%s/%s: leader %s, epoch %" PRId64 "%s\n", topic, part, leader != NULL ? leader : "?",
           epoch, unclean ? " (unclean)" : "");
    if (unclean) {
        if (tn_ctl_get_int(v, "records_at_risk", &risk))
            printf("records at risk: %" PRId64
                   " (below the high watermark the node last saw, missing on the new leader; "
                   "the old ISR may have acknowledged more)\n",
                   risk);
        else
            printf("records at risk: unknown (whatever the old in-sync replicas held and node %s "
                   "lacks is lost)\n",
                   node);
    }
    yajl_tree_free(v);
    return TN_CTL_OK;
}

/* "2,4,3" as a JSON list of ids into body; false when it is not one. */
static bool replicas_body(const char *list, char *body, size_t cap)
{
    size_t at = (size_t)snprintf(body, cap, "{\"replicas\":[");
    const char *p = list;
    int n = 0;
    while (*p != '\0') {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || len > 10 || n == 8)
            return false;
        for (size_t i = 0; i < len; i++)
            if (p[i] < '0' || p[i] > '9')
                return false;
        at += (size_t)snprintf(body + at, at < cap ? cap - at : 0, "%s\"%.*s\"", n > 0 ? "," : "",
                               (int)len, p);
        n++;
        p += len;
        if (*p == ',' && *++p == '\0')
            return false; /* a trailing comma */
    }
    at += (size_t)snprintf(body + at, at < cap ? cap - at : 0, "]}");
    return n > 0 && at < cap;
}

/* The move id's entry of GET /v1/cluster/moves: its state into state[cap]
 * (a progress line printed unless --json). TN_CTL_OK, or a failure. */
static int move_state(tn_ctl_t *c, const char *id, char *state, size_t cap)
{
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "GET", "/v1/cluster/moves", NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    if (r.status != 200) {
        int rc = tn_ctl_fail(&r, "partitions move: GET /v1/cluster/moves");
        tn_ctl_resp_fini(&r);
        return rc;
    }
    yajl_val v = tn_ctl_parse(&r, "partitions move");
    tn_ctl_resp_fini(&r);
    if (v == NULL)
        return TN_CTL_FAIL;
    yajl_val ml = tn_ctl_get(v, "moves");
    state[0] = '\0';
    for (size_t i = 0; YAJL_IS_ARRAY(ml) && i < ml->u.array.len; i++) {
        yajl_val m = ml->u.array.values[i];
        const char *mid = tn_ctl_get_str(m, "id");
        if (mid == NULL || strcmp(mid, id) != 0)
            continue;
        const char *st = tn_ctl_get_str(m, "state"), *err = tn_ctl_get_str(m, "error");
        snprintf(state, cap, "%s", st != NULL ? st : "?");
        int64_t lag = 0;
        if (!tn_ctl_json(c)) {
            if (tn_ctl_get_int(m, "lag_records", &lag))
                printf("move %s: %s, %" PRId64 " records behind\n", id, state, lag);
            else
                printf("move %s: %s%s%s\n", id, state, err != NULL ? ": " : "",
                       err != NULL ? err : "");
        }
    }
    yajl_tree_free(v);
    if (state[0] == '\0') {
        fprintf(stderr, "ternctl: partitions move: move %s is not listed (any more)\n", id);
        return TN_CTL_FAIL;
    }
    return TN_CTL_OK;
}

/* move --wait: the move followed and its state at the last look. */
typedef struct {
    const char *id;
    char state[32];
} move_wait_t;

static int move_look(tn_ctl_t *c, void *arg, bool *more)
{
    move_wait_t *w = arg;
    int rc = move_state(c, w->id, w->state, sizeof(w->state));
    if (rc != TN_CTL_OK)
        return rc;
    if (strcmp(w->state, "done") == 0)
        return TN_CTL_OK;
    if (strcmp(w->state, "aborted") == 0 || strcmp(w->state, "failed") == 0)
        return TN_CTL_FAIL;
    *more = true;
    return TN_CTL_OK;
}

static void move_expired(void *arg)
{
    const move_wait_t *w = arg;
    fprintf(stderr, "ternctl: partitions move: move %s still %s after --wait-timeout\n", w->id,
            w->state);
}

static int move(tn_ctl_t *c, int argc, char **argv)
{
    static const char cmd[] = "partitions move";
    static const struct option longopts[] = {{"replicas", required_argument, NULL, 'r'},
                                             {"wait", no_argument, NULL, 'w'},
                                             {"wait-timeout", required_argument, NULL, 't'},
                                             {NULL, 0, NULL, 0}};
    const char *replicas = NULL;
    bool wait = false;
    int64_t wait_ms = 3600 * 1000;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int rc;
        if (ch == 'r')
            replicas = optarg;
        else if (!tn_ctl_wait_opt(cmd, ch, &wait, &wait_ms, &rc))
            return tn_ctl_usage(cmd, "unknown option or missing value \"%s\"", argv[optind - 1]);
        else if (rc != TN_CTL_OK)
            return rc;
    }
    if (argc - optind != 2)
        return tn_ctl_usage(cmd, "needs TOPIC PARTITION --replicas IDS");
    const char *topic = argv[optind], *part = argv[optind + 1];
    if (!all_digits(part) || strlen(part) > 10)
        return tn_ctl_usage(cmd, "PARTITION \"%s\" is not a partition number", part);
    char body[256];
    if (replicas == NULL)
        return tn_ctl_usage(cmd, "--replicas IDS is required (member ids, preferred leader "
                                 "first: --replicas 2,4,3)");
    if (!replicas_body(replicas, body, sizeof(body)))
        return tn_ctl_usage(cmd, "--replicas \"%s\" is not a list of 1 to 8 member ids (2,4,3)",
                            replicas);
    char esc[3 * 256 + 1], path[1024];
    tn_ctl_esc(topic, esc, sizeof(esc));
    snprintf(path, sizeof(path), "/v1/topics/%s/partitions/%s", esc, part);
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "PATCH", path, body, strlen(body), &r) != 0)
        return TN_CTL_FAIL;
    if (r.status != 202) {
        int rc = tn_ctl_fail(&r, cmd);
        tn_ctl_resp_fini(&r);
        return rc;
    }
    yajl_val v = tn_ctl_parse(&r, cmd);
    if (v == NULL) {
        tn_ctl_resp_fini(&r);
        return TN_CTL_FAIL;
    }
    char id[40];
    snprintf(id, sizeof(id), "%s", tn_ctl_get_str(v, "id") ? tn_ctl_get_str(v, "id") : "");
    yajl_tree_free(v);
    if (tn_ctl_json(c))
        tn_ctl_print_json(r.body, r.len);
    else
        printf("move %s of %s/%s to replicas %s begun\n", id, topic, part, replicas);
    tn_ctl_resp_fini(&r);
    if (!wait)
        return TN_CTL_OK;
    move_wait_t mw = {id, ""};
    return tn_ctl_wait_for(c, wait_ms, MOVE_POLL_MS, move_look, move_expired, &mw);
}

static int run(tn_ctl_t *c, int argc, char **argv)
{
    if (argc < 2)
        return tn_ctl_usage("partitions", "needs a subcommand (move, force-leader)");
    if (strcmp(argv[1], "move") == 0)
        return move(c, argc - 1, argv + 1);
    if (strcmp(argv[1], "force-leader") == 0)
        return force_leader(c, argc - 1, argv + 1);
    return tn_ctl_usage("partitions", "unknown subcommand \"%s\"", argv[1]);
}

const tn_ctl_cmd_t tn_ctl_cmd_partitions = {
    "partitions",
    "operate on a replicated topic's partitions (move one, force a leader election)",
    "usage: ternctl partitions move TOPIC PARTITION --replicas IDS [--wait] [--wait-timeout D]\n"
    "       ternctl partitions force-leader TOPIC PARTITION NODE [--unclean]\n"
    "\n"
    "move reassigns partition PARTITION of the replicated topic TOPIC to the members IDS\n"
    "(comma-separated, preferred leader first), online (PATCH /v1/topics/{t}/partitions/{p};\n"
    "admin): the new members copy the log from the leader, join the in-sync replicas, the\n"
    "leader hands over if it is not among IDS, and the members not in IDS drop out (their\n"
    "copies are set aside on disk, not deleted). A factor-1 topic's partition moves to one\n"
    "member (IDS names one). The server refuses (400) an unknown or dead member, the same\n"
    "list, more than one member for a factor-1 topic, fewer members than\n"
    "min_insync_replicas; 409 while another move of the partition is under way. --wait\n"
    "follows it (a line every 500 ms) until done (exit 0) or aborted (exit 1; `ternctl\n"
    "cluster moves` shows why), at most --wait-timeout (default 1h). `ternctl cluster\n"
    "moves` lists moves; DELETE /v1/cluster/moves/{id} aborts one (docs/cluster.md,\n"
    "\"Partition moves\").\n"
    "\n"
    "Makes member NODE the leader of partition PARTITION of the replicated topic TOPIC\n"
    "(POST /v1/topics/{t}/partitions/{p}/leader; admin). Without --unclean NODE must be a\n"
    "live, eligible in-sync replica: the election moves leadership and loses nothing.\n"
    "With --unclean a live replica outside the ISR may lead a partition that has no live\n"
    "in-sync replica: it becomes the only ISR member, the epoch is marked unclean, and\n"
    "records the old in-sync replicas held that NODE lacks are lost; the answer says how\n"
    "many when the node can tell. The server refuses (409, with the reason) what the rules\n"
    "forbid: NODE not a replica, not live, or out of sync without --unclean. The election\n"
    "is logged at warn on the node that took it (docs/replication.md, \"What an operator\n"
    "sees and does\").\n"
    "\n"
    "examples:\n"
    "  ternctl partitions move orders 0 --replicas 2,4,3 --wait  # node 1's copy to node 4\n"
    "  ternctl partitions force-leader orders 0 2             # hand partition 0 to node 2\n"
    "  ternctl partitions force-leader orders 3 1 --unclean   # last resort: may lose records\n"
    "  ternctl --json partitions force-leader orders 0 2      # the server's answer as JSON\n",
    run,
};
