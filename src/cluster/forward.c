/* Forwarding a publish for a replicated partition to its leader. See
 * forward.h for the design. */
#include "core/platform.h"

#include "cluster/forward.h"

#include "cluster/wire.h"
#include "core/alloc.h"
#include "core/assert.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define BACKOFF_FIRST_MS 50
#define BACKOFF_MAX_MS   1000

typedef struct fwd_s fwd_t;

struct tn_forward_s {
    tn_forward_opts_t o;
    tn_rpc_t *rpc;
    uint64_t node_id;
    uint64_t next_seq; /* 0: not seeded yet */
    uint32_t rr;       /* round robin for unpinned publishes */
    fwd_t *head;       /* forwards not answered yet */
    uint64_t live;     /* forwards whose memory is not freed yet */
    bool freeing;
    tn_forward_stats_t st;
};

/* One forwarded publish: from tn_forward_publish until its timer closed. */
struct fwd_s {
    fwd_t *prev, *next; /* f->head, while not answered */
    tn_forward_t *f;
    tn_pub_t *p;
    tn_pub_cb cb;
    char topic[256];
    uint32_t partition;
    uint64_t seq;
    int64_t deadline_ms; /* monotonic */
    tn_buf_t req;        /* the request fields, encoded once */
    size_t epoch_at;     /* where its leader_epoch field is */
    uint64_t tried;      /* the leader the last attempt went to */
    uint64_t hint;       /* the leader a 421 named (0: none) */
    uint32_t attempts;
    uint32_t backoff_ms;
    bool in_call;
    bool answered;
    uv_timer_t timer;
    tn_produce_call_t call;
    char last[320];  /* why the last attempt did not succeed */
    int last_status; /* its status (0: no leader to ask) */
};

int tn_forward_new(const tn_forward_opts_t *o, tn_forward_t **out)
{
    tn_forward_t *f = tn_calloc(1, sizeof(*f));
    if (f == NULL)
        return UV_ENOMEM;
    f->o = *o;
    if (f->o.timeout_ms == 0)
        f->o.timeout_ms = TN_FORWARD_TIMEOUT_MS;
    if (f->o.attempt_ms == 0)
        f->o.attempt_ms = TN_FORWARD_ATTEMPT_MS;
    *out = f;
    return 0;
}

void tn_forward_stats(const tn_forward_t *f, tn_forward_stats_t *out)
{
    *out = f->st;
}

static void on_answer(tn_produce_call_t *c, int status);
static void attempt(fwd_t *fw);

static void on_fwd_closed(uv_handle_t *h)
{
    fwd_t *fw = h->data;
    tn_forward_t *f = fw->f;
    tn_buf_fini(&fw->req);
    tn_free(fw);
    f->live--;
    if (f->freeing && f->live == 0)
        tn_free(f);
}

/* Answer the door exactly once, and let the forward go. */
static void finish(fwd_t *fw, int status)
{
    tn_forward_t *f = fw->f;
    TN_ASSERT(!fw->answered);
    fw->answered = true;
    if (fw->prev != NULL)
        fw->prev->next = fw->next;
    else
        f->head = fw->next;
    if (fw->next != NULL)
        fw->next->prev = fw->prev;
    f->st.inflight--;
    tn_pub_t *p = fw->p;
    p->partition = fw->partition;
    p->remote = false;
    if (status == 0) {
        f->st.ok++;
        p->first_offset = fw->call.first_offset;
    } else {
        f->st.failed++;
        p->first_offset = 0;
        if (status == UV_ETIMEDOUT) {
            TN_LOG_RL(TN_LOG_WARN, 10000,
                      "forwarding %u message(s) for %s/%u to its leader: no answer within %" PRIu64
                      " ms (%u attempt(s); last: %s)",
                      p->n, fw->topic, fw->partition, f->o.timeout_ms, fw->attempts, fw->last);
            /* The door says why in the words of the refusal that lasted:
             * a leader not serving (or none at all) or a fenced epoch is
             * a retryable replication refusal (cluster/replerr.h: 503,
             * E_PUB_FAILED); only answers that never came stay a
             * timeout. */
            if (fw->last_status == TN_EFENCED || fw->last_status == TN_ENOTSERVING)
                status = fw->last_status;
            else if (fw->last_status == 0 || fw->last_status == TN_EREMOTE ||
                     fw->last_status == UV_EAGAIN)
                status = TN_ENOTSERVING;
        }
    }
    uv_timer_stop(&fw->timer);
    uv_close((uv_handle_t *)&fw->timer, on_fwd_closed);
    fw->cb(p, status);
}

static void on_timer(uv_timer_t *t)
{
    attempt(t->data);
}

/* Try again: at once (from the loop) when now is set, else after the
 * backoff. */
static void again(fwd_t *fw, bool now)
{
    uint64_t wait = 0;
    if (!now) {
        wait = fw->backoff_ms;
        fw->backoff_ms = TN_MIN(fw->backoff_ms * 2, BACKOFF_MAX_MS);
    }
    uv_timer_start(&fw->timer, on_timer, wait, 0);
}

static void set_last(fwd_t *fw, const char *why)
{
    snprintf(fw->last, sizeof(fw->last), "%s", why);
}

/* The leader and epoch the metastore replica shows for fw's partition. */
static uint64_t leader_now(const fwd_t *fw, uint32_t *epoch)
{
    const tn_meta_state_t *s = tn_meta_state(fw->f->o.meta);
    const tn_pstate_t *ps = tn_meta_state_pstate(s, fw->topic, fw->partition);
    *epoch = ps != NULL ? ps->leader_epoch : 0;
    return ps != NULL ? ps->leader : 0;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void attempt(fwd_t *fw)
{
    tn_forward_t *f = fw->f;
    if (f->rpc == NULL) {
        finish(fw, TN_ECLOSED);
        return;
    }
    int64_t left = fw->deadline_ms - tn_now_mono_ms();
    if (left <= 0) {
        finish(fw, UV_ETIMEDOUT);
        return;
    }
    uint32_t epoch = 0;
    uint64_t leader = leader_now(fw, &epoch);
    /* The replica still names the node that refused, but the refusal
     * named another: go there (with epoch 0: whatever it has). */
    if ((leader == 0 || leader == fw->tried) && fw->hint != 0 && fw->hint != fw->tried) {
        leader = fw->hint;
        epoch = 0;
    }
    fw->hint = 0;
    if (leader == 0) {
        fw->last_status = 0;
        set_last(fw, "the partition has no leader");
        again(fw, false);
        return;
    }
    put_be32((uint8_t *)tn_buf_data(&fw->req) + fw->epoch_at, epoch);
    fw->tried = leader;
    if (fw->attempts++ > 0)
        f->st.retries++;
    fw->in_call = true;
    int rc;
    if (leader == f->node_id) {
        /* This node leads it by the metastore, though the engine had not
         * taken the partition when the door asked: serve it here as a
         * forwarded batch (the window keeps retries single). The answer
         * may come before this returns: nothing touches fw after. */
        rc = tn_produce_local(f->o.produce, &fw->req, &fw->call, on_answer);
        if (rc != 0) {
            fw->in_call = false;
            set_last(fw, tn_strerror(rc));
            again(fw, false);
        }
        return;
    }
    const tn_meta_member_t *m = tn_meta_member_find(tn_meta_state(f->o.meta), leader);
    if (m == NULL || m->api_addr[0] == '\0') {
        fw->in_call = false;
        snprintf(fw->last, sizeof(fw->last), "leader %" PRIu64 " has no address", leader);
        again(fw, false);
        return;
    }
    uint64_t timeout = TN_MIN((uint64_t)left, f->o.attempt_ms);
    rc = tn_produce_call(f->rpc, m->api_addr, &fw->req, timeout, &fw->call, on_answer);
    if (rc != 0) {
        fw->in_call = false;
        snprintf(fw->last, sizeof(fw->last), "leader %" PRIu64 ": %s", leader, tn_strerror(rc));
        if (rc == UV_EINVAL || rc == TN_ETOOBIG || rc == UV_ENOMEM || rc == TN_ECLOSED)
            finish(fw, rc);
        else
            again(fw, false); /* in its dial backoff */
    }
}

static void on_answer(tn_produce_call_t *c, int status)
{
    fwd_t *fw = c->data;
    fw->in_call = false;
    switch (status) {
    case 0:
    case TN_EFEWREPLICAS: /* not retried: the client hears it at once */
    case TN_ENOTFOUND:
    case TN_EDISKHIGH:
    case UV_EINVAL:
    case TN_EPROTO:
    case UV_ENOMEM:
        finish(fw, status);
        return;
    case UV_ERANGE:
        finish(fw, UV_EINVAL); /* no such partition, as the engine says it */
        return;
    default:
        break;
    }
    if (fw->f->rpc == NULL || (status == TN_ECLOSED && fw->f->freeing)) {
        finish(fw, TN_ECLOSED);
        return;
    }
    /* 421, 409, 503, or the answer was lost: the same seq again. */
    fw->last_status = status;
    snprintf(fw->last, sizeof(fw->last), "leader %" PRIu64 ": %.256s", fw->tried,
             c->error[0] != '\0' ? c->error : tn_strerror(status));
    if (status == TN_EREMOTE)
        fw->hint = c->leader;
    uint32_t epoch;
    uint64_t leader = leader_now(fw, &epoch);
    bool moved = (leader != 0 && leader != fw->tried) || (fw->hint != 0 && fw->hint != fw->tried);
    again(fw, moved);
}

void tn_forward_set_rpc(tn_forward_t *f, tn_rpc_t *rpc, uint64_t node_id)
{
    f->rpc = rpc;
    if (node_id != 0)
        f->node_id = node_id;
    if (f->next_seq == 0 && node_id != 0) {
        /* A leader's window is keyed by (node id, seq) and outlives this
         * process: a restart must never hand out a seq its previous run
         * used, or a new batch would be answered with an old batch's
         * offset. The wall clock in ms, shifted left 20 bits, grows faster
         * than any run can count (a million batches per ms), so a later
         * start begins above every earlier seq while the clock does not
         * step back. The incarnation's low bits set apart two processes
         * with the same id started in the same ms from different data
         * directories (a wiped disk). */
        uint64_t inc = tn_meta_incarnation(f->o.meta);
        f->next_seq = ((uint64_t)tn_now_wall_ms() << 20) + (inc & 0xFFFFF);
    }
    if (rpc != NULL)
        return;
    /* Node RPC goes: what waits for a retry ends now; calls in flight are
     * cancelled and end through on_answer. */
    for (fwd_t *fw = f->head, *next; fw != NULL; fw = next) {
        next = fw->next;
        if (fw->in_call && fw->call.call != NULL)
            tn_produce_call_cancel(&fw->call);
        else if (!fw->in_call)
            finish(fw, TN_ECLOSED);
    }
}

bool tn_forward_replicated(const tn_forward_t *f, const char *topic)
{
    if (f->o.meta == NULL)
        return false;
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(f->o.meta), topic);
    return e != NULL && tn_meta_topic_factor(&e->rec) > 1;
}

bool tn_forward_part_replicated(const tn_forward_t *f, const char *topic, uint32_t p)
{
    return tn_forward_replicated(f, topic) ||
           (f->o.meta != NULL && tn_meta_state_pstate(tn_meta_state(f->o.meta), topic, p) != NULL);
}

uint32_t tn_forward_pick(tn_forward_t *f, const char *topic, uint32_t nparts)
{
    uint32_t start = f->rr++;
    if (nparts == 0)
        return 0;
    const tn_meta_state_t *s = tn_meta_state(f->o.meta);
    for (uint32_t k = 0; k < nparts; k++) {
        uint32_t idx = (start + k) % nparts;
        uint64_t leader = tn_meta_state_owner(s, topic, idx);
        const tn_meta_member_t *m = leader != 0 ? tn_meta_member_find(s, leader) : NULL;
        if (m != NULL && m->status == TN_MEMBER_ALIVE)
            return idx;
    }
    return start % nparts;
}

int tn_forward_publish(tn_forward_t *f, const char *topic, uint32_t partition, tn_pub_t *p,
                       tn_pub_cb cb)
{
    if (f->rpc == NULL || f->freeing || f->next_seq == 0)
        return TN_ECLOSED;
    size_t tlen = strlen(topic);
    if (tlen == 0 || tlen > 255 || p->n == 0)
        return UV_EINVAL;
    fwd_t *fw = tn_calloc(1, sizeof(*fw));
    tn_commit_rec_t *recs = tn_malloc((size_t)p->n * sizeof(*recs));
    if (fw == NULL || recs == NULL) {
        tn_free(fw);
        tn_free(recs);
        return UV_ENOMEM;
    }
    int64_t now = tn_now_wall_ms();
    for (uint32_t i = 0; i < p->n; i++) {
        /* A record with a time of its own keeps it; the rest take the
         * publish's (queue.h: tn_pub_set_deliver_at). */
        int64_t at = p->own_times && p->recs[i].deliver_at_ms >= 0 ? p->recs[i].deliver_at_ms
                                                                   : p->deliver_at_ms;
        recs[i] = (tn_commit_rec_t){p->recs[i].key, p->recs[i].body, at, now};
    }
    tn_wire_produce_hdr_t h = {.partition = partition, .node = f->node_id, .seq = f->next_seq};
    memcpy(h.topic, topic, tlen + 1);
    tn_buf_init(&fw->req);
    int rc = tn_wire_produce_encode(&fw->req, &h, recs, p->n);
    tn_free(recs);
    if (rc == 0 && tn_buf_size(&fw->req) + 1 > TN_WIRE_MAX_PAYLOAD)
        rc = TN_ETOOBIG;
    if (rc == 0)
        rc = uv_timer_init(f->o.loop, &fw->timer);
    if (rc != 0) {
        tn_buf_fini(&fw->req);
        tn_free(fw);
        return rc;
    }
    f->next_seq++;
    fw->f = f;
    fw->p = p;
    fw->cb = cb;
    memcpy(fw->topic, topic, tlen + 1);
    fw->partition = partition;
    fw->seq = h.seq;
    fw->deadline_ms = tn_now_mono_ms() + (int64_t)f->o.timeout_ms;
    fw->epoch_at = 4 + tlen + 4; /* after the topic and the partition */
    fw->backoff_ms = BACKOFF_FIRST_MS;
    fw->call.data = fw;
    fw->timer.data = fw;
    fw->next = f->head;
    if (f->head != NULL)
        f->head->prev = fw;
    f->head = fw;
    f->live++;
    f->st.forwarded++;
    f->st.records += p->n;
    f->st.inflight++;
    /* The first attempt from the loop: the door's callback never runs
     * inside this call. */
    again(fw, true);
    return 0;
}

void tn_forward_free(tn_forward_t *f)
{
    if (f == NULL)
        return;
    f->freeing = true;
    tn_forward_set_rpc(f, NULL, 0);
    if (f->live == 0)
        tn_free(f);
}
