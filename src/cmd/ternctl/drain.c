/* `ternctl drain`: start the node's graceful drain (POST /v1/drain) and,
 * with --wait, follow it (GET /v1/drain every 500 ms) until the node says
 * "drained" or goes away: a drained node exits, so a connection that
 * fails after the drain began is the success it waits for. The exit code
 * is 0 then; 1 when the POST is refused, or when the node still answers
 * "draining" well past the deadline it announced (ten seconds later). */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define POLL_MS  500
#define GRACE_MS 10000 /* past the announced deadline before --wait gives up */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One progress line (or the JSON) from a GET/POST body; its state into
 * state[cap] and its deadline into *deadline. false: not the drain body. */
static bool show(tn_ctl_t *c, const tn_ctl_resp_t *r, char *state, size_t cap, int64_t *deadline)
{
    yajl_val v = tn_ctl_parse(r, "drain");
    if (v == NULL)
        return false;
    const char *s = tn_ctl_get_str(v, "state");
    int64_t nsq = 0, consumers = 0, polls = 0, feeds = 0, pubs = 0;
    bool ok = s != NULL && tn_ctl_get_int(v, "deadline_ms", deadline);
    tn_ctl_get_int(v, "nsq_in_flight", &nsq);
    tn_ctl_get_int(v, "nsq_consumers", &consumers);
    tn_ctl_get_int(v, "long_polls", &polls);
    tn_ctl_get_int(v, "ws_feeds", &feeds);
    tn_ctl_get_int(v, "publishes_in_progress", &pubs);
    if (ok) {
        snprintf(state, cap, "%s", s);
        if (tn_ctl_json(c)) {
            size_t n = r->len;
            while (n > 0 && (r->body[n - 1] == '\n' || r->body[n - 1] == '\r'))
                n--;
            tn_ctl_print_json(r->body, n);
        } else {
            char left[32] = "-";
            if (strcmp(s, "draining") == 0)
                tn_ctl_fmt_ms(*deadline > now_ms() ? *deadline - now_ms() : 0, left, sizeof(left));
            printf("%s: %" PRId64 " NSQ message(s) in flight (%" PRId64 " consumer(s)), %" PRId64
                   " long poll(s), %" PRId64 " live feed(s), %" PRId64
                   " publish(es) under way; deadline in %s\n",
                   s, nsq, consumers, polls, feeds, pubs, left);
        }
        fflush(stdout);
    } else {
        fprintf(stderr, "ternctl: drain: the server's answer has no drain state\n");
    }
    yajl_tree_free(v);
    return ok;
}

int tn__ctl_drain(tn_ctl_t *c, const char *base_url, const char *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {{"wait", no_argument, NULL, 'w'},
                                             {"drain-timeout", required_argument, NULL, 't'},
                                             {NULL, 0, NULL, 0}};
    bool wait = false;
    int64_t timeout_ms = 0;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
        if (ch == 'w') {
            wait = true;
        } else if (ch == 't') {
            if (tn_ctl_parse_ms(optarg, &timeout_ms) != 0 || timeout_ms <= 0 ||
                timeout_ms > 24LL * 3600 * 1000)
                return tn_ctl_usage(
                    cmd, "--drain-timeout: \"%s\" is not a duration from 1ms to 24h", optarg);
        } else {
            return tn_ctl_usage(cmd, "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return tn_ctl_usage(cmd, "takes no arguments (got \"%s\")", argv[optind]);
    char body[64] = "";
    if (timeout_ms > 0)
        snprintf(body, sizeof(body), "{\"timeout_ms\":%" PRId64 "}", timeout_ms);
    tn_ctl_resp_t r;
    if (tn_ctl_call_url(c, base_url, "POST", "/v1/drain", body, strlen(body), &r) != 0)
        return TN_CTL_FAIL; /* the reason is printed */
    if (r.status != 202 && r.status != 200) {
        int rc = tn_ctl_fail(&r, "drain: POST /v1/drain");
        tn_ctl_resp_fini(&r);
        return rc;
    }
    if (r.status == 200 && !tn_ctl_json(c))
        printf("a drain was already under way\n");
    char state[32];
    int64_t deadline = 0;
    bool ok = show(c, &r, state, sizeof(state), &deadline);
    tn_ctl_resp_fini(&r);
    if (!ok)
        return TN_CTL_FAIL;
    while (wait && strcmp(state, "drained") != 0) {
        if (now_ms() > deadline + GRACE_MS) {
            fprintf(stderr,
                    "ternctl: drain: the node is still %s %d s after its drain's deadline\n", state,
                    GRACE_MS / 1000);
            return TN_CTL_FAIL;
        }
        tn_ctl_sleep_ms(POLL_MS);
        if (tn_ctl_call_url(c, base_url, "GET", "/v1/drain", NULL, 0, &r) != 0) {
            /* The drained node exited and took its listener with it. */
            if (!tn_ctl_json(c))
                printf("the node has gone: drained and exited\n");
            return TN_CTL_OK;
        }
        if (r.status != 200) {
            int rc = tn_ctl_fail(&r, "drain: GET /v1/drain");
            tn_ctl_resp_fini(&r);
            return rc;
        }
        ok = show(c, &r, state, sizeof(state), &deadline);
        tn_ctl_resp_fini(&r);
        if (!ok)
            return TN_CTL_FAIL;
    }
    return TN_CTL_OK;
}

static int run(tn_ctl_t *c, int argc, char **argv)
{
    return tn__ctl_drain(c, tn_ctl_base_url(c), "drain", argc, argv);
}

const tn_ctl_cmd_t tn_ctl_cmd_drain = {
    "drain",
    "take the node out of service for a restart (graceful drain), optionally waiting for it",
    "usage: ternctl drain [--wait] [--drain-timeout D]\n"
    "\n"
    "Starts the node's graceful drain (POST /v1/drain; admin): /readyz goes 503, new\n"
    "publishes and consumes are refused with retryable answers, NSQ consumers get no new\n"
    "messages while they finish what they hold, /v1 long polls end and live feeds close;\n"
    "the node exits 0 once nothing is in flight or the drain's bound passes\n"
    "(docs/operations.md, \"Draining and rolling restarts\"). A drain cannot be cancelled.\n"
    "\n"
    "options:\n"
    "  --wait              follow the drain (a progress line every 500 ms) until the node\n"
    "                      says drained or exits; exit 1 if it still drains 10 s past its\n"
    "                      deadline\n"
    "  --drain-timeout D   bound this drain to D (\"90s\", \"2m\"; at most 24h) instead of\n"
    "                      the node's drain-timeout (30s by default). Not --timeout: that is\n"
    "                      ternctl's bound on each request\n"
    "\n"
    "examples:\n"
    "  ternctl drain --wait                          # a rolling restart's stop step\n"
    "  ternctl --url http://10.0.0.2:4151 drain --wait --drain-timeout 2m\n"
    "  ternctl --json drain                          # the node's answer as JSON\n",
    run,
};
