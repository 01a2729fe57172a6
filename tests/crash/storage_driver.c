/* The SIGKILL crash driver. Two commands:
 *
 *   tern-crash-driver run DIR MODE FIRST_ID
 *       Open the store in DIR with durability MODE (durable, write_ack,
 *       relaxed) and append self-describing records to three partitions
 *       from 16 concurrent appenders, FINing some of them through channel
 *       logs, until killed. After each acknowledgement it writes one line
 *       to stdout with write(2) (nothing buffered to lose on SIGKILL):
 *       "A <partition> <offset> <id>" or "F <partition> <offset>".
 *
 *   tern-crash-driver verify DIR MODE LEDGER
 *       Recover DIR and check the ledger: every acknowledged record present
 *       with its body (missing), every record read well formed (corrupt),
 *       every acknowledged FIN settled (fins_lost). Prints
 *       "records=N missing=N corrupt=N fins=N fins_lost=N" and exits 1
 *       when something corrupt was read, a FIN was lost, or (durable mode)
 *       an acknowledged record is missing. */
#include "core/platform.h"

#include "body.h"

#include "core/err.h"
#include "core/log.h"
#include "storage/chanlog.h"
#include "storage/plog.h"
#include "storage/store.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NPART     3
#define APPENDERS 16
#define NOT_SEEN  UINT64_MAX /* verify: an offset whose read was not kept */

static void opts_for(tn_store_opts_t *o, const char *dir, const char *mode)
{
    tn_config_t cfg;
    if (tn_config_init(&cfg) != 0)
        exit(2);
    tn_store_opts_from_config(o, &cfg);
    tn_config_fini(&cfg);
    o->data_path = dir;
    o->segment_bytes = 1024 * 1024;
    o->checkpoint_every = 64;
    o->disk_min_free = 0;
    o->disk_high_pct = 100;
    o->disk_low_pct = 99;
    if (strcmp(mode, "durable") == 0)
        o->durability = TN_DURABILITY_DURABLE;
    else if (strcmp(mode, "write_ack") == 0)
        o->durability = TN_DURABILITY_WRITE_ACK;
    else if (strcmp(mode, "relaxed") == 0)
        o->durability = TN_DURABILITY_RELAXED;
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        exit(2);
    }
}

/* One ledger line: "A part offset id" or "F part offset". */
static void out_line(char kind, unsigned long long part, unsigned long long off,
                     unsigned long long id)
{
    char line[96];
    int n = kind == 'A' ? snprintf(line, sizeof(line), "A %llu %llu %llu\n", part, off, id)
                        : snprintf(line, sizeof(line), "F %llu %llu\n", part, off);
    if (write(1, line, (size_t)n) != n)
        exit(3);
}

typedef struct {
    tn_append_t req;
    tn_rec_in_t recs[4];
    char bodies[4][512];
    uint64_t ids[4];
    uint32_t part;
    tn_walop_t fin;
    uint32_t fin_part;
    bool fin_busy;
} appender_t;

static tn_plog_t *plogs[NPART];
static tn_chanlog_t *cls[NPART];
static uint64_t next_id;
static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void start(appender_t *a);

static void on_fin(tn_walop_t *op, int status)
{
    appender_t *a = op->data;
    a->fin_busy = false;
    if (status == 0)
        out_line('F', a->fin_part, op->rec.offset, 0);
}

static void on_append(tn_append_t *req, int status)
{
    appender_t *a = req->data;
    if (status != 0) {
        fprintf(stderr, "append failed: %s\n", tn_strerror(status));
        exit(4);
    }
    for (uint32_t i = 0; i < req->nrecs; i++)
        out_line('A', a->part, req->first_offset + i, a->ids[i]);
    if (!a->fin_busy && rnd() % 3 == 0) {
        tn_walrec_t r = {TN_WAL_FIN, req->first_offset, 0, 0, 0};
        a->fin.data = a;
        a->fin_part = a->part;
        if (tn_chanlog_submit(cls[a->part], &a->fin, &r, on_fin) == 0)
            a->fin_busy = true;
    }
    start(a);
}

static void start(appender_t *a)
{
    a->part = (uint32_t)(rnd() % NPART);
    uint32_t n = 1 + (uint32_t)(rnd() % 4);
    for (uint32_t i = 0; i < n; i++) {
        a->ids[i] = next_id++;
        size_t len = crash_body(a->ids[i], a->bodies[i], sizeof(a->bodies[i]));
        a->recs[i] = (tn_rec_in_t){{NULL, 0}, tn_iov(a->bodies[i], len), 0};
    }
    a->req.data = a;
    int rc = tn_plog_append(plogs[a->part], &a->req, a->recs, n, on_append);
    if (rc != 0) {
        fprintf(stderr, "append refused: %s\n", tn_strerror(rc));
        exit(4);
    }
}

/* Open the store and every partition and channel; the recovered channel
 * states go to cur (caller frees) or are dropped when cur is NULL. */
static tn_store_t *open_all(uv_loop_t *loop, const char *dir, const char *mode, tn_cursor_t *cur)
{
    tn_store_opts_t o;
    opts_for(&o, dir, mode);
    tn_store_t *store;
    char err[512];
    int rc = tn_store_open(loop, &o, &store, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "open: %s\n", err);
        exit(5);
    }
    for (uint32_t p = 0; p < NPART; p++) {
        tn_cursor_t state;
        if (tn_plog_open(store, "crash", p, &plogs[p]) != 0 ||
            tn_chanlog_open(store, "crash", p, "ch", NULL, &cls[p], &state) != 0) {
            fprintf(stderr, "open partition %u failed\n", p);
            exit(5);
        }
        if (tn_plog_err(plogs[p]) != 0 || tn_chanlog_err(cls[p]) != 0) {
            fprintf(stderr, "recovery failed: %s%s\n", plogs[p]->errmsg, cls[p]->errmsg);
            exit(6);
        }
        if (cur != NULL)
            cur[p] = state;
        else
            tn_cursor_fini(&state);
    }
    return store;
}

static int cmd_run(const char *dir, const char *mode, uint64_t first_id)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    next_id = first_id;
    rng ^= first_id * 2654435761u;
    open_all(&loop, dir, mode, NULL);
    static appender_t apps[APPENDERS];
    for (int i = 0; i < APPENDERS; i++)
        start(&apps[i]);
    /* Runs until killed; a generous limit keeps a lost harness from
     * leaving it running forever. */
    alarm(120);
    uv_run(&loop, UV_RUN_DEFAULT);
    return 0;
}

static int cmd_verify(const char *dir, const char *mode, const char *ledger)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_cursor_t cur[NPART];
    tn_store_t *store = open_all(&loop, dir, mode, cur);
    FILE *f = fopen(ledger, "r");
    if (f == NULL) {
        perror(ledger);
        return 2;
    }
    unsigned long long records = 0, missing = 0, corrupt = 0, fins = 0, fins_lost = 0;
    tn_buf_t scratch;
    tn_buf_init(&scratch);
    /* Every record of every partition must be well formed. What each read
     * gave (crash_body_check's answer) is kept, so that the ledger's check
     * below takes it instead of reading the record again: the reads are
     * most of a verify's time, and a second read of the same record in the
     * same recovered log gives the same answer. */
    uint64_t *seen[NPART] = {NULL};
    uint64_t ends[NPART];
    for (uint32_t p = 0; p < NPART; p++) {
        uint64_t end = tn_plog_written_next(plogs[p]);
        ends[p] = end;
        if (end > 0)
            seen[p] = malloc((size_t)end * sizeof(seen[p][0])); /* NULL: read again below */
        for (uint64_t off = 0; off < end; off++) {
            if (seen[p] != NULL)
                seen[p][off] = NOT_SEEN;
        }
        for (uint64_t off = 0; off < end; off++) {
            tn_rec_t rec;
            int rc = tn_plog_read(plogs[p], off, &scratch, &rec);
            uint64_t check = rc == 0 ? crash_body_check(rec.body, rec.h.body_len) : 0;
            if (rc == 0 && seen[p] != NULL)
                seen[p][off] = check;
            if (rc != 0 || check == 0) {
                fprintf(stderr, "partition %u offset %llu: %s\n", p, (unsigned long long)off,
                        rc ? tn_strerror(rc) : "malformed body");
                corrupt++;
                if (rc != 0)
                    break;
            }
        }
    }
    char kind;
    unsigned long long part, off, id;
    char line[128];
    while (fgets(line, sizeof(line), f) != NULL) {
        int n = sscanf(line, "%c %llu %llu %llu", &kind, &part, &off, &id);
        if (n < 3 || part >= NPART)
            continue; /* a line cut by the kill */
        if (kind == 'A' && n == 4) {
            records++;
            uint64_t check = 0;
            int rc = 0;
            if (seen[part] != NULL && off < ends[part] && seen[part][off] != NOT_SEEN) {
                check = seen[part][off];
            } else {
                tn_rec_t rec;
                rc = tn_plog_read(plogs[part], off, &scratch, &rec);
                if (rc == 0)
                    check = crash_body_check(rec.body, rec.h.body_len);
            }
            if (rc == TN_ENOTFOUND) {
                missing++;
            } else if (rc != 0 || check != id + 1) {
                fprintf(stderr, "partition %llu offset %llu: expected id %llu\n", part, off, id);
                corrupt++;
            }
        } else if (kind == 'F') {
            fins++;
            if (!tn_cursor_is_settled(&cur[part], off))
                fins_lost++;
        }
    }
    fclose(f);
    tn_buf_fini(&scratch);
    for (uint32_t p = 0; p < NPART; p++)
        free(seen[p]);
    for (uint32_t p = 0; p < NPART; p++)
        tn_cursor_fini(&cur[p]);
    printf("records=%llu missing=%llu corrupt=%llu fins=%llu fins_lost=%llu\n", records, missing,
           corrupt, fins, fins_lost);
    tn_store_close(store, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0) {
        fprintf(stderr, "loop not closed cleanly\n");
        return 1;
    }
    bool ok = corrupt == 0 && fins_lost == 0 && (strcmp(mode, "durable") != 0 || missing == 0);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    tn_log_level = TN_LOG_ERROR;
    signal(SIGPIPE, SIG_IGN);
    if (argc == 5 && strcmp(argv[1], "run") == 0)
        return cmd_run(argv[2], argv[3], strtoull(argv[4], NULL, 10));
    if (argc == 5 && strcmp(argv[1], "verify") == 0)
        return cmd_verify(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: %s run DIR MODE FIRST_ID | verify DIR MODE LEDGER\n", argv[0]);
    return 2;
}
