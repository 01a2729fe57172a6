/* `ternctl partitions force-leader TOPIC P NODE [--unclean]`: an admin's
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

static int run(tn_ctl_t *c, int argc, char **argv)
{
    if (argc < 2)
        return tn_ctl_usage("partitions", "needs a subcommand (force-leader)");
    if (strcmp(argv[1], "force-leader") == 0)
        return force_leader(c, argc - 1, argv + 1);
    return tn_ctl_usage("partitions", "unknown subcommand \"%s\"", argv[1]);
}

const tn_ctl_cmd_t tn_ctl_cmd_partitions = {
    "partitions",
    "operate on a replicated topic's partitions (force a leader election)",
    "usage: ternctl partitions force-leader TOPIC PARTITION NODE [--unclean]\n"
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
    "  ternctl partitions force-leader orders 0 2             # hand partition 0 to node 2\n"
    "  ternctl partitions force-leader orders 3 1 --unclean   # last resort: may lose records\n"
    "  ternctl --json partitions force-leader orders 0 2      # the server's answer as JSON\n",
    run,
};
