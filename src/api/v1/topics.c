/* The /v1 topic routes: list, get, create (with a parent: attached as
 * its child, children.c), change and delete; and how a record's settings
 * reach the engine's topic (tn_v1_apply_topic). See v1.h.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/v1/topics.h"

#include "api/v1/children.h"
#include "api/v1/common.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/fdroom.h"
#include "core/log.h"
#include "core/time.h"
#include "meta/owner.h"
#include "api/access.h"
#include "api/catalog.h"
#include "api/fanout.h"
#include "proto/http/json.h"
#include "storage/io.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_DEFAULT 100
#define LIST_MAX     1000

static void on_topics_list(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    int64_t limit = LIST_DEFAULT;
    int q = tn__v1_query_int(r, "limit", &limit);
    if (q < 0 || (q == 1 && limit < 1)) {
        tn__v1_error(r, 400, "limit must be a positive integer", NULL);
        return;
    }
    limit = TN_MIN(limit, (int64_t)LIST_MAX);
    char token[TN_NAME_MAX + 1] = "";
    int rc = tn_http_query(r->head.query, "page_token", token, sizeof(token));
    if (rc < 0) {
        tn__v1_error(r, 400, "invalid page_token", NULL);
        return;
    }
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"topics\":[", 11);
    int64_t n = 0;
    const char *last = NULL;
    bool more = false;
    for (size_t i = tn_meta_topic_after(s, token); i < s->ntopics; i++) {
        const tn_meta_topic_entry_t *e = s->topics[i];
        if (!tn__v1_can_read(v, r, &e->rec))
            continue;
        if (n == limit) {
            more = true;
            break;
        }
        if (n > 0)
            tn_buf_append(&b, ",", 1);
        tn__v1_topic_json(v, &b, e, NULL, 0);
        last = e->rec.name;
        n++;
    }
    tn_buf_append(&b, "],\"next_page_token\":", 20);
    tn__v1_json_str(&b, more && last != NULL ? last : "");
    tn_buf_append(&b, "}", 1);
    tn__v1_respond_buf(r, 200, &b);
}

/* A GET of one topic gathering its partitions' numbers: from
 * tn_router_pstats to its callback (the owners' answers can take up to
 * TN_ROUTER_PSTATS_TIMEOUT_MS). r is NULL once the client left. */
typedef struct {
    tn_v1_t *v;
    tn_http_request_t *r;
    char topic[TN_NAME_MAX + 1];
    uint32_t n;
    tn_router_pstat_t items[];
} stats_op_t;

static void stats_cancel(tn_http_request_t *r)
{
    stats_op_t *op = r->data;
    op->r = NULL;
}

static void on_stats_gathered(void *arg, tn_router_pstat_t *items, uint32_t n)
{
    stats_op_t *op = arg;
    tn_http_request_t *r = op->r;
    if (r != NULL) {
        r->on_cancel = NULL;
        /* The record again: it may have changed (or gone) while the owners
         * answered. */
        const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(op->v->meta), op->topic);
        if (e == NULL) {
            tn__v1_error(r, 404, "topic not found", NULL);
        } else {
            tn_buf_t b;
            tn_buf_init(&b);
            tn__v1_topic_json(op->v, &b, e, items, n);
            tn__v1_respond_buf(r, 200, &b);
        }
    }
    tn_free(op);
}

static void on_topic_get(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = tn__v1_path_topic(v, r, topic);
    if (e == NULL)
        return;
    if (!tn__v1_can_read(v, r, &e->rec)) {
        tn__v1_error(r, 403, "no grant on this topic", NULL);
        return;
    }
    int64_t part = -1;
    int q = tn__v1_query_int(r, "partition", &part);
    if (q < 0 || (q == 1 && part >= (int64_t)e->rec.partitions)) {
        tn__v1_error(r, 400, "invalid partition", NULL);
        return;
    }
    /* Every partition of the record, and any the engine here has beyond
     * it (a growth the replica has not shown yet); or the one asked. */
    uint32_t n = e->rec.partitions;
    tn_topic_t *bt = NULL;
    if (tn_broker_topic(v->broker, topic, strlen(topic), false, 0, NULL, &bt) == 0)
        n = TN_MAX(n, bt->nparts);
    if (q == 1)
        n = 1;
    stats_op_t *op = tn_calloc(1, sizeof(*op) + (size_t)n * sizeof(op->items[0]));
    if (op == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    op->v = v;
    op->r = r;
    op->n = n;
    snprintf(op->topic, sizeof(op->topic), "%s", topic);
    for (uint32_t i = 0; i < n; i++)
        op->items[i].partition = q == 1 ? (uint32_t)part : i;
    r->data = op;
    r->on_cancel = stats_cancel;
    tn_router_pstats(v->router, op->topic, op->items, n, on_stats_gathered, op);
}

void tn_v1_apply_topic(tn_broker_t *b, const tn_meta_topic_t *rec)
{
    /* Being placed or grown too: what it is given now holds after (the
     * logs it opens meanwhile take its durability when installed). */
    tn_topic_t *t = tn_broker_topic_find(b, rec->name);
    if (t == NULL || t->state == TN_OBJ_DELETING || t->state == TN_OBJ_FAILED)
        return;
    t->max_inflight_part = (uint32_t)TN_MIN(rec->max_inflight, (int64_t)UINT32_MAX);
    t->max_acked_ahead = (uint32_t)TN_MIN(rec->max_acked_ahead, (int64_t)UINT32_MAX);
    if (rec->delivery_mode == TN_DELIVERY_TTL_DISCARD && rec->ttl_ms > 0)
        t->ttl_ms = rec->ttl_ms;
    if (!rec->native)
        return;
    t->own_settings = true;
    t->own_retention_ns =
        rec->retention_ms > INT64_MAX / 1000000 ? INT64_MAX : rec->retention_ms * 1000000;
    t->own_max_attempts = rec->max_attempts;
    if (t->durability != rec->durability)
        tn_topic_set_durability(t, rec->durability);
}

/* --- creating and deleting topics ---------------------------------------------------- */

#define DEFAULT_PARTITIONS 3
#define DEFAULT_VISIBILITY 30000
#define DEFAULT_CAP        1024
/* A topic's retention_ms is 0 (no age limit) or at least an hour: what a
 * lagging child or a slow consumer can count on. */
#define MIN_RETENTION_MS (3600LL * 1000)

/* Why a retention_ms asked for is refused (into err), or false. */
static bool retention_refused(int64_t ms, char *err, size_t errlen)
{
    if (ms == 0 || ms >= MIN_RETENTION_MS)
        return false;
    if (ms < 0)
        snprintf(err, errlen, "invalid argument: retention_ms must be >= 0 (0 means no age limit)");
    else
        snprintf(err, errlen,
                 "invalid argument: retention_ms must be 0 (no age limit) or at least %lld "
                 "(1 hour); got %" PRId64,
                 MIN_RETENTION_MS, ms);
    return true;
}

typedef struct {
    char name[TN_NAME_MAX + 1];
    int64_t partitions;
    int64_t retention_ms;
    int64_t visibility_timeout_ms;
    int64_t max_inflight;
    int64_t max_acked_ahead;
    char delivery_mode[16];
    int64_t ttl_ms;
    int64_t max_attempts;
    char durability[16];
    char owner[TN_USERNAME_MAX + 1];
    char parent[TN_NAME_MAX + 1];
    int64_t fanout_delay_ms;
    int64_t replication_factor;
    int64_t min_insync;
} create_body_t;

enum {
    CF_NAME,
    CF_PARTITIONS,
    CF_RETENTION,
    CF_VISIBILITY,
    CF_INFLIGHT,
    CF_ACKED_AHEAD,
    CF_MODE,
    CF_TTL,
    CF_ATTEMPTS,
    CF_DURABILITY,
    CF_OWNER,
    CF_PARENT,
    CF_DELAY,
    CF_FACTOR,
    CF_MIN_INSYNC,
    CF_COUNT
};

static const tn_jfield_t create_fields[] = {
    {"name", TN_JF_STR, offsetof(create_body_t, name), TN_NAME_MAX},
    {"partitions", TN_JF_INT, offsetof(create_body_t, partitions), 0},
    {"retention_ms", TN_JF_INT, offsetof(create_body_t, retention_ms), 0},
    {"visibility_timeout_ms", TN_JF_INT, offsetof(create_body_t, visibility_timeout_ms), 0},
    {"max_in_flight_per_partition", TN_JF_INT, offsetof(create_body_t, max_inflight), 0},
    {"max_acked_ahead_per_partition", TN_JF_INT, offsetof(create_body_t, max_acked_ahead), 0},
    {"delivery_mode", TN_JF_STR, offsetof(create_body_t, delivery_mode), 15},
    {"ttl_ms", TN_JF_INT, offsetof(create_body_t, ttl_ms), 0},
    {"max_attempts", TN_JF_INT, offsetof(create_body_t, max_attempts), 0},
    {"durability", TN_JF_STR, offsetof(create_body_t, durability), 15},
    {"owner", TN_JF_STR, offsetof(create_body_t, owner), TN_USERNAME_MAX},
    {"parent", TN_JF_STR, offsetof(create_body_t, parent), TN_NAME_MAX},
    {"fanout_delay_ms", TN_JF_INT, offsetof(create_body_t, fanout_delay_ms), 0},
    {"replication_factor", TN_JF_INT, offsetof(create_body_t, replication_factor), 0},
    {"min_insync_replicas", TN_JF_INT, offsetof(create_body_t, min_insync), 0},
};
_Static_assert(TN_ARRAY_SIZE(create_fields) == CF_COUNT, "create_fields and its enum disagree");

/* The record a create body asks for, or a 400 message in err. */
static bool topic_from_body(tn_v1_t *v, const create_body_t *b, const bool *given,
                            tn_meta_topic_t *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof(*t));
    if (!given[CF_NAME] || !tn_name_valid(b->name, strlen(b->name))) {
        snprintf(err, errlen, "invalid argument: name must match [A-Za-z0-9._-]{1,255}");
        return false;
    }
    if (given[CF_DELAY] && !given[CF_PARENT]) {
        snprintf(err, errlen, "invalid argument: fanout_delay_ms requires parent");
        return false;
    }
    snprintf(t->name, sizeof(t->name), "%s", b->name);
    int64_t parts = given[CF_PARTITIONS] ? b->partitions : DEFAULT_PARTITIONS;
    if (parts < 1 || parts > (int64_t)v->o.max_partitions) {
        snprintf(err, errlen, "invalid argument: partitions must be 1..%u", v->o.max_partitions);
        return false;
    }
    t->partitions = (uint32_t)parts;
    if (given[CF_RETENTION] && retention_refused(b->retention_ms, err, errlen))
        return false;
    t->retention_ms = given[CF_RETENTION] ? b->retention_ms : v->o.default_retention_ms;
    t->visibility_timeout_ms = given[CF_VISIBILITY] && b->visibility_timeout_ms != 0
                                   ? b->visibility_timeout_ms
                                   : DEFAULT_VISIBILITY;
    t->max_inflight = given[CF_INFLIGHT] && b->max_inflight != 0 ? b->max_inflight : DEFAULT_CAP;
    t->max_acked_ahead =
        given[CF_ACKED_AHEAD] && b->max_acked_ahead != 0 ? b->max_acked_ahead : DEFAULT_CAP;
    if (t->retention_ms < 0 || t->visibility_timeout_ms < 0 || t->max_inflight < 0 ||
        t->max_acked_ahead < 0) {
        snprintf(err, errlen, "invalid argument: retention, timeouts and caps must be >= 0");
        return false;
    }
    const char *mode = given[CF_MODE] ? b->delivery_mode : "reliable";
    if (strcmp(mode, "reliable") == 0) {
        t->delivery_mode = TN_DELIVERY_RELIABLE;
        if (given[CF_TTL] && b->ttl_ms != 0) {
            snprintf(err, errlen, "invalid argument: ttl_ms needs delivery_mode ttl_discard");
            return false;
        }
    } else if (strcmp(mode, "ttl_discard") == 0) {
        t->delivery_mode = TN_DELIVERY_TTL_DISCARD;
        if (!given[CF_TTL] || b->ttl_ms <= 0) {
            snprintf(err, errlen, "invalid argument: delivery_mode ttl_discard needs ttl_ms > 0");
            return false;
        }
        t->ttl_ms = b->ttl_ms;
    } else {
        snprintf(err, errlen, "invalid argument: delivery_mode must be reliable or ttl_discard");
        return false;
    }
    if (given[CF_ATTEMPTS] && (b->max_attempts < 0 || b->max_attempts > UINT16_MAX)) {
        snprintf(err, errlen, "invalid argument: max_attempts must be 0..65535");
        return false;
    }
    t->max_attempts = given[CF_ATTEMPTS] ? (uint32_t)b->max_attempts : 0;
    const char *dur = given[CF_DURABILITY] ? b->durability : "durable";
    if (strcmp(dur, "durable") == 0) {
        t->durability = 0;
    } else if (strcmp(dur, "write_ack") == 0) {
        t->durability = 1;
    } else if (strcmp(dur, "relaxed") == 0) {
        t->durability = 2;
    } else {
        snprintf(err, errlen, "invalid argument: durability must be durable, write_ack or relaxed");
        return false;
    }
    /* Replication (docs/replication.md): the options' defaults. The
     * metastore clamps the factor to the members alive when it applies
     * the record (a lone node: 1), min_insync to the factor: the answer
     * shows what it decided. */
    int64_t factor =
        given[CF_FACTOR] ? b->replication_factor : TN_MAX(v->o.default_replication_factor, 1);
    if (factor < 1 || factor > TN_META_MAX_FACTOR) {
        snprintf(err, errlen, "invalid argument: replication_factor must be 1..%d",
                 TN_META_MAX_FACTOR);
        return false;
    }
    int64_t min_insync = given[CF_MIN_INSYNC] ? b->min_insync : TN_MAX(v->o.min_insync_replicas, 1);
    if (given[CF_MIN_INSYNC] && (min_insync < 1 || min_insync > factor)) {
        snprintf(err, errlen,
                 "invalid argument: min_insync_replicas must be 1..replication_factor (%" PRId64
                 ")",
                 factor);
        return false;
    }
    t->replication_factor = (uint8_t)factor;
    t->min_insync = (uint8_t)TN_MIN(min_insync, factor);
    t->created_at_ms = tn_now_wall_ms();
    return true;
}

static bool can_create(tn_v1_t *v, const tn_http_request_t *r, const char *name)
{
    return tn__v1_is_admin(v, r) || tn__v1_has_grant(tn__v1_caller(v, r), TN_GRANT_CREATE, name);
}

typedef struct {
    int64_t partitions;
    int64_t retention_ms;
    int64_t visibility_timeout_ms;
    int64_t max_inflight;
    int64_t max_acked_ahead;
    char owner[TN_USERNAME_MAX + 1];
    int64_t replication_factor;
    int64_t min_insync;
} patch_body_t;

enum {
    PF_PARTITIONS,
    PF_RETENTION,
    PF_VISIBILITY,
    PF_INFLIGHT,
    PF_ACKED_AHEAD,
    PF_OWNER,
    PF_FACTOR,
    PF_MIN_INSYNC,
    PF_COUNT
};

/* A PATCH's fields, kept to make the change again from a newer record. */
typedef struct {
    patch_body_t b;
    bool given[PF_COUNT];
} patch_t;

/* One create, change or delete under way; the request may leave before
 * it ends. */
typedef struct tn__v1_op_s {
    tn_v1_t *v;
    tn_http_request_t *r; /* NULL once the client left */
    tn_meta_req_t mreq;
    tn_waiter_t wait;
    char topic[TN_NAME_MAX + 1];
    int64_t ttl_ms;
    uint32_t partitions;
    char parent[TN_NAME_MAX + 1]; /* create-and-attach */
    int64_t delay_ms;
    patch_t patch;         /* PATCH */
    int tries;             /* PATCH proposals refused because the record changed */
    int64_t created_at_ms; /* DELETE: the deleted record's, for the purge */
    /* A creation the engine refused (near the descriptor limit, a full
     * disk, any other error: refused), whose record is being taken back
     * (create_failed): the DELETE steps then answer the creation's
     * refusal (create_refused). */
    bool undo;
    int refused;
    bool marked; /* create: its record carries this node's creation mark */
    /* A creation answered while its mark stood (its TOPIC_READY or its
     * take-back not committed): on v->finishing (finish_later), proposing
     * it again every FINISH_RETRY_MS, until the metastore records it or
     * the record is no longer this node's marked one. proposing: one is
     * under way. */
    bool finishing, proposing;
    /* A creation whose record's proposal failed without a refusal (it may
     * commit still: meta/meta.h): until when (monotonic ms) it looks for
     * the record, to make its part then (finish_step); 0: not such a one. */
    int64_t lost_until_ms;
    struct tn__v1_op_s *next;
#ifdef TN_TEST
    /* TERN_TEST_V1_CREATE_FAIL's delay (test_fail_after), then
     * TERN_TEST_V1_TAKE_BACK_DELAY's (test_delay_take_back) */
    uv_timer_t *hook;
    int failed; /* TERN_TEST_V1_FINISH_FAIL's failures so far (test_finish_fails) */
#endif
} op_t;

static void op_cancel(tn_http_request_t *r)
{
    op_t *op = r->data;
    op->r = NULL;
}

/* Free op, off v->finishing if it was there. */
static void op_free(op_t *op)
{
    if (op->finishing) {
        op_t **pp = &op->v->finishing;
        while (*pp != op)
            pp = &(*pp)->next;
        *pp = op->next;
    }
    tn_free(op);
}

/* Answer op's client, if still there (op stays). */
static void op_answer(op_t *op, int status, const char *msg)
{
    tn_buf_t b;
    tn_buf_init(&b);
    if (op->r != NULL && (status == 201 || status == 200)) {
        const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(op->v->meta), op->topic);
        if (e != NULL)
            tn__v1_topic_json(op->v, &b, e, NULL, 0);
        else
            tn_buf_append(&b, "{}", 2);
    }
    tn__v1_end(op->r, status, msg, &b);
    op->r = NULL;
}

static void op_end(op_t *op, int status, const char *msg)
{
    op_answer(op, status, msg);
    op_free(op);
}

/* Start an operation on c's topic by proposing c; r stays parked until
 * the operation answers it (cb may run before this returns). parent (may
 * be NULL): a creation then attaches the topic to it. false when it could
 * not start, with r answered. */
static bool op_start(tn_v1_t *v, tn_http_request_t *r, const tn_meta_cmd_t *c, tn_meta_cb cb,
                     const char *parent, int64_t delay_ms, const patch_t *patch)
{
    op_t *op = tn_calloc(1, sizeof(*op));
    if (op == NULL) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return false;
    }
    op->v = v;
    op->r = r;
    if (parent != NULL)
        snprintf(op->parent, sizeof(op->parent), "%s", parent);
    op->delay_ms = delay_ms;
    if (patch != NULL)
        op->patch = *patch;
    snprintf(op->topic, sizeof(op->topic), "%s", c->topic.name);
    op->ttl_ms = c->topic.ttl_ms;
    op->partitions = c->topic.partitions;
    op->created_at_ms = c->topic.created_at_ms;
    op->marked = c->type == TN_MC_TOPIC_PUT && c->if_absent && c->topic.creating != 0;
    op->mreq.data = op;
    r->data = op;
    r->on_cancel = op_cancel;
    if (tn_meta_propose(v->meta, &op->mreq, c, cb) != 0) {
        r->on_cancel = NULL;
        tn_free(op);
        tn__v1_error(r, 503, "control plane temporarily unavailable", "Retry-After: 1\r\n");
        return false;
    }
    return true;
}

static void create_step(op_t *op);
static bool test_finish_fails(op_t *op);
static bool test_delay_take_back(op_t *op);
static void finish_later(op_t *op);

/* The answer when TOPIC_READY was not committed (finish_later). */
#define READY_LATER                                                                                \
    "topic made, but not recorded ready yet (the control plane did not answer); this node "        \
    "records it by itself once the metastore answers, and publishes to it are refused (retry) "    \
    "until then"

/* Propose TOPIC_READY for op's record (cb gets its outcome). */
static void propose_ready(op_t *op, tn_meta_cb cb)
{
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_READY;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", op->topic);
    c.topic.created_at_ms = op->created_at_ms;
    op->mreq.data = op;
    if (test_finish_fails(op))
        cb(&op->mreq, UV_ETIMEDOUT);
    else if (tn_meta_propose(op->v->meta, &op->mreq, &c, cb) != 0)
        cb(&op->mreq, UV_ECANCELED);
}

/* The creation is made here and its record ready (or the mark could not
 * be cleared: see on_channel_recorded): the answer. */
static void on_ready_recorded(tn_meta_req_t *req, int status)
{
    op_t *op = req->data;
    if (status != 0 && status != TN_ENOTFOUND && status != TN_ECHANGED) {
        /* Not committed (the metastore did not answer): the mark stays,
         * and publishes to the topic are refused (503, retry), until this
         * node proposes it again and it is (finish_later), or its session
         * is fenced (a restart: meta/state.h). */
        TN_LOG(TN_LOG_ERROR,
               "topic %s: made, but its record could not be marked ready: %s; proposed again "
               "every second (publishes to it are refused until then)",
               op->topic, tn_strerror(status));
        op_answer(op, tn__v1_meta_code(status), READY_LATER);
        finish_later(op);
        return;
    }
    /* Gone or made again meanwhile (TN_ENOTFOUND, TN_ECHANGED): the answer
     * shows what is. */
    if (op->parent[0] != '\0') {
        /* The attach answers (201 with the attached child). */
        tn__v1_attach_created(op->v, op->r, op->parent, op->topic, op->delay_ms);
        op_free(op);
        return;
    }
    op_end(op, 201, NULL);
}

/* Its part is made here (the topic and its default channel, recorded or
 * not): the record's creation mark is cleared (TOPIC_READY, a
 * compare-and-set on the creation time), and only then the answer, so
 * that no node acknowledged a publish to a topic that could still be
 * taken back (cluster/hold.h). */
static void on_channel_recorded(tn_meta_req_t *req, int status)
{
    (void)status; /* recorded, or the catalog was first: either way it is there */
    op_t *op = req->data;
    if (!op->marked) {
        on_ready_recorded(req, 0);
        return;
    }
    propose_ready(op, on_ready_recorded);
}

static void on_delete_recorded(tn_meta_req_t *req, int status);

/* What becomes of the record of a creation the engine refused. */
typedef enum {
    UNDO_DONE,  /* taken back */
    UNDO_KEPT,  /* it stays: its mark went with this node's fenced session, or it stops */
    UNDO_LATER, /* not taken back yet: this node takes it back by itself (finish_later) */
} undo_end_t;

/* What follows the error of a refused creation (but near the descriptor
 * limit: TN__V1_FD_KEPT, FD_LATER) whose record stays (UNDO_KEPT). */
#define KEPT                                                                                       \
    ", and its record could not be taken back (the metastore did not answer): delete the "         \
    "topic, then create it again"
/* And whose record is not taken back yet (UNDO_LATER). */
#define LATER                                                                                      \
    ", and its record is not taken back yet (the metastore did not answer): it is taken back "     \
    "once the metastore answers (the topic is then gone); create it again after that"
#define FD_LATER                                                                                   \
    "cannot create it now: too many open files, and its record is not taken back yet (the "        \
    "metastore did not answer): it is taken back once the metastore answers; create it again "     \
    "after that, once descriptors are free"

/* The answer to a creation the engine refused with op->refused, its
 * record's fate how: near the descriptor limit a 503 to retry, on a full
 * disk a 507, else a 500 with the error. */
static void create_refused(op_t *op, undo_end_t how)
{
    int rc = op->refused;
    int code = tn_io_nospace(rc) ? 507 : 500;
    char msg[512];
    if (rc == UV_EMFILE) {
        code = 503;
        snprintf(msg, sizeof(msg), "%s",
                 how == UNDO_KEPT    ? TN__V1_FD_KEPT
                 : how == UNDO_LATER ? FD_LATER
                                     : TN__V1_FD_FULL);
    } else {
        snprintf(msg, sizeof(msg), "%s%s%s",
                 tn_io_nospace(rc) ? "cannot create it now: " : "create failed: ", tn_strerror(rc),
                 how == UNDO_KEPT    ? KEPT
                 : how == UNDO_LATER ? LATER
                 : tn_io_nospace(rc) ? "; retry once space is freed"
                                     : "");
    }
    if (how != UNDO_LATER) {
        op_end(op, code, msg);
        return;
    }
    op_answer(op, code, msg);
    finish_later(op);
}

/* Take op's record back (its checks made: create_failed, finish_step):
 * creations of the name through the gate wait, and its TOPIC_DELETE is
 * proposed (on_delete_recorded). The delete names the record's creation time
 * (if_created): the check that the record is still this creation's was
 * made on this node's replica, and by the time the delete commits the
 * name may have been deleted and made again through another node, a
 * topic the take-back must leave alone (TN_ECHANGED then). */
static void take_back_now(op_t *op)
{
    op->undo = true;
    /* Until the deletion is committed, a creation of the name through the
     * gate (an NSQ PUB) waits rather than pass on this record. */
    tn_catalog_hold_creations(op->v->catalog, op->topic, op->created_at_ms, true);
    tn_meta_cmd_t c;
    tn_meta_cmd_take_back(&c, op->topic, op->created_at_ms);
    op->mreq.data = op;
    if (test_finish_fails(op))
        on_delete_recorded(&op->mreq, UV_ETIMEDOUT);
    else if (tn_meta_propose(op->v->meta, &op->mreq, &c, on_delete_recorded) != 0)
        on_delete_recorded(&op->mreq, UV_ECANCELED);
}

static void take_back(op_t *op)
{
    if (!test_delay_take_back(op))
        take_back_now(op);
}

/* The engine could not make op's topic or its channel (rc). The answer
 * promises that nothing is kept: the record is taken back (a TOPIC_DELETE
 * of it, then the purge of what this and other nodes made of it, as a
 * DELETE does) before it. Otherwise the topic would be listed without its
 * log here, and a retry would meet "topic already exists". Near the
 * descriptor limit that is the usual case: the check before the record
 * found room for one file, not for every partition's. */
static void create_failed(op_t *op, int rc)
{
    TN_LOG(TN_LOG_ERROR, "topic %s: creating it in the queue engine failed: %s", op->topic,
           tn_strerror(rc));
    op->refused = rc;
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(op->v->meta), op->topic);
    if (e == NULL || e->rec.created_at_ms != op->created_at_ms || op->v->closing) {
        create_refused(op, UNDO_DONE); /* not this creation's record any longer */
        return;
    }
    if (op->marked && e->rec.creating != op->v->node_id) {
        /* The mark went with this node's fenced session (meta/state.h):
         * other nodes may have acknowledged publishes to the topic since,
         * which a take-back would delete. It stays; the catalog makes it
         * here when it can. */
        create_refused(op, UNDO_KEPT);
        return;
    }
    take_back(op);
}

/* --- creations answered before their mark went -------------------------------- */

/* How often such a creation proposes its TOPIC_READY or take-back again. */
#define FINISH_RETRY_MS 1000
/* How long a creation whose record's proposal failed without a refusal
 * looks for the record: a few times the proposal's own budget, in which
 * a new leader commits what the old one appended. */
#define LOST_WAIT_MS (6 * TN_META_PROPOSE_MS)

static void on_finish_ready(tn_meta_req_t *req, int status)
{
    op_t *op = req->data;
    op->proposing = false;
    if (status == 0 || status == TN_ENOTFOUND || status == TN_ECHANGED) {
        TN_LOG(TN_LOG_NOTICE, "topic %s: %s", op->topic,
               status == 0 ? "its record is marked ready at last"
                           : "its record is gone or made again: nothing left to mark ready");
        op_free(op);
        return;
    }
    if (op->v->closing) {
        op_free(op); /* its session is fenced at the next start: the topic is ready then */
        return;
    }
    TN_LOG_RL(TN_LOG_WARN, 10000,
              "topic %s: its record still could not be marked ready: %s; proposed again every "
              "second",
              op->topic, tn_strerror(status));
}

/* One more try at what op left unfinished (a TOPIC_READY, or a take-back
 * when op->undo), while its record is still the one this node marked.
 * Else nothing is left to do: the record is gone or made again (taken
 * back, deleted: what a take-back left still goes, on_delete_recorded),
 * or no longer marked by this node (ready; or its mark went with this
 * node's fenced session, and the topic stands: meta/state.h). */
static void finish_step(op_t *op)
{
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(op->v->meta), op->topic);
    bool same = e != NULL && e->rec.created_at_ms == op->created_at_ms;
    if (op->lost_until_ms != 0 && e == NULL && tn_now_mono_ms() < op->lost_until_ms)
        return; /* its record may still come */
    if (op->lost_until_ms != 0 && same && e->rec.creating == op->v->node_id) {
        /* Committed after all: the creation goes on where it stopped (its
         * part here, its default channel, then TOPIC_READY), its client
         * answered already. */
        TN_LOG(TN_LOG_NOTICE,
               "topic %s: its record was committed after its creation was answered; making it",
               op->topic);
        op->lost_until_ms = 0;
        op->proposing = true;
        create_step(op);
        return;
    }
    if (op->lost_until_ms != 0) {
        op_free(op); /* never committed, or not this creation's record */
        return;
    }
    if (same && e->rec.creating == op->v->node_id) {
        op->proposing = true;
        if (op->undo)
            take_back(op);
        else
            propose_ready(op, on_finish_ready);
        return;
    }
    if (op->undo && !same) {
        op->proposing = true;
        on_delete_recorded(&op->mreq, 0); /* its purge, then freed */
        return;
    }
    TN_LOG(TN_LOG_NOTICE, "topic %s: its creation is no longer marked by this node%s", op->topic,
           op->undo ? "; its record stays" : "");
    op_free(op);
}

static void on_finish_timer(uv_timer_t *h)
{
    tn_v1_t *v = h->data;
    op_t *next = NULL;
    for (op_t *op = v->finishing; op != NULL; op = next) {
        next = op->next; /* finish_step frees op at most */
        if (!op->proposing)
            finish_step(op);
    }
    if (v->finishing == NULL)
        uv_timer_stop(h);
}

/* op answered its client while its record still carries this node's
 * creation mark (its TOPIC_READY, or its take-back, not committed; or,
 * op->lost_until_ms set, its record's proposal failed and may commit
 * still): it goes on v->finishing, and proposes it again every
 * FINISH_RETRY_MS until it is committed (or the record is no longer that
 * marked one: finish_step), so the mark does not stay, and publishes to
 * the topic refused, for as long as this node runs. Called again for an
 * op on the list (a lost creation going on): it waits for the timer. */
static void finish_later(op_t *op)
{
    tn_v1_t *v = op->v;
    if (v->closing) {
        op_free(op); /* its session is fenced at the next start (meta/state.h) */
        return;
    }
    if (op->finishing) { /* a lost creation going on (finish_step) */
        op->proposing = false;
        return;
    }
    if (v->finish_timer == NULL) {
        uv_timer_t *h = tn_calloc(1, sizeof(*h));
        if (h == NULL || uv_timer_init(v->loop, h) != 0) {
            tn_free(h);
            TN_LOG(TN_LOG_ERROR,
                   "topic %s: out of memory: its creation mark stays until this node restarts",
                   op->topic);
            op_free(op);
            return;
        }
        h->data = v;
        v->finish_timer = h;
    }
    op->finishing = true;
    op->proposing = false;
    op->next = v->finishing;
    v->finishing = op;
    if (!uv_is_active((uv_handle_t *)v->finish_timer))
        uv_timer_start(v->finish_timer, on_finish_timer, FINISH_RETRY_MS, FINISH_RETRY_MS);
}

static void on_finish_timer_closed(uv_handle_t *h)
{
    tn_free(h);
}

void tn__v1_topics_close(tn_v1_t *v)
{
    if (v->finish_timer != NULL)
        uv_close((uv_handle_t *)v->finish_timer, on_finish_timer_closed);
    v->finish_timer = NULL;
    op_t *next = NULL;
    for (op_t *op = v->finishing; op != NULL; op = next) {
        next = op->next;
        if (!op->proposing) /* else its callback frees it, seeing v->closing */
            op_free(op);
    }
}

static void on_create_wait(tn_waiter_t *w, int status)
{
    op_t *op = w->data;
    if (status != 0) {
        create_failed(op, status);
        return;
    }
    create_step(op);
}

/* The engine's side: the topic, then its default channel. */
static void create_step(op_t *op)
{
    if (op->v->closing) {
        op_end(op, 503, "shutting down");
        return;
    }
    op->wait.cb = on_create_wait;
    op->wait.data = op;
    tn_topic_t *t = NULL;
    int rc = tn_broker_topic(op->v->broker, op->topic, strlen(op->topic), true, op->partitions,
                             &op->wait, &t);
    if (rc == UV_EAGAIN)
        return;
    tn_channel_t *ch = NULL;
    if (rc == 0) {
        if (op->ttl_ms > 0)
            t->ttl_ms = op->ttl_ms;
        rc = tn_topic_channel(t, "default", 7, true, &op->wait, &ch);
        if (rc == UV_EAGAIN)
            return;
    }
    if (rc != 0) {
        create_failed(op, rc);
        return;
    }
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(op->v->meta), op->topic);
    if (e != NULL)
        tn_v1_apply_topic(op->v->broker, &e->rec);
    /* The default channel is in the record the answer shows. */
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_CHANNEL_PUT;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", op->topic);
    snprintf(c.channel, sizeof(c.channel), "default");
    op->mreq.data = op;
    if (tn_meta_propose(op->v->meta, &op->mreq, &c, on_channel_recorded) != 0)
        on_channel_recorded(&op->mreq, UV_ECANCELED);
}

#ifdef TN_TEST
/* TERN_TEST_V1_CREATE_FAIL=PREFIX=MS (ternd-test): a /v1 creation of a
 * topic whose name starts with PREFIX fails (UV_EIO) MS ms after its
 * record is committed, without making anything in the engine, as one
 * that ran out of descriptors or disk there would: the window in which
 * other nodes see the record while it is about to be taken back.
 * test_fail_after reads such a PREFIX=MS from var: MS for topic, else -1. */
static int64_t test_fail_after(const char *var, const char *topic)
{
    const char *spec = getenv(var);
    const char *eq = spec != NULL ? strchr(spec, '=') : NULL;
    if (eq == NULL || strncmp(topic, spec, (size_t)(eq - spec)) != 0)
        return -1;
    return atoll(eq + 1);
}

static void on_hook_closed(uv_handle_t *h)
{
    tn_free(h);
}

static void on_hook_fired(uv_timer_t *t)
{
    op_t *op = t->data;
    uv_close((uv_handle_t *)t, on_hook_closed);
    op->hook = NULL;
    create_failed(op, UV_EIO);
}

/* Start op->hook: cb in ms ms (ms < 0: not). Whether it started. */
static bool hook_start(op_t *op, int64_t ms, uv_timer_cb cb)
{
    if (ms < 0 || op->hook != NULL)
        return false;
    op->hook = tn_malloc(sizeof(*op->hook));
    if (op->hook == NULL || uv_timer_init(op->v->loop, op->hook) != 0) {
        tn_free(op->hook);
        op->hook = NULL;
        return false;
    }
    op->hook->data = op;
    uv_timer_start(op->hook, cb, (uint64_t)ms, 0);
    return true;
}

/* Whether the hook took op's creation over (it fails later). */
static bool test_hook(op_t *op)
{
    return hook_start(op, test_fail_after("TERN_TEST_V1_CREATE_FAIL", op->topic), on_hook_fired);
}

static void on_take_back_due(uv_timer_t *t)
{
    op_t *op = t->data;
    uv_close((uv_handle_t *)t, on_hook_closed);
    op->hook = NULL;
    take_back_now(op);
}

/* TERN_TEST_V1_TAKE_BACK_DELAY=PREFIX=MS (ternd-test): the take-back of
 * a /v1 creation of a topic whose name starts with PREFIX (its hold on
 * the gate and its TOPIC_DELETE) starts MS ms after the check that its
 * record is still this creation's, as one whose way to the metastore
 * leader was slow would reach it: the window in which another client
 * deletes the name and makes it again through another node (the hold
 * comes late too, so that this node's engine follows those records
 * meanwhile). Whether the hook took the take-back over. */
static bool test_delay_take_back(op_t *op)
{
    return hook_start(op, test_fail_after("TERN_TEST_V1_TAKE_BACK_DELAY", op->topic),
                      on_take_back_due);
}

/* TERN_TEST_V1_FINISH_FAIL=PREFIX[=N] (ternd-test): the first N (1 when
 * not given) proposals of a TOPIC_READY or take-back (TOPIC_DELETE) of a
 * /v1 creation of a topic whose name starts with PREFIX fail
 * (UV_ETIMEDOUT) without being proposed, as ones past the write's budget
 * on a metastore without a leader would. */
static bool test_finish_fails(op_t *op)
{
    const char *spec = getenv("TERN_TEST_V1_FINISH_FAIL");
    if (spec == NULL || spec[0] == '\0')
        return false;
    const char *eq = strchr(spec, '=');
    size_t len = eq != NULL ? (size_t)(eq - spec) : strlen(spec);
    int n = eq != NULL ? atoi(eq + 1) : 1;
    if (op->failed >= n || strncmp(op->topic, spec, len) != 0)
        return false;
    op->failed++;
    return true;
}

/* TERN_TEST_V1_CREATE_LOST=PREFIX (ternd-test): a /v1 creation of a topic
 * whose name starts with PREFIX hears UV_ETIMEDOUT for its record that
 * was committed, as a proposal whose budget passed while a new leader
 * committed it would (meta/meta.h: a copy the old leader appended). */
static int test_create_lost(const op_t *op, int status)
{
    const char *spec = getenv("TERN_TEST_V1_CREATE_LOST");
    if (status != 0 || spec == NULL || spec[0] == '\0' ||
        strncmp(op->topic, spec, strlen(spec)) != 0)
        return status;
    return UV_ETIMEDOUT;
}
#else
static bool test_hook(op_t *op)
{
    (void)op;
    return false;
}

static bool test_finish_fails(op_t *op)
{
    (void)op;
    return false;
}

static bool test_delay_take_back(op_t *op)
{
    (void)op;
    return false;
}

static int test_create_lost(const op_t *op, int status)
{
    (void)op;
    return status;
}
#endif

static void on_create_recorded(tn_meta_req_t *req, int status)
{
    op_t *op = req->data;
    status = test_create_lost(op, status);
    if (status == UV_EEXIST) {
        op_end(op, 409, "topic already exists");
        return;
    }
    if (status == UV_EPERM) {
        /* A dead-letter name whose parent, owned by another, this
         * replica had not applied when the request came (meta/owner.h). */
        char why[TN_NAME_MAX * 2 + 128];
        if (op->r == NULL ||
            !tn_access_dlq_refused(op->v->meta, op->topic, op->r->principal, why, sizeof(why)))
            snprintf(why, sizeof(why),
                     "%s is a dead-letter topic of a topic another user owns: only that topic's "
                     "owner or an admin may make it or publish to it",
                     op->topic);
        op_end(op, 403, why);
        return;
    }
    if (status != 0) {
        op_answer(op, tn__v1_meta_code(status), tn__v1_meta_why(status));
        if (!op->marked || status == TN_ECLOSED) {
            op_free(op);
            return;
        }
        /* Not refused: the record may commit still (a copy a former
         * leader appended), marked by this node, which no longer works
         * on it: it looks for it a while, to finish it then. */
        op->lost_until_ms = tn_now_mono_ms() + LOST_WAIT_MS;
        finish_later(op);
        return;
    }
    if (test_hook(op))
        return;
    create_step(op);
}

static void on_topic_create(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_guard_write(r))
        return;
    create_body_t b;
    memset(&b, 0, sizeof(b));
    bool given[CF_COUNT];
    char err[192];
    int rc = tn_json_object(tn_buf_data(&r->body), tn_buf_size(&r->body), create_fields, CF_COUNT,
                            &b, given, err, sizeof(err));
    if (rc == UV_ENOMEM) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    if (rc != 0 || !topic_from_body(v, &b, given, &c.topic, err, sizeof(err))) {
        tn__v1_error(r, 400, err, NULL);
        return;
    }
    if (v->o.security && !can_create(v, r, c.topic.name)) {
        tn__v1_error(r, 403, "no create grant for this topic name", NULL);
        return;
    }
    if (tn__v1_dlq_refused(v, r, c.topic.name))
        return;
    tn_topic_t *existing = NULL;
    if (tn_meta_topic_find(tn_meta_state(v->meta), c.topic.name) != NULL ||
        tn_broker_topic(v->broker, c.topic.name, strlen(c.topic.name), false, 0, NULL, &existing) !=
            TN_ENOTFOUND) {
        tn__v1_error(r, 409, "topic already exists", NULL);
        return;
    }
    /* Refused before anything is recorded: a record the engine could not
     * open would stay in the metastore, a topic without partitions. */
    if (!tn_fd_room(TN_FD_CREATE)) {
        tn__v1_error(r, 503, TN__V1_FD_FULL, "Retry-After: 1\r\n");
        return;
    }
    if (given[CF_PARENT]) {
        const tn_meta_topic_entry_t *pe = tn_meta_topic_find(tn_meta_state(v->meta), b.parent);
        if (pe == NULL) {
            tn__v1_error(r, 404, "parent topic not found", NULL);
            return;
        }
        if (!tn__v1_can_manage(v, r, &pe->rec)) {
            tn__v1_error(r, 403, "attaching needs ownership (or admin) of the parent", NULL);
            return;
        }
        /* Parent partition p feeds child partition p (fanout.h). */
        if (given[CF_PARTITIONS] && c.topic.partitions != pe->rec.partitions) {
            snprintf(err, sizeof(err),
                     "invalid argument: a topic created with a parent has the parent's partition "
                     "count: the parent has %u, the request asks for %u",
                     pe->rec.partitions, c.topic.partitions);
            tn__v1_error(r, 400, err, NULL);
            return;
        }
        c.topic.partitions = pe->rec.partitions;
        const char *msg = NULL;
        int st = tn__v1_link_refusal(v, &pe->rec, &c.topic, b.fanout_delay_ms, &msg);
        if (st != 0) {
            tn__v1_error(r, st, msg, NULL);
            return;
        }
    }
    if (v->o.security) {
        /* A dead-letter topic is its parent's owner's (api/access.h). */
        const char *owner = tn_access_parent_owner(v->meta, c.topic.name);
        snprintf(c.topic.owner, sizeof(c.topic.owner), "%.*s", TN_USERNAME_MAX,
                 owner != NULL ? owner : r->principal);
    }
    c.type = TN_MC_TOPIC_PUT;
    c.if_absent = true;
    c.clamp = true; /* the factor asked: the metastore clamps it */
    c.topic.native = true;
    /* Being created by this node until its part is made (on_channel_recorded):
     * publishes to it wait meanwhile, everywhere (cluster/hold.h). */
    c.topic.creating = v->node_id;
    /* The metastore decides a dead-letter name's owner again, on its own
     * state (this replica may not have the parent yet: meta/owner.h). */
    if (v->o.security && tn_meta_dlq_form(c.topic.name))
        c.owner_rule = tn__v1_is_admin(v, r) ? TN_META_OWN_FOLLOW : TN_META_OWN_CHECK;
    (void)op_start(v, r, &c, on_create_recorded, given[CF_PARENT] ? b.parent : NULL,
                   b.fanout_delay_ms, NULL);
}

static const tn_jfield_t patch_fields[] = {
    {"partitions", TN_JF_INT, offsetof(patch_body_t, partitions), 0},
    {"retention_ms", TN_JF_INT, offsetof(patch_body_t, retention_ms), 0},
    {"visibility_timeout_ms", TN_JF_INT, offsetof(patch_body_t, visibility_timeout_ms), 0},
    {"max_in_flight_per_partition", TN_JF_INT, offsetof(patch_body_t, max_inflight), 0},
    {"max_acked_ahead_per_partition", TN_JF_INT, offsetof(patch_body_t, max_acked_ahead), 0},
    {"owner", TN_JF_STR, offsetof(patch_body_t, owner), TN_USERNAME_MAX},
    {"replication_factor", TN_JF_INT, offsetof(patch_body_t, replication_factor), 0},
    {"min_insync_replicas", TN_JF_INT, offsetof(patch_body_t, min_insync), 0},
};
_Static_assert(TN_ARRAY_SIZE(patch_fields) == PF_COUNT, "patch_fields and its enum disagree");

static void on_grown(void *arg, int status)
{
    op_t *op = arg;
    if (status != 0) {
        op_end(op, 500, "growing the topic failed");
        return;
    }
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(op->v->meta), op->topic);
    if (e != NULL)
        tn_v1_apply_topic(op->v->broker, &e->rec);
    op_end(op, 200, NULL);
}

/* The update p makes of cur, into c: true, or false with why it is
 * refused in err. The proposal is refused in turn if the record changes
 * before it lands. */
static bool patch_make(tn_v1_t *v, const patch_t *p, const tn_meta_topic_t *cur, tn_meta_cmd_t *c,
                       char *err, size_t errlen)
{
    const patch_body_t *b = &p->b;
    if (p->given[PF_PARTITIONS] && b->partitions <= (int64_t)cur->partitions) {
        snprintf(err, errlen, "invalid argument: partitions can only grow: the topic has %u",
                 cur->partitions);
        return false;
    }
    if (p->given[PF_PARTITIONS] && b->partitions > v->o.max_partitions) {
        snprintf(err, errlen, "invalid argument: partitions must be at most %u (max-partitions)",
                 v->o.max_partitions);
        return false;
    }
    uint8_t factor = tn_meta_topic_factor(cur);
    if (p->given[PF_FACTOR] && b->replication_factor != factor) {
        /* on_topic_patch sends a change to factor_patch; a record changed
         * meanwhile under an ordinary PATCH says so. */
        snprintf(err, errlen, "the topic's replication_factor changed meanwhile: send it again");
        return false;
    }
    if (p->given[PF_MIN_INSYNC] && (b->min_insync < 1 || b->min_insync > factor)) {
        snprintf(err, errlen,
                 "invalid argument: min_insync_replicas must be 1..replication_factor (%u)",
                 factor);
        return false;
    }
    memset(c, 0, sizeof(*c));
    c->type = TN_MC_TOPIC_PUT;
    c->if_unchanged = true;
    c->expect = tn_meta_topic_fingerprint(cur);
    c->topic = *cur;
    if (p->given[PF_PARTITIONS])
        c->topic.partitions = (uint32_t)b->partitions;
    if (p->given[PF_RETENTION])
        c->topic.retention_ms = b->retention_ms;
    if (p->given[PF_VISIBILITY])
        c->topic.visibility_timeout_ms =
            b->visibility_timeout_ms ? b->visibility_timeout_ms : DEFAULT_VISIBILITY;
    if (p->given[PF_INFLIGHT])
        c->topic.max_inflight = b->max_inflight ? b->max_inflight : DEFAULT_CAP;
    if (p->given[PF_ACKED_AHEAD])
        c->topic.max_acked_ahead = b->max_acked_ahead ? b->max_acked_ahead : DEFAULT_CAP;
    if (p->given[PF_OWNER])
        snprintf(c->topic.owner, sizeof(c->topic.owner), "%s", b->owner);
    /* Its dead-letter topics follow a new owner (meta/owner.h). */
    if (strcmp(c->topic.owner, cur->owner) != 0)
        c->owner_rule = TN_META_OWN_CARRY;
    if (p->given[PF_MIN_INSYNC])
        c->topic.min_insync = (uint8_t)b->min_insync; /* every partition state follows */
    return true;
}

/* --- the replication factor (docs/replication.md "Changing a topic's
 * replication factor") ------------------------------------------------------------ */

/* The TOPIC_FACTOR p makes of cur, into c: 0, else the HTTP status of the
 * refusal with why in err. Checked on this node's replica; the apply
 * checks the owners again, and the record's fingerprint. */
static int factor_make(tn_v1_t *v, const patch_t *p, const tn_meta_topic_t *cur, tn_meta_cmd_t *c,
                       char *err, size_t errlen)
{
    const patch_body_t *b = &p->b;
    const tn_meta_state_t *s = tn_meta_state(v->meta);
    if (b->replication_factor < 1 || b->replication_factor > TN_META_MAX_FACTOR) {
        snprintf(err, errlen, "invalid argument: replication_factor must be 1..%d",
                 TN_META_MAX_FACTOR);
        return 400;
    }
    uint8_t factor = (uint8_t)b->replication_factor, was = tn_meta_topic_factor(cur);
    int64_t min_insync = TN_MIN(tn_meta_topic_min_insync(cur), factor);
    if (p->given[PF_MIN_INSYNC])
        min_insync = b->min_insync;
    else if (was == 1)
        min_insync = TN_MIN(TN_MAX(v->o.min_insync_replicas, 1), factor);
    if (min_insync < 1 || min_insync > factor) {
        snprintf(err, errlen,
                 "invalid argument: min_insync_replicas must be 1..replication_factor (%u)",
                 factor);
        return 400;
    }
    uint32_t eligible = 0;
    for (size_t i = 0; i < s->nmembers; i++)
        eligible += tn_meta_member_live(&s->members[i]) && !s->members[i].draining;
    if (factor > was && factor > eligible) {
        snprintf(err, errlen,
                 "replication_factor %u needs %u alive members that are not draining; the "
                 "cluster has %" PRIu32,
                 factor, factor, eligible);
        return 409;
    }
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(s, cur->name);
    for (uint32_t q = 0; e != NULL && factor > 1 && q < e->rec.partitions; q++) {
        if (e->owners[q] == 0 || tn_meta_state_pstate(s, cur->name, q) != NULL)
            continue;
        const tn_meta_member_t *m = tn_meta_member_find(s, e->owners[q]);
        if (!tn_meta_member_live(m)) {
            snprintf(err, errlen,
                     "partition %" PRIu32 "'s owner, member %" PRIu64
                     ", is not alive: its only copy cannot be copied until it is back",
                     q, e->owners[q]);
            return 409;
        }
    }
    memset(c, 0, sizeof(*c));
    c->type = TN_MC_TOPIC_FACTOR;
    c->if_unchanged = true;
    c->expect = tn_meta_topic_fingerprint(cur);
    snprintf(c->topic.name, sizeof(c->topic.name), "%s", cur->name);
    c->topic.replication_factor = factor;
    c->topic.min_insync = (uint8_t)min_insync;
    return 0;
}

/* Whether rec has the factor and min_insync p asks (a copy of the change
 * that landed, or another change to the same). */
static bool factor_done(const patch_t *p, const tn_meta_topic_t *rec)
{
    return tn_meta_topic_factor(rec) == p->b.replication_factor &&
           (!p->given[PF_MIN_INSYNC] || tn_meta_topic_min_insync(rec) == p->b.min_insync);
}

/* The change is committed; the answer shows this node's replica once it
 * has it (on a follower the leader answered first). The moves follow,
 * begun by the metastore leader. */
static void on_factor_applied(void *arg, int status)
{
    (void)status; /* not yet applied here: the answer shows what is */
    op_end(arg, 200, NULL);
}

static void on_factor_recorded(tn_meta_req_t *req, int status)
{
    op_t *op = req->data;
    const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(op->v->meta), op->topic);
    if (status == TN_ENOTFOUND || (status == TN_ECHANGED && e == NULL)) {
        op_end(op, 404, "topic not found");
        return;
    }
    if (status == TN_ECHANGED && factor_done(&op->patch, &e->rec)) {
        op_end(op, 200, NULL);
        return;
    }
    if (status == TN_ECHANGED && ++op->tries < TN__V1_CHANGE_TRIES && !op->v->closing) {
        tn_meta_cmd_t c;
        char refusal[192];
        int code = factor_make(op->v, &op->patch, &e->rec, &c, refusal, sizeof(refusal));
        if (code != 0)
            op_end(op, code, refusal);
        else if (tn_meta_propose(op->v->meta, &op->mreq, &c, on_factor_recorded) != 0)
            op_end(op, 503, "control plane temporarily unavailable");
        return;
    }
    if (status == TN_ECHANGED) {
        op_end(op, 409, "the topic kept changing while this change was applied; send it again");
    } else if (status == UV_EPERM) {
        op_end(op, 409,
               "a partition's owner is not alive: its only copy cannot be copied until it is "
               "back");
    } else if (status != 0) {
        op_end(op, tn__v1_meta_code(status), tn__v1_meta_why(status));
    } else if (op->v->closing || tn_meta_confirm(op->v->meta, on_factor_applied, op) != 0) {
        op_end(op, 200, NULL);
    }
}

/* PATCH replication_factor to another factor: admins only (it copies
 * partitions between members), on its own or with min_insync_replicas. */
static void factor_patch(tn_v1_t *v, tn_http_request_t *r, const tn_meta_topic_entry_t *e,
                         const patch_t *p)
{
    if (v->o.security && !tn__v1_is_admin(v, r)) {
        tn__v1_error(r, 403, "only an admin may change a topic's replication factor", NULL);
        return;
    }
    for (int i = 0; i < PF_COUNT; i++) {
        if (p->given[i] && i != PF_FACTOR && i != PF_MIN_INSYNC) {
            tn__v1_error(r, 400,
                         "invalid argument: replication_factor is changed on its own "
                         "(min_insync_replicas may come with it)",
                         NULL);
            return;
        }
    }
    tn_meta_cmd_t c;
    char err[192];
    int code = factor_make(v, p, &e->rec, &c, err, sizeof(err));
    if (code != 0) {
        tn__v1_error(r, code, err, NULL);
        return;
    }
    (void)op_start(v, r, &c, on_factor_recorded, NULL, 0, p);
}

static void grow_engine(op_t *op);

static void on_engine_idle(tn_waiter_t *w, int status)
{
    (void)status; /* what it waited for ended: look again */
    grow_engine(w->data);
}

/* Grow the engine's topic to the recorded partitions. The catalog follows
 * every change of the replica too, so the topic may be growing already,
 * or placing partitions, or making a channel: this waits for that and
 * looks again. */
static void grow_engine(op_t *op)
{
    tn_topic_t *t = NULL;
    op->wait.cb = on_engine_idle;
    op->wait.data = op;
    int rc = op->v->closing ? TN_ECLOSED
                            : tn_broker_topic(op->v->broker, op->topic, strlen(op->topic), false, 0,
                                              &op->wait, &t);
    if (rc == UV_EAGAIN)
        return;
    if (rc == TN_ECLOSED) {
        op_end(op, 503, "shutting down");
        return;
    }
    if (rc != 0 || t->nparts >= op->partitions) {
        on_grown(op, 0); /* grown by the catalog, or gone from the engine: the record answers */
        return;
    }
    if (tn_topic_wait_idle(t, &op->wait) == UV_EAGAIN)
        return;
    rc = tn_topic_grow(t, op->partitions, on_grown, op);
    if (rc != 0)
        op_end(op, 503, "growing the topic failed");
}

/* The change is committed; on a follower its replica may not have it yet
 * (the leader answered first). The engine's growth and the answer go
 * from this node's replica: wait until it has the change. */
static void on_patch_applied(void *arg, int status)
{
    op_t *op = arg;
    if (status != 0 && status != TN_ECLOSED)
        TN_LOG(TN_LOG_WARN, "changing topic %s: recorded, not yet applied here (%s)", op->topic,
               tn_strerror(status));
    grow_engine(op);
}

static void on_patch_recorded(tn_meta_req_t *req, int status)
{
    op_t *op = req->data;
    if (status == TN_ENOTFOUND) { /* deleted while the change was on its way */
        op_end(op, 404, "topic not found");
        return;
    }
    if (status == TN_ECHANGED && ++op->tries < TN__V1_CHANGE_TRIES && !op->v->closing) {
        /* Another change landed first: make this one again on top of it. */
        const tn_meta_topic_entry_t *e = tn_meta_topic_find(tn_meta_state(op->v->meta), op->topic);
        tn_meta_cmd_t c;
        char refusal[160];
        if (e == NULL) {
            op_end(op, 404, "topic not found");
        } else if (!patch_make(op->v, &op->patch, &e->rec, &c, refusal, sizeof(refusal))) {
            op_end(op, 409, refusal); /* e.g. it grew to the asked count meanwhile */
        } else {
            op->partitions = c.topic.partitions; /* before: the answer may come at once */
            if (tn_meta_propose(op->v->meta, &op->mreq, &c, on_patch_recorded) != 0)
                op_end(op, 503, "control plane temporarily unavailable");
        }
        return;
    }
    if (status == TN_ECHANGED) {
        op_end(op, 409, "the topic kept changing while this change was applied; send it again");
        return;
    }
    if (status != 0) {
        op_end(op, tn__v1_meta_code(status), tn__v1_meta_why(status));
        return;
    }
    /* More partitions: the record has them; now the engine's topic. */
    if (op->v->closing || tn_meta_confirm(op->v->meta, on_patch_applied, op) != 0)
        grow_engine(op);
}

static void on_topic_patch(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    if (!tn__v1_guard_write(r))
        return;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = tn__v1_path_topic(v, r, topic);
    if (e == NULL)
        return;
    if (!tn__v1_can_manage(v, r, &e->rec)) {
        tn__v1_error(r, 403, "only the topic's owner or an admin may change it", NULL);
        return;
    }
    patch_body_t b;
    memset(&b, 0, sizeof(b));
    bool given[PF_COUNT];
    char err[256];
    int rc = tn_json_object(tn_buf_data(&r->body), tn_buf_size(&r->body), patch_fields, PF_COUNT,
                            &b, given, err, sizeof(err));
    if (rc == UV_ENOMEM) {
        tn__v1_error(r, 503, "out of memory", "Retry-After: 1\r\n");
        return;
    }
    bool any = false;
    for (int i = 0; i < PF_COUNT; i++)
        any = any || given[i];
    bool refused = rc != 0;
    if (!refused && !any) {
        snprintf(err, sizeof(err),
                 "invalid argument: give at least one of partitions, retention_ms, "
                 "visibility_timeout_ms, max_in_flight_per_partition, "
                 "max_acked_ahead_per_partition, owner, replication_factor, min_insync_replicas");
        refused = true;
    } else if (!refused && given[PF_RETENTION]) {
        refused = retention_refused(b.retention_ms, err, sizeof(err));
    }
    /* Adopting a topic (an NSQ door's, say) protects it on every door
     * (api/access.h); "" gives it back to the open doors. */
    if (!refused && given[PF_OWNER] && v->o.security && !tn__v1_is_admin(v, r)) {
        tn__v1_error(r, 403, "only an admin may change a topic's owner", NULL);
        return;
    }
    if (!refused && given[PF_OWNER] && b.owner[0] != '\0' &&
        tn_meta_user_find(tn_meta_state(v->meta), b.owner) == NULL) {
        snprintf(err, sizeof(err), "invalid argument: owner %s is not a user", b.owner);
        refused = true;
    }
    if (!refused && (b.visibility_timeout_ms < 0 || b.max_inflight < 0 || b.max_acked_ahead < 0)) {
        snprintf(err, sizeof(err), "invalid argument: timeouts and caps must be >= 0");
        refused = true;
    }
    patch_t p;
    p.b = b;
    memcpy(p.given, given, sizeof(p.given));
    if (!refused && given[PF_FACTOR] &&
        b.replication_factor != (int64_t)tn_meta_topic_factor(&e->rec)) {
        factor_patch(v, r, e, &p);
        return;
    }
    tn_meta_cmd_t c;
    if (refused || !patch_make(v, &p, &e->rec, &c, err, sizeof(err))) {
        tn__v1_error(r, 400, err, NULL);
        return;
    }
    (void)op_start(v, r, &c, on_patch_recorded, NULL, 0, &p);
}

/* Every live member purged the topic, or some did not: the record is
 * deleted either way, and those catch up by following it. */
static void on_purged(void *arg, int status, const char *error)
{
    op_t *op = arg;
    if (op->undo) {
        if (status != 0)
            TN_LOG(TN_LOG_WARN, "topic %s: its refused creation is taken back; %s", op->topic,
                   error);
        create_refused(op, UNDO_DONE);
        return;
    }
    if (status != 0) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "topic deleted; %s", error);
        op_end(op, 500, msg);
        return;
    }
    op_end(op, 204, NULL);
}

static void on_delete_recorded(tn_meta_req_t *req, int status)
{
    op_t *op = req->data;
    if (op->undo) /* the record is gone, or stays: creations go on */
        tn_catalog_hold_creations(op->v->catalog, op->topic, op->created_at_ms, false);
    if (op->undo && status == TN_ECHANGED) {
        /* Deleted and made again meanwhile (by another client, through
         * any node): not this creation's record any longer, and the one
         * made again stays. What this creation left went with the
         * deletion's purge, or goes as the catalog follows the records. */
        TN_LOG(TN_LOG_NOTICE,
               "topic %s: the record of its refused creation was deleted and made again "
               "meanwhile: nothing to take back, the topic made again stays",
               op->topic);
        create_refused(op, UNDO_DONE);
        return;
    }
    if (op->undo && (status != 0 || op->v->closing)) {
        if (status != 0 && status != TN_ENOTFOUND && op->finishing) {
            op->proposing = false;
            if (op->v->closing) {
                op_free(op); /* its session is fenced at the next start: the record stays */
                return;
            }
            TN_LOG_RL(TN_LOG_WARN, 10000,
                      "topic %s: the record of its refused creation still could not be taken "
                      "back: %s; proposed again every second",
                      op->topic, tn_strerror(status));
            return;
        }
        if (status != 0 && status != TN_ENOTFOUND) {
            TN_LOG(TN_LOG_ERROR,
                   "topic %s: taking back the record of its refused creation failed: %s%s",
                   op->topic, tn_strerror(status),
                   op->v->closing ? "" : "; proposed again every second");
            create_refused(op, op->v->closing ? UNDO_KEPT : UNDO_LATER);
            return;
        }
        create_refused(op, UNDO_DONE);
        return;
    }
    if (status == TN_ENOTFOUND) {
        op_end(op, 404, "topic not found");
        return;
    }
    if (status != 0) {
        op_end(op, tn__v1_meta_code(status), tn__v1_meta_why(status));
        return;
    }
    /* The engine's part (waiting for a creation or growth under way). */
    if (op->v->closing) {
        op_end(op, 503, "shutting down");
        return;
    }
    /* Its children stand alone now (the delete detached them): their
     * fan-out runners stop before the topic goes. */
    tn_fanout_sync(op->v->fanout);
    /* Then every live member removes its files, this one included
     * (cluster/router.h), and the answer waits for them. */
    if (tn_router_purge(op->v->router, op->topic, op->created_at_ms, on_purged, op) != 0)
        op_end(op, 500, "topic deleted; out of memory purging its files (they are removed later)");
}

static void on_topic_delete(tn_http_request_t *r, void *arg)
{
    tn_v1_t *v = arg;
    char topic[TN_NAME_MAX + 1];
    const tn_meta_topic_entry_t *e = tn__v1_path_topic(v, r, topic);
    if (e == NULL)
        return;
    if (!tn__v1_can_manage(v, r, &e->rec)) {
        tn__v1_error(r, 403, "only the topic's owner or an admin may delete it", NULL);
        return;
    }
    if (!tn__v1_caught_up(v, r, on_topic_delete))
        return;
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_TOPIC_DELETE;
    snprintf(c.topic.name, sizeof(c.topic.name), "%s", topic);
    c.topic.created_at_ms = e->rec.created_at_ms; /* not encoded: the purge's */
    (void)op_start(v, r, &c, on_delete_recorded, NULL, 0, NULL);
}

int tn__v1_topics_register(tn_http_server_t *srv, tn_v1_t *v)
{
    int rc = tn_http_route(srv, "GET", "/v1/topics", 0, TN__V1_NO_BODY, on_topics_list, v);
    rc = rc ? rc
            : tn_http_route(srv, "GET", "/v1/topics/{topic}", 0, TN__V1_NO_BODY, on_topic_get, v);
    rc = rc ? rc
            : tn_http_route(srv, "POST", "/v1/topics", TN_JSON_MAX_BODY, TN__V1_TOO_BIG,
                            on_topic_create, v);
    rc = rc ? rc
            : tn_http_route(srv, "DELETE", "/v1/topics/{topic}", 0, TN__V1_NO_BODY, on_topic_delete,
                            v);
    rc = rc ? rc
            : tn_http_route(srv, "PATCH", "/v1/topics/{topic}", TN_JSON_MAX_BODY, TN__V1_TOO_BIG,
                            on_topic_patch, v);
    return rc;
}
