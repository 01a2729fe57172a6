/* `ternctl scrub`: start a scrub of the node's sealed segments (POST
 * /v1/storage/scrub) and, with --wait, follow it (GET /v1/storage/scrub
 * every half second: a long run never holds one request open past
 * --timeout) until it ends, then print its report; --last prints the
 * report of the run going on or the last one without starting any.
 *
 * Exit codes: 0 when the run (or, with --last, the report shown) found
 * nothing; 1 when it found damage, was stopped (the node shut down), or a
 * request failed; 2 usage. Without --wait the command only starts the
 * run: 0 once the node took the request. */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POLL_US 500000

static void when(int64_t ms, char *buf, size_t cap)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

/* Print a report (human form); its exit code. */
static int print_report(yajl_val rep)
{
    int64_t id = 0, started = 0, finished = 0, parts = 0, segs = 0, skipped = 0, bytes = 0,
            records = 0, throttled = 0, errors = 0;
    tn_ctl_get_int(rep, "id", &id);
    const char *status = tn_ctl_get_str(rep, "status");
    const char *trigger = tn_ctl_get_str(rep, "trigger");
    if (status == NULL) {
        fprintf(stderr, "ternctl: scrub: the report has no status\n");
        return TN_CTL_FAIL;
    }
    if (strcmp(status, "none") == 0) {
        printf("no scrub has run since the node started\n");
        return TN_CTL_OK;
    }
    tn_ctl_get_int(rep, "started_ms", &started);
    bool done = tn_ctl_get_int(rep, "finished_ms", &finished);
    tn_ctl_get_int(rep, "partitions", &parts);
    tn_ctl_get_int(rep, "segments", &segs);
    tn_ctl_get_int(rep, "segments_skipped", &skipped);
    tn_ctl_get_int(rep, "bytes", &bytes);
    tn_ctl_get_int(rep, "records_checked", &records);
    tn_ctl_get_int(rep, "throttled_ms", &throttled);
    tn_ctl_get_int(rep, "errors_total", &errors);
    char at[40], took[32], sz[32], wait[32];
    when(started, at, sizeof(at));
    printf("scrub run %" PRId64 " (%s): %s\n", id, trigger ? trigger : "?", status);
    if (done)
        printf("started:    %s, took %s\n", at,
               tn_ctl_fmt_ms(finished - started, took, sizeof(took)));
    else
        printf("started:    %s, still running\n", at);
    printf("checked:    %" PRId64 " partitions, %" PRId64 " segments (%" PRId64
           " skipped), %s, %" PRId64 " records\n",
           parts, segs, skipped, tn_ctl_fmt_bytes((uint64_t)bytes, sz, sizeof(sz)), records);
    printf("rate limit: waited %s\n", tn_ctl_fmt_ms(throttled, wait, sizeof(wait)));
    printf("errors:     %" PRId64 "\n", errors);
    yajl_val list = tn_ctl_get(rep, "errors");
    size_t n = YAJL_IS_ARRAY(list) ? list->u.array.len : 0;
    if (n > 0) {
        printf("\n");
        tn_ctl_table_t t;
        tn_ctl_table_init(&t, 8);
        const char *head[] = {"TOPIC",    "PARTITION", "SEGMENT",  "FILE",
                              "POSITION", "OFFSET",    "ISOLATED", "ERROR"};
        tn_ctl_table_row(&t, head);
        for (size_t i = 0; i < n; i++) {
            yajl_val e = list->u.array.values[i];
            int64_t p = 0, seg = 0, pos = 0, off = 0;
            bool iso = false;
            tn_ctl_get_int(e, "partition", &p);
            tn_ctl_get_int(e, "segment", &seg);
            tn_ctl_get_int(e, "position", &pos);
            tn_ctl_get_bool(e, "isolated", &iso);
            char ps[24], ss[24], pp[24], os[24] = "-";
            if (tn_ctl_get_int(e, "offset", &off))
                snprintf(os, sizeof(os), "%" PRId64, off);
            snprintf(ps, sizeof(ps), "%" PRId64, p);
            snprintf(ss, sizeof(ss), "%" PRId64, seg);
            snprintf(pp, sizeof(pp), "%" PRId64, pos);
            const char *row[] = {tn_ctl_get_str(e, "topic"),
                                 ps,
                                 ss,
                                 tn_ctl_get_str(e, "file"),
                                 pp,
                                 os,
                                 iso ? "yes" : "no",
                                 tn_ctl_get_str(e, "error")};
            tn_ctl_table_row(&t, row);
        }
        tn_ctl_table_print(&t, stdout);
        tn_ctl_table_fini(&t);
        if ((int64_t)n < errors)
            printf("(%" PRId64 " more not listed)\n", errors - (int64_t)n);
    }
    if (strcmp(status, "ok") == 0 || strcmp(status, "running") == 0)
        return TN_CTL_OK;
    return TN_CTL_FAIL;
}

/* GET the report: *tree (the caller frees it) and its id and status. */
static int get_report(tn_ctl_t *c, tn_ctl_resp_t *r, yajl_val *tree)
{
    *tree = NULL;
    if (tn_ctl_call(c, "GET", "/v1/storage/scrub", NULL, 0, r) != 0)
        return TN_CTL_FAIL;
    if (r->status != 200)
        return tn_ctl_fail(r, "scrub: GET /v1/storage/scrub");
    *tree = tn_ctl_parse(r, "scrub: GET /v1/storage/scrub");
    return *tree != NULL ? TN_CTL_OK : TN_CTL_FAIL;
}

static int show(tn_ctl_t *c, tn_ctl_resp_t *r, yajl_val tree)
{
    if (!tn_ctl_json(c))
        return print_report(tree);
    tn_ctl_print_json(r->body, r->len);
    const char *status = tn_ctl_get_str(tree, "status");
    return status != NULL && (strcmp(status, "ok") == 0 || strcmp(status, "none") == 0 ||
                              strcmp(status, "running") == 0)
               ? TN_CTL_OK
               : TN_CTL_FAIL;
}

static int run(tn_ctl_t *c, int argc, char **argv)
{
    static const struct option longs[] = {
        {"wait", no_argument, NULL, 'w'}, {"last", no_argument, NULL, 'l'}, {NULL, 0, NULL, 0}};
    bool wait = false, last = false;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "+", longs, NULL)) != -1) {
        if (ch == 'w')
            wait = true;
        else if (ch == 'l')
            last = true;
        else
            return tn_ctl_usage("scrub", "unknown option \"%s\"", argv[optind - 1]);
    }
    if (optind < argc)
        return tn_ctl_usage("scrub", "takes no arguments (got \"%s\")", argv[optind]);
    if (wait && last)
        return tn_ctl_usage("scrub", "--wait and --last do not go together");

    tn_ctl_resp_t r;
    memset(&r, 0, sizeof(r));
    yajl_val tree = NULL;
    int rc;
    if (last) {
        rc = get_report(c, &r, &tree);
        if (rc == TN_CTL_OK)
            rc = show(c, &r, tree);
        goto out;
    }
    if (tn_ctl_call(c, "POST", "/v1/storage/scrub", NULL, 0, &r) != 0) {
        rc = TN_CTL_FAIL;
        goto out;
    }
    if (r.status != 202) {
        rc = tn_ctl_fail(&r, "scrub: POST /v1/storage/scrub");
        goto out;
    }
    tree = tn_ctl_parse(&r, "scrub: POST /v1/storage/scrub");
    int64_t id = 0;
    bool started = false;
    if (tree == NULL || !tn_ctl_get_int(tree, "id", &id)) {
        rc = TN_CTL_FAIL;
        goto out;
    }
    tn_ctl_get_bool(tree, "started", &started);
    if (!wait) {
        if (tn_ctl_json(c))
            tn_ctl_print_json(r.body, r.len);
        else
            printf("scrub run %" PRId64 " %s; `ternctl scrub --last` shows its report\n", id,
                   started ? "started" : "already running");
        rc = TN_CTL_OK;
        goto out;
    }
    if (!tn_ctl_json(c))
        fprintf(stderr, "scrub run %" PRId64 " %s; waiting for it to end\n", id,
                started ? "started" : "already running");
    for (;;) {
        yajl_tree_free(tree);
        tn_ctl_resp_fini(&r);
        memset(&r, 0, sizeof(r));
        rc = get_report(c, &r, &tree);
        if (rc != TN_CTL_OK)
            goto out;
        int64_t now_id = 0;
        const char *status = tn_ctl_get_str(tree, "status");
        tn_ctl_get_int(tree, "id", &now_id);
        if (now_id > id || (now_id == id && status != NULL && strcmp(status, "running") != 0))
            break;
        usleep(POLL_US);
    }
    rc = show(c, &r, tree);
out:
    if (tree != NULL)
        yajl_tree_free(tree);
    tn_ctl_resp_fini(&r);
    return rc;
}

const tn_ctl_cmd_t tn_ctl_cmd_scrub = {
    .name = "scrub",
    .summary = "verify the node's sealed segments (CRCs and indexes) now, or show the last report",
    .help = "usage: ternctl scrub [--wait | --last]\n"
            "\n"
            "Starts a scrub on the node (POST /v1/storage/scrub, admins only): every sealed\n"
            "segment of every partition stored there is read at the node's scrub-rate and\n"
            "every record's CRC and the sidecar index are checked. A damaged segment\n"
            "isolates its partition, as recovery does. A scrub already running is joined,\n"
            "not started twice.\n"
            "\n"
            "  --wait   follow the run (GET /v1/storage/scrub every 0.5 s) until it ends and\n"
            "           print its report: what was checked, and each error with its topic,\n"
            "           partition, segment, file, byte position and record offset\n"
            "  --last   start nothing: print the report of the run going on, or the last one\n"
            "\n"
            "With --json the server's JSON is printed (the POST's answer, or the report).\n"
            "\n"
            "Exit status: 0 when the run found nothing (without --wait: once the node took\n"
            "the request), 1 when it found damage, was stopped by a shutdown, or a request\n"
            "failed, 2 for bad arguments.\n"
            "\n"
            "Examples:\n"
            "  ternctl scrub --wait\n"
            "  ternctl --json scrub --last\n",
    .run = run,
};
