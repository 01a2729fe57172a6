/* /v1 consumes in a cluster: the door's side (a consume for partitions
 * other nodes own, routed by cluster/router.h) and the owner's side (the
 * TN_OP_CONSUME handler, which runs a forwarded consume on this node's
 * lanes through a parked consumer, api/consume.h).
 *
 * DESIGN: how a consume is routed (docs/cluster.md).
 *   1. Pinned (partition) or replay (offset): the router says where the
 *      partition lives. Here: the lanes, as on a lone node. On an alive
 *      owner: forwarded (the client's wait + 2 s) and its answer relayed
 *      as is; an owner marked dead: 503 "partition owner is down; retry
 *      later"; an owner that cannot be reached: 502.
 *   2. A queue consume: this node's lanes without waiting; then, while
 *      nothing came (or a batch is not full), a non-blocking probe of
 *      each other alive owner of a partition of the topic, one after the
 *      other, 500 ms each (a stalled owner is skipped for the round). A
 *      batch fills from several of them.
 *   3. Still nothing and a wait: the lanes wait here, alone for
 *      POLL_DELAY_MS (a message they get meanwhile costs no call to
 *      another node), then one owner (rotating over the owners) gets a
 *      forwarded long poll, while the other owners are probed again as
 *      in step 2, round after round, one call at a time: after an empty
 *      round a pause of 100 ms, doubling to 1 s (100, 200, 400, 800,
 *      1000, 1000...), while the client's wait lasts (with one other
 *      owner, long-polled, there are no rounds). The first with messages
 *      answers (relay), the others are cancelled. A cancelled lane
 *      request nacks what it had taken; a cancelled forwarded consume is
 *      nacked by its owner (tn_consume_parked_cancel there). A reply that
 *      crossed the cancel on the wire is dropped by node RPC; the owner
 *      kept its handles for 2 s and nacks them when the CANCEL arrives
 *      (the grace, below), so they come back at once.
 * The empty memo: a probe (steps 2 and 3) that an owner answered with
 * nothing is remembered for EMPTY_MEMO_MS by topic, channel and owner;
 * within that time this node's other consumes with a wait take that
 * owner as empty without asking it (one without a wait always asks: it
 * has no long poll to find later what a skipped probe would have found).
 * Many consumers finding this node's partitions empty at once so cost
 * each other owner one probe per EMPTY_MEMO_MS, not one each. A message
 * that reaches a skipped owner is found as one produced just after a
 * probe always was: by that owner's own consumers, the long poll, or the
 * next probe round (the memo is over by then). An answer with messages
 * from that owner forgets its memo at once.
 * Caps: a consume that leaves this node counts once against its user's
 * cap here, from its route to its answer (its lane requests do not count
 * again), and carries the user to its owners, which count what they run
 * for it under that user as well.
 * A lone node (no node RPC in the router) never leaves step 1's "here".
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/forward.h"

#include "api/consume.h"
#include "api/v1/common.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/name.h"
#include "core/time.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_MS       500
#define PACE_FIRST_MS  100  /* after an empty probe round, before the next */
#define POLL_DELAY_MS  50   /* the lanes wait alone before the long poll */
#define PACE_MAX_MS    1000 /* the pause doubles up to this */
#define FORWARD_EXTRA  2000
#define EMPTY_MEMO_MS  20 /* a probe's "nothing here" holds this long */
#define OWNERS_MAX     64
#define BATCH_PREFIX   "{\"messages\":["
#define BATCH_SUFFIX   "]}\n"
#define OWNER_DOWN_MSG "partition owner is down; retry later"

/* --- the door's side ------------------------------------------------------------ */

typedef enum { ST_LOCAL_PROBE, ST_REMOTE_PROBE, ST_WAIT, ST_PINNED } stage_t;

/* One /v1 consume that may involve other nodes, from its route to its
 * answer. Freed once answered (or its client gone) and neither the lane
 * request nor the call is outstanding; listed in v->fwds until then. */
typedef struct tn__v1_fwd_s fwd_t;
struct tn__v1_fwd_s {
    tn_v1_t *v;
    fwd_t *prev, *next;   /* in v->fwds */
    tn_http_request_t *r; /* NULL once answered or the client left */
    tn_consume_args_t a;
    char ident[72];
    stage_t stage;
    tn_consume_parked_t local;
    bool local_on;   /* local is with the lanes */
    bool local_done; /* the wait stage's lane request answered without messages */
    int local_status;
    tn_buf_t local_body;      /* its answer, relayed when nothing else came */
    tn_router_consume_t call; /* a probe, a pinned consume, or the wait's long poll */
    bool call_on;
    tn_router_consume_t round; /* the wait's probe of an owner not long-polled */
    bool round_on;
    uv_timer_t pace;   /* the pause between the wait's probe rounds */
    bool pace_made;    /* pace is initialised (closed before f is freed) */
    bool pace_closing; /* uv_close(pace) is under way: its callback frees f */
    int64_t pace_ms;   /* the next pause */
    bool poll_due;     /* the wait's long poll starts at the first pace */
    uint64_t owners[OWNERS_MAX];
    size_t nowners;
    size_t probe;  /* the next owner to probe */
    size_t polled; /* the wait stage: the index of the long-polled owner */
    tn_buf_t msgs; /* a batch's messages so far, comma separated */
    uint32_t got;
    uint32_t charge;    /* counted against a.ident's cap until answered */
    int64_t started_ms; /* monotonic */
    unsigned depth;     /* callbacks of f running: freed when the last returns */
};

static uint32_t rotation; /* the owner a forwarded long poll goes to */

#ifdef TN_TEST
/* TERN_TEST_CONSUME_MEMO_MS and TERN_TEST_CONSUME_POLL_DELAY_MS: the empty
 * memo's and the long poll's delay in ms instead of EMPTY_MEMO_MS and
 * POLL_DELAY_MS, so that a test can hold either for as long as it looks
 * (tests/cluster/test_consume_memo.py). */
static int64_t test_ms(const char *name, int64_t dflt)
{
    const char *s = getenv(name);
    return s != NULL && *s != '\0' ? strtoll(s, NULL, 10) : dflt;
}
static int64_t memo_ms(void)
{
    return test_ms("TERN_TEST_CONSUME_MEMO_MS", EMPTY_MEMO_MS);
}
static int64_t poll_delay_ms(void)
{
    return test_ms("TERN_TEST_CONSUME_POLL_DELAY_MS", POLL_DELAY_MS);
}
#else
static inline int64_t memo_ms(void)
{
    return EMPTY_MEMO_MS;
}
static inline int64_t poll_delay_ms(void)
{
    return POLL_DELAY_MS;
}
#endif

/* --- the empty memo (the DESIGN comment above) ---------------------------------- */

/* Topic and channel (a '/' between: neither name has one), mixed with
 * the owner. */
static uint64_t memo_key(const fwd_t *f, uint64_t owner)
{
    uint64_t h = tn_u64map_strkey(TN_U64MAP_STRKEY_INIT, f->a.topic);
    h = tn_u64map_strkey(tn_u64map_strkey(h, "/"), f->a.channel);
    return h ^ (owner * 0x9e3779b97f4a7c15ull);
}

/* What owner answered a probe of f with: nothing (remembered) or
 * messages (forgotten). */
static void memo_note(fwd_t *f, uint64_t owner, bool empty)
{
    uint64_t k = memo_key(f, owner);
    tn__v1_memo_t *m = &f->v->empty_memo[k % TN__V1_MEMO_SLOTS];
    if (empty) {
        m->key = k;
        m->at_ms = tn_now_mono_ms();
    } else if (m->key == k) {
        m->at_ms = 0;
    }
}

/* Whether owner answered a probe of f's topic and channel with nothing
 * in the last EMPTY_MEMO_MS. Never for a consume without a wait: it has
 * no long poll to find later what a skipped probe would have found. */
static bool memo_empty(const fwd_t *f, uint64_t owner)
{
    if (f->a.wait_ms <= 0)
        return false;
    uint64_t k = memo_key(f, owner);
    const tn__v1_memo_t *m = &f->v->empty_memo[k % TN__V1_MEMO_SLOTS];
    return m->key == k && m->at_ms != 0 && tn_now_mono_ms() - m->at_ms < memo_ms();
}

static void fwd_free(fwd_t *f)
{
    tn_v1_t *v = f->v;
    if (f->prev != NULL)
        f->prev->next = f->next;
    else
        v->fwds = f->next;
    if (f->next != NULL)
        f->next->prev = f->prev;
    v->nfwds--;
    tn_buf_fini(&f->msgs);
    tn_buf_fini(&f->local_body);
    tn_free(f);
}

static void on_pace_closed(uv_handle_t *h)
{
    fwd_free(h->data);
}

static void fwd_maybe_free(fwd_t *f)
{
    if (f->depth > 0 || f->r != NULL || f->local_on || f->call_on || f->round_on || f->pace_closing)
        return;
    if (f->pace_made) {
        f->pace_closing = true;
        uv_close((uv_handle_t *)&f->pace, on_pace_closed);
        return;
    }
    fwd_free(f);
}

/* Give back what f counted against its user's cap. */
static void uncharge(fwd_t *f)
{
    if (f->charge > 0 && f->v->consume != NULL)
        tn_consume_uncharge(f->v->consume, f->ident, f->charge);
    f->charge = 0;
}

/* The client has its answer (or left): give back its cap, cancel what
 * else is asked for it (a lane request nacks what it had taken, a
 * cancelled forwarded consume is nacked by its owner) and end the probe
 * rounds. */
static void stop_all(fwd_t *f)
{
    uncharge(f);
    if (f->local_on) {
        tn_consume_parked_cancel(&f->local);
        f->local_on = false;
    }
    if (f->call_on)
        tn_router_consume_cancel(&f->call); /* on_call runs later */
    if (f->round_on)
        tn_router_consume_cancel(&f->round); /* on_round runs later */
    if (f->pace_made)
        uv_timer_stop(&f->pace);
}

/* Answer the client with status and body exactly as the lanes would;
 * what else is still asked for it is cancelled (a lane request nacks
 * what it had taken, a cancelled forwarded consume is nacked by its
 * owner), and the probe rounds end. */
static void relay(fwd_t *f, int status, const char *body, size_t len)
{
    tn_http_request_t *r = f->r;
    if (r == NULL)
        return;
    f->r = NULL;
    stop_all(f);
    r->on_cancel = NULL;
    if (status == 204)
        tn_http_respond(r, 204, NULL, NULL, NULL, 0);
    else
        tn_http_respond(r, status, TN__V1_JSON,
                        status == 503 || status == 429 ? "Retry-After: 1\r\n" : NULL, body, len);
}

static void relay_error(fwd_t *f, int status, const char *msg)
{
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"error\":\"", 10);
    tn_buf_json_escape(&b, msg);
    tn_buf_append(&b, "\"}\n", 3);
    relay(f, status, tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
}

/* The batch so far. */
static void relay_batch(fwd_t *f)
{
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, BATCH_PREFIX, strlen(BATCH_PREFIX));
    tn_buf_append(&b, tn_buf_data(&f->msgs), tn_buf_size(&f->msgs));
    tn_buf_append(&b, BATCH_SUFFIX, strlen(BATCH_SUFFIX));
    relay(f, 200, tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
}

/* Add the messages of a batch answer (as the lanes write it) to f's;
 * how many (0 when the body is not one). */
static uint32_t merge(fwd_t *f, const char *body, size_t len)
{
    size_t pl = strlen(BATCH_PREFIX), sl = strlen(BATCH_SUFFIX);
    if (len < pl + sl || memcmp(body, BATCH_PREFIX, pl) != 0 ||
        memcmp(body + len - sl, BATCH_SUFFIX, sl) != 0 || len == pl + sl)
        return 0;
    /* Count the messages: each is one top-level object of the array. */
    uint32_t n = 0;
    int depth = 0;
    bool in_str = false, esc = false;
    for (size_t i = pl; i < len - sl; i++) {
        char c = body[i];
        if (in_str) {
            if (esc)
                esc = false;
            else if (c == '\\')
                esc = true;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"')
            in_str = true;
        else if (c == '{' && depth == 0)
            n++, depth++;
        else if (c == '{' || c == '[')
            depth++;
        else if (c == '}' || c == ']')
            depth--;
    }
    if (f->got > 0)
        tn_buf_append(&f->msgs, ",", 1);
    tn_buf_append(&f->msgs, body + pl, len - pl - sl);
    f->got += n;
    return n;
}

static void next_step(fwd_t *f);
static void start_poll(fwd_t *f);

/* Around every entry into f (a callback, the route): f stays until the
 * outermost returns, which frees it when it is done. */
static void enter(fwd_t *f)
{
    f->depth++;
}

static void leave(fwd_t *f)
{
    f->depth--;
    fwd_maybe_free(f);
}

static tn_wire_consume_t wire_args(const fwd_t *f, int64_t wait_ms, uint32_t max)
{
    tn_wire_consume_t w;
    memset(&w, 0, sizeof(w));
    snprintf(w.topic, sizeof(w.topic), "%s", f->a.topic);
    snprintf(w.channel, sizeof(w.channel), "%s", f->a.channel);
    w.partition = f->a.partition;
    w.pinned = f->a.pinned;
    w.offset = f->a.offset;
    w.replay = f->a.replay;
    w.wait_ms = wait_ms;
    w.max = max;
    w.local_only = true;
    snprintf(w.ident, sizeof(w.ident), "%s", f->a.ident);
    return w;
}

static void local_answered(fwd_t *f, int status, const char *body, size_t len);

/* The lanes answered f's local request. */
static void on_local(tn_consume_parked_t *pk, int status, const char *body, size_t len)
{
    fwd_t *f = pk->data;
    enter(f);
    f->local_on = false;
    local_answered(f, status, body, len);
    leave(f);
}

static void local_answered(fwd_t *f, int status, const char *body, size_t len)
{
    if (f->r == NULL)
        return;
    if (status == 200) {
        if (f->a.max == 0) {
            relay(f, 200, body, len); /* cancels the long poll and the probe rounds */
            return;
        }
        merge(f, body, len);
        if (f->stage == ST_WAIT || f->got >= f->a.max) {
            relay_batch(f);
            return;
        }
        next_step(f);
        return;
    }
    if (status != 204 && f->stage == ST_LOCAL_PROBE) {
        relay(f, status, body, len); /* 404, 429, 503...: as a lone node answers */
        return;
    }
    if (f->stage == ST_WAIT) {
        f->local_done = true;
        f->local_status = status;
        tn_buf_append(&f->local_body, body, len);
        if (!f->call_on)
            relay(f, status, body, len); /* the wait is over: the probe rounds end */
        return;
    }
    next_step(f);
}

static void start_local(fwd_t *f, int64_t wait_ms, uint32_t max)
{
    tn_consume_args_t a = f->a;
    a.wait_ms = wait_ms;
    a.max = max;
    a.ident = ""; /* f counts it, once */
    f->local.answer = on_local;
    f->local.data = f;
    f->local_on = true;
    tn_consume_start_parked(f->v->consume, &f->local, &a); /* may answer now */
}

static void call_answered(fwd_t *f, const tn_router_consume_t *c, int status, const tn_buf_t *b);

/* The owner answered f's call (or the call failed). */
static void on_call(tn_router_consume_t *c, int status)
{
    fwd_t *f = c->data;
    enter(f);
    f->call_on = false;
    tn_buf_t body = c->body; /* ours now: c may carry the next call */
    tn_buf_init(&c->body);
    call_answered(f, c, status, &body);
    tn_buf_fini(&body);
    leave(f);
}

static void call_answered(fwd_t *f, const tn_router_consume_t *c, int status, const tn_buf_t *b)
{
    uint16_t hs = status == 0 ? c->http_status : 0;
    const char *body = tn_buf_data(b);
    size_t len = tn_buf_size(b);
    if (f->stage != ST_PINNED && (hs == 200 || hs == 204))
        memo_note(f, c->owner, hs == 204);
    if (f->r == NULL)
        return;
    if (f->stage == ST_PINNED) {
        if (status != 0) {
            char msg[400];
            snprintf(msg, sizeof(msg), "partition owner (node %" PRIu64 ") unreachable: %s",
                     c->owner, c->error);
            relay_error(f, 502, msg);
        } else {
            relay(f, hs, body, len);
        }
        return;
    }
    if (status != 0 || (hs != 200 && hs != 204))
        TN_LOG_RL(TN_LOG_WARN, 10000, "consume of %s forwarded to node %" PRIu64 ": %s", f->a.topic,
                  c->owner, status != 0 ? c->error : "refused");
    bool got = status == 0 && hs == 200;
    if (got && f->a.max == 0) {
        relay(f, 200, body, len); /* cancels the lane request and the probe rounds */
        return;
    }
    if (got)
        merge(f, body, len);
    if (f->stage == ST_WAIT) {
        if (f->got > 0) {
            relay_batch(f);
        } else if (f->local_done) {
            relay(f, f->local_status, tn_buf_data(&f->local_body), tn_buf_size(&f->local_body));
        }
        return;
    }
    if (f->a.max > 0 && f->got >= f->a.max) {
        relay_batch(f);
        return;
    }
    next_step(f);
}

static int start_call(fwd_t *f, uint64_t owner, int64_t wait_ms, uint32_t max, uint64_t timeout)
{
    tn_wire_consume_t w = wire_args(f, wait_ms, max);
    f->call.data = f;
    int rc = tn_router_consume_call(f->v->router, owner, &w, timeout, &f->call, on_call);
    f->call_on = rc == 0;
    return rc;
}

/* --- the wait's probe rounds -----------------------------------------------------
 *
 * While the lanes and one owner's long poll wait, the other owners are
 * probed again, round after round, as in the probe stage (no wait, 500
 * ms each, one call at a time): after an empty round a pause of 100 ms,
 * doubled after each (200, 400, 800) up to 1 s, while the client's wait
 * lasts. A round that gets messages answers the client through relay,
 * which cancels the lane request and the long poll as any first answer
 * does. With one other owner (it is long-polled) there are no rounds. */

static int64_t wait_left(const fwd_t *f)
{
    return f->a.wait_ms - (tn_now_mono_ms() - f->started_ms);
}

static void round_next(fwd_t *f);

static void on_pace(uv_timer_t *t)
{
    fwd_t *f = t->data;
    enter(f);
    if (f->r != NULL && f->stage == ST_WAIT && f->poll_due) {
        start_poll(f);
    } else if (f->r != NULL && f->stage == ST_WAIT && !f->round_on) {
        f->probe = 0;
        round_next(f);
    }
    leave(f);
}

/* Pause before the next round, when the wait lasts beyond it; the pause
 * after it doubles, up to PACE_MAX_MS. */
static void pace_arm(fwd_t *f)
{
    int64_t pause = f->pace_ms;
    if (f->r == NULL || wait_left(f) <= pause)
        return;
    if (!f->pace_made) {
        if (uv_timer_init(f->v->loop, &f->pace) != 0)
            return; /* no rounds: the lanes and the long poll still wait */
        f->pace.data = f;
        f->pace_made = true;
    }
    f->pace_ms = TN_MIN(pause * 2, (int64_t)PACE_MAX_MS);
    uv_timer_start(&f->pace, on_pace, (uint64_t)pause, 0);
}

static void on_round(tn_router_consume_t *c, int status)
{
    fwd_t *f = c->data;
    enter(f);
    f->round_on = false;
    tn_buf_t b = c->body;
    tn_buf_init(&c->body);
    uint16_t hs = status == 0 ? c->http_status : 0;
    if (hs == 200 || hs == 204)
        memo_note(f, c->owner, hs == 204);
    if (f->r != NULL) {
        if (status != 0 || (hs != 200 && hs != 204))
            TN_LOG_RL(TN_LOG_WARN, 10000, "consume of %s probed at node %" PRIu64 ": %s",
                      f->a.topic, c->owner, status != 0 ? c->error : "refused");
        if (hs == 200 && f->a.max == 0)
            relay(f, 200, tn_buf_data(&b), tn_buf_size(&b));
        else if (hs == 200 && merge(f, tn_buf_data(&b), tn_buf_size(&b)) > 0)
            relay_batch(f);
        else
            round_next(f);
    }
    tn_buf_fini(&b);
    leave(f);
}

/* Probe the round's next owner (not the long-polled one); at the
 * round's end, the pause. */
static void round_next(fwd_t *f)
{
    while (f->probe < f->nowners && wait_left(f) > 0) {
        size_t i = f->probe++;
        if (i == f->polled || memo_empty(f, f->owners[i]))
            continue;
        tn_wire_consume_t w = wire_args(f, 0, f->a.max);
        f->round.data = f;
        if (tn_router_consume_call(f->v->router, f->owners[i], &w, PROBE_MS, &f->round, on_round) ==
            0) {
            f->round_on = true;
            return;
        }
    }
    pace_arm(f);
}

/* After the local probe, or a remote one: the next owner to probe, then
 * the wait, then the answer. */
static void next_step(fwd_t *f)
{
    uint32_t left = f->a.max > 0 ? f->a.max - f->got : 0;
    if (f->stage == ST_LOCAL_PROBE)
        f->stage = ST_REMOTE_PROBE;
    while (f->stage == ST_REMOTE_PROBE && f->probe < f->nowners) {
        uint64_t owner = f->owners[f->probe++];
        if (!memo_empty(f, owner) && start_call(f, owner, 0, left, PROBE_MS) == 0)
            return;
    }
    if (f->got > 0) {
        relay_batch(f);
        return;
    }
    /* The wait left after the probes. */
    int64_t wait = f->a.wait_ms - (tn_now_mono_ms() - f->started_ms);
    if (wait <= 0 || f->nowners == 0) {
        relay(f, 204, NULL, 0);
        return;
    }
    f->stage = ST_WAIT;
    f->polled = rotation++ % f->nowners;
    start_local(f, wait, f->a.max); /* may answer now */
    if (f->r == NULL)
        return;
    /* The long poll waits POLL_DELAY_MS: a message this node's lanes get
     * meanwhile answers without a call to another node. */
    f->poll_due = true;
    f->pace_ms = poll_delay_ms();
    pace_arm(f);
    if (!f->pace_made || !uv_is_active((uv_handle_t *)&f->pace))
        start_poll(f); /* a wait shorter than the delay, or no timer */
}

/* The wait's long poll of one owner, then the probe rounds of the others. */
static void start_poll(fwd_t *f)
{
    f->poll_due = false;
    uint32_t left = f->a.max > 0 ? f->a.max - f->got : 0;
    int64_t wait = wait_left(f);
    if (wait > 0)
        (void)start_call(f, f->owners[f->polled], wait, left, (uint64_t)wait + FORWARD_EXTRA);
    if (f->nowners > 1) {
        f->pace_ms = PACE_FIRST_MS; /* the probe stage was an empty round */
        pace_arm(f);
    }
}

static void on_client_gone(tn_http_request_t *r)
{
    fwd_t *f = r->data;
    enter(f);
    f->r = NULL;
    stop_all(f);
    leave(f);
}

void tn__v1_consume_route(tn_v1_t *v, tn_http_request_t *r, const tn_consume_args_t *a)
{
    uint64_t owner = 0;
    size_t nowners = 0;
    uint64_t owners[OWNERS_MAX];
    if (a->pinned || a->replay) {
        int where = tn_router_consume_where(v->router, a->topic, a->partition, &owner);
        if (where == UV_EHOSTDOWN) {
            tn__v1_error(r, 503, OWNER_DOWN_MSG, "Retry-After: 1\r\n");
            return;
        }
        if (where != TN_EREMOTE) {
            tn_consume_start(v->consume, r, a); /* here, or not placed yet */
            return;
        }
    } else {
        nowners = tn_router_consume_owners(v->router, a->topic, owners, OWNERS_MAX);
        if (nowners == 0) {
            tn_consume_start(v->consume, r, a);
            return;
        }
    }
    /* Counted once, for its whole life, on this node: as on a lone node
     * (its owners count what they run for it too). */
    uint32_t charge = 0;
    if (!tn_consume_charge(v->consume, a->ident, a->replay ? 1 : TN_MAX(a->max, 1u), &charge)) {
        tn__v1_error(r, 429, "too many concurrent consumes for this user", "Retry-After: 1\r\n");
        return;
    }
    fwd_t *f = tn_calloc(1, sizeof(*f));
    if (f == NULL) {
        tn_consume_uncharge(v->consume, a->ident, charge);
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    f->charge = charge;
    f->v = v;
    f->next = v->fwds;
    if (v->fwds != NULL)
        v->fwds->prev = f;
    v->fwds = f;
    v->nfwds++;
    f->r = r;
    f->a = *a;
    snprintf(f->ident, sizeof(f->ident), "%s", a->ident);
    f->a.ident = f->ident;
    tn_buf_init(&f->msgs);
    tn_buf_init(&f->local_body);
    memcpy(f->owners, owners, nowners * sizeof(owners[0]));
    f->nowners = nowners;
    r->data = f;
    r->on_cancel = on_client_gone;
    f->started_ms = tn_now_mono_ms();
    enter(f);
    if (a->pinned || a->replay) {
        f->stage = ST_PINNED;
        int rc = start_call(f, owner, a->wait_ms, a->max, (uint64_t)a->wait_ms + FORWARD_EXTRA);
        if (rc != 0) {
            char msg[200];
            snprintf(msg, sizeof(msg), "partition owner (node %" PRIu64 ") unreachable: %s", owner,
                     tn_strerror(rc));
            relay_error(f, 502, msg);
        }
    } else {
        f->stage = ST_LOCAL_PROBE;
        start_local(f, 0, a->max);
    }
    leave(f);
}

void tn__v1_forwards_drain(tn_v1_t *v)
{
    fwd_t *f = v->fwds;
    while (f != NULL) {
        fwd_t *next = f->next;
        enter(f);
        if (f->r != NULL && f->got > 0)
            relay_batch(f); /* what a batch holds goes out */
        else if (f->r != NULL)
            relay(f, 204, NULL, 0); /* as a wait that ran out; its calls are cancelled */
        leave(f);
        f = next;
    }
}

/* --- the owner's side --------------------------------------------------------- */

/* A forwarded consume parked on this node's lanes: the RPC implementation
 * of a parked consumer. */
typedef struct {
    tn_consume_parked_t pk;
    tn_rpc_req_t *req;
    tn_v1_t *v;
    bool starting; /* inside tn_consume_start_parked */
    bool answered;
    char topic[TN_NAME_MAX + 1];
    char channel[TN_NAME_MAX + 1];
    uint32_t n; /* the leases its answer carries */
    tn_wire_handle_t h[TN_CONSUME_BATCH_MAX];
} rpc_parked_t;

/* --- the grace of delivered handles ---------------------------------------------
 *
 * A forwarded consume's answer carries leases. When the caller gives up
 * just as the answer goes (its client left, another source answered
 * first, its deadline passed), the answer and the caller's CANCEL cross:
 * node RPC drops the answer there, and the CANCEL reaches this node for a
 * request it no longer has (tn_rpc_on_late_cancel). So for GRACE_MS after
 * each answer with leases the owner keeps its handles, keyed by the
 * caller's endpoint and request id, and a late CANCEL for it nacks them at
 * once: the messages are deliverable again now instead of after their
 * visibility timeout. A caller that read the answer never cancels; the
 * records expire from the front of a FIFO (every record lives GRACE_MS),
 * looked at whenever one is added or a late CANCEL comes, so their cost
 * is a copy of the handles per answer. At most GRACE_MAX are kept (the
 * oldest goes first). A late CANCEL finds its record through grace_ix,
 * by grace_key(caller, request id), so a node answering thousands of
 * forwarded consumes a second does not walk them all for each late
 * CANCEL. Two records of one key (a 64-bit hash collision) keep the
 * newer in the index: the older's leases come back by their visibility
 * timeout, as when memory is short. */

#define GRACE_MS       2000
#define GRACE_MAX      8192
#define GRACE_PEER_MAX 64 /* a caller's endpoint, cut there */

struct tn__v1_grace_s {
    tn__v1_grace_t *next, *prev; /* the FIFO: next is younger */
    uint64_t key;                /* grace_key(peer, id) */
    int64_t expires_ms;          /* monotonic */
    uint64_t id;
    char peer[GRACE_PEER_MAX];
    char topic[TN_NAME_MAX + 1];
    char channel[TN_NAME_MAX + 1];
    uint32_t n;
    tn_wire_handle_t h[];
};

/* The caller's endpoint, mixed with the request id. */
static uint64_t grace_key(const char *peer, uint64_t id)
{
    return tn_u64map_strkey(TN_U64MAP_STRKEY_INIT, peer) ^ (id * 0x9e3779b97f4a7c15ull);
}

/* Take g out of the FIFO and out of the index (not freed). */
static void grace_unlink(tn_v1_t *v, tn__v1_grace_t *g)
{
    if (g->prev != NULL)
        g->prev->next = g->next;
    else
        v->grace_head = g->next;
    if (g->next != NULL)
        g->next->prev = g->prev;
    else
        v->grace_tail = g->prev;
    v->ngrace--;
    if (tn_u64map_get(&v->grace_ix, g->key) == g)
        tn_u64map_del(&v->grace_ix, g->key);
}

static void grace_pop(tn_v1_t *v)
{
    tn__v1_grace_t *g = v->grace_head;
    grace_unlink(v, g);
    tn_free(g);
}

static void grace_expire(tn_v1_t *v)
{
    int64_t now = tn_now_mono_ms();
    while (v->grace_head != NULL && (v->grace_head->expires_ms <= now || v->ngrace > GRACE_MAX))
        grace_pop(v);
}

/* Remember p's leases for GRACE_MS (memory short: not at all; their
 * visibility timeout still brings them back). */
static void grace_keep(tn_v1_t *v, const rpc_parked_t *p, const char *peer, uint64_t id)
{
    grace_expire(v);
    tn__v1_grace_t *g = tn_malloc(sizeof(*g) + (size_t)p->n * sizeof(g->h[0]));
    if (g == NULL)
        return;
    g->next = NULL;
    g->prev = v->grace_tail;
    g->expires_ms = tn_now_mono_ms() + GRACE_MS;
    g->id = id;
    snprintf(g->peer, sizeof(g->peer), "%s", peer);
    g->key = grace_key(g->peer, id);
    if (tn_u64map_put(&v->grace_ix, g->key, g) != 0) {
        tn_free(g); /* memory short: kept not at all, as above */
        return;
    }
    snprintf(g->topic, sizeof(g->topic), "%s", p->topic);
    snprintf(g->channel, sizeof(g->channel), "%s", p->channel);
    g->n = p->n;
    memcpy(g->h, p->h, (size_t)p->n * sizeof(g->h[0]));
    if (v->grace_tail != NULL)
        v->grace_tail->next = g;
    else
        v->grace_head = g;
    v->grace_tail = g;
    v->ngrace++;
}

void tn_v1_consume_late_cancel(void *arg, const char *peer, uint64_t id)
{
    tn_v1_t *v = arg;
    grace_expire(v);
    char kept[GRACE_PEER_MAX];
    snprintf(kept, sizeof(kept), "%s", peer); /* as grace_keep kept it */
    tn__v1_grace_t *g = tn_u64map_get(&v->grace_ix, grace_key(kept, id));
    if (g == NULL || g->id != id || strcmp(g->peer, kept) != 0)
        return; /* read by the caller, expired, or never kept */
    grace_unlink(v, g);
    uint32_t back = 0;
    for (uint32_t i = 0; i < g->n && v->consume != NULL; i++)
        if (tn_consume_settle(v->consume, g->topic, g->channel, g->h[i].partition, g->h[i].offset,
                              g->h[i].nonce, TN_SETTLE_NACK, 0, NULL, NULL) == 0)
            back++;
    TN_LOG_RL(TN_LOG_INFO, 10000,
              "consume of %s for %s: the caller gave up as the answer went; %u of %u "
              "message(s) back at once",
              g->topic, peer, back, g->n);
    tn_free(g);
}

void tn__v1_grace_free(tn_v1_t *v)
{
    while (v->grace_head != NULL)
        grace_pop(v);
    tn_u64map_fini(&v->grace_ix);
}

static void rpc_reply_error(tn_rpc_req_t *req, int status, const char *msg)
{
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"error\":\"", 10);
    tn_buf_json_escape(&b, msg);
    tn_buf_append(&b, "\"}\n", 3);
    tn_rpc_reply(req, (uint16_t)status, TN__V1_JSON, tn_buf_data(&b), tn_buf_size(&b));
    tn_buf_fini(&b);
}

static void rpc_delivered(tn_consume_parked_t *pk, uint32_t partition, uint64_t offset,
                          uint32_t nonce)
{
    rpc_parked_t *p = pk->data;
    if (p->n < TN_CONSUME_BATCH_MAX)
        p->h[p->n++] = (tn_wire_handle_t){partition, offset, nonce};
}

static void rpc_answer(tn_consume_parked_t *pk, int status, const char *body, size_t len)
{
    rpc_parked_t *p = pk->data;
    if (status == 200 && p->n > 0 && !tn_rpc_req_cancelled(p->req))
        grace_keep(p->v, p, tn_rpc_req_peer(p->req), tn_rpc_req_id(p->req));
    tn_rpc_reply(p->req, (uint16_t)status, status == 204 ? NULL : TN__V1_JSON, body, len);
    p->answered = true;
    if (!p->starting)
        tn_free(p);
}

static void rpc_cancelled(void *arg, tn_rpc_req_t *req)
{
    rpc_parked_t *p = arg;
    (void)req;
    if (p->answered)
        return;
    tn_consume_parked_cancel(&p->pk); /* nacks what a batch had taken */
    rpc_reply_error(p->req, 503, "the consume was cancelled");
    tn_free(p);
}

static void on_rpc_consume(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    tn_v1_t *v = arg;
    if (v->closing || v->consume == NULL) {
        rpc_reply_error(req, 503, "shutting down");
        return;
    }
    tn_wire_consume_t w;
    char msg[200];
    if (tn_wire_consume_decode(payload, len, &w, msg, sizeof(msg)) != 0) {
        rpc_reply_error(req, 400, msg);
        return;
    }
    if (!tn_name_valid(w.topic, strlen(w.topic)) || !tn_name_valid(w.channel, strlen(w.channel))) {
        rpc_reply_error(req, 400,
                        "invalid argument: topic and channel must match "
                        "[A-Za-z0-9._-]{1,255}");
        return;
    }
    if (w.max > TN_CONSUME_BATCH_MAX || (w.max > 0 && w.replay)) {
        rpc_reply_error(req, 400, "invalid argument: max must be 1..100 and not with offset");
        return;
    }
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(v->meta), w.topic);
    if (e == NULL) {
        rpc_reply_error(req, 404, "topic not found");
        return;
    }
    if ((w.pinned || w.replay) && w.partition >= e->rec.partitions) {
        rpc_reply_error(req, 400, "invalid argument: partition out of range");
        return;
    }
    tn_consume_args_t a;
    memset(&a, 0, sizeof(a));
    snprintf(a.topic, sizeof(a.topic), "%s", w.topic);
    snprintf(a.channel, sizeof(a.channel), "%s", w.channel);
    a.partitions = e->rec.partitions;
    a.visibility_ms = e->rec.visibility_timeout_ms;
    a.wait_ms = TN_MIN(TN_MAX(w.wait_ms, (int64_t)0), v->o.max_consume_wait_ms);
    a.pinned = w.pinned;
    a.partition = w.partition;
    a.replay = w.replay;
    a.offset = w.offset;
    a.max = w.max;
    a.ident = w.ident; /* counted here too: forwarded consumes never bypass this node's cap */
    rpc_parked_t *p = tn_calloc(1, sizeof(*p));
    if (p == NULL) {
        rpc_reply_error(req, 503, "out of memory");
        return;
    }
    p->req = req;
    p->v = v;
    snprintf(p->topic, sizeof(p->topic), "%s", w.topic);
    snprintf(p->channel, sizeof(p->channel), "%s", w.channel);
    p->pk.answer = rpc_answer;
    p->pk.delivered = rpc_delivered;
    p->pk.data = p;
    p->starting = true;
    tn_consume_start_parked(v->consume, &p->pk, &a);
    p->starting = false;
    if (p->answered) {
        tn_free(p);
        return;
    }
    tn_rpc_req_on_cancel(req, rpc_cancelled, p);
}

void tn_v1_consume_handler(tn_v1_t *v, tn_rpc_handler_t *out)
{
    *out = (tn_rpc_handler_t){TN_OP_CONSUME, TN_RPC_OP_EXEMPT, on_rpc_consume, v};
}
