/* `ternctl status`: one node's view of itself and its cluster.
 *
 * Four requests: GET /info (version, host, ports, start time; nsqd's
 * endpoint, since /v1 has no node record), GET /healthz, GET /readyz, and
 * GET /v1/cluster/members (admin only). Every part that answers is shown;
 * the exit code is 0 only when the node is healthy and ready and every part
 * answered. */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"
#include "core/buf.h"

#include <inttypes.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *path;
    tn_ctl_resp_t r;
    bool reached;
} part_t;

/* Append "name":<the body as JSON, or null> to b. */
static void json_part(tn_buf_t *b, const char *name, const part_t *p, bool with_status)
{
    tn_buf_append(b, ",\"", 2);
    tn_buf_append(b, name, strlen(name));
    tn_buf_append(b, "\":", 2);
    if (!p->reached || (!with_status && p->r.status != 200)) {
        tn_buf_append(b, "null", 4);
        return;
    }
    yajl_val v = tn_ctl_tree(p->r.body);
    char num[32];
    if (with_status) {
        int n = snprintf(num, sizeof(num), "{\"http_status\":%d,\"body\":", p->r.status);
        tn_buf_append(b, num, (size_t)n);
    }
    if (v != NULL) {
        size_t n = p->r.len;
        while (n > 0 && (p->r.body[n - 1] == '\n' || p->r.body[n - 1] == '\r'))
            n--;
        tn_buf_append(b, p->r.body, n);
    } else
        tn_buf_append(b, "null", 4);
    if (with_status)
        tn_buf_append(b, "}", 1);
    if (v != NULL)
        yajl_tree_free(v);
}

static const char *state_of(const part_t *p, char *buf, size_t cap)
{
    if (!p->reached)
        return "unreachable";
    yajl_val v = tn_ctl_tree(p->r.body);
    const char *s = tn_ctl_get_str(v, "status");
    if (s == NULL)
        s = tn_ctl_get_str(v, "error");
    snprintf(buf, cap, "%s (%d)", s ? s : "?", p->r.status);
    if (v != NULL)
        yajl_tree_free(v);
    return buf;
}

static int run(tn_ctl_t *c, int argc, char **argv)
{
    if (argc > 1)
        return tn_ctl_usage("status", "takes no arguments (got \"%s\")", argv[1]);
    part_t info = {.path = "/info"}, health = {.path = "/healthz"}, ready = {.path = "/readyz"},
           members = {.path = "/v1/cluster/members"};
    part_t *parts[] = {&info, &health, &ready, &members};
    for (size_t i = 0; i < TN_ARRAY_SIZE(parts); i++) {
        parts[i]->reached = tn_ctl_call(c, "GET", parts[i]->path, NULL, 0, &parts[i]->r) == 0;
        if (!parts[i]->reached && i == 0)
            return TN_CTL_FAIL; /* the node is not there: the reason is printed */
    }
    int rc = TN_CTL_OK;
    if (!health.reached || health.r.status != 200 || !ready.reached || ready.r.status != 200)
        rc = TN_CTL_FAIL;
    if (info.r.status != 200)
        rc = tn_ctl_fail(&info.r, "status: GET /info");
    if (members.reached && members.r.status != 200)
        rc = tn_ctl_fail(&members.r, "status: GET /v1/cluster/members");

    yajl_val iv = info.r.status == 200 ? tn_ctl_parse(&info.r, "status: GET /info") : NULL;
    yajl_val mv = members.reached && members.r.status == 200
                      ? tn_ctl_parse(&members.r, "status: GET /v1/cluster/members")
                      : NULL;
    yajl_val ml = tn_ctl_get(mv, "members");
    if ((info.r.status == 200 && iv == NULL) || (members.r.status == 200 && ml == NULL))
        rc = TN_CTL_FAIL;

    if (tn_ctl_json(c)) {
        tn_buf_t b;
        tn_buf_init(&b);
        tn_buf_append(&b, "{\"url\":\"", 8);
        tn_buf_json_escape(&b, tn_ctl_base_url(c));
        tn_buf_append(&b, "\"", 1);
        json_part(&b, "info", &info, false);
        json_part(&b, "health", &health, true);
        json_part(&b, "ready", &ready, true);
        json_part(&b, "cluster", &members, false);
        tn_buf_append(&b, "}", 1);
        tn_ctl_print_json(tn_buf_data(&b), tn_buf_size(&b));
        tn_buf_fini(&b);
    } else {
        char hs[64], rs[64];
        printf("node:       %s\n", tn_ctl_base_url(c));
        if (iv != NULL) {
            int64_t start = 0, tcp = 0, http = 0;
            tn_ctl_get_int(iv, "start_time", &start);
            tn_ctl_get_int(iv, "tcp_port", &tcp);
            tn_ctl_get_int(iv, "http_port", &http);
            char up[32], when[40];
            time_t st = (time_t)start;
            struct tm tm;
            gmtime_r(&st, &tm);
            strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
            const char *ver = tn_ctl_get_str(iv, "version");
            const char *host = tn_ctl_get_str(iv, "hostname");
            printf("version:    tern %s\n", ver ? ver : "?");
            printf("host:       %s (NSQ TCP port %" PRId64 ", HTTP port %" PRId64 ")\n",
                   host ? host : "?", tcp, http);
            printf("started:    %s (up %s)\n", when,
                   tn_ctl_fmt_ms(((int64_t)time(NULL) - start) * 1000, up, sizeof(up)));
        }
        printf("health:     %s\n", state_of(&health, hs, sizeof(hs)));
        printf("readiness:  %s\n", state_of(&ready, rs, sizeof(rs)));
        if (YAJL_IS_ARRAY(ml)) {
            size_t n = ml->u.array.len, alive = 0;
            const char *leader = NULL;
            for (size_t i = 0; i < n; i++) {
                yajl_val m = ml->u.array.values[i];
                const char *st = tn_ctl_get_str(m, "status");
                bool l = false;
                if (st != NULL && strcmp(st, "alive") == 0)
                    alive++;
                if (tn_ctl_get_bool(m, "leader", &l) && l)
                    leader = tn_ctl_get_str(m, "id");
            }
            printf("cluster:    %zu member%s, %zu alive, leader %s\n\n", n, n == 1 ? "" : "s",
                   alive, leader ? leader : "none known");
            tn__ctl_print_members(ml);
        } else {
            printf("cluster:    unknown (GET /v1/cluster/members %s)\n",
                   members.reached ? "failed" : "unreachable");
        }
    }
    if (iv != NULL)
        yajl_tree_free(iv);
    if (mv != NULL)
        yajl_tree_free(mv);
    for (size_t i = 0; i < TN_ARRAY_SIZE(parts); i++)
        tn_ctl_resp_fini(&parts[i]->r);
    return rc;
}

const tn_ctl_cmd_t tn_ctl_cmd_status = {
    .name = "status",
    .summary = "the node's version, health, readiness and cluster members",
    .help = "usage: ternctl status\n"
            "\n"
            "Shows the node's version, host, ports and uptime (GET /info), its health\n"
            "(GET /healthz) and readiness (GET /readyz), and the cluster's members as this\n"
            "node's metastore replica knows them (GET /v1/cluster/members; admin only).\n"
            "Exit code 0 when the node is healthy and ready and every request succeeded,\n"
            "else 1 (what failed is printed).\n"
            "\n"
            "With --json: {\"url\":..., \"info\":<GET /info>, \"health\":{\"http_status\":N,\n"
            "\"body\":...}, \"ready\":{...}, \"cluster\":<GET /v1/cluster/members>} (null for a\n"
            "part that failed).\n"
            "\n"
            "Example:\n"
            "  ternctl --url http://10.0.0.1:4151 --password-file ~/.tern-pw status\n",
    .run = run,
};
