/* Memory-only partition logs: the records of an NSQ `#ephemeral` topic,
 * kept in a ring in memory and never written to disk. See
 * tn_plog_open_memory in plog.h.
 *
 * A memory log is a tn_plog_t with mem set, so the queue engine reads,
 * watches and closes it exactly as a disk log; only appending, reading
 * and dropping old records differ, and those live here. An append is
 * complete once its records are in the ring: it is acknowledged through
 * the store's completion queue on a later loop turn, in order with every
 * other completion, never inside tn_plog_append (the engine's callers do
 * not expect their callback before the call returns).
 *
 * Bounds: at most mem_max_records records and mem_max_bytes of keys and
 * bodies are held; beyond that an append is refused with TN_EFULL (never
 * taken and then dropped), until tn_plog_mem_trim lets go of the records
 * every reader has finished with.
 *
 * Threads: appends and trims on the loop thread; tn__memlog_read on any
 * thread (the engine's cold reads run on workers), under the log's lock. */
#include "core/platform.h"

#include "storage/plog.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/time.h"

#include <string.h>

typedef struct tn__mrec_s {
    int64_t publish_ns;
    int64_t deliver_at_ms;
    uint32_t key_len;
    uint32_t body_len;
    char *data; /* key then body */
} tn__mrec_t;

static tn__mrec_t *slot(tn_plog_t *plog, uint64_t offset)
{
    return &plog->mrecs[offset & (plog->mem_cap - 1)];
}

/* Room in the ring for `count` records from mem_first on (lock held). */
static int ring_reserve(tn_plog_t *plog, uint64_t next, uint64_t count)
{
    if (count <= plog->mem_cap)
        return 0;
    uint64_t cap = plog->mem_cap ? plog->mem_cap : 16;
    while (cap < count)
        cap *= 2;
    if (cap > UINT32_MAX)
        return UV_ENOMEM;
    tn__mrec_t *ring = tn_malloc((size_t)cap * sizeof(*ring));
    if (ring == NULL)
        return UV_ENOMEM;
    for (uint64_t o = plog->mem_first; o < next; o++)
        ring[o & (cap - 1)] = *slot(plog, o);
    tn_free(plog->mrecs);
    plog->mrecs = ring;
    plog->mem_cap = (uint32_t)cap;
    return 0;
}

static void append_done(tn__sreq_t *s)
{
    tn_append_t *req = (tn_append_t *)s;
    req->cb(req, s->status);
}

int tn__memlog_append(tn_plog_t *plog, tn_append_t *req, const tn_rec_in_t *recs, uint32_t n,
                      tn_append_cb cb)
{
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (recs[i].body.len > plog->store->opts.max_body || recs[i].key.len > UINT16_MAX)
            return TN_ETOOBIG;
        bytes += recs[i].key.len + recs[i].body.len;
    }
    uint64_t next = atomic_load(&plog->written_next);
    uint64_t held = next - plog->mem_first;
    if (held + n > plog->mem_max_records || plog->mem_bytes + bytes > plog->mem_max_bytes)
        return TN_EFULL;
    int64_t now = tn_now_wall_ns();
    /* Publish times never go back within a log (channels search by them). */
    int64_t publish_ns = now > plog->last_publish_ns ? now : plog->last_publish_ns;
    uv_mutex_lock(&plog->lock);
    int rc = ring_reserve(plog, next, held + n);
    uint32_t made = 0;
    for (; rc == 0 && made < n; made++) {
        const tn_rec_in_t *in = &recs[made];
        size_t len = in->key.len + in->body.len;
        char *data = tn_malloc(len > 0 ? len : 1);
        if (data == NULL) {
            rc = UV_ENOMEM;
            break;
        }
        if (in->key.len > 0)
            memcpy(data, in->key.base, in->key.len);
        if (in->body.len > 0)
            memcpy(data + in->key.len, in->body.base, in->body.len);
        *slot(plog, next + made) = (tn__mrec_t){
            publish_ns, in->deliver_at_ms, (uint32_t)in->key.len, (uint32_t)in->body.len, data};
    }
    if (rc != 0) {
        /* All or nothing: the slots past written_next were never visible. */
        for (uint32_t i = 0; i < made; i++)
            tn_free(slot(plog, next + i)->data);
        uv_mutex_unlock(&plog->lock);
        return rc;
    }
    plog->mem_bytes += bytes;
    uv_mutex_unlock(&plog->lock);
    plog->last_publish_ns = publish_ns;
    atomic_store(&plog->written_next, next + n);
    atomic_store(&plog->durable_next, next + n);

    memset(&req->s, 0, sizeof(req->s));
    req->s.done = append_done;
    req->plog = plog;
    req->recs = recs;
    req->nrecs = n;
    req->cb = cb;
    req->hdrs = NULL;
    req->pnext = NULL;
    req->first_offset = next;
    req->publish_ns = publish_ns;
    tn__store_complete(plog->store, &req->s, &req->s);
    return 0;
}

int tn__memlog_read(tn_plog_t *plog, uint64_t offset, tn_buf_t *scratch, tn_rec_t *rec)
{
    uv_mutex_lock(&plog->lock);
    if (offset < plog->mem_first || offset >= atomic_load(&plog->written_next)) {
        uv_mutex_unlock(&plog->lock);
        return TN_ENOTFOUND;
    }
    const tn__mrec_t *m = slot(plog, offset);
    size_t len = (size_t)m->key_len + m->body_len;
    tn_buf_reset(scratch);
    int rc = tn_buf_append(scratch, m->data, len);
    if (rc == 0) {
        memset(rec, 0, sizeof(*rec));
        rec->h.offset = offset;
        rec->h.publish_ns = m->publish_ns;
        rec->h.deliver_at_ms = m->deliver_at_ms;
        rec->h.body_len = m->body_len;
        rec->h.key_len = (uint16_t)m->key_len;
        rec->key = tn_buf_data(scratch);
        rec->body = tn_buf_data(scratch) + m->key_len;
    }
    uv_mutex_unlock(&plog->lock);
    return rc;
}

uint64_t tn_plog_mem_trim(tn_plog_t *plog, uint64_t below)
{
    if (!plog->mem)
        return 0;
    uint64_t next = atomic_load(&plog->written_next);
    if (below > next)
        below = next;
    uint64_t dropped = 0;
    uv_mutex_lock(&plog->lock);
    while (plog->mem_first < below) {
        tn__mrec_t *m = slot(plog, plog->mem_first);
        plog->mem_bytes -= (uint64_t)m->key_len + m->body_len;
        tn_free(m->data);
        m->data = NULL;
        plog->mem_first++;
        dropped++;
    }
    if (plog->mem_first == next && plog->mem_cap > 64) {
        /* Empty: give a ring grown by a burst back. */
        tn_free(plog->mrecs);
        plog->mrecs = NULL;
        plog->mem_cap = 0;
    }
    uv_mutex_unlock(&plog->lock);
    return dropped;
}

void tn__memlog_free(tn_plog_t *plog)
{
    uint64_t next = atomic_load(&plog->written_next);
    for (uint64_t o = plog->mem_first; o < next; o++)
        tn_free(slot(plog, o)->data);
    tn_free(plog->mrecs);
    plog->mrecs = NULL;
    plog->mem_cap = 0;
}
