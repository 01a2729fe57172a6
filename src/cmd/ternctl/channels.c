/* `ternctl channels list|pause|unpause|empty|delete`: a topic's channels.
 * /v1 has no channel routes, so these use nsqd's: GET /stats?format=json
 * filtered to the topic (depth, in flight, deferred, consumers, paused),
 * and POST /channel/<op>?topic=T&channel=C. Both act on the node asked (in
 * a cluster, nsqd's endpoints are per node). */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"

#include <inttypes.h>
#include <string.h>

#define CMD "channels"

static const char *num(yajl_val o, const char *key, char *buf, size_t cap)
{
    int64_t v = 0;
    if (!tn_ctl_get_int(o, key, &v))
        return NULL;
    snprintf(buf, cap, "%" PRId64, v);
    return buf;
}

static int list(tn_ctl_t *c, int argc, char **argv)
{
    if (argc != 2)
        return tn_ctl_usage(CMD, "list takes one topic name");
    const char *topic = argv[1];
    char esc[800], path[1024], what[400];
    snprintf(path, sizeof(path), "/stats?format=json&include_clients=false&topic=%s",
             tn_ctl_esc(topic, esc, sizeof(esc)));
    snprintf(what, sizeof(what), "list channels of %s", topic);
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "GET", path, NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    if (r.status != 200) {
        int rc = tn_ctl_fail(&r, what);
        tn_ctl_resp_fini(&r);
        return rc;
    }
    yajl_val v = tn_ctl_parse(&r, what);
    yajl_val topics = tn_ctl_get(v, "topics");
    yajl_val t = NULL;
    for (size_t i = 0; YAJL_IS_ARRAY(topics) && i < topics->u.array.len; i++) {
        const char *n = tn_ctl_get_str(topics->u.array.values[i], "topic_name");
        if (n != NULL && strcmp(n, topic) == 0)
            t = topics->u.array.values[i];
    }
    int rc = TN_CTL_OK;
    yajl_val chans = tn_ctl_get(t, "channels");
    if (v == NULL) {
        rc = TN_CTL_FAIL;
    } else if (!YAJL_IS_ARRAY(chans)) {
        fprintf(stderr, "ternctl: %s: 404 topic not found on this node\n", what);
        rc = TN_CTL_FAIL;
    } else if (tn_ctl_json(c)) {
        tn_buf_t b;
        tn_buf_init(&b);
        tn_buf_append(&b, "{\"topic\":\"", 10);
        tn_buf_json_escape(&b, topic);
        tn_buf_append(&b, "\",\"channels\":", 13);
        tn_ctl_json_write(&b, chans);
        tn_buf_append(&b, "}", 1);
        tn_ctl_print_json(tn_buf_data(&b), tn_buf_size(&b));
        tn_buf_fini(&b);
    } else if (chans->u.array.len == 0) {
        printf("topic %s has no channels\n", topic);
    } else {
        tn_ctl_table_t tb;
        tn_ctl_table_init(&tb, 9);
        const char *head[] = {"CHANNEL",  "DEPTH",    "IN FLIGHT", "DEFERRED", "MESSAGES",
                              "REQUEUED", "TIMEOUTS", "CONSUMERS", "PAUSED"};
        tn_ctl_table_row(&tb, head);
        for (size_t i = 0; i < chans->u.array.len; i++) {
            yajl_val ch = chans->u.array.values[i];
            char a[24], b[24], d[24], e[24], f[24], g[24], h[24];
            bool paused = false;
            tn_ctl_get_bool(ch, "paused", &paused);
            const char *row[] = {tn_ctl_get_str(ch, "channel_name"),
                                 num(ch, "depth", a, sizeof(a)),
                                 num(ch, "in_flight_count", b, sizeof(b)),
                                 num(ch, "deferred_count", d, sizeof(d)),
                                 num(ch, "message_count", e, sizeof(e)),
                                 num(ch, "requeue_count", f, sizeof(f)),
                                 num(ch, "timeout_count", g, sizeof(g)),
                                 num(ch, "client_count", h, sizeof(h)),
                                 paused ? "yes" : "no"};
            tn_ctl_table_row(&tb, row);
        }
        tn_ctl_table_print(&tb, stdout);
        tn_ctl_table_fini(&tb);
    }
    if (v != NULL)
        yajl_tree_free(v);
    tn_ctl_resp_fini(&r);
    return rc;
}

static int act(tn_ctl_t *c, int argc, char **argv)
{
    const char *op = argv[0];
    if (argc != 3)
        return tn_ctl_usage(CMD, "%s takes a topic and a channel name", op);
    char et[800], ec[800], path[2048], what[600];
    snprintf(path, sizeof(path), "/channel/%s?topic=%s&channel=%s", op,
             tn_ctl_esc(argv[1], et, sizeof(et)), tn_ctl_esc(argv[2], ec, sizeof(ec)));
    snprintf(what, sizeof(what), "%s channel %s of %s", op, argv[2], argv[1]);
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "POST", path, NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    int rc = TN_CTL_OK;
    if (r.status != 200) {
        rc = tn_ctl_fail(&r, what);
    } else if (tn_ctl_json(c)) {
        tn_buf_t b;
        tn_buf_init(&b);
        tn_buf_append(&b, "{\"topic\":\"", 10);
        tn_buf_json_escape(&b, argv[1]);
        tn_buf_append(&b, "\",\"channel\":\"", 13);
        tn_buf_json_escape(&b, argv[2]);
        tn_buf_append(&b, "\",\"done\":\"", 10);
        tn_buf_json_escape(&b, op);
        tn_buf_append(&b, "\"}", 2);
        tn_ctl_print_json(tn_buf_data(&b), tn_buf_size(&b));
        tn_buf_fini(&b);
    } else {
        static const char *const past[][2] = {{"pause", "paused"},
                                              {"unpause", "unpaused"},
                                              {"empty", "emptied"},
                                              {"delete", "deleted"}};
        const char *p = op;
        for (size_t i = 0; i < TN_ARRAY_SIZE(past); i++)
            if (strcmp(past[i][0], op) == 0)
                p = past[i][1];
        printf("%s channel %s of topic %s\n", p, argv[2], argv[1]);
    }
    tn_ctl_resp_fini(&r);
    return rc;
}

static int run(tn_ctl_t *c, int argc, char **argv)
{
    if (argc < 2)
        return tn_ctl_usage(CMD, "which one: list, pause, unpause, empty or delete?");
    const char *sub = argv[1];
    if (strcmp(sub, "list") == 0)
        return list(c, argc - 1, argv + 1);
    if (strcmp(sub, "pause") == 0 || strcmp(sub, "unpause") == 0 || strcmp(sub, "empty") == 0 ||
        strcmp(sub, "delete") == 0)
        return act(c, argc - 1, argv + 1);
    return tn_ctl_usage(CMD, "unknown subcommand \"%s\" (list, pause, unpause, empty, delete)",
                        sub);
}

const tn_ctl_cmd_t tn_ctl_cmd_channels = {
    .name = "channels",
    .summary = "list a topic's channels; pause, unpause, empty or delete one",
    .help = "usage: ternctl channels list TOPIC\n"
            "       ternctl channels pause|unpause|empty|delete TOPIC CHANNEL\n"
            "\n"
            "list     the topic's channels with depth, in-flight, deferred, message,\n"
            "         requeue and timeout counts, consumers and whether paused\n"
            "         (GET /stats?format=json&topic=TOPIC)\n"
            "pause    stop the channel's deliveries (publishes go on); durable\n"
            "unpause  resume them\n"
            "empty    drop the channel's backlog, deferred and in-flight messages\n"
            "delete   delete the channel (its consumers are disconnected)\n"
            "\n"
            "The native /v1 API has no channel routes, so these use nsqd's endpoints\n"
            "(/stats and POST /channel/<op>), which act on the node asked.\n"
            "--json: list prints {\"topic\":...,\"channels\":[<nsqd's channel stats>]}, the\n"
            "others {\"topic\":...,\"channel\":...,\"done\":\"pause\"}.\n"
            "\n"
            "Examples:\n"
            "  ternctl channels list orders\n"
            "  ternctl channels pause orders billing\n",
    .run = run,
};
