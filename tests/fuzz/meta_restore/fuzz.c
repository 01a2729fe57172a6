/* Fuzz target: the rewrite of a backup's metastore snapshot for a whole
 * cluster restored from it (tn_meta_restore_rewrite, meta/restore.h), as
 * `ternctl backup restore` runs it on a snapshot, a member list and
 * copies read from a directory an operator points it at. The input is
 *
 *   [1] n, then n member ids: [1] b, b < 0x80 the id itself, else [8] a
 *       little-endian id;
 *   [1] bit 0: the backup id (a set's hex id, or none);
 *   [2] L (little-endian), then L bytes the copies callback hands out in
 *       turn: per copy [1] flags (bit 0 present, bit 1 damaged, bit 2 the
 *       callback fails here, bit 3 wide) then last_epoch, log_end,
 *       max_epoch, as [1][1][1] or, wide, [4][8][4]; once they run out
 *       every copy is missing;
 *   the rest: the snapshot.
 *
 * The rewrite succeeds or is refused with a message. Every decision it
 * tells is the election's (tn_meta_restore_choose's rule), leads with
 * epochs above every one the snapshot or a copy names, and keeps the
 * replica list valid; what it writes restores (a restored node loads
 * it), again from the same inputs gives the same bytes, and gives every
 * member its derived incarnation. */
#include "core/platform.h"

#include "core/buf.h"
#include "core/err.h"
#include "meta/restore.h"
#include "meta/state.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MEMBERS 16

typedef struct {
    const uint8_t *p; /* the copies' bytes */
    size_t n, at;
} feed_t;

static uint64_t get_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i > 0; i--)
        v = v << 8 | p[i - 1];
    return v;
}

static int on_copies(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps,
                     tn_meta_restore_copy_t *copies, uint32_t ncopies, char *err, size_t errlen)
{
    feed_t *f = arg;
    if (topic == NULL || topic[0] == '\0' || ps->nreplicas == 0 || ncopies < ps->nreplicas)
        abort();
    for (uint32_t k = 0; k < ps->nreplicas; k++)
        if (copies[k].node != ps->replicas[k] || copies[k].present)
            abort(); /* the replicas' first, in replicas order, not filled yet */
    for (uint32_t k = 0; k < ncopies && f->at < f->n; k++) {
        uint8_t flags = f->p[f->at++];
        if (flags & 4) {
            tn_errbuf(err, errlen, "node %u's copy of %s/%u is unreadable",
                      (unsigned)copies[k].node, topic, (unsigned)p);
            return UV_EIO;
        }
        size_t w = (flags & 8) ? 16 : 3;
        if (f->n - f->at < w) {
            f->at = f->n;
            break;
        }
        const uint8_t *v = f->p + f->at;
        f->at += w;
        copies[k].present = (flags & 1) != 0;
        copies[k].damaged = (flags & 2) != 0;
        copies[k].last_epoch = (uint32_t)get_le(v, w == 16 ? 4 : 1);
        copies[k].log_end = get_le(v + (w == 16 ? 4 : 1), w == 16 ? 8 : 1);
        copies[k].max_epoch = (uint32_t)get_le(v + (w == 16 ? 12 : 2), w == 16 ? 4 : 1);
    }
    return 0;
}

static bool candidate(const tn_meta_restore_copy_t *c)
{
    return c->present && !c->damaged;
}

/* Whether a is strictly ahead of b, as an election sees it. */
static bool ahead(const tn_meta_restore_copy_t *a, const tn_meta_restore_copy_t *b)
{
    return a->last_epoch > b->last_epoch ||
           (a->last_epoch == b->last_epoch && a->log_end > b->log_end);
}

static bool valid_replicas(const tn_pstate_t *ps)
{
    if (ps->nreplicas == 0 || ps->nreplicas > TN_PSTATE_MAX_REPLICAS)
        return false;
    for (uint32_t i = 0; i < ps->nreplicas; i++) {
        if (ps->replicas[i] == TN_PSTATE_NONE)
            return false;
        for (uint32_t k = 0; k < i; k++)
            if (ps->replicas[k] == ps->replicas[i])
                return false;
    }
    return true;
}

static void on_told(void *arg, const char *topic, uint32_t p, const tn_pstate_t *old,
                    const tn_pstate_t *now, const tn_meta_restore_copy_t *copies, uint32_t ncopies,
                    int best)
{
    (void)arg;
    (void)topic;
    (void)p;
    /* The election's choice: the first copy none is ahead of. */
    int want = -1;
    for (uint32_t i = 0; i < ncopies; i++)
        if (candidate(&copies[i]) && (want < 0 || ahead(&copies[i], &copies[want])))
            want = (int)i;
    if (best != want)
        abort();
    if (best < 0
            ? now->leader != TN_PSTATE_NONE || now->nisr != 0
            : now->leader != copies[best].node || now->nisr != 1 || now->isr[0].node != now->leader)
        abort();
    if (now->nelr != 0 || now->leader_epoch <= old->leader_epoch ||
        now->partition_epoch <= old->partition_epoch)
        abort();
    for (uint32_t i = 0; i < ncopies; i++)
        if (now->leader_epoch <= copies[i].last_epoch || now->leader_epoch <= copies[i].max_epoch)
            abort(); /* a leader never appends under an epoch a follower holds */
    if (!valid_replicas(now) || now->nreplicas < old->nreplicas)
        abort();
    bool listed = best < 0;
    for (uint32_t i = 0; !listed && i < now->nreplicas; i++)
        listed = now->replicas[i] == now->leader;
    if (!listed)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024 * 1024 || size < 4)
        return 0;
    size_t at = 0;
    uint64_t members[MAX_MEMBERS];
    size_t n = data[at++] % (MAX_MEMBERS + 1);
    for (size_t i = 0; i < n; i++) {
        if (at >= size)
            return 0;
        uint8_t b = data[at++];
        if (b < 0x80) {
            members[i] = b;
            continue;
        }
        if (size - at < 8)
            return 0;
        members[i] = get_le(data + at, 8);
        at += 8;
    }
    if (size - at < 3)
        return 0;
    const char *bid = (data[at++] & 1) ? "0123456789abcdef0123456789abcdef" : "";
    size_t ncb = (size_t)get_le(data + at, 2);
    at += 2;
    if (size - at < ncb)
        return 0;
    feed_t feed = {data + at, ncb, 0};
    at += ncb;
    const uint8_t *snap = data + at;
    size_t len = size - at;

    tn_buf_t out;
    tn_buf_init(&out);
    char err[600] = "";
    int rc = tn_meta_restore_rewrite(snap, len, bid, members, n, on_copies, on_told, &feed, &out,
                                     err, sizeof(err));
    if (rc != 0) {
        if (err[0] == '\0' || tn_buf_size(&out) != 0)
            abort(); /* refused: says why, writes nothing */
        tn_buf_fini(&out);
        return 0;
    }
    /* Another member's restore from the same inputs writes the same bytes. */
    tn_buf_t again;
    tn_buf_init(&again);
    feed.at = 0;
    if (tn_meta_restore_rewrite(snap, len, bid, members, n, on_copies, NULL, &feed, &again, err,
                                sizeof(err)) != 0 ||
        tn_buf_size(&again) != tn_buf_size(&out) ||
        memcmp(tn_buf_data(&again), tn_buf_data(&out), tn_buf_size(&out)) != 0)
        abort();
    tn_buf_fini(&again);
    /* A restored node loads what the rewrite wrote. */
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    if (tn_meta_state_restore(&s, tn_buf_data(&out), tn_buf_size(&out)) != 0)
        abort();
    for (size_t i = 0; i < n; i++) {
        const tn_meta_member_t *m = tn_meta_member_find(&s, members[i]);
        if (m != NULL && (m->incarnation != tn_meta_restore_incarnation(bid, members[i]) ||
                          m->boot != 0 || m->fenced))
            abort();
    }
    tn_meta_state_fini(&s);
    tn_buf_fini(&out);
    return 0;
}
