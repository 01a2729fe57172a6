/* The SIGKILL crash driver of the ingress log. Two commands:
 *
 *   tern-crash-ilog-driver run DIR FIRST_ID
 *       Open the store in DIR and its ingress log (64 KiB segments, so
 *       rotation and compaction happen often) and append self-describing
 *       records from 16 concurrent appenders, in batches of 1 to 4, until
 *       killed; in every other run (FIRST_ID / 10^7 odd), every so often
 *       checkpoint part of what is durable (the compaction after it
 *       deletes segments). After each acknowledgement
 *       it writes one line per record to stdout with write(2) (nothing
 *       buffered to lose on SIGKILL): "A <seq> <id>"; after a checkpoint
 *       completes, "C <next>".
 *
 *   tern-crash-ilog-driver verify DIR LEDGER
 *       Recover DIR and check the ledger: every record stored is read back
 *       whole, in dense seqs from the oldest stored to the next (no hole,
 *       nothing after one), each a well-formed record of its id; every
 *       acknowledged seq is present with its id, unless it is below the
 *       recovered checkpoint (compaction may have removed it); the
 *       recovered checkpoint is at least every checkpoint acknowledged.
 *       Prints "records=N missing=N corrupt=N stored=N checkpoint=N" and
 *       exits 1 when anything is missing or corrupt. */
#include "core/platform.h"

#include "body.h"

#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "storage/ilog.h"
#include "storage/store.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define APPENDERS 16

static void opts_for(tn_store_opts_t *o, const char *dir)
{
    tn_config_t cfg;
    if (tn_config_init(&cfg) != 0)
        exit(2);
    tn_store_opts_from_config(o, &cfg);
    tn_config_fini(&cfg);
    o->data_path = dir;
    o->disk_min_free = 0;
    o->disk_high_pct = 100;
    o->disk_low_pct = 99;
}

static const tn_ilog_opts_t ilog_opts = {.segment_bytes = 64 * 1024, .rotate_bytes = 16 * 1024};

/* What record id looks like: its body, and topic, key, partition and times
 * derived from it. */
typedef struct {
    char topic[32];
    char key[32];
    char body[512];
    tn_irec_t rec;
} made_t;

static void make(made_t *m, uint64_t id)
{
    snprintf(m->topic, sizeof(m->topic), "topic-%llu", (unsigned long long)(id % 5));
    int kl = snprintf(m->key, sizeof(m->key), "key-%llu", (unsigned long long)id);
    size_t bl = crash_body(id, m->body, sizeof(m->body));
    m->rec.topic = tn_iov(m->topic, strlen(m->topic));
    m->rec.key = id % 3 ? tn_iov(m->key, (size_t)kl) : tn_iov(NULL, 0);
    m->rec.body = tn_iov(m->body, bl);
    m->rec.partition = (uint32_t)(id % 7);
    m->rec.pinned = id % 3 != 0;
    m->rec.deliver_at_ms = id % 4 == 0 ? (int64_t)id : 0;
    m->rec.created_ms = 1700000000000LL + (int64_t)id;
}

/* The id of a record read back when every field is what make() gives
 * for it, else -1. */
static long long check(const tn_irec_t *r)
{
    uint64_t id1 = crash_body_check(r->body.base, r->body.len);
    if (id1 == 0)
        return -1;
    made_t m;
    make(&m, id1 - 1);
    if (r->topic.len != m.rec.topic.len || memcmp(r->topic.base, m.topic, r->topic.len) != 0 ||
        r->key.len != m.rec.key.len ||
        (r->key.len > 0 && memcmp(r->key.base, m.key, r->key.len) != 0) ||
        r->partition != m.rec.partition || r->pinned != m.rec.pinned ||
        r->deliver_at_ms != m.rec.deliver_at_ms || r->created_ms != m.rec.created_ms)
        return -1;
    return (long long)(id1 - 1);
}

static void out_line(const char *line, int n)
{
    if (write(1, line, (size_t)n) != n)
        exit(3);
}

typedef struct {
    tn_ilog_append_t req;
    made_t made[4];
    tn_irec_t recs[4];
    uint64_t ids[4];
} appender_t;

static tn_ilog_t *ilog;
static uint64_t next_id;
static uint64_t rng = 88172645463325252ull;
static tn_ilog_ckpt_t ckpt_req;
static bool ckpt_busy;
static uint64_t acks;
static bool checkpointing; /* every other run: the others leave all they wrote */

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void start(appender_t *a);

static void on_ckpt(tn_ilog_ckpt_t *req, int status)
{
    ckpt_busy = false;
    if (status != 0) {
        fprintf(stderr, "checkpoint failed: %s\n", tn_strerror(status));
        exit(4);
    }
    char line[64];
    int n = snprintf(line, sizeof(line), "C %llu\n", (unsigned long long)req->next);
    out_line(line, n);
}

static void on_append(tn_ilog_append_t *req, int status)
{
    appender_t *a = req->data;
    if (status != 0) {
        fprintf(stderr, "append failed: %s\n", tn_strerror(status));
        exit(4);
    }
    for (uint32_t i = 0; i < req->nrecs; i++) {
        char line[96];
        int n = snprintf(line, sizeof(line), "A %llu %llu\n",
                         (unsigned long long)req->first_seq + i, (unsigned long long)a->ids[i]);
        out_line(line, n);
    }
    /* Now and then all but up to the newest 4000 records are "committed". */
    if (checkpointing && ++acks % 64 == 0 && !ckpt_busy) {
        uint64_t durable = tn_ilog_durable_seq(ilog);
        uint64_t lag = rnd() % 4000;
        uint64_t to = durable > lag ? durable - lag : 0;
        if (to > tn_ilog_checkpoint_seq(ilog) &&
            tn_ilog_checkpoint(ilog, &ckpt_req, to, on_ckpt) == 0)
            ckpt_busy = true;
    }
    start(a);
}

static void start(appender_t *a)
{
    uint32_t n = 1 + (uint32_t)(rnd() % 4);
    for (uint32_t i = 0; i < n; i++) {
        a->ids[i] = next_id++;
        make(&a->made[i], a->ids[i]);
        a->recs[i] = a->made[i].rec;
    }
    a->req.data = a;
    int rc = tn_ilog_append(ilog, &a->req, a->recs, n, on_append);
    if (rc != 0) {
        fprintf(stderr, "append refused: %s\n", tn_strerror(rc));
        exit(4);
    }
}

static tn_store_t *open_all(uv_loop_t *loop, const char *dir)
{
    tn_store_opts_t o;
    opts_for(&o, dir);
    tn_store_t *store;
    char err[512];
    int rc = tn_store_open(loop, &o, &store, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "open: %s\n", err);
        exit(5);
    }
    rc = tn_ilog_open_opts(store, &ilog_opts, &ilog, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "ingress log recovery failed: %s: %s\n", tn_strerror(rc), err);
        exit(6);
    }
    return store;
}

static int cmd_run(const char *dir, uint64_t first_id)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    next_id = first_id;
    rng ^= first_id * 2654435761u;
    checkpointing = first_id / 10000000 % 2 == 1;
    open_all(&loop, dir);
    static appender_t apps[APPENDERS];
    for (int i = 0; i < APPENDERS; i++)
        start(&apps[i]);
    /* Runs until killed; a generous limit keeps a lost harness from
     * leaving it running forever. */
    alarm(120);
    uv_run(&loop, UV_RUN_DEFAULT);
    return 0;
}

typedef struct {
    uint64_t seq;
    uint64_t id;
} ack_t;

static bool closed;

static void on_closed(tn_ilog_t *l)
{
    (void)l;
    closed = true;
}

static int cmd_verify(const char *dir, const char *ledger)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_store_t *store = open_all(&loop, dir);
    FILE *f = fopen(ledger, "r");
    if (f == NULL) {
        perror(ledger);
        return 2;
    }
    uint64_t next = tn_ilog_next_seq(ilog), ckpt = tn_ilog_checkpoint_seq(ilog);
    unsigned long long records = 0, missing = 0, corrupt = 0, stored = 0, max_ckpt = 0;
    /* Every stored record, from the oldest on: dense, whole, well formed. */
    long long *ids = calloc(next + 1, sizeof(*ids));
    uint64_t seq = 0;
    bool first = true;
    while (seq < next) {
        tn_ilog_batch_t b;
        int rc = tn_ilog_read(ilog, seq, 512, 1 << 20, &b);
        if (rc == UV_ERANGE && first) {
            seq++; /* below the oldest stored: compacted */
            continue;
        }
        if (rc != 0 || b.n == 0) {
            fprintf(stderr, "read at seq %llu: %s\n", (unsigned long long)seq,
                    rc ? tn_strerror(rc) : "nothing below next");
            corrupt++;
            break;
        }
        if (first && seq > ckpt) {
            fprintf(stderr, "the oldest stored seq %llu is above the checkpoint %llu\n",
                    (unsigned long long)seq, (unsigned long long)ckpt);
            corrupt++;
        }
        first = false;
        for (uint32_t i = 0; i < b.n; i++) {
            long long id = check(&b.recs[i].rec);
            if (b.recs[i].seq != seq + i || id < 0) {
                fprintf(stderr, "seq %llu: malformed record\n", (unsigned long long)seq + i);
                corrupt++;
            }
            ids[seq + i] = id + 1;
        }
        stored += b.n;
        seq += b.n;
        tn_ilog_batch_fini(&b);
    }
    char line[128];
    while (fgets(line, sizeof(line), f) != NULL) {
        /* "A <seq> <id>" or "C <next>"; anything else is a line cut by a kill. */
        char kind = line[0];
        char *p = line + 1, *end;
        unsigned long long a = strtoull(p, &end, 10), id = 0;
        bool has_a = end != p;
        p = end;
        id = strtoull(p, &end, 10);
        bool has_id = end != p;
        if (*end != '\n')
            continue;
        if (kind == 'C' && has_a && !has_id) {
            if (a > max_ckpt)
                max_ckpt = a;
            continue;
        }
        if (kind != 'A' || !has_a || !has_id)
            continue;
        records++;
        if (a >= next) {
            fprintf(stderr, "acknowledged seq %llu is at or past the next seq %llu\n", a,
                    (unsigned long long)next);
            missing++;
        } else if (ids[a] == 0) {
            if (a >= ckpt) {
                fprintf(stderr, "acknowledged seq %llu is missing\n", a);
                missing++;
            }
        } else if (ids[a] != (long long)id + 1) {
            fprintf(stderr, "seq %llu: id %lld, acknowledged %llu\n", a, ids[a] - 1, id);
            corrupt++;
        }
    }
    fclose(f);
    free(ids);
    if (ckpt < max_ckpt) {
        fprintf(stderr, "checkpoint %llu went back below %llu\n", (unsigned long long)ckpt,
                max_ckpt);
        corrupt++;
    }
    printf("records=%llu missing=%llu corrupt=%llu stored=%llu checkpoint=%llu\n", records, missing,
           corrupt, stored, (unsigned long long)ckpt);
    tn_ilog_close(ilog, on_closed);
    while (!closed)
        uv_run(&loop, UV_RUN_ONCE);
    tn_store_close(store, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0) {
        fprintf(stderr, "loop not closed cleanly\n");
        return 1;
    }
    return missing == 0 && corrupt == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    tn_log_level = TN_LOG_ERROR;
    signal(SIGPIPE, SIG_IGN);
    if (argc == 4 && strcmp(argv[1], "run") == 0)
        return cmd_run(argv[2], strtoull(argv[3], NULL, 10));
    if (argc == 4 && strcmp(argv[1], "verify") == 0)
        return cmd_verify(argv[2], argv[3]);
    fprintf(stderr, "usage: %s run DIR FIRST_ID | verify DIR LEDGER\n", argv[0]);
    return 2;
}
