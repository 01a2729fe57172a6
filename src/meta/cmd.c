/* The metastore command codec. See cmd.h for the layout. */
#include "core/platform.h"

#include "meta/cmd.h"
#include "meta/codec.h"

#include "core/alloc.h"
#include "core/err.h"

#include <string.h>

/* --- encoding ------------------------------------------------------------------ */

static void w_topic(tn__meta_wr_t *w, const tn_meta_topic_t *t)
{
    tn__meta_w_str(w, t->name, TN_NAME_MAX);
    tn__meta_w_u32(w, t->partitions);
    tn__meta_w_u64(w, (uint64_t)t->retention_ms);
    tn__meta_w_u64(w, (uint64_t)t->visibility_timeout_ms);
    tn__meta_w_u64(w, (uint64_t)t->max_inflight);
    tn__meta_w_u64(w, (uint64_t)t->max_acked_ahead);
    tn__meta_w_u8(w, t->delivery_mode);
    tn__meta_w_u8(w, t->durability);
    tn__meta_w_u64(w, (uint64_t)t->ttl_ms);
    tn__meta_w_u32(w, t->max_attempts);
    tn__meta_w_u64(w, (uint64_t)t->created_at_ms);
    tn__meta_w_str(w, t->owner, TN_META_USER_MAX);
    tn__meta_w_str(w, t->parent, TN_NAME_MAX);
    tn__meta_w_u64(w, (uint64_t)t->fanout_delay_ms);
    tn__meta_w_u64(w, t->attach_epoch);
}

static void w_user(tn__meta_wr_t *w, const tn_meta_user_t *u)
{
    tn__meta_w_str(w, u->name, TN_META_USER_MAX);
    tn__meta_w_str(w, u->hash, TN_META_HASH_MAX);
    tn__meta_w_u8(w, u->root ? 1 : 0);
    tn__meta_w_u64(w, (uint64_t)u->created_at_ms);
    tn__meta_w_u64(w, (uint64_t)u->updated_at_ms);
    if (u->ngrants > TN_META_MAX_GRANTS && w->rc == 0)
        w->rc = UV_EINVAL;
    tn__meta_w_u16(w, u->ngrants);
    for (uint16_t i = 0; i < u->ngrants && w->rc == 0; i++) {
        const tn_meta_grant_t *g = &u->grants[i];
        if (g->npatterns > TN_META_MAX_PATTERNS)
            w->rc = UV_EINVAL;
        tn__meta_w_u8(w, g->action);
        tn__meta_w_u16(w, g->npatterns);
        for (uint16_t k = 0; k < g->npatterns; k++)
            tn__meta_w_str(w, g->patterns[k], TN_NAME_MAX + 1);
    }
}

static void w_members(tn__meta_wr_t *w, const tn_pstate_member_t *v, uint32_t n, bool may_be_empty)
{
    if ((n == 0 && !may_be_empty) || n > TN_PSTATE_MAX_REPLICAS) {
        if (w->rc == 0)
            w->rc = UV_EINVAL;
        return;
    }
    tn__meta_w_u8(w, (uint8_t)n);
    for (uint32_t i = 0; i < n; i++) {
        tn__meta_w_u32(w, v[i].node);
        tn__meta_w_u64(w, v[i].incarnation);
    }
}

/* Stall marks: [1] n, n x ([4] node [8] end [8] ms); n 1.. (0.. with
 * may_empty), nodes distinct and not NONE, ms >= 0. */
static void w_marks(tn__meta_wr_t *w, const tn_pstate_mark_t *v, uint32_t n, bool may_empty)
{
    bool ok = n <= TN_PSTATE_MAX_REPLICAS && (n > 0 || may_empty);
    for (uint32_t i = 0; ok && i < n; i++) {
        ok = v[i].node != TN_PSTATE_NONE && v[i].ms >= 0;
        for (uint32_t k = 0; ok && k < i; k++)
            ok = v[k].node != v[i].node;
    }
    if (!ok) {
        if (w->rc == 0)
            w->rc = UV_EINVAL;
        return;
    }
    tn__meta_w_u8(w, (uint8_t)n);
    for (uint32_t i = 0; i < n; i++) {
        tn__meta_w_u32(w, v[i].node);
        tn__meta_w_u64(w, v[i].end);
        tn__meta_w_u64(w, (uint64_t)v[i].ms);
    }
}

static void w_pstate(tn__meta_wr_t *w, const tn_pstate_t *ps)
{
    if (ps->nreplicas == 0 || ps->nreplicas > TN_PSTATE_MAX_REPLICAS) {
        if (w->rc == 0)
            w->rc = UV_EINVAL;
        return;
    }
    tn__meta_w_u8(w, (uint8_t)ps->nreplicas);
    for (uint32_t i = 0; i < ps->nreplicas; i++)
        tn__meta_w_u32(w, ps->replicas[i]);
    tn__meta_w_u32(w, ps->leader);
    tn__meta_w_u32(w, ps->leader_epoch);
    tn__meta_w_u32(w, ps->partition_epoch);
    w_members(w, ps->isr, ps->nisr, true);
    w_members(w, ps->elr, ps->nelr, true);
    tn__meta_w_u8(w, (uint8_t)ps->min_insync);
    tn__meta_w_u32(w, ps->corrupt);
    tn__meta_w_u8(w, ps->unclean ? 1 : 0);
    if (ps->ntarget == 0)
        return; /* no move: the record older builds wrote */
    if (ps->ntarget > TN_PSTATE_MAX_REPLICAS || ps->nold == 0 ||
        ps->nold > TN_PSTATE_MAX_REPLICAS || ps->move_id == 0) {
        if (w->rc == 0)
            w->rc = UV_EINVAL;
        return;
    }
    tn__meta_w_u8(w, (uint8_t)ps->ntarget);
    for (uint32_t i = 0; i < ps->ntarget; i++)
        tn__meta_w_u32(w, ps->target[i]);
    tn__meta_w_u8(w, (uint8_t)ps->nold);
    for (uint32_t i = 0; i < ps->nold; i++)
        tn__meta_w_u32(w, ps->old[i]);
    tn__meta_w_u64(w, ps->move_id);
    tn__meta_w_u64(w, (uint64_t)ps->move_started_ms);
    if (ps->nmark > 0)
        w_marks(w, ps->mark, ps->nmark, false); /* absent: the record older builds wrote */
}

/* A list of n (1..TN_PSTATE_MAX_REPLICAS) node ids. */
static void w_nodes(tn__meta_wr_t *w, const uint32_t *v, uint32_t n)
{
    if (n == 0 || n > TN_PSTATE_MAX_REPLICAS) {
        if (w->rc == 0)
            w->rc = UV_EINVAL;
        return;
    }
    tn__meta_w_u8(w, (uint8_t)n);
    for (uint32_t i = 0; i < n; i++)
        tn__meta_w_u32(w, v[i]);
}

/* --- fingerprints ------------------------------------------------------------ */

typedef struct {
    uint64_t h;
} fnv_t;

static void fnv_bytes(fnv_t *f, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        f->h ^= b[i];
        f->h *= UINT64_C(0x100000001b3);
    }
}

static void fnv_u64(fnv_t *f, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    fnv_bytes(f, b, 8);
}

/* Length first, so "ab"+"c" and "a"+"bc" differ. */
static void fnv_str(fnv_t *f, const char *s)
{
    size_t n = strlen(s);
    fnv_u64(f, n);
    fnv_bytes(f, s, n);
}

uint64_t tn_meta_topic_fingerprint(const tn_meta_topic_t *t)
{
    fnv_t f = {UINT64_C(0xcbf29ce484222325)};
    fnv_str(&f, t->name);
    fnv_u64(&f, t->partitions);
    fnv_u64(&f, (uint64_t)t->retention_ms);
    fnv_u64(&f, (uint64_t)t->visibility_timeout_ms);
    fnv_u64(&f, (uint64_t)t->max_inflight);
    fnv_u64(&f, (uint64_t)t->max_acked_ahead);
    fnv_u64(&f, t->delivery_mode);
    fnv_u64(&f, t->durability);
    fnv_u64(&f, (uint64_t)t->ttl_ms);
    fnv_u64(&f, t->max_attempts);
    fnv_u64(&f, (uint64_t)t->created_at_ms);
    fnv_str(&f, t->owner);
    fnv_str(&f, t->parent);
    fnv_u64(&f, (uint64_t)t->fanout_delay_ms);
    fnv_u64(&f, t->attach_epoch);
    fnv_u64(&f, t->native ? 1 : 0);
    /* Only a replicated topic's: a factor-1 record keeps the fingerprint
     * it had before these fields (an if_unchanged in an older log entry). */
    if (tn_meta_topic_factor(t) > 1 || tn_meta_topic_min_insync(t) > 1) {
        fnv_u64(&f, tn_meta_topic_factor(t));
        fnv_u64(&f, tn_meta_topic_min_insync(t));
    }
    return f.h;
}

uint8_t tn_meta_topic_factor(const tn_meta_topic_t *t)
{
    return t->replication_factor > 0 ? t->replication_factor : 1;
}

uint8_t tn_meta_topic_min_insync(const tn_meta_topic_t *t)
{
    return t->min_insync > 0 ? t->min_insync : 1;
}

uint64_t tn_meta_user_fingerprint(const tn_meta_user_t *u)
{
    fnv_t f = {UINT64_C(0xcbf29ce484222325)};
    fnv_str(&f, u->name);
    fnv_str(&f, u->hash);
    fnv_u64(&f, u->root ? 1 : 0);
    fnv_u64(&f, (uint64_t)u->created_at_ms);
    fnv_u64(&f, (uint64_t)u->updated_at_ms);
    fnv_u64(&f, u->ngrants);
    for (uint16_t i = 0; i < u->ngrants; i++) {
        fnv_u64(&f, u->grants[i].action);
        fnv_u64(&f, u->grants[i].npatterns);
        for (uint16_t k = 0; k < u->grants[i].npatterns; k++)
            fnv_str(&f, u->grants[i].patterns[k]);
    }
    return f.h;
}

/* --- encoding ----------------------------------------------------------------- */

/* TOPIC_PUT's owner rule (cmd.h): known bits; CHECK and FOLLOW on a
 * create only, and not together; CARRY on an update only. */
static bool owner_rule_valid(const tn_meta_cmd_t *c)
{
    uint8_t r = c->owner_rule;
    bool made = (r & (TN_META_OWN_CHECK | TN_META_OWN_FOLLOW)) != 0;
    bool both = (r & TN_META_OWN_CHECK) != 0 && (r & TN_META_OWN_FOLLOW) != 0;
    return (r & ~TN_META_OWN_ALL) == 0 && !both && (!made || c->if_absent) &&
           ((r & TN_META_OWN_CARRY) == 0 || !c->if_absent);
}

int tn_meta_cmd_encode(const tn_meta_cmd_t *c, tn_buf_t *out)
{
    size_t start = tn_buf_size(out);
    tn__meta_wr_t w = {out, 0};
    static const unsigned char magic[2] = {'T', 'M'};
    tn__meta_w_bytes(&w, magic, 2);
    tn__meta_w_u8(&w, TN_META_VERSION);
    tn__meta_w_u8(&w, c->type);
    tn__meta_w_u32(&w, 0); /* payload length, set below */
    if (c->if_absent && c->if_unchanged)
        w.rc = UV_EINVAL; /* not encodable: contradictory */
    switch (c->type) {
    case TN_MC_TOPIC_PUT: {
        uint8_t factor = tn_meta_topic_factor(&c->topic);
        uint8_t min_insync = tn_meta_topic_min_insync(&c->topic);
        bool repl = factor > 1 || min_insync > 1;
        if (factor > TN_META_MAX_FACTOR || min_insync > factor)
            w.rc = UV_EINVAL;
        tn__meta_w_u8(
            &w, (c->if_absent ? 1 : 0) | (c->topic.native ? 2 : 0) | (c->if_unchanged ? 4 : 0) |
                    (c->nskip > 0 ? 8 : 0) | (c->again ? TN_META_TOPIC_AGAIN : 0) |
                    (repl ? TN_META_TOPIC_REPL : 0) | (c->clamp ? TN_META_TOPIC_CLAMP : 0) |
                    (c->owner_rule != 0 ? TN_META_TOPIC_OWNER : 0));
        if (!owner_rule_valid(c))
            w.rc = UV_EINVAL;
        w_topic(&w, &c->topic);
        if (c->if_unchanged)
            tn__meta_w_u64(&w, c->expect);
        if (c->nskip > 0) {
            if (c->nskip > TN_META_MAX_SKIP)
                w.rc = UV_EINVAL;
            tn__meta_w_u16(&w, c->nskip);
            for (uint16_t i = 0; i < c->nskip && w.rc == 0; i++) {
                if (c->skip[i] == 0 || (i > 0 && c->skip[i] <= c->skip[i - 1]))
                    w.rc = UV_EINVAL;
                tn__meta_w_u64(&w, c->skip[i]);
            }
        }
        if (repl) {
            tn__meta_w_u8(&w, factor);
            tn__meta_w_u8(&w, min_insync);
        }
        if (c->owner_rule != 0)
            tn__meta_w_u8(&w, c->owner_rule);
        if (c->topic.creating != 0)
            tn__meta_w_u64(&w, c->topic.creating);
        break;
    }
    case TN_MC_TOPIC_DELETE:
        tn__meta_w_str(&w, c->topic.name, TN_NAME_MAX);
        if (c->if_created)
            tn__meta_w_u64(&w, (uint64_t)c->topic.created_at_ms);
        break;
    case TN_MC_TOPIC_READY:
        tn__meta_w_str(&w, c->topic.name, TN_NAME_MAX);
        tn__meta_w_u64(&w, (uint64_t)c->topic.created_at_ms);
        break;
    case TN_MC_TOPIC_FACTOR:
        if (c->topic.replication_factor < 1 || c->topic.replication_factor > TN_META_MAX_FACTOR ||
            c->topic.min_insync < 1 || c->topic.min_insync > c->topic.replication_factor)
            w.rc = UV_EINVAL;
        tn__meta_w_str(&w, c->topic.name, TN_NAME_MAX);
        tn__meta_w_u8(&w, c->topic.replication_factor);
        tn__meta_w_u8(&w, c->topic.min_insync);
        tn__meta_w_u64(&w, c->expect);
        break;
    case TN_MC_CHANNEL_PUT:
    case TN_MC_CHANNEL_DELETE:
        tn__meta_w_u8(&w, c->if_absent ? 1 : 0);
        tn__meta_w_str(&w, c->topic.name, TN_NAME_MAX);
        tn__meta_w_str(&w, c->channel, TN_NAME_MAX);
        if (c->type == TN_MC_CHANNEL_PUT && c->chan_stamp != 0)
            tn__meta_w_u64(&w, c->chan_stamp);
        break;
    case TN_MC_USER_PUT:
        if (c->fresh && !c->if_absent)
            w.rc = UV_EINVAL;
        tn__meta_w_u8(&w, (c->if_unchanged ? 2
                           : c->if_absent  ? 1
                                           : 0) |
                              (c->again ? TN_META_USER_AGAIN : 0) |
                              (c->fresh ? TN_META_USER_FRESH : 0));
        w_user(&w, &c->user);
        if (c->if_unchanged)
            tn__meta_w_u64(&w, c->expect);
        break;
    case TN_MC_USER_DELETE:
        tn__meta_w_str(&w, c->user.name, TN_META_USER_MAX);
        if (c->disown)
            tn__meta_w_u8(&w, TN_META_USER_DISOWN);
        break;
    case TN_MC_MEMBER_PUT:
        tn__meta_w_u64(&w, c->member.id);
        tn__meta_w_str(&w, c->member.addr, TN_META_ADDR_MAX);
        break;
    case TN_MC_MEMBER_DRAIN:
        tn__meta_w_u64(&w, c->member.id);
        tn__meta_w_u8(&w, c->member.draining ? 1 : 0);
        break;
    case TN_MC_MEMBER_REG:
    case TN_MC_MEMBER_REC:
        if (c->member.id == 0 || c->member.addr[0] == '\0' || c->member.heartbeat_ms < 0)
            w.rc = UV_EINVAL;
        tn__meta_w_u64(&w, c->member.id);
        tn__meta_w_str(&w, c->member.addr, TN_META_ADDR_MAX);
        tn__meta_w_str(&w, c->member.api_addr, TN_META_ADDR_MAX);
        tn__meta_w_u64(&w, (uint64_t)c->member.heartbeat_ms);
        if (c->type == TN_MC_MEMBER_REC) {
            tn__meta_w_str(&w, c->member.nsq.broadcast, TN_META_HOST_MAX);
            tn__meta_w_str(&w, c->member.nsq.hostname, TN_META_HOST_MAX);
            tn__meta_w_u16(&w, c->member.nsq.tcp_port);
            tn__meta_w_u16(&w, c->member.nsq.http_port);
            tn__meta_w_str(&w, c->member.nsq.version, TN_META_RELEASE_MAX);
            if (c->member.boot != 0 && c->member.incarnation == 0)
                w.rc = UV_EINVAL; /* a boot id goes with an incarnation */
            if (c->member.incarnation != 0)
                tn__meta_w_u64(&w, c->member.incarnation);
            if (c->member.boot != 0)
                tn__meta_w_u64(&w, c->member.boot);
        }
        break;
    case TN_MC_TOPIC_GROW_FOR:
        if (c->member.id == 0)
            w.rc = UV_EINVAL;
        tn__meta_w_str(&w, c->topic.name, TN_NAME_MAX);
        tn__meta_w_u64(&w, c->member.id);
        break;
    case TN_MC_MEMBER_STATUS:
        if (c->member.id == 0 || c->member.status > TN_MEMBER_DEAD || c->member.heartbeat_ms < 0)
            w.rc = UV_EINVAL;
        tn__meta_w_u64(&w, c->member.id);
        tn__meta_w_u8(&w, c->member.status);
        tn__meta_w_u64(&w, (uint64_t)c->member.heartbeat_ms);
        break;
    case TN_MC_NOOP:
        tn__meta_w_u64(&w, c->member.id);
        tn__meta_w_u64(&w, c->nonce);
        break;
    case TN_MC_PART_OWNERS:
        if (c->nowners == 0 || c->nowners > TN_META_MAX_PARTITIONS)
            w.rc = UV_EINVAL;
        tn__meta_w_str(&w, c->topic.name, TN_NAME_MAX);
        tn__meta_w_u32(&w, c->nowners);
        for (uint32_t i = 0; i < c->nowners && w.rc == 0; i++)
            tn__meta_w_u64(&w, c->owners[i]);
        break;
    case TN_MC_MEMBER_FENCE:
        if (c->member.id == 0)
            w.rc = UV_EINVAL;
        tn__meta_w_u64(&w, c->member.id);
        tn__meta_w_u64(&w, c->member.incarnation);
        break;
    case TN_MC_MEMBER_REMOVE:
        if (c->member.id == 0 || c->removed_ms < 0)
            w.rc = UV_EINVAL;
        tn__meta_w_u64(&w, c->member.id);
        tn__meta_w_u64(&w, c->member.incarnation);
        tn__meta_w_u64(&w, (uint64_t)c->removed_ms);
        break;
    case TN_MC_PART_ISR:
        tn__meta_w_str(&w, c->topic.name, TN_NAME_MAX);
        tn__meta_w_u32(&w, c->part);
        tn__meta_w_u32(&w, c->node);
        tn__meta_w_u32(&w, c->leader_epoch);
        tn__meta_w_u32(&w, c->expected_pe);
        w_members(&w, c->isr, c->nisr, false);
        if (!c->isr_unflagged)
            tn__meta_w_u8(&w, c->channels_checked ? 1 : 0);
        break;
    case TN_MC_PART_LEADER:
        tn__meta_w_str(&w, c->topic.name, TN_NAME_MAX);
        tn__meta_w_u32(&w, c->part);
        tn__meta_w_u32(&w, c->node);
        tn__meta_w_u8(&w, c->unclean ? 1 : 0);
        break;
    case TN_MC_PART_REBALANCE:
        tn__meta_w_str(&w, c->topic.name, TN_NAME_MAX);
        tn__meta_w_u32(&w, c->part);
        break;
    case TN_MC_PART_CORRUPT:
        tn__meta_w_str(&w, c->topic.name, TN_NAME_MAX);
        tn__meta_w_u32(&w, c->part);
        tn__meta_w_u32(&w, c->node);
        break;
    case TN_MC_PART_STATE:
        tn__meta_w_str(&w, c->topic.name, TN_NAME_MAX);
        tn__meta_w_u32(&w, c->part);
        w_pstate(&w, &c->pstate);
        break;
    case TN_MC_PART_MOVE:
        if (c->move_id == 0 || c->move_kind > TN_MOVE_FAIL || c->move_ms < 0)
            w.rc = UV_EINVAL;
        tn__meta_w_str(&w, c->topic.name, TN_NAME_MAX);
        tn__meta_w_u32(&w, c->part);
        tn__meta_w_u8(&w, c->move_kind);
        tn__meta_w_u64(&w, c->move_id);
        tn__meta_w_u64(&w, (uint64_t)c->move_ms);
        if (c->move_kind == TN_MOVE_BEGIN) {
            w_nodes(&w, c->target, c->ntarget);
        } else if (c->move_kind == TN_MOVE_ABORT || c->move_kind == TN_MOVE_FAIL) {
            tn__meta_w_str(&w, c->move_reason, TN_META_MOVE_REASON_MAX);
            if (!c->abort_unflagged) /* its flags byte (none but bit 0) */
                tn__meta_w_u8(&w, 1);
        } else if (!c->move_unflagged) { /* COMPLETE: its flags byte (none but bit 0) */
            tn__meta_w_u8(&w, 1);
        }
        break;
    case TN_MC_MOVE_MARK:
        if (c->move_id == 0)
            w.rc = UV_EINVAL;
        tn__meta_w_str(&w, c->topic.name, TN_NAME_MAX);
        tn__meta_w_u32(&w, c->part);
        tn__meta_w_u64(&w, c->move_id);
        w_marks(&w, c->mark, c->nmark, true);
        break;
    case TN_MC_MOVE_DONE: {
        const tn_meta_move_t *mv = &c->move;
        if (mv->id == 0 || (mv->end < TN_MOVE_DONE || mv->end > TN_MOVE_FAILED) ||
            mv->started_ms < 0 || mv->finished_ms < 0)
            w.rc = UV_EINVAL;
        tn__meta_w_u64(&w, mv->id);
        tn__meta_w_str(&w, mv->topic, TN_NAME_MAX);
        tn__meta_w_u32(&w, mv->part);
        tn__meta_w_u8(&w, mv->end);
        tn__meta_w_u64(&w, (uint64_t)mv->started_ms);
        tn__meta_w_u64(&w, (uint64_t)mv->finished_ms);
        w_nodes(&w, mv->from, mv->nfrom);
        w_nodes(&w, mv->to, mv->nto);
        tn__meta_w_str(&w, mv->reason, TN_META_MOVE_REASON_MAX);
        break;
    }
    case TN_MC_REMOTE_PUT:
    case TN_MC_REMOTE_DELETE:
    case TN_MC_REMOTE_SALT:
    case TN_MC_REMOTE_CHILD_PUT:
    case TN_MC_REMOTE_CHILD_DELETE:
        if (w.rc == 0)
            w.rc = c->remote != NULL ? tn__meta_remote_encode(c->type, c->remote, out) : UV_EINVAL;
        break;
    case TN_MC_CLUSTER_REBALANCE: {
        const tn_meta_rebal_t *rb = &c->rebal;
        if (rb->id == 0 || rb->since_ms < 0 || rb->reason < TN_REBAL_API ||
            rb->reason > TN_REBAL_JOIN || (c->if_absent && !rb->wanted))
            w.rc = UV_EINVAL;
        tn__meta_w_u8(&w, (uint8_t)((rb->wanted ? 1u : 0u) | (c->if_absent ? 2u : 0u)));
        tn__meta_w_u8(&w, rb->reason);
        tn__meta_w_u64(&w, rb->id);
        tn__meta_w_u64(&w, (uint64_t)rb->since_ms);
        break;
    }
    default:
        w.rc = UV_EINVAL;
    }
    size_t payload = tn_buf_size(out) - start - TN_META_HDR;
    if (w.rc == 0 && payload > TN_META_MAX_CMD - TN_META_HDR)
        w.rc = UV_EINVAL;
    if (w.rc == 0) {
        tn_put_u32((unsigned char *)tn_buf_data(out) + start + 4, (uint32_t)payload);
        static const unsigned char zeros[8];
        size_t pad = (8 - (TN_META_HDR + payload) % 8) % 8;
        tn__meta_w_bytes(&w, zeros, pad);
    }
    if (w.rc != 0)
        out->len = out->off + start; /* nothing half-written stays */
    return w.rc;
}

/* --- decoding ------------------------------------------------------------------ */

/* A flag byte: 0 or 1, anything else is damage. */
static bool r_flag(tn__meta_rd_t *r)
{
    uint8_t v = tn__meta_r_u8(r);
    if (v > 1 && r->rc == 0)
        r->rc = TN_ECORRUPT;
    return v == 1;
}

static int64_t r_i64(tn__meta_rd_t *r)
{
    return (int64_t)tn__meta_r_u64(r);
}

static void r_name(tn__meta_rd_t *r, char *out, bool may_be_empty)
{
    tn__meta_r_str(r, out, TN_NAME_MAX);
    size_t n = strlen(out);
    if (r->rc == 0 && !(may_be_empty && n == 0) && !tn_name_valid(out, n))
        r->rc = TN_ECORRUPT;
}

static bool user_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > TN_META_USER_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

static void r_topic(tn__meta_rd_t *r, tn_meta_topic_t *t)
{
    r_name(r, t->name, false);
    t->partitions = tn__meta_r_u32(r);
    t->retention_ms = r_i64(r);
    t->visibility_timeout_ms = r_i64(r);
    t->max_inflight = r_i64(r);
    t->max_acked_ahead = r_i64(r);
    t->delivery_mode = tn__meta_r_u8(r);
    t->durability = tn__meta_r_u8(r);
    t->ttl_ms = r_i64(r);
    t->max_attempts = tn__meta_r_u32(r);
    t->created_at_ms = r_i64(r);
    tn__meta_r_str(r, t->owner, TN_META_USER_MAX);
    r_name(r, t->parent, true);
    t->fanout_delay_ms = r_i64(r);
    t->attach_epoch = tn__meta_r_u64(r);
    if (r->rc == 0 &&
        (t->partitions == 0 || t->partitions > TN_META_MAX_PARTITIONS || t->retention_ms < 0 ||
         t->visibility_timeout_ms < 0 || t->max_inflight < 0 || t->max_acked_ahead < 0 ||
         t->delivery_mode > TN_DELIVERY_TTL_DISCARD || t->durability > 2 || t->ttl_ms < 0 ||
         (t->delivery_mode == TN_DELIVERY_TTL_DISCARD && t->ttl_ms == 0) ||
         t->fanout_delay_ms < 0 || (t->owner[0] != '\0' && !user_name_valid(t->owner))))
        r->rc = TN_ECORRUPT;
}

/* TOPIC_PUT's skip list: 1..TN_META_MAX_SKIP ids, strictly ascending, none 0. */
static void r_skip(tn__meta_rd_t *r, tn_meta_cmd_t *c)
{
    uint16_t n = tn__meta_r_u16(r);
    if (r->rc == 0 && (n == 0 || n > TN_META_MAX_SKIP || (size_t)n * 8 > r->left))
        r->rc = TN_ECORRUPT;
    if (r->rc != 0)
        return;
    c->skip = tn_calloc(n, sizeof(*c->skip));
    if (c->skip == NULL) {
        r->rc = UV_ENOMEM;
        return;
    }
    c->nskip = n;
    for (uint16_t i = 0; i < n; i++) {
        c->skip[i] = tn__meta_r_u64(r);
        if (c->skip[i] == 0 || (i > 0 && c->skip[i] <= c->skip[i - 1]))
            r->rc = TN_ECORRUPT;
    }
}

static void r_user(tn__meta_rd_t *r, tn_meta_user_t *u)
{
    tn__meta_r_str(r, u->name, TN_META_USER_MAX);
    tn__meta_r_str(r, u->hash, TN_META_HASH_MAX);
    uint8_t root = tn__meta_r_u8(r);
    u->root = root == 1;
    u->created_at_ms = r_i64(r);
    u->updated_at_ms = r_i64(r);
    uint16_t ng = tn__meta_r_u16(r);
    if (r->rc == 0 && (!user_name_valid(u->name) || root > 1 || ng > TN_META_MAX_GRANTS))
        r->rc = TN_ECORRUPT;
    if (r->rc != 0 || ng == 0)
        return;
    u->grants = tn_calloc(ng, sizeof(*u->grants));
    if (u->grants == NULL) {
        r->rc = UV_ENOMEM;
        return;
    }
    u->ngrants = ng;
    for (uint16_t i = 0; i < ng && r->rc == 0; i++) {
        tn_meta_grant_t *g = &u->grants[i];
        g->action = tn__meta_r_u8(r);
        uint16_t np = tn__meta_r_u16(r);
        if (r->rc == 0 && (g->action < TN_GRANT_PRODUCE || g->action > TN_GRANT_ADMIN ||
                           np > TN_META_MAX_PATTERNS))
            r->rc = TN_ECORRUPT;
        if (r->rc != 0)
            break;
        if (np == 0)
            continue;
        g->patterns = tn_calloc(np, sizeof(*g->patterns));
        if (g->patterns == NULL) {
            r->rc = UV_ENOMEM;
            break;
        }
        for (uint16_t k = 0; k < np && r->rc == 0; k++) {
            char pat[TN_NAME_MAX + 2];
            tn__meta_r_str(r, pat, TN_NAME_MAX + 1);
            if (r->rc != 0)
                break;
            g->patterns[k] = tn_strdup(pat);
            if (g->patterns[k] == NULL)
                r->rc = UV_ENOMEM;
            else
                g->npatterns = (uint16_t)(k + 1);
        }
    }
}

/* n members (0..TN_PSTATE_MAX_REPLICAS; 0 only if may_be_empty), node ids
 * not NONE and distinct. */
static uint32_t r_members(tn__meta_rd_t *r, tn_pstate_member_t *v, bool may_be_empty)
{
    uint8_t n = tn__meta_r_u8(r);
    if (r->rc == 0 && ((n == 0 && !may_be_empty) || n > TN_PSTATE_MAX_REPLICAS))
        r->rc = TN_ECORRUPT;
    if (r->rc != 0)
        return 0;
    for (uint32_t i = 0; i < n; i++) {
        v[i].node = tn__meta_r_u32(r);
        v[i].incarnation = tn__meta_r_u64(r);
        for (uint32_t k = 0; k < i && r->rc == 0; k++)
            if (v[k].node == v[i].node)
                r->rc = TN_ECORRUPT;
        if (r->rc == 0 && v[i].node == TN_PSTATE_NONE)
            r->rc = TN_ECORRUPT;
    }
    return n;
}

static bool is_replica(const tn_pstate_t *ps, uint32_t node)
{
    for (uint32_t i = 0; i < ps->nreplicas; i++)
        if (ps->replicas[i] == node)
            return true;
    return false;
}

/* A list of 1..TN_PSTATE_MAX_REPLICAS distinct node ids, none NONE; its
 * count, 0 after an error. */
static uint32_t r_nodes(tn__meta_rd_t *r, uint32_t *v)
{
    uint8_t n = tn__meta_r_u8(r);
    if (r->rc == 0 && (n == 0 || n > TN_PSTATE_MAX_REPLICAS))
        r->rc = TN_ECORRUPT;
    for (uint32_t i = 0; i < n && r->rc == 0; i++) {
        v[i] = tn__meta_r_u32(r);
        for (uint32_t k = 0; k < i && r->rc == 0; k++)
            if (v[k] == v[i])
                r->rc = TN_ECORRUPT;
        if (r->rc == 0 && v[i] == TN_PSTATE_NONE)
            r->rc = TN_ECORRUPT;
    }
    return r->rc == 0 ? n : 0;
}

static bool nodes_have(const uint32_t *v, uint32_t n, uint32_t node)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == node)
            return true;
    return false;
}

/* Stall marks as w_marks writes them; the count read, 0 on error. */
static uint32_t r_marks(tn__meta_rd_t *r, tn_pstate_mark_t *v, bool may_empty)
{
    uint8_t n = tn__meta_r_u8(r);
    if (r->rc == 0 && (n > TN_PSTATE_MAX_REPLICAS || (n == 0 && !may_empty)))
        r->rc = TN_ECORRUPT;
    for (uint32_t i = 0; i < n && r->rc == 0; i++) {
        v[i].node = tn__meta_r_u32(r);
        v[i].end = tn__meta_r_u64(r);
        v[i].ms = r_i64(r);
        if (r->rc == 0 && (v[i].node == TN_PSTATE_NONE || v[i].ms < 0))
            r->rc = TN_ECORRUPT;
        for (uint32_t k = 0; k < i && r->rc == 0; k++)
            if (v[k].node == v[i].node)
                r->rc = TN_ECORRUPT;
    }
    return r->rc == 0 ? n : 0;
}

/* A partition state's move (partstate.h's invariants: replicas is the
 * target followed by the old replicas not in it). false: damaged. */
static bool r_move(tn__meta_rd_t *r, tn_pstate_t *ps)
{
    ps->ntarget = r_nodes(r, ps->target);
    ps->nold = r_nodes(r, ps->old);
    ps->move_id = tn__meta_r_u64(r);
    ps->move_started_ms = r_i64(r);
    if (r->rc != 0)
        return false;
    if (ps->move_id == 0 || ps->move_started_ms < 0 || ps->ntarget < ps->min_insync)
        return false;
    uint32_t k = 0;
    for (uint32_t i = 0; i < ps->ntarget; i++)
        if (k >= ps->nreplicas || ps->replicas[k++] != ps->target[i])
            return false;
    for (uint32_t i = 0; i < ps->nold; i++)
        if (!nodes_have(ps->target, ps->ntarget, ps->old[i]) &&
            (k >= ps->nreplicas || ps->replicas[k++] != ps->old[i]))
            return false;
    if (k != ps->nreplicas)
        return false;
    if (ps->ntarget == ps->nold &&
        memcmp(ps->target, ps->old, ps->ntarget * sizeof(ps->target[0])) == 0)
        return false;
    if (r->left == 0)
        return true; /* no stall marks (every older record) */
    ps->nmark = r_marks(r, ps->mark, false);
    if (r->rc != 0)
        return false;
    for (uint32_t i = 0; i < ps->nmark; i++)
        if (!nodes_have(ps->target, ps->ntarget, ps->mark[i].node))
            return false;
    return true;
}

/* A snapshot's partition state, checked against the invariants a state
 * machine keeps (partstate.h), so a damaged one is refused, not applied. */
static void r_pstate(tn__meta_rd_t *r, tn_pstate_t *ps)
{
    memset(ps, 0, sizeof(*ps));
    uint8_t n = tn__meta_r_u8(r);
    if (r->rc == 0 && (n == 0 || n > TN_PSTATE_MAX_REPLICAS))
        r->rc = TN_ECORRUPT;
    if (r->rc != 0)
        return;
    ps->nreplicas = n;
    for (uint32_t i = 0; i < n; i++) {
        ps->replicas[i] = tn__meta_r_u32(r);
        for (uint32_t k = 0; k < i && r->rc == 0; k++)
            if (ps->replicas[k] == ps->replicas[i])
                r->rc = TN_ECORRUPT;
        if (r->rc == 0 && ps->replicas[i] == TN_PSTATE_NONE)
            r->rc = TN_ECORRUPT;
    }
    ps->leader = tn__meta_r_u32(r);
    ps->leader_epoch = tn__meta_r_u32(r);
    ps->partition_epoch = tn__meta_r_u32(r);
    ps->nisr = r_members(r, ps->isr, true);
    ps->nelr = r_members(r, ps->elr, true);
    ps->min_insync = tn__meta_r_u8(r);
    ps->corrupt = tn__meta_r_u32(r);
    uint8_t unclean = tn__meta_r_u8(r);
    ps->unclean = unclean == 1;
    if (r->rc != 0)
        return;
    bool ok = unclean <= 1 && ps->min_insync >= 1 && ps->min_insync <= n &&
              (ps->corrupt >> n) == 0 && ps->leader_epoch >= 1;
    for (uint32_t i = 0; ok && i < ps->nisr; i++)
        ok = is_replica(ps, ps->isr[i].node);
    for (uint32_t i = 0; ok && i < ps->nelr; i++)
        ok = is_replica(ps, ps->elr[i].node);
    if (ok && ps->leader != TN_PSTATE_NONE)
        ok = tn_pstate_isr_find(ps, ps->leader) >= 0;
    if (ok && r->left > 0)
        ok = r_move(r, ps);
    if (!ok && r->rc == 0)
        r->rc = TN_ECORRUPT;
}

int tn_meta_cmd_decode(const void *buf, size_t len, tn_meta_cmd_t *c, size_t *used)
{
    memset(c, 0, sizeof(*c));
    const unsigned char *b = buf;
    if (len < TN_META_HDR)
        return TN_ESHORT;
    if (b[0] != 'T' || b[1] != 'M')
        return TN_ECORRUPT;
    if (b[2] != TN_META_VERSION)
        return UV_ENOTSUP;
    uint32_t payload = tn_get_u32(b + 4);
    if (payload > TN_META_MAX_CMD - TN_META_HDR)
        return TN_ECORRUPT;
    size_t total = TN_META_HDR + payload;
    size_t padded = (total + 7) / 8 * 8;
    if (len < padded)
        return TN_ESHORT;
    for (size_t i = total; i < padded; i++) {
        if (b[i] != 0)
            return TN_ECORRUPT;
    }
    c->type = b[3];
    tn__meta_rd_t r = {b + TN_META_HDR, payload, 0};
    switch (c->type) {
    case TN_MC_TOPIC_PUT: {
        uint8_t flags = tn__meta_r_u8(&r);
        if (r.rc == 0 && (flags & 5u) == 5u)
            r.rc = TN_ECORRUPT;
        c->again = (flags & TN_META_TOPIC_AGAIN) != 0;
        c->clamp = (flags & TN_META_TOPIC_CLAMP) != 0;
        c->if_absent = (flags & 1) != 0;
        c->if_unchanged = (flags & 4) != 0;
        r_topic(&r, &c->topic);
        c->topic.native = (flags & 2) != 0;
        if (c->if_unchanged)
            c->expect = tn__meta_r_u64(&r);
        if ((flags & 8) != 0)
            r_skip(&r, c);
        c->topic.replication_factor = 1;
        c->topic.min_insync = 1;
        if ((flags & TN_META_TOPIC_REPL) != 0) {
            c->topic.replication_factor = tn__meta_r_u8(&r);
            c->topic.min_insync = tn__meta_r_u8(&r);
            /* 1/1 is written without the bit: one encoding per record. */
            if (r.rc == 0 &&
                (c->topic.replication_factor < 1 ||
                 (c->topic.replication_factor == 1 && c->topic.min_insync == 1) ||
                 c->topic.replication_factor > TN_META_MAX_FACTOR || c->topic.min_insync < 1 ||
                 c->topic.min_insync > c->topic.replication_factor))
                r.rc = TN_ECORRUPT;
        }
        if ((flags & TN_META_TOPIC_OWNER) != 0) {
            c->owner_rule = tn__meta_r_u8(&r);
            if (r.rc == 0 && (c->owner_rule == 0 || !owner_rule_valid(c)))
                r.rc = TN_ECORRUPT;
        }
        /* The creation mark came later: an older build's entry (and
         * snapshot record) has none, a topic that is ready. */
        if (r.rc == 0 && r.left > 0) {
            c->topic.creating = tn__meta_r_u64(&r);
            if (r.rc == 0 && c->topic.creating == 0)
                r.rc = TN_ECORRUPT;
        }
        break;
    }
    case TN_MC_TOPIC_DELETE:
        r_name(&r, c->topic.name, false);
        /* The take-back's stamp came later: an older build's entry has
         * none, an unconditional delete. */
        if (r.rc == 0 && r.left > 0) {
            c->if_created = true;
            c->topic.created_at_ms = r_i64(&r);
        }
        break;
    case TN_MC_TOPIC_READY:
        r_name(&r, c->topic.name, false);
        c->topic.created_at_ms = r_i64(&r);
        break;
    case TN_MC_TOPIC_FACTOR:
        r_name(&r, c->topic.name, false);
        c->topic.replication_factor = tn__meta_r_u8(&r);
        c->topic.min_insync = tn__meta_r_u8(&r);
        c->if_unchanged = true;
        c->expect = tn__meta_r_u64(&r);
        if (r.rc == 0 &&
            (c->topic.replication_factor < 1 || c->topic.replication_factor > TN_META_MAX_FACTOR ||
             c->topic.min_insync < 1 || c->topic.min_insync > c->topic.replication_factor))
            r.rc = TN_ECORRUPT;
        break;
    case TN_MC_CHANNEL_PUT:
    case TN_MC_CHANNEL_DELETE:
        c->if_absent = r_flag(&r);
        r_name(&r, c->topic.name, false);
        r_name(&r, c->channel, false);
        /* The stamp came later: an older build's entry has none (0). */
        if (c->type == TN_MC_CHANNEL_PUT && r.rc == 0 && r.left > 0) {
            c->chan_stamp = tn__meta_r_u64(&r);
            if (r.rc == 0 && c->chan_stamp == 0)
                r.rc = TN_ECORRUPT;
        }
        break;
    case TN_MC_USER_PUT: {
        uint8_t cond = tn__meta_r_u8(&r); /* 1 if_absent, 2 if_unchanged; bit 7 again, 6 fresh */
        c->again = (cond & TN_META_USER_AGAIN) != 0;
        c->fresh = (cond & TN_META_USER_FRESH) != 0;
        cond &= (uint8_t) ~(TN_META_USER_AGAIN | TN_META_USER_FRESH);
        if (r.rc == 0 && (cond > 2 || (c->fresh && cond != 1)))
            r.rc = TN_ECORRUPT;
        c->if_absent = cond == 1;
        c->if_unchanged = cond == 2;
        r_user(&r, &c->user);
        if (c->if_unchanged)
            c->expect = tn__meta_r_u64(&r);
        break;
    }
    case TN_MC_USER_DELETE:
        tn__meta_r_str(&r, c->user.name, TN_META_USER_MAX);
        if (r.rc == 0 && !user_name_valid(c->user.name))
            r.rc = TN_ECORRUPT;
        /* The flags byte came later: an older build's entry has none. */
        if (r.rc == 0 && r.left > 0) {
            c->disown = tn__meta_r_u8(&r) == TN_META_USER_DISOWN;
            if (r.rc == 0 && !c->disown)
                r.rc = TN_ECORRUPT;
        }
        break;
    case TN_MC_MEMBER_PUT:
        c->member.id = tn__meta_r_u64(&r);
        tn__meta_r_str(&r, c->member.addr, TN_META_ADDR_MAX);
        if (r.rc == 0 && (c->member.id == 0 || c->member.addr[0] == '\0'))
            r.rc = TN_ECORRUPT;
        break;
    case TN_MC_MEMBER_DRAIN:
        c->member.id = tn__meta_r_u64(&r);
        c->member.draining = r_flag(&r);
        if (r.rc == 0 && c->member.id == 0)
            r.rc = TN_ECORRUPT;
        break;
    case TN_MC_MEMBER_REG:
    case TN_MC_MEMBER_REC:
        c->member.id = tn__meta_r_u64(&r);
        tn__meta_r_str(&r, c->member.addr, TN_META_ADDR_MAX);
        tn__meta_r_str(&r, c->member.api_addr, TN_META_ADDR_MAX);
        c->member.heartbeat_ms = r_i64(&r);
        if (c->type == TN_MC_MEMBER_REC) {
            tn__meta_r_str(&r, c->member.nsq.broadcast, TN_META_HOST_MAX);
            tn__meta_r_str(&r, c->member.nsq.hostname, TN_META_HOST_MAX);
            c->member.nsq.tcp_port = tn__meta_r_u16(&r);
            c->member.nsq.http_port = tn__meta_r_u16(&r);
            tn__meta_r_str(&r, c->member.nsq.version, TN_META_RELEASE_MAX);
            if (r.rc == 0 && (r.left == 8 || r.left == 16)) {
                bool boot = r.left == 16;
                c->member.incarnation = tn__meta_r_u64(&r); /* absent in older ones: 0 */
                c->member.boot = boot ? tn__meta_r_u64(&r) : 0;
                if (c->member.incarnation == 0 || (boot && c->member.boot == 0))
                    r.rc = TN_ECORRUPT; /* 0 is written as no field */
            }
        }
        if (r.rc == 0 &&
            (c->member.id == 0 || c->member.addr[0] == '\0' || c->member.heartbeat_ms < 0))
            r.rc = TN_ECORRUPT;
        break;
    case TN_MC_TOPIC_GROW_FOR:
        r_name(&r, c->topic.name, false);
        c->member.id = tn__meta_r_u64(&r);
        if (r.rc == 0 && c->member.id == 0)
            r.rc = TN_ECORRUPT;
        break;
    case TN_MC_MEMBER_STATUS:
        c->member.id = tn__meta_r_u64(&r);
        c->member.status = tn__meta_r_u8(&r);
        c->member.heartbeat_ms = r_i64(&r);
        if (r.rc == 0 &&
            (c->member.id == 0 || c->member.status > TN_MEMBER_DEAD || c->member.heartbeat_ms < 0))
            r.rc = TN_ECORRUPT;
        break;
    case TN_MC_NOOP:
        c->member.id = tn__meta_r_u64(&r);
        c->nonce = tn__meta_r_u64(&r);
        break;
    case TN_MC_PART_OWNERS: {
        r_name(&r, c->topic.name, false);
        uint32_t n = tn__meta_r_u32(&r);
        if (r.rc == 0 && (n == 0 || n > TN_META_MAX_PARTITIONS || (size_t)n * 8 != r.left))
            r.rc = TN_ECORRUPT;
        if (r.rc != 0)
            break;
        c->owners = tn_calloc(n, sizeof(*c->owners));
        if (c->owners == NULL) {
            r.rc = UV_ENOMEM;
            break;
        }
        c->nowners = n;
        for (uint32_t i = 0; i < n; i++)
            c->owners[i] = tn__meta_r_u64(&r);
        break;
    }
    case TN_MC_MEMBER_FENCE:
        c->member.id = tn__meta_r_u64(&r);
        c->member.incarnation = tn__meta_r_u64(&r);
        if (r.rc == 0 && c->member.id == 0)
            r.rc = TN_ECORRUPT;
        break;
    case TN_MC_MEMBER_REMOVE:
        c->member.id = tn__meta_r_u64(&r);
        c->member.incarnation = tn__meta_r_u64(&r);
        c->removed_ms = (int64_t)tn__meta_r_u64(&r);
        if (r.rc == 0 && (c->member.id == 0 || c->removed_ms < 0))
            r.rc = TN_ECORRUPT;
        break;
    case TN_MC_PART_ISR:
        r_name(&r, c->topic.name, false);
        c->part = tn__meta_r_u32(&r);
        c->node = tn__meta_r_u32(&r);
        c->leader_epoch = tn__meta_r_u32(&r);
        c->expected_pe = tn__meta_r_u32(&r);
        c->nisr = r_members(&r, c->isr, false);
        /* The flags byte came later: an entry without it is an older
         * build's, whose leaders had no channel check to make. */
        c->channels_checked = true;
        c->isr_unflagged = r.rc == 0 && r.left == 0;
        if (r.rc == 0 && r.left > 0)
            c->channels_checked = r_flag(&r);
        if (r.rc == 0 && c->node == TN_PSTATE_NONE)
            r.rc = TN_ECORRUPT;
        break;
    case TN_MC_PART_LEADER:
        r_name(&r, c->topic.name, false);
        c->part = tn__meta_r_u32(&r);
        c->node = tn__meta_r_u32(&r);
        c->unclean = r_flag(&r);
        if (r.rc == 0 && c->node == TN_PSTATE_NONE)
            r.rc = TN_ECORRUPT;
        break;
    case TN_MC_PART_REBALANCE:
        r_name(&r, c->topic.name, false);
        c->part = tn__meta_r_u32(&r);
        break;
    case TN_MC_PART_CORRUPT:
        r_name(&r, c->topic.name, false);
        c->part = tn__meta_r_u32(&r);
        c->node = tn__meta_r_u32(&r);
        if (r.rc == 0 && c->node == TN_PSTATE_NONE)
            r.rc = TN_ECORRUPT;
        break;
    case TN_MC_PART_STATE:
        r_name(&r, c->topic.name, false);
        c->part = tn__meta_r_u32(&r);
        r_pstate(&r, &c->pstate);
        break;
    case TN_MC_PART_MOVE:
        r_name(&r, c->topic.name, false);
        c->part = tn__meta_r_u32(&r);
        c->move_kind = tn__meta_r_u8(&r);
        c->move_id = tn__meta_r_u64(&r);
        c->move_ms = r_i64(&r);
        if (r.rc == 0 && (c->move_kind > TN_MOVE_FAIL || c->move_id == 0 || c->move_ms < 0))
            r.rc = TN_ECORRUPT;
        if (r.rc == 0 && c->move_kind == TN_MOVE_BEGIN)
            c->ntarget = r_nodes(&r, c->target);
        else if (r.rc == 0 && (c->move_kind == TN_MOVE_ABORT || c->move_kind == TN_MOVE_FAIL))
            tn__meta_r_str(&r, c->move_reason, TN_META_MOVE_REASON_MAX);
        /* ABORT's and FAIL's flags byte came with rule 8's refusal for too
         * few copies (bit 0); an entry without it is an older build's. */
        if (r.rc == 0 && (c->move_kind == TN_MOVE_ABORT || c->move_kind == TN_MOVE_FAIL)) {
            c->abort_unflagged = r.left == 0;
            if (!c->abort_unflagged && !r_flag(&r) && r.rc == 0)
                r.rc = TN_ECORRUPT;
        }
        /* COMPLETE's flags byte came with TOPIC_FACTOR (bit 0: the
         * partition's min_insync follows the topic's at the completion);
         * an entry without it is an older build's. */
        if (r.rc == 0 && c->move_kind == TN_MOVE_COMPLETE) {
            c->move_unflagged = r.left == 0;
            if (!c->move_unflagged && !r_flag(&r) && r.rc == 0)
                r.rc = TN_ECORRUPT;
        }
        break;
    case TN_MC_MOVE_MARK:
        r_name(&r, c->topic.name, false);
        c->part = tn__meta_r_u32(&r);
        c->move_id = tn__meta_r_u64(&r);
        if (r.rc == 0 && c->move_id == 0)
            r.rc = TN_ECORRUPT;
        c->nmark = r_marks(&r, c->mark, true);
        break;
    case TN_MC_MOVE_DONE: {
        tn_meta_move_t *mv = &c->move;
        mv->id = tn__meta_r_u64(&r);
        r_name(&r, mv->topic, false);
        mv->part = tn__meta_r_u32(&r);
        mv->end = tn__meta_r_u8(&r);
        mv->started_ms = r_i64(&r);
        mv->finished_ms = r_i64(&r);
        if (r.rc == 0 && (mv->id == 0 || (mv->end < TN_MOVE_DONE || mv->end > TN_MOVE_FAILED) ||
                          mv->started_ms < 0 || mv->finished_ms < 0))
            r.rc = TN_ECORRUPT;
        mv->nfrom = r_nodes(&r, mv->from);
        mv->nto = r_nodes(&r, mv->to);
        tn__meta_r_str(&r, mv->reason, TN_META_MOVE_REASON_MAX);
        break;
    }
    case TN_MC_REMOTE_PUT:
    case TN_MC_REMOTE_DELETE:
    case TN_MC_REMOTE_SALT:
    case TN_MC_REMOTE_CHILD_PUT:
    case TN_MC_REMOTE_CHILD_DELETE:
        if ((c->remote = tn_malloc(sizeof(*c->remote))) == NULL)
            return UV_ENOMEM;
        r.rc = tn__meta_remote_decode(c->type, r.p, r.left, c->remote);
        if (r.rc != 0) {
            tn_free(c->remote);
            c->remote = NULL;
        }
        r.left = 0;
        break;
    case TN_MC_CLUSTER_REBALANCE: {
        tn_meta_rebal_t *rb = &c->rebal;
        uint8_t flags = tn__meta_r_u8(&r);
        rb->wanted = (flags & 1u) != 0;
        c->if_absent = (flags & 2u) != 0;
        rb->reason = tn__meta_r_u8(&r);
        rb->id = tn__meta_r_u64(&r);
        rb->since_ms = r_i64(&r);
        if (r.rc == 0 &&
            ((flags & ~3u) != 0 || (c->if_absent && !rb->wanted) || rb->id == 0 ||
             rb->since_ms < 0 || rb->reason < TN_REBAL_API || rb->reason > TN_REBAL_JOIN))
            r.rc = TN_ECORRUPT;
        break;
    }
    default:
        return UV_ENOTSUP;
    }
    if (r.rc == 0 && r.left != 0)
        r.rc = TN_ECORRUPT; /* trailing bytes */
    if (r.rc != 0) {
        tn_meta_cmd_fini(c);
        return r.rc;
    }
    *used = padded;
    return 0;
}

void tn_meta_user_fini(tn_meta_user_t *u)
{
    for (uint16_t i = 0; u->grants != NULL && i < u->ngrants; i++) {
        char **pats = u->grants[i].patterns;
        for (uint16_t k = 0; pats != NULL && k < u->grants[i].npatterns; k++)
            tn_free(pats[k]);
        tn_free(pats);
    }
    tn_free(u->grants);
    u->grants = NULL;
    u->ngrants = 0;
}

int tn_meta_user_copy(tn_meta_user_t *dst, const tn_meta_user_t *src)
{
    tn_meta_user_fini(dst);
    tn_meta_user_t u = *src;
    u.grants = NULL;
    u.ngrants = 0;
    if (src->ngrants > 0) {
        u.grants = tn_calloc(src->ngrants, sizeof(*u.grants));
        if (u.grants == NULL)
            return UV_ENOMEM;
        u.ngrants = src->ngrants;
        for (uint16_t i = 0; i < src->ngrants; i++) {
            const tn_meta_grant_t *g = &src->grants[i];
            u.grants[i].action = g->action;
            if (g->npatterns == 0 || g->patterns == NULL)
                continue;
            u.grants[i].patterns = tn_calloc(g->npatterns, sizeof(char *));
            if (u.grants[i].patterns == NULL) {
                tn_meta_user_fini(&u);
                return UV_ENOMEM;
            }
            for (uint16_t k = 0; k < g->npatterns; k++) {
                u.grants[i].patterns[k] = tn_strdup(g->patterns[k]);
                if (u.grants[i].patterns[k] == NULL) {
                    tn_meta_user_fini(&u);
                    return UV_ENOMEM;
                }
                u.grants[i].npatterns = (uint16_t)(k + 1);
            }
        }
    }
    *dst = u;
    return 0;
}

void tn_meta_cmd_take_back(tn_meta_cmd_t *c, const char *topic, int64_t created_at_ms)
{
    memset(c, 0, sizeof(*c));
    c->type = TN_MC_TOPIC_DELETE;
    snprintf(c->topic.name, sizeof(c->topic.name), "%s", topic);
    c->topic.created_at_ms = created_at_ms;
    c->if_created = true;
}

void tn_meta_cmd_fini(tn_meta_cmd_t *c)
{
    tn_meta_user_fini(&c->user);
    tn_free(c->skip);
    c->skip = NULL;
    c->nskip = 0;
    tn_free(c->owners);
    c->owners = NULL;
    c->nowners = 0;
    if (c->remote != NULL) {
        tn__meta_remote_cmd_fini(c->remote);
        tn_free(c->remote);
        c->remote = NULL;
    }
}
