/* The queue engine: topics, partitions, channels, consumers, publishing,
 * delivery and settling. Every door (NSQ TCP, NSQ HTTP, /v1) calls these
 * functions; none of them touches storage directly.
 *
 * A topic has P partitions, each one partition log (storage/plog.h). A
 * channel is a consumer group on a topic with, per partition, a cursor
 * (storage/cursor.h: frontier, settled-ahead set, requeued entries), a
 * lease table (queue/lease.h) and a pending heap (messages waiting for a
 * time: requeued with a delay, deferred by DPUB, or timed out and due at
 * once). Durable channels write every settle to their channel log
 * (storage/chanlog.h); `#ephemeral` channels keep it all in memory and
 * vanish with their last consumer.
 *
 * DESIGN: publish.
 *   1. The door copies the bodies into reference-counted messages
 *      (tn_pub_set) and calls tn_broker_publish with a topic name; a
 *      missing topic is created first (its partition logs open on a
 *      worker thread), publishes wait for it.
 *   2. The engine picks a partition (round robin) and appends the batch
 *      as one atomic group-committed append.
 *   3. At the durability boundary the messages enter the partition's tail
 *      cache (so fresh deliveries never read the disk), the door's callback
 *      runs (it answers OK), and the partition's channels are pumped once
 *      the new records are visible.
 *
 * DESIGN: delivery (the pump of a channel, run from a uv_idle handle so
 * everything that happened in one loop pass is served in one go).
 *   1. While a consumer has credit (its RDY minus its in-flight count) and
 *      the node-wide in-flight budgets allow: take the next candidate,
 *      rotating over partitions: first a due pending entry, else the next
 *      offset of the scan (from the frontier up to the partition's visible
 *      position, at most max_ahead past the frontier), skipping settled,
 *      leased and pending offsets.
 *   2. Look the record up in the tail cache. On a miss, the partition
 *      fetches a run of records on a worker thread and the channel waits
 *      for it. A gap (an offset skipped by recovery) is settled. A record
 *      deferred into the future joins the pending heap.
 *   3. Lease it to the consumer (new nonce, deadline now + timeout) and hand
 *      it over through the consumer's deliver callback.
 *
 * DESIGN: settling. FIN and REQ apply to the live cursor at once (the
 * message stops counting as in flight, as in nsqd, and is not delivered
 * again) and are written to the channel log; a crash before that write is
 * durable redelivers the message, never loses one. Timeouts put the
 * message back as due at once and count in timeout_count (written to the
 * log in batches).
 *   1. A settle (tn_consumer_fin/ack/req) first refuses with the log's
 *      sticky error when the channel partition's log has failed: the lease
 *      stays as it was. Else it ends the lease, applies the record to the
 *      live cursor and queues it to the channel log (group-committed:
 *      every record queued in one loop pass shares one fdatasync).
 *   2. A door that answers "done" (a /v1 ack's 204, a forwarded SETTLE's
 *      reply) then calls tn_channel_sync: a FIFO wait on that channel
 *      partition's log, fired from the completion of the record that makes
 *      the log's completed count reach its submitted count at the time of
 *      the call (records complete in the order queued, so that one is the
 *      settle's own or a later one). It gets that completion's status: 0
 *      after the fdatasync, else the sticky error (the door answers 500).
 *   3. Nothing counts a FIN as done before it is durable: GC reclaims only
 *      below the frontier the log made durable (synced_frontier), and
 *      tn_channel_stats counts a FIN in finish_count (and out of depth)
 *      only once its record completed (fins_unsynced).
 *   TOUCH/extend writes nothing: a lease lives in memory only, and a crash
 *   redelivers every leased message whatever its deadline, so an extend
 *   has nothing to make durable and needs no wait.
 *   Failure: a record whose write or fdatasync fails breaks the channel
 *   partition (no more deliveries from it; the error is sticky). Its
 *   settles answer 500 through their waits; the live cursor is not rolled
 *   back (nothing is delivered from the partition any more), its FINs stay
 *   out of finish_count, and after a restart the messages are delivered
 *   again from what the log holds. Every later settle is refused at step 1
 *   with its lease untouched.
 *
 * Invariants:
 *   - An offset of a channel partition is in at most one of: settled (below
 *     the frontier or in the settled set), leased, pending.
 *   - The scan position is at or above the frontier; everything between
 *     the frontier and the scan position is settled, leased or pending.
 *   - Memory per channel partition is bounded by max_ahead, not by the
 *     backlog on disk.
 *
 * DESIGN: placement (a cluster). A topic keeps its partition count on
 * every node, but a partition's log lives only on the node that owns it
 * (the metastore's assignment, asked through the broker's placement
 * function). The others are remote: no log open, no file, the owner's
 * member id kept; channels hold an idle partition state for them. Remote
 * partitions take no part in publishing (round robin goes over the local
 * ones; one pinned to a remote partition is refused with TN_EREMOTE),
 * delivery, depth, stats or GC.
 *   1. A topic being created asks the placement for each partition once
 *      its record is committed (after the creation gate), and opens only
 *      the local ones; growth does the same for the new partitions.
 *   2. tn_topic_follow_placement asks again: a remote partition now placed
 *      here is opened on a worker thread (its log and its durable
 *      channels' logs, from their files: empty for a partition never held
 *      here), the topic waiting meanwhile as while it grows. A channel log
 *      the engine still holds for it (a replicated partition led here
 *      before) is closed first, after its queued records: one log object
 *      per file set. A partition open here and now owned by another node (a data
 *      directory restored onto another node) is made remote with a
 *      warning; its files stay on disk, nothing is deleted. Owners are
 *      sticky, so data never moves.
 *   3. With no placement function (a lone engine, the unit tests) every
 *      partition is local.
 *
 * Threads: everything here runs on the loop thread of the broker. */
#ifndef TN_QUEUE_QUEUE_H
#define TN_QUEUE_QUEUE_H

#include "core/platform.h"

#include "core/buf.h"
#include "core/config.h"
#include "core/heap.h"
#include "core/hist.h"
#include "core/u64map.h"
#include "queue/lease.h"
#include "storage/chanlog.h"
#include "storage/plog.h"
#include "storage/store.h"

#include <uv.h>

typedef struct tn_broker_s tn_broker_t;
typedef struct tn_topic_s tn_topic_t;
typedef struct tn_part_s tn_part_t;
typedef struct tn_channel_s tn_channel_t;
typedef struct tn_chpart_s tn_chpart_t;
typedef struct tn_consumer_s tn_consumer_t;
typedef struct tn_pub_s tn_pub_t;
typedef struct tn_waiter_s tn_waiter_t;
typedef struct tn_centry_s tn_centry_t;
typedef struct tn_bare_s tn_bare_t;

/* Which topics a /stats client object names in its pub_counts
 * (tn_consumer_t.describe, the NSQ door's producers): topic, unless NULL
 * or "", only that one (nsqd's /stats?topic=); shown, when set, only
 * those it says the caller may see (api/nsq/http.c: a protected topic is
 * not named to who may not read it). */
typedef struct {
    const char *topic;
    bool (*shown)(void *arg, const char *topic);
    void *arg;
} tn_pubs_filter_t;

/* A ttl_discard rule: topics named `name` (or starting with it, when
 * prefix) expire their messages after ttl_ms. */
typedef struct {
    char name[256];
    bool prefix;
    int64_t ttl_ms;
} tn_ttl_rule_t;

typedef struct {
    uint32_t default_partitions;
    int64_t bootstrap_window_ms;
    int64_t retention_ns;  /* 0: no age limit */
    uint32_t max_attempts; /* 0: no dead-lettering */
    uint64_t cache_bytes;
    uint64_t max_inflight_bytes;
    uint64_t max_inflight_msgs;
    uint64_t max_ahead;
    int64_t gc_interval_ms;
    tn_ttl_rule_t *ttl_rules;
    uint32_t nttl_rules;
    /* What a partition of an ephemeral topic (memory only) holds at most:
     * records and bytes of bodies and keys; publishes beyond are refused. */
    uint32_t mem_max_records;
    uint64_t mem_max_bytes;
} tn_broker_opts_t;

/* Fill o from cfg. 0, or TN_ECONFIG with a line in err (a bad
 * ttl-discard-topics entry). o->ttl_rules is owned by o: tn_broker_opts_fini. */
int tn_broker_opts_from_config(tn_broker_opts_t *o, const tn_config_t *cfg, char *err,
                               size_t errlen);
void tn_broker_opts_fini(tn_broker_opts_t *o);

typedef enum { TN_OBJ_CREATING = 0, TN_OBJ_READY, TN_OBJ_FAILED, TN_OBJ_DELETING } tn_obj_state_t;

/* Waiting for a topic or channel being created: cb runs on the loop thread
 * with 0 or the error that failed the creation. Caller-owned. */
typedef void (*tn_waiter_cb)(tn_waiter_t *w, int status);
struct tn_waiter_s {
    tn_waiter_cb cb;
    void *data;
    tn_waiter_t *next;
};

/* One cached record of a partition: its body (NULL for an offset that
 * holds no record) and the metadata delivery needs. Hot entries live in
 * the partition's ring; cold ones (read back from disk) in its map, on a
 * broker-wide FIFO. */
struct tn_centry_s {
    uint64_t offset;
    int64_t publish_ns;
    int64_t deliver_at_ms;
    tn_msg_t *body;
    tn_msg_t *key; /* NULL: the record has no key */
    tn_part_t *part;
    /* A control record (storage/record.h; body NULL): never delivered,
     * settled by the scan without counting as a message (TN_WAL_SKIP). */
    bool control;
    tn_centry_t *prev; /* cold entries: broker-wide FIFO, oldest first */
    tn_centry_t *next;
};

typedef struct tn_fetch_s tn_fetch_t;

struct tn_part_s {
    tn_topic_t *topic;
    uint32_t index;
    tn_plog_t *plog;
    /* Tail cache: the newest records by offset in a ring ([ring_lo,
     * ring_hi), slot offset & (ring_cap - 1)); older records read from
     * disk in the cold map. */
    tn_centry_t *ring;
    uint32_t ring_cap;
    uint64_t ring_lo;
    uint64_t ring_hi;
    uint64_t ring_bytes;
    tn_part_t *hot_prev; /* broker's list of partitions with a non-empty ring */
    tn_part_t *hot_next;
    tn_u64map_t cache;          /* cold: offset -> tn_centry_t */
    tn_fetch_t *fetch;          /* the read in progress, or NULL */
    tn_waiter_t *fetch_waiters; /* replay reads waiting for it */
    void *close_after_fetch;    /* topic deletion waiting for that read */
    uint64_t first_offset;      /* lowest offset kept, as of the last GC */
    /* Every offset below this is on disk or has had its append completion
     * run here (so its body is in the tail cache): delivery scans stop
     * there, so a record made visible a moment before its completion is
     * not read back from disk. */
    uint64_t appended_next;
    tn_plog_gc_t gc;
    bool gc_busy;
    tn_plog_advance_t advance;
    bool advancing;
    /* While the topic is paused: offsets from here on are held at the
     * topic (its depth), not delivered by any channel. Never above a cut
     * of the log since the pause (tn__topic_hold_cut). */
    uint64_t hold;
    /* The hold point the topic's pause file may take: hold, except while
     * a paused topic's emptying waits for the channels' records that
     * settle what it held (tn_topic_empty), or after those failed: then
     * the point from before, which those records do not need. */
    uint64_t hold_file;
    /* Placement: the partition lives on another node (owner, its member
     * id; 0 while the metastore has not placed it). plog is NULL, except
     * for a partition found on disk here that the metastore gives to
     * another node: that log stays open, untouched, and unused. */
    bool remote;
    /* How many times it stopped being served here (made remote): a
     * dead-letter move that started before compares it at its end. */
    uint32_t left_count;
    bool opening; /* tn_topic_follow_placement is opening it */
    /* Deliveries held: a replicated partition's leader about to hand over,
     * or one that took over while its old leader may still deliver
     * (tn_topic_part_hold); appends and settles go on. Only the replica
     * manager sets and clears it. */
    bool held;
    /* Recovered from disk in a cluster and not yet placed: no delivery
     * until the placement was followed once with a metastore replica
     * known current (tn_broker_hold_recovered), so a stale copy (one
     * moved away, or restored with --rejoin) is not served meanwhile. */
    bool start_held;
    /* The delivery lease of a replicated partition's leader: no delivery
     * at or past this loop time (uv_now); 0: none (tn_topic_part_lease). */
    uint64_t lease_until;
    uint64_t owner;
};

struct tn_topic_s {
    tn_broker_t *broker;
    char *name;
    tn_obj_state_t state;
    int err;
    uint32_t nparts;
    tn_part_t **parts; /* each its own allocation: pointers to them stay valid as it grows */
    tn_channel_t *channels;
    tn_waiter_t *waiters;
    uint32_t next_part; /* round robin for publishes without a key */
    /* This node's pause (tn_topic_pause), kept with each local
     * partition's hold point in the topic's pause file (storage/store.h,
     * tn_store_topic_pause_write; what a restart loads), as the channel's
     * pause: each tn_topic_pause asks for a write (pause_asked counts the
     * asks), one write runs at a time (pause_writing: the topic is busy
     * for a deletion meanwhile, as for the stamp), one asked while it
     * runs follows it, pause_done is the count the last finished write
     * covered, and pause_waits the answers waiting for theirs. A pause
     * with no directory of the topic here (no partition here) makes one,
     * its stamp first (record_created_ms), so that it is durable there
     * too. pause_dirless: the last write found no directory all the same
     * (an unpause, or a record not known yet): the pause is in memory
     * until one is made here, then written. Ephemeral topics write
     * nothing. Loop thread. */
    bool paused;
    /* The pause the pause file holds, as far as this node knows (loaded,
     * or the last write that succeeded; unpaused for a topic made here):
     * a write that fails takes t->paused back to it, as its answer (an
     * error) says and a restart loads (tpause_take_back). */
    bool paused_kept;
    bool pause_writing;
    bool pause_dirless;
    uint64_t pause_asked, pause_done;
    /* Counts the pauses (from unpaused), the emptyings whose channel
     * records failed and the cuts of a log below its hold point: an
     * emptying moves the hold points the file may take (hold_file) only
     * if none came between its start and its records' end. */
    uint64_t pause_epoch;
    struct tn__tpause_wait_s *pause_waits;
    /* Truncations of a partition's log held back by the store's cut watch
     * until a pause write covering their ask (seq) has ended
     * (tn__topic_hold_cut); ended as pause_waits are. */
    tn_store_cut_t *pause_cuts;
    bool deleted;
    bool growing; /* tn_topic_grow under way: channel creations and deletions wait */
    bool is_dlq;  /* its name ends in .DLQ: never dead-letters itself */
    /* Its name ends in #ephemeral: its partitions live in memory only
     * (storage/plog.h tn_plog_open_memory), so do its channels; the
     * metastore never records it; it goes once its last channel is gone. */
    bool memory;
    int64_t ttl_ms; /* ttl_discard topics: messages expire; 0: reliable */
    /* Caps of the native API's consumes (pulling consumers and receipt
     * handle acks; NSQ consumers have RDY), per channel partition, 0: no
     * cap: leases at once; offsets settled ahead of the frontier (at the
     * cap only the frontier goes out to pullers, and tn_consumer_ack past
     * it is refused). */
    uint32_t max_inflight_part;
    uint32_t max_acked_ahead;
    /* Settings of the topic's own (a /v1 topic's record) in place of the
     * broker's options. */
    bool own_settings;
    int64_t own_retention_ns;  /* 0: no age limit */
    uint32_t own_max_attempts; /* 0: no dead-lettering */
    /* The durability of its partition logs (tn_topic_set_durability), for
     * those opened later; -1: the store's default. */
    int durability;
    /* tn_topic_follow_placement was asked while the topic was busy: it
     * runs once the creation, growth or channel creation ends. */
    bool place_again;
    /* The created_at_ms of the metastore record it was made from (the
     * catalog's, in a cluster): a record of that name with another one is
     * a new topic, made after this one was deleted. 0: not known yet.
     * Kept in the topic's directory (its stamp, tn_store_topic_stamp_write)
     * before its first local partition is made, so that a node coming back
     * knows which topic its files are of; stamp_ms: the one there (0: none
     * yet). */
    int64_t record_created_ms;
    int64_t stamp_ms;
    /* A worker writes the stamp (tn_topic_keep_stamp): the topic serves
     * on, but counts as busy (no growth, placement or deletion meanwhile). */
    bool stamping;
    uint64_t ttl_discards;
    uint64_t message_count; /* published since start */
    uint64_t message_bytes;
    tn_topic_t *hnext;
    uint32_t busy; /* worker jobs holding the topic */
};

/* A wait for a channel partition's log to make durable what was queued
 * to it (tn_channel_sync): caller-owned, in use until cb. */
typedef struct tn_chan_sync_s tn_chan_sync_t;
typedef void (*tn_chan_sync_cb)(tn_chan_sync_t *s, int status);
struct tn_chan_sync_s {
    void *data; /* for the caller */
    /* Private. */
    uint64_t seq; /* the log's submitted count to reach */
    tn_chan_sync_cb cb;
    tn_chan_sync_t *next;
};

struct tn_chpart_s {
    tn_channel_t *ch;
    tn_part_t *part;
    tn_chanlog_t *cl; /* NULL for ephemeral channels */
    tn_cursor_t cur;  /* live state: settles apply here first */
    tn_leases_t leases;
    uint64_t scan;
    tn_heap_t pending;    /* tn__pend_t due later, by due time (monotonic ms) */
    tn_heap_t ready;      /* tn__pend_t due now, lowest offset first */
    tn_u64map_t pend_map; /* offset -> tn__pend_t, in either heap */
    /* Offsets whose dead-letter move put its copy in the dead-letter
     * topic (durably) but whose source FIN was refused or failed (a full
     * disk): the next move of the message settles the source only, so the
     * dead-letter topic holds one copy (channel.c, dead_letter). Values
     * are cp itself (a set); an entry goes when a FIN of its offset is
     * durable, or an EMPTY past it, and all of them when another
     * leader's records come (tn_broker_chan_apply) or the dead-letter
     * topic is deleted (tn__channel_dlq_gone). Memory only: a restart
     * (or another leader) moves such a message again, copy and all. */
    tn_u64map_t dlq_copied;
    uint64_t synced_frontier; /* frontier the channel log has made durable */
    uint64_t timeouts_logged;
    uint64_t fins_unsynced;                /* FIN records queued, not yet durable */
    tn_chan_sync_t *sync_head, *sync_tail; /* tn_channel_sync waits, oldest first */
    /* Records (the log's count) whose waits may end: all completed ones,
     * or for a replicated partition those its replication confirmed
     * (tn_broker_chan_repl_done). */
    uint64_t settled_seq;
    uint64_t repl_high;  /* the last record handed to replication */
    tn_heap_node_t wake; /* in the broker's wake heap: next deadline */
    bool waiting_fetch;
    bool broken; /* its log failed (or is being dropped): no more deliveries */
    bool failed; /* its log failed while running: counted in the broker's logs_failed */
    /* Its log's last write found the disk full (UV_ENOSPC, -EDQUOT; 0:
     * no): no deliveries, settles refused with it, counted in the
     * broker's logs_full, until the log can grow again and the live
     * state is taken back to the durable one (channel.c, full_retry). */
    int full;
    bool full_checking;    /* a tn_chanlog_state request is out */
    int64_t full_retry_ms; /* monotonic: when to check again (the wake heap) */
    tn_chanlog_state_t full_req;
};

struct tn_channel_s {
    tn_topic_t *topic;
    char *name;
    bool ephemeral; /* its name ends in #ephemeral: it goes with its last consumer */
    bool memory;    /* no channel log: ephemeral, or a channel of an ephemeral topic */
    tn_obj_state_t state;
    int err;
    tn_chpart_t **parts; /* one per partition of the topic, each its own allocation */
    tn_waiter_t *waiters;
    tn_consumer_t *consumers; /* circular list */
    uint32_t nconsumers;
    uint32_t next_part;
    bool paused; /* this node's pause: no partition led here delivers */
    bool deleted;
    bool pump_queued;
    tn_channel_t *pump_next;
    bool starving; /* in the broker's starved list */
    tn_channel_t *starve_next;
    tn_channel_t *next; /* topic's list */
    uint32_t busy;
    uint64_t message_count; /* delivered since start */
    uint64_t dlq_count;
    /* Which channel object this is: a number no other channel object of
     * the broker had (from 1), so a channel deleted and made again under
     * the same name (or in a topic made again) has another. Whoever keeps
     * something tied to a channel of this node's disk (cluster/setrepl.c,
     * a follower's channel logs) tells the two apart by it. */
    uint64_t gen;
    /* The stamp of the metastore record this channel is (meta/cmd.h
     * CHANNEL_PUT: a random id drawn when the channel was made, the same
     * on every node), which the catalog sets (api/catalog.c) and the
     * replicator carries with the channel's state (cluster/setrepl.h).
     * 0: not known (made before its record and not matched yet, loaded
     * from files written before stamps, a record of an older build, or a
     * fan-out link's channel). Kept on disk beside the channel's files
     * (tn_store_channel_stamp_write): loaded from there at start, so a
     * node that was down while the channel was deleted and made again
     * tells its old channel from the recorded one. */
    uint64_t stamp;
    /* The stamp in the channel's stamp file: the one its creation writes
     * (the stamp known once the creation gate opened; 0: a stamp left by
     * an earlier channel of the name is removed), the one read at load,
     * or the one a keep job wrote (tn_channel_keep_stamp). Loop thread,
     * not changed while a creation or keep job runs. */
    uint64_t stamp_kept;
    /* A worker writes the stamp (tn_channel_keep_stamp); a deletion
     * meanwhile (the channel's or its topic's) waits for it before it
     * removes the files (stamp_drop: that deletion's wait). */
    bool stamping;
    void *stamp_drop;
    /* This node's pause, kept in the channel's pause file
     * (tn_store_channel_pause_write; what a restart loads): each
     * tn_channel_pause asks for a write of ch->paused (pause_asked counts
     * the asks), one write runs at a time (pause_writing; none while the
     * stamp job runs, which writes the pause file before the stamp), one
     * asked while it runs follows it, and pause_done is the count the last
     * finished write covered. tn_channel_sync_all waits (pause_waits, seq:
     * the ask needed) for the writes asked before it; a deletion meanwhile
     * waits for the running one (pause_drop), as for the stamp. Loop
     * thread. */
    uint64_t pause_asked, pause_done;
    /* The pause the pause file holds, as far as this node knows (loaded,
     * made, or the last write that succeeded): a write that fails takes
     * ch->paused back to it, as its answer (an error) says. */
    bool paused_kept;
    bool pause_writing;
    tn_chan_sync_t *pause_waits;
    void *pause_drop;
    /* The catalog deletes it to make its record's channel anew (deleted
     * and made again elsewhere meanwhile: another stamp): its consumers
     * are kicked with tn_consumer_t.replaced, to come back for the new
     * one rather than be told it is gone. Loop thread. */
    bool replaced;
};

/* A message handed to a consumer. body is borrowed for the callback; take
 * a reference (tn_msg_ref) to keep it. */
typedef struct {
    uint32_t partition;
    uint64_t offset;
    uint32_t nonce;
    uint16_t attempts;
    int64_t publish_ns;
    tn_msg_t *body;
    const tn_msg_t *key; /* NULL: none */
} tn_delivery_t;

typedef void (*tn_deliver_cb)(tn_consumer_t *c, const tn_delivery_t *d);

/* A consumer attached to a channel (an NSQ connection after SUB, a native
 * long-poll). Caller-owned; attach with tn_consumer_attach. */
struct tn_consumer_s {
    tn_channel_t *ch;
    tn_lease_owner_t owner; /* its leases: the in-flight count is owner.count */
    uint32_t credit;        /* RDY: in flight at most this many; pull: asks left */
    /* A pulling consumer (a long-poll) asks for credit messages; each
     * delivery spends one, acked or not. */
    bool pull;
    bool pinned; /* deliver only from partition pin */
    uint32_t pin;
    int64_t timeout_ms;   /* lease duration */
    uint32_t sample_rate; /* 0: all; else deliver this many of each 100 */
    uint32_t sample_n;
    tn_deliver_cb deliver;
    /* Optional: its channel or topic is being deleted. The engine has
     * detached c already (its in-flight messages went back); the door
     * drops the client and may free c here. */
    void (*kick)(tn_consumer_t *c);
    /* Set before kick: the channel is being replaced by the recorded one
     * of the same name (tn_channel_t.replaced), not deleted for good. */
    bool replaced;
    /* Optional: a partition of its topic that this node served has gone
     * to another node while it runs (a partition move or a failover handed
     * its lead away; docs/cluster.md, "What clients see at the
     * hand-over"). The engine has detached c already (its in-flight
     * messages went back); the door drops the client so that it looks the
     * topic up again and finds the new leader (an NSQ connection closes,
     * as nsqd closes a deleted topic's consumers), and may free c here.
     * NULL: c stays attached (a /v1 long-poll lane: see left). */
    void (*moved)(tn_consumer_t *c);
    /* Optional, for a consumer without moved, which stays attached (a /v1
     * long-poll lane): the same news, told once the departed partition's
     * leases ended, so the door can answer the requests parked on c now
     * rather than at the end of their wait (their clients ask again and
     * find the new leader). c must not be detached or freed here. */
    void (*left)(tn_consumer_t *c);
    /* Optional: append this consumer's /stats client object (JSON) to out;
     * f says which topics its pub_counts may name. */
    void (*describe)(tn_consumer_t *c, const tn_pubs_filter_t *f, tn_buf_t *out);
    /* Optional, for a consumer not pinned: true when it takes nothing more
     * of partition for now (a remote child's cursor holding its share of
     * that partition: api/rchild.c). Asked at each pick; the consumer's
     * own settles (fin, req, dead letter) deliver again, and so does
     * tn_consumer_unhold (a hold let go with no settle). NULL: every
     * partition. */
    bool (*hold)(tn_consumer_t *c, uint32_t partition);
    void *data;
    tn_consumer_t *prev;
    tn_consumer_t *next;
    uint64_t message_count;
    uint64_t finish_count;
    uint64_t requeue_count;
};

/* A publish: caller-owned, in use from tn_broker_publish until cb. */
typedef void (*tn_pub_cb)(tn_pub_t *p, int status);
struct tn_pub_s {
    tn_append_t app; /* private */
    void *data;
    bool pinned; /* set with pin: this partition, not round robin */
    uint32_t pin;
    uint32_t partition; /* result: where it went */
    uint64_t first_offset;
    /* Result, with TN_EREMOTE: the member that owns the partition asked
     * for (0: not placed yet, or every partition is on other nodes). */
    uint64_t owner;
    /* Result, set by the router (cluster/router.h): accepted into this
     * node's ingress log for another node's partition (first_offset is
     * not known then). */
    bool remote;
    /* The router's: the door's callback and the router. */
    tn_pub_cb route_cb;
    void *route;
    /* Set by the NSQ doors (PUB, MPUB, DPUB, /pub, /mpub): an unpinned
     * publish that finds no partition of the topic here asks the broker's
     * grow-here hook for one (tn_broker_set_grow_here) and goes to it
     * once it is open, rather than answering TN_EREMOTE at once. */
    bool grow_here;
    /* The first ncontrol records (bodies set as any, no key) are control
     * records (storage/record.h), written with TN_REC_F_CONTROL in the
     * same atomic batch as the rest: never delivered, not counted as
     * messages. 0 for every door; the PRODUCE handler sets 1 (the
     * PRODUCER record ahead of a forwarded batch, cluster/produce.h). */
    uint32_t ncontrol;
    /* Private. */
    bool grew; /* the hook was asked once: no second time */
    tn_broker_t *broker;
    tn_topic_t *topic;
    tn_waiter_t wait;
    uint32_t n;
    tn_msg_t **msgs;
    tn_rec_in_t *recs;
    tn_msg_t *msg1;
    tn_rec_in_t rec1;
    tn_msg_t **keys; /* copies of the keys set, or NULL */
    tn_msg_t *key1;
    int64_t deliver_at_ms;
    /* A record has its own delivery time (tn_pub_set_deliver_at): the
     * others (marked unset in recs) take deliver_at_ms. */
    bool own_times;
    int64_t start_ns;
    tn_pub_cb cb;
};

/* What the engine tells a listener (lookupd registration, the catalog)
 * about. TN_EV_TOPIC_FAILED: a topic's creation failed (its waiters were
 * told; the topic is gone from the engine). TN_EV_PARTS_OPENED: remote
 * partitions of a topic that placement now puts here were opened
 * (tn_topic_follow_placement; channel NULL): an NSQ publish waiting for a
 * partition here (the catalog's claims) may go on. */
typedef enum {
    TN_EV_TOPIC_UP = 1,
    TN_EV_TOPIC_DOWN,
    TN_EV_CHANNEL_UP,
    TN_EV_CHANNEL_DOWN,
    TN_EV_TOPIC_FAILED,
    TN_EV_PARTS_OPENED,
} tn_broker_event_t;

typedef void (*tn_broker_event_cb)(void *arg, tn_broker_event_t ev, const char *topic,
                                   const char *channel);

#define TN_BROKER_MAX_LISTENERS 4

/* The creation gate: asked before the engine creates a topic (ch NULL;
 * t is being created: its name, partitions and TTL are set) or a durable
 * channel ch of t, for whichever door asked, so that the
 * metastore records it first. The creation goes on when the gate calls
 * tn_gate_done(g, 0), or fails with the status it gives. */
typedef struct tn_gate_s tn_gate_t;
typedef void (*tn_gate_fn)(void *arg, tn_gate_t *g, tn_topic_t *t, tn_channel_t *ch);
/* The stamper: the creation time of the metastore record of the topic
 * named name (0: none), asked once the gate let a topic's creation
 * through, for its record_created_ms, which the creation writes first as
 * its stamp. None (no catalog): never stamped. */
typedef int64_t (*tn_stamp_fn)(void *arg, const char *name);

/* The placement: whether partition p of topic t (borrowed; its name and
 * partition count are set) lives on this node; false with *owner, the
 * member id that holds it (0: not placed yet). Ephemeral topics are never
 * asked (they are local everywhere). */
typedef bool (*tn_place_fn)(void *arg, const tn_topic_t *t, uint32_t p, uint64_t *owner);

/* The grow-here hook: a publish with grow_here found every partition of
 * the ready topic t (borrowed for the call) on other nodes. It returns
 * UV_EAGAIN when it has asked for a partition here (w's cb runs, once,
 * with 0 when t has a local partition open, or the error that kept it
 * from one: the publish then fails with TN_EREMOTE), or another status
 * at once (TN_EREMOTE: t does not grow this way). It never calls w's cb
 * before returning. Never asked for ephemeral topics. */
typedef int (*tn_grow_here_fn)(void *arg, tn_topic_t *t, tn_waiter_t *w);

/* The append check: asked right before the engine appends a publish to
 * partition p of the durable topic t (borrowed for the call; p is open
 * here), in the same loop turn as the append. 0 lets it go on; any other
 * status fails the publish with it (p->partition set), nothing written.
 * The router sets it (cluster/router.c) so that a record of a replicated
 * partition is appended only by its leader once that leader gated its log
 * and started its epoch, whichever way the publish reached the engine
 * (a door, a publish that waited for its topic to be made or grown, a
 * COMMIT, a dead letter). NULL: every append goes on. */
typedef int (*tn_append_check_fn)(void *arg, const tn_topic_t *t, uint32_t p);

/* How the engine publishes on its own behalf (a dead letter's copy to
 * its DLQ topic): tn_broker_publish's contract, with arg first. The
 * router sets it (cluster/router.c) so that such a publish goes the way a
 * door's does: forwarded to a partition led elsewhere, and waiting for a
 * new leader that is not serving yet instead of failing. NULL:
 * tn_broker_publish. */
typedef int (*tn_publish_fn)(void *arg, const char *topic, size_t len, tn_pub_t *p,
                             int64_t deliver_at_ms, tn_pub_cb cb);

/* Channel-state replication of replicated partitions (cluster/setrepl.h
 * sets it). Loop thread; arg borrowed until the broker closes. */
typedef struct {
    /* Whether the records of channel partitions of partition p of topic are
     * replicated: asked when a record completes locally. When true, the
     * record is handed to durable and the tn_channel_sync waits it covers
     * end only at tn_broker_chan_repl_done. NULL: nothing is. */
    bool (*replicated)(void *arg, const char *topic, uint32_t p);
    /* rec (borrowed) is durable in the local channel log of (topic,
     * channel, p) as its record number seq (from 1, counted from the
     * log's open: a reopened log starts again at 1); frontier is the
     * channel's frontier once it and every record before it apply. */
    void (*durable)(void *arg, const char *topic, const char *channel, uint32_t p, uint64_t seq,
                    const tn_walrec_t *rec, uint64_t frontier);
    void *arg;
} tn_chan_repl_t;

struct tn_broker_s {
    uv_loop_t *loop;
    /* Told of topic and channel events (channel is NULL for topic events). */
    struct {
        tn_broker_event_cb cb;
        void *arg;
    } listeners[TN_BROKER_MAX_LISTENERS];
    uint32_t nlisteners;
    tn_gate_fn gate;
    void *gate_arg;
    tn_stamp_fn stamp;
    void *stamp_arg;
    tn_place_fn place; /* NULL: every partition is local */
    void *place_arg;
    /* Whether partition p of t is replicated (its placement moves away
     * and back while the node runs, as its leader changes; place_arg is
     * the argument): made remote, its log is set aside for the replica
     * manager; placed here again, it takes that log back
     * (tn_topic_follow_placement). NULL: none is. */
    bool (*place_readopt)(void *arg, const tn_topic_t *t, uint32_t p);
    tn_grow_here_fn grow_here; /* NULL: a publish with no local partition is TN_EREMOTE */
    void *grow_here_arg;
    tn_append_check_fn append_check; /* NULL: none (tn_broker_set_append_check) */
    void *append_check_arg;
    tn_publish_fn publisher; /* NULL: tn_broker_publish (tn_broker_set_publisher) */
    void *publisher_arg;
    /* Asked before a dead letter of topic moves to dlq, an existing topic
     * or one to make (NULL: every move goes): true refuses it, and why
     * says why and what the operator does; the message stays on its
     * channel, tried again DLQ_REFUSED_RETRY_MS later (channel.c). Set by
     * ternd to api/access.h's ownership rule. */
    bool (*dlq_refused)(void *arg, const char *topic, const char *dlq, char *why, size_t len);
    void *dlq_refused_arg;
    tn_store_t *store;
    tn_broker_opts_t opts;
    tn_topic_t **buckets;
    size_t nbuckets;
    size_t ntopics;
    /* tail cache */
    tn_part_t *hot;      /* partitions with a non-empty ring, last appended first */
    tn_part_t *hot_tail; /* the one appended to least recently: evicted first */
    uint64_t hot_bytes;
    tn_centry_t *cache_head; /* cold entries, oldest first */
    tn_centry_t *cache_tail;
    uint64_t cache_bytes;
    /* in-flight budget */
    uint64_t inflight_bytes;
    uint64_t inflight_msgs;
    /* pumping */
    uv_idle_t idle;
    tn_channel_t *pump_head;
    tn_channel_t *starved; /* waiting for the in-flight budget */
    /* deadlines */
    uv_timer_t timer;
    int64_t timer_at;
    tn_heap_t wakes; /* tn_chpart_t.wake */
    uv_timer_t gc_timer;
    uint32_t workers; /* worker jobs in flight */
    bool closing;
    void (*close_cb)(tn_broker_t *b);
    uint32_t handles_open;
    uint32_t nonce_seed;
    uint64_t channel_gen; /* the last tn_channel_t.gen given */
    /* latency: publish to its durability boundary; channel-log records
     * (FIN, REQ, ...) to their fdatasync */
    tn_hist_t pub_hist;
    tn_hist_t walop_hist;
    /* Channel partitions whose log failed while running (a write or
     * fdatasync error, sticky): the node is not ready while any is open. */
    uint32_t logs_failed;
    /* Channel partitions whose log found the disk full (tn_chpart_t.full):
     * /ping says so until space is freed. */
    uint32_t logs_full;
    /* counters */
    uint64_t timeouts;
    uint64_t dlq_moves;
    uint64_t ttl_discards;
    uint64_t gc_segments;
    /* Channel-state replication (tn_broker_set_chan_repl). */
    tn_chan_repl_t chan_repl;
    /* Topic directories the start found with no partition directory (a
     * pause on a node holding no copy made them), and those of creations
     * that failed: not loaded, and left to tn_broker_sweep_bare. */
    tn_bare_t *bare;
};

/* Open the engine over an open store and load every topic and channel on
 * disk (blocking: call at startup). Partitions or channels found damaged
 * are isolated and logged. 0 or an error. */
int tn_broker_open(uv_loop_t *loop, tn_store_t *store, const tn_broker_opts_t *opts,
                   tn_broker_t **out);
/* Stop timers and free the engine's memory once its workers and storage
 * requests finish; cb runs after that, with NULL (the broker is gone). Consumers must be detached
 * first. The store is closed by the caller afterwards. */
void tn_broker_close(tn_broker_t *b, void (*cb)(tn_broker_t *b));

/* Find a topic; with create, make a missing one (nparts 0: the default).
 * Returns 0 with *out ready; UV_EAGAIN when it is being created: w (when
 * not NULL) is queued and its cb runs when the creation ends, after which
 * the caller looks again; TN_ENOTFOUND; UV_EINVAL (bad name); or the error
 * of a failed creation. */
/* Add / remove a listener for topic and channel events. 0 or UV_ENOSPC. */
int tn_broker_listen(tn_broker_t *b, tn_broker_event_cb cb, void *arg);
void tn_broker_unlisten(tn_broker_t *b, tn_broker_event_cb cb, void *arg);

int tn_broker_topic(tn_broker_t *b, const char *name, size_t len, bool create, uint32_t nparts,
                    tn_waiter_t *w, tn_topic_t **out);

/* The topic directories the start found holding no partition (the pause
 * files and stamps of a pause taken here with no copy, docs/cluster.md),
 * and those creations that failed left (whatever they hold), that no
 * topic of the engine has taken since: each one recorded(arg,
 * name) does not know is removed (renamed into trash/ on a worker thread,
 * as a deletion here does; logged), as its topic was deleted while this
 * node was down and not made again, so nothing else ever would. One whose
 * name a topic of the engine has is left to that topic (its creation
 * keeps the directory or removes it by its stamp, its deletion removes
 * it) and forgotten here. A creation of the name while its directory is
 * being removed waits for the removal. For the catalog, once its
 * metastore replica is caught up (a replica behind would take a live
 * topic's pause for a deleted one's). Loop thread; recorded and arg are
 * borrowed for the call. */
void tn_broker_sweep_bare(tn_broker_t *b, bool (*recorded)(void *arg, const char *topic),
                          void *arg);

/* Set (fn NULL: remove) the creation gate. */
void tn_broker_set_gate(tn_broker_t *b, tn_gate_fn fn, void *arg);
/* Set the stamper (tn_stamp_fn; NULL: none). */
void tn_broker_set_stamper(tn_broker_t *b, tn_stamp_fn fn, void *arg);
/* The gate's answer for g (which is freed). */
void tn_gate_done(tn_gate_t *g, int status);

/* Same for a channel of a ready topic. An ephemeral channel (name ending
 * in #ephemeral) is created at once; a durable one opens its channel logs
 * on a worker thread. */
int tn_topic_channel(tn_topic_t *t, const char *name, size_t len, bool create, tn_waiter_t *w,
                     tn_channel_t **out);

/* Create a durable channel that starts at the topic's tail (nothing
 * published before is its to deliver), as for a fan-out child. As
 * tn_topic_channel with create; an existing channel is found as it is. */
int tn_topic_channel_at_tail(tn_topic_t *t, const char *name, size_t len, tn_waiter_t *w,
                             tn_channel_t **out);
/* Create a durable channel whose local partitions each start at their
 * first record published at or after since_ns (wall clock, as publish
 * times are): a fan-out link's channel on a node that did not make the
 * attach, which gets what its partitions took from the attach on. As
 * tn_topic_channel with create; an existing channel is found as it is. */
int tn_topic_channel_since(tn_topic_t *t, const char *name, size_t len, int64_t since_ns,
                           tn_waiter_t *w, tn_channel_t **out);

/* Prepare a publish of n messages; tn_pub_set copies each body in. 0 or
 * UV_ENOMEM. tn_pub_fini releases what the publish holds. */
int tn_pub_init(tn_pub_t *p, uint32_t n);
int tn_pub_set(tn_pub_t *p, uint32_t i, const void *data, size_t len);
/* Copy in all n bodies (borrowed) at once, in one allocation; for
 * batches. The publish must have no body set yet. */
int tn_pub_set_all(tn_pub_t *p, const tn_iov_t *bodies);
/* Give message i (already set) a key, copied. 0, UV_EINVAL (i out of
 * range, key over 65535 bytes) or UV_ENOMEM. */
int tn_pub_set_key(tn_pub_t *p, uint32_t i, const void *key, size_t len);
/* Give message i (already set) its own delivery time, wall clock ms (0:
 * at once), in place of the one tn_broker_publish gives the rest: a batch
 * whose records were accepted as separate produces (some deferred, some
 * not) is still one append. Setting the body again drops it. 0, or
 * UV_EINVAL (i out of range or not set, ms negative). */
int tn_pub_set_deliver_at(tn_pub_t *p, uint32_t i, int64_t ms);
/* Copy in all n records (recs[0..n-1] and what they point at borrowed):
 * the bodies in one allocation (tn_pub_set_all), each non-empty key, and
 * every record's own delivery time (0: at once), as the records of
 * another node's ingress log are committed. The publish must have no body
 * set yet. 0, UV_EINVAL (a key over 65535 bytes, a negative time) or
 * UV_ENOMEM; on an error tn_pub_fini releases what was copied. */
int tn_pub_fill(tn_pub_t *p, const tn_rec_in_t *recs);
void tn_pub_fini(tn_pub_t *p);

/* Publish p to the topic called name (created when missing). deliver_at_ms
 * (wall clock, 0 = now) defers delivery of every message that has no time
 * of its own (tn_pub_set_deliver_at). Without a pin the partition is
 * the next local one, round robin. Returns 0 when under way (cb runs
 * with the final status: 0 at the durability boundary, else an error), or
 * at once UV_EINVAL, TN_EDISKHIGH, TN_ECLOSED or a storage error.
 * TN_EREMOTE (at once or through cb): the pinned partition, or every
 * partition of the topic, lives on another node (p->owner); with
 * p->grow_here the grow-here hook was asked first and gave none. */
int tn_broker_publish(tn_broker_t *b, const char *name, size_t len, tn_pub_t *p,
                      int64_t deliver_at_ms, tn_pub_cb cb);
/* tn_broker_publish to t, a topic the caller found ready (tn_broker_topic
 * returned 0 for it) earlier in the same call, without looking its name up
 * again: the same checks, outcomes and callback. t borrowed. (A door's
 * publish needs the topic before the engine does, for the replica checks:
 * one look-up by name per publish instead of three.) */
int tn_topic_publish(tn_topic_t *t, tn_pub_t *p, int64_t deliver_at_ms, tn_pub_cb cb);

/* Attach c (deliver, timeout_ms, data, and pull/pinned/pin set by the
 * caller; credit 0) to a ready channel. */
void tn_consumer_attach(tn_consumer_t *c, tn_channel_t *ch);
/* Detach: its in-flight messages go back to the channel, due at once. An
 * ephemeral channel goes away with its last consumer. */
void tn_consumer_detach(tn_consumer_t *c);
/* Deliver what the channel's consumers may take now, rather than at the
 * end of the loop turn (a long-poll about to give up looks once more). */
void tn_channel_pump_now(tn_channel_t *ch);
/* Set the credit (RDY) and deliver what it allows. */
void tn_consumer_credit(tn_consumer_t *c, uint32_t credit);
static inline size_t tn_consumer_inflight(const tn_consumer_t *c)
{
    return c->owner.count;
}

/* Settle a message this consumer holds. check_nonce: the nonce must match
 * its current delivery (receipt handles); NSQ checks the owner only.
 * Returns 0 (settled in memory, its record queued: tn_channel_sync waits
 * for it to be durable), TN_ENOTFOUND (not in flight), UV_ESRCH (in
 * flight for another delivery or consumer), UV_EINVAL (no such
 * partition), or the channel log's sticky error (the lease stays as it
 * was) or UV_ENOMEM. */
int tn_consumer_fin(tn_consumer_t *c, uint32_t partition, uint64_t offset, bool check_nonce,
                    uint32_t nonce);
/* Settle by receipt handle: the nonce must match, and when the topic has
 * an acked-ahead cap that is reached, an offset other than the frontier
 * is refused with UV_ENOBUFS (the head of the queue must be acked first).
 * Otherwise as tn_consumer_fin. */
int tn_consumer_ack(tn_consumer_t *c, uint32_t partition, uint64_t offset, uint32_t nonce);
/* Wait until what was queued so far to the log of partition of ch is
 * durable (queue.h DESIGN: settling, step 2): cb runs exactly once with 0
 * after the fdatasync that covers it, or the log's error; before this
 * returns when nothing is waiting to be made durable (an ephemeral
 * channel, a remote partition, an idle log: 0) or the log has failed
 * already (its sticky error). s is borrowed until cb. */
void tn_channel_sync(tn_channel_t *ch, uint32_t partition, tn_chan_sync_t *s, tn_chan_sync_cb cb);
/* Set (hooks NULL: remove) channel-state replication; copied. */
void tn_broker_set_chan_repl(tn_broker_t *b, const tn_chan_repl_t *hooks);
/* The replication of records up to number seq of (topic, channel, p)'s
 * channel log ended with status (0: on enough replicas; else an error
 * that fails the waits): the tn_channel_sync waits it covers end with
 * status. A channel or partition not (or no longer) here: nothing. */
void tn_broker_chan_repl_done(tn_broker_t *b, const char *topic, const char *channel, uint32_t p,
                              uint64_t seq, int status);
/* A follower's replicated channel record (cluster/setrepl.h) for a
 * partition this node does not serve but whose channel log the engine
 * still holds (a leader set aside, or a partition found on disk at start
 * and placed elsewhere): applied to the channel's cursor, so the engine
 * serves it if it leads again (a REQ also waits there until its due time,
 * with its attempts, as one read from the log at its open), and queued to
 * its log: cb(op, status) runs once, as tn_chanlog_submit's would (op is
 * borrowed until then, as a token: the engine writes the record through
 * a request of its own). A write that finds the disk full fails alone,
 * as the engine's own records do (TN_WALOP_SPACE_OK): cb gets the error,
 * and until the engine sees the log can grow again and takes the cursor
 * back to its durable state (tn_broker_logs_full counts it meanwhile),
 * every record is refused with that error, so the leader's retry writes
 * them again. 0; TN_ENOTFOUND no such channel partition or no log open
 * for it here; UV_EBUSY the partition is served here; the disk-full
 * error (above); or the cursor's or the log's error (cb never runs then). */
int tn_broker_chan_apply(tn_broker_t *b, const char *topic, const char *channel, uint32_t p,
                         const tn_walrec_t *rec, tn_walop_t *op, tn_walop_cb cb);
/* Call fn(t, p, arg) for each partition p whose log is here of every
 * ready topic t, in table order (loop thread; fn must not add or remove
 * topics). */
void tn_broker_each_local_part(tn_broker_t *b, void (*fn)(tn_topic_t *t, uint32_t p, void *arg),
                               void *arg);
/* How many open channel partitions' logs failed while running (their
 * settles are refused): while not 0, /readyz says not ready. */
static inline uint32_t tn_broker_logs_failed(const tn_broker_t *b)
{
    return b->logs_failed;
}
/* How many open channel partitions' logs found the disk full (their
 * deliveries and settles wait for space; not sticky). */
static inline uint32_t tn_broker_logs_full(const tn_broker_t *b)
{
    return b->logs_full;
}
/* Put it back, deliverable after delay_ms (0: at once). Refused, the
 * lease kept as it was: the log's sticky error or its full disk, and
 * UV_ENOMEM when the message's pending entry cannot be made. */
int tn_consumer_req(tn_consumer_t *c, uint32_t partition, uint64_t offset, bool check_nonce,
                    uint32_t nonce, int64_t delay_ms);
/* tn_consumer_req for a consumer of the node's own, with no client to
 * tell of a refusal (a /v1 lane giving back what nobody will get, a
 * fan-out's or a remote child's runner trying a message again later): a
 * REQ refused (out of memory, a log that cannot take the record) ends the
 * lease by delay_ms from now instead, as its timeout would (counted as a
 * timeout, attempts kept, no REQ record: a restart delivers it at once
 * anyway), which needs no memory; a warn line, rate-limited, says so. So
 * the message is never held past delay_ms (or its lease's end, if
 * sooner) for want of memory. No such lease of c's: nothing happens.
 * Loop thread. */
void tn_consumer_put_back(tn_consumer_t *c, uint32_t partition, uint64_t offset, bool check_nonce,
                          uint32_t nonce, int64_t delay_ms);
/* The end of a dead-letter move (tn_consumer_dead_letter): status 0 once
 * the copy is durable in the dead-letter topic and the source's FIN in
 * its log (the move is done, and counted: tn_channel_t.dlq_count,
 * tn_broker_t.dlq_moves); else why the message went back to its channel,
 * to be delivered and moved again later: UV_EPERM (refused by
 * tn_broker_t.dlq_refused), the copy's publish error, the FIN's (a full
 * disk, say), UV_ENOMEM, TN_ECLOSED (the channel or the broker went), or
 * TN_EREMOTE (the partition went to another leader meanwhile: no FIN is
 * written here, and that leader's delivery decides). */
typedef void (*tn_dlq_done_cb)(void *arg, int status);
/* Move a message this consumer holds to the channel's dead-letter topic
 * now, whatever the topic's max-attempts (a remote child's message its
 * remote refuses for good: api/rchild.c): a copy of body, with key (NULL
 * or empty: none), is published to tn_channel_dlq_name's topic, then the
 * source is settled, as a dead letter of max-attempts (the same refusal by
 * tn_broker_t.dlq_refused, the same retries: the message goes back to the
 * channel, due again later, and is delivered again meanwhile). Returns as
 * tn_consumer_fin (the lease stays as it was on an error); on 0, cb (may
 * be NULL) runs exactly once, possibly before this returns, when the move
 * ends (tn_dlq_done_cb), with arg (borrowed until then). */
int tn_consumer_dead_letter(tn_consumer_t *c, uint32_t partition, uint64_t offset, bool check_nonce,
                            uint32_t nonce, const tn_msg_t *body, const tn_msg_t *key,
                            tn_dlq_done_cb cb, void *arg);
/* c's hold (tn_consumer_t.hold) let go of a partition with no settle of
 * c's (its leases had lapsed, say): deliver again at the loop's next turn. */
void tn_consumer_unhold(tn_consumer_t *c);
/* The dead-letter topic of ch into out (len at least TN_NAME_MAX + 1):
 * `<topic>.<channel>.DLQ`, or the hashed form (core/name.h). */
void tn_channel_dlq_name(const tn_channel_t *ch, char *out, size_t len);
/* Renew its lease for timeout_ms from now, but (max_ms > 0) never past
 * max_ms after its delivery: nsqd's TOUCH stops at --max-msg-timeout. */
int tn_consumer_touch(tn_consumer_t *c, uint32_t partition, uint64_t offset, bool check_nonce,
                      uint32_t nonce, int64_t timeout_ms, int64_t max_ms);

/* The record at offset of partition p of a ready topic, for a replay
 * read that leases nothing: from the tail cache, or read from disk into it
 * first. 0 with *out (borrowed until control returns to the loop);
 * TN_ENOTFOUND when offset is at or past what consumers may see;
 * UV_ERANGE when it is below the oldest record kept; TN_EGAP when there is
 * no record there (a hole recovery skipped); UV_EINVAL for no such
 * partition; UV_EAGAIN when it is being read: w (when not NULL) is queued
 * and its cb runs when the read ends (0 or the read's error), and the
 * caller looks again. */
int tn_part_record(tn_topic_t *t, uint32_t p, uint64_t offset, tn_waiter_t *w,
                   const tn_centry_t **out);

/* Stats of one channel. */
typedef struct {
    uint64_t depth; /* unsettled messages from the frontier to the tail */
    uint64_t inflight;
    uint64_t deferred;
    uint64_t finish_count;
    uint64_t requeue_count;
    uint64_t timeout_count;
    uint64_t message_count; /* entered the channel: finished + depth; survives restarts */
} tn_channel_stats_t;
void tn_channel_stats(const tn_channel_t *ch, tn_channel_stats_t *out);

/* Pause or unpause delivery of a channel on this node: applied at once,
 * to every partition this node leads now or comes to lead later (the
 * pause is the node's, as a lone nsqd's channel; docs/cluster.md). For a
 * durable channel the node's pause file is written (what a restart
 * loads) and a record is queued to the log of each partition held here
 * (durable once tn_channel_sync_all's cb ran with 0). Other nodes are
 * not told. 0 or the first error; when the log of a partition held here
 * cannot take records (found the disk full, or failed), that error with
 * nothing changed (neither the pause, nor its file, nor any log). */
int tn_channel_pause(tn_channel_t *ch, bool paused);
/* Drop everything the channel holds: its backlog up to the tail, deferred
 * and requeued messages, and what is in flight (later FINs for those
 * fail), in the partitions held here. Counters stay. Durable for durable
 * channels as tn_channel_pause, and refused as it is (the error, nothing
 * dropped) when the log of a partition held here cannot take records. */
int tn_channel_empty(tn_channel_t *ch);
/* Pause or unpause a topic on this node, as nsqd does: while paused, what
 * is published is held at the topic (its depth) and no channel receives
 * it; what the channels held before goes on being delivered. Unpausing
 * hands the held messages to every channel, in order. Applied at once;
 * durable as nsqd's, which keeps it in its metadata file: the topic's
 * pause file is written (paused, and each local partition's hold point),
 * so a restart comes back paused holding exactly what arrived since the
 * pause (an ephemeral topic's pause is in memory only; a topic with no
 * directory here keeps it in memory until its first partition here is
 * made, then writes it). cb(arg, status) runs exactly once on the loop
 * thread, possibly before this returns, once the file holds this pause
 * (0; nothing to write counts) or with the write's error (the topic then
 * goes back to the pause the file held, as a restart loads it, and so
 * does every ask that write covered or that came since, each answered
 * the error: tpause_take_back); cb may be NULL.
 * 0, or UV_ENOMEM (nothing changed, cb does not run). Loop thread. */
typedef void (*tn_topic_pause_cb)(void *arg, int status);
int tn_topic_pause(tn_topic_t *t, bool paused, tn_topic_pause_cb cb, void *arg);
/* Messages the topic itself holds: while it has no channel, what it
 * retains for the first one; while paused, what arrived since. Control
 * records are not messages and do not count. */
uint64_t tn_topic_depth(const tn_topic_t *t);
/* Messages ever written to the log of partition p (local: its log is
 * open here), restarts and retention included: its next offset less the
 * control records below it (storage/plog.h, tn_plog_controls_below), so
 * a replicated partition counts what a factor-1 one would for the same
 * publishes. Any thread that may read the topic. */
uint64_t tn_part_message_count(const tn_part_t *p);
/* Deletion: consumers are kicked, in-flight messages dropped, files
 * removed (durably, before cb). cb (may be NULL) runs on the loop thread
 * with 0 or an error once it is done; the object is gone by then. While a
 * topic is being deleted, looking it up gives UV_EBUSY. */
typedef void (*tn_delete_cb)(void *arg, int status);
/* Drop what the topic itself holds (tn_topic_depth), as nsqd's
 * /topic/empty: the retained messages of a topic without channels are
 * dropped durably (the first channel made later starts after them); a
 * paused topic's held messages are settled in every channel (done once
 * those records are durable, then the pause file holds the new hold
 * points, tn_topic_pause: never written before the records, by this or
 * any other write of the file, and not after a record that failed).
 * Channels' own messages are untouched. cb runs with 0 or an error once
 * done (possibly before this returns). 0 when under way; UV_EBUSY (not
 * ready, or being emptied); UV_EAGAIN (paused, and a channel has not yet
 * finished the messages from before the pause: they cannot be told
 * apart); UV_ENOMEM (for a topic without
 * channels; for a paused one, nothing was settled). */
int tn_topic_empty(tn_topic_t *t, tn_delete_cb cb, void *arg);
int tn_channel_delete(tn_channel_t *ch, tn_delete_cb cb, void *arg);
/* Write ch->stamp as the channel's stamp file when the file does not hold
 * it (a channel loaded from files written before stamps, or made before
 * its record was known, whose record the catalog just matched it to), on
 * a worker: the channel serves on meanwhile, and its deletion waits for
 * the write (so it never lands beside the files of a channel made after
 * this one is deleted). copy_here: the caller knows of a copy of one of
 * the topic's partitions open here outside the engine (the replica
 * manager's own), so the topic has a directory here. Nothing when there
 * is nothing to write, no topic directory here, or while a write runs
 * (the next call tries again). Loop thread. */
void tn_channel_keep_stamp(tn_channel_t *ch, bool copy_here);
int tn_topic_delete(tn_topic_t *t, tn_delete_cb cb, void *arg);
/* Delete the topic called topic (channel NULL) or its channel, waiting
 * first for it, or a channel of it, to finish being created or grown (the
 * metastore has already dropped the record: the files must go too). cb
 * runs with 0 (deleted, or being deleted by another request),
 * TN_ENOTFOUND (no such topic or channel), TN_ECLOSED or an error, possibly
 * before this returns. 0, or UV_ENOMEM (cb will not run). */
int tn_broker_delete(tn_broker_t *b, const char *topic, const char *channel, tn_delete_cb cb,
                     void *arg);

/* Grow a ready topic to nparts partitions (more than it has). The new
 * partition logs are opened on a worker thread, and each channel gets the
 * new partitions from their first offset (all of it is new). Meanwhile
 * the topic answers lookups as being created (publishes wait), and
 * creating or deleting a channel waits or is refused. cb runs with 0 or
 * the error; after an error the topic keeps its partitions (a new
 * partition's files may remain; the next start, which counts partition
 * directories, takes them). 0 when under way, UV_EINVAL (not more),
 * UV_EBUSY (not ready, or a channel is being made), UV_ENOMEM. */
int tn_topic_grow(tn_topic_t *t, uint32_t nparts, tn_delete_cb cb, void *arg);
/* Whether t is free for a growth or a deletion: 0 when it and every
 * channel of it are ready. UV_EAGAIN while it is being created, grown or
 * placed, or a channel of it is being made: w is queued on that and runs
 * once it ends (with its outcome; look again then). UV_EBUSY: it is being
 * deleted or failed. */
int tn_topic_wait_idle(tn_topic_t *t, tn_waiter_t *w);

/* Set (fn NULL: remove) the grow-here hook. Publishes waiting on the old
 * one still get its answer. */
void tn_broker_set_grow_here(tn_broker_t *b, tn_grow_here_fn fn, void *arg);
/* Set (fn NULL: remove) the append check (tn_append_check_fn); arg
 * borrowed until it is removed or the broker closes. */
void tn_broker_set_append_check(tn_broker_t *b, tn_append_check_fn fn, void *arg);
/* Set (fn NULL: remove) how the engine publishes on its own behalf
 * (tn_publish_fn); arg borrowed until it is removed. Publishes under way
 * keep the one they started with. */
void tn_broker_set_publisher(tn_broker_t *b, tn_publish_fn fn, void *arg);
/* Set (fn NULL: remove) the placement function. Topics already open keep
 * their partitions until tn_broker_follow_placement. */
void tn_broker_set_placement(tn_broker_t *b, tn_place_fn fn, void *arg);
/* Follow the placement for every topic (tn_topic_follow_placement). */
void tn_broker_follow_placement(tn_broker_t *b);
/* Ask the placement again for each partition of t and follow it: remote
 * partitions now placed here are opened (on a worker thread; meanwhile
 * the topic answers lookups as being created, publishes wait), and local
 * ones now owned by another node become remote, their files left on disk
 * (logged at warning level; such a partition is served here again only
 * after a restart). The leases on a partition that goes remote end
 * (back among its pending entries, nothing recorded: its new owner
 * delivers those messages again); when no partition of t is served here
 * after that, the consumers with a moved callback are detached and told.
 * A local partition the placement leaves unplaced (owner 0) stays local,
 * except a replicated one (place_readopt): not placed here, it goes
 * remote with no leader too. A remote partition opened here again
 * whose channels' logs the engine still holds (tn_topic_part_abandon)
 * has them closed first, once their queued records completed (so their
 * completions and tn_channel_sync waits end as ever), then opened from
 * their files. A topic busy being created, grown or
 * given a channel follows once that ends. cb (may be NULL) runs with 0 or
 * the error of the opening (the partitions stay remote then), possibly
 * before this returns; 0, or UV_ENOMEM (cb will not run). */
int tn_topic_follow_placement(tn_topic_t *t, tn_delete_cb cb, void *arg);
/* Whether partition p of t has its log here. */
static inline bool tn_topic_part_local(const tn_topic_t *t, uint32_t p)
{
    return p < t->nparts && !t->parts[p]->remote;
}
/* The log of partition p of t: a local partition's, or the one set aside
 * for a partition made remote (the replica manager follows on it), or
 * NULL. Borrowed: owned by the engine. */
static inline tn_plog_t *tn_topic_part_plog(const tn_topic_t *t, uint32_t p)
{
    return p < t->nparts ? t->parts[p]->plog : NULL;
}
/* Whether t is being created, grown or given partitions placed here
 * (tn_topic_follow_placement opening them) or a channel: its partitions'
 * logs may be opened meanwhile, and tn_broker_topic answers UV_EAGAIN.
 * Loop thread. */
bool tn_topic_busy(const tn_topic_t *t);
/* The stamp a job making a local partition directory of t must write
 * first (storage/store.h): record_created_ms when the topic's directory
 * does not hold it yet, else 0. tn_topic_stamped notes that a job wrote
 * ms. Loop thread. */
int64_t tn_topic_stamp_due(const tn_topic_t *t);
void tn_topic_stamped(tn_topic_t *t, int64_t ms);
/* Write record_created_ms as t's stamp when its directory is here without
 * it (a topic loaded from a directory written before stamps, whose record
 * the catalog just took as its own; or a topic whose only files here are
 * a replica's own copies, opened before the engine's topic was made):
 * on a worker, the topic busy meanwhile (tn_topic_busy; publishes and
 * consumes go on, a deletion waits in tn_topic_wait_idle, and is refused
 * with UV_EBUSY if asked directly), so the write never lands in the
 * directory of a topic made after this one is deleted. copy_here: the caller knows of a
 * copy of one of t's partitions open here outside the engine (the replica
 * manager's own, which t->parts does not show). Nothing when there is
 * nothing to write, or while t is busy (the next call tries again). Loop
 * thread. */
void tn_topic_keep_stamp(tn_topic_t *t, bool copy_here);
/* The topic named name in any state (being created, grown, placed or
 * deleted too, unlike tn_broker_topic), or NULL. Borrowed: owned by the
 * engine. Loop thread. */
tn_topic_t *tn_broker_topic_find(tn_broker_t *b, const char *name);
/* Close the log set aside for remote partition p of t (made remote for a
 * replicated partition's new leader, tn_topic_follow_placement) because
 * the replica manager wrote the partition's files through a log object
 * of its own since: this one's view is stale, and served again it would
 * lead from where it ends. It is closed without touching a file
 * (tn_plog_abandon); placed here again, the partition is opened from its
 * files, as one never held here. The channels' logs of p stay open (a
 * follower's records go through them, tn_broker_chan_apply); placed here
 * again, they are closed then (after their queued records) and opened
 * from their files with the partition. 0 (done, or nothing to do: p local, or
 * remote with no log), or UV_EBUSY while the topic is busy
 * (tn_topic_busy) or a read, collection or advance started before it
 * was set aside still uses that log: ask again later.
 * Loop thread. */
int tn_topic_part_abandon(tn_topic_t *t, uint32_t p);
/* Close everything the engine holds of remote partition p of t, so that
 * nothing of it uses the partition's files any more: the log set aside
 * (closed as tn_topic_part_abandon closes it: no file touched) and every
 * channel's log of the partition. A replicated partition dropped from
 * this node's replicas does it before its copy goes to quarantine/
 * (cluster/replica.c, "quarantine marks"). Placed here again, the
 * partition is opened from its files, as one never held here. cb(arg, 0)
 * runs on the loop thread once every log closed (possibly before this
 * returns). 0 (cb will run), UV_EINVAL (no partition p), UV_EBUSY (p is
 * local or being opened, the topic is busy, a read, collection or advance
 * still uses the set-aside log, or a channel log has records in flight
 * or waits on it: ask again later; cb will not run), UV_ENOMEM.
 * Loop thread. */
int tn_topic_part_release(tn_topic_t *t, uint32_t p, tn_delete_cb cb, void *arg);
/* Hold (or resume) deliveries of partition p of t (no-op past nparts): a
 * replicated partition's leader whose move is about to hand its
 * leadership to another node stops delivering first, so that the new
 * leader never delivers what this one still could, and a new leader
 * holds until the old one stopped (cluster/replica.c, handfence.h).
 * Appends, settles and leases already out go on. Loop thread. */
void tn_topic_part_hold(tn_topic_t *t, uint32_t p, bool held);
/* Hold (held true) the deliveries of every partition open in the engine
 * now, or resume those so held (false): the catalog holds what recovery
 * opened in a cluster until it followed the placement once with a
 * caught-up metastore replica (api/catalog.c). Loop thread. */
void tn_broker_hold_recovered(tn_broker_t *b, bool held);
/* Requeue every lease out on partition p of t, in every channel, as a REQ
 * record due now that keeps the lease's attempts, then wait until those
 * records are durable (and, with channel-state replication, on enough
 * replicas: tn_channel_sync): cb(arg, 0) then, or with the first error of
 * a channel log. A replicated partition's leader about to hand its
 * leadership over does it (cluster/replica.c), so the records carry the
 * attempts of the messages in flight to the new leader. The holders'
 * settles fail afterwards (the leases are gone); nothing is delivered
 * meanwhile only if the caller holds the partition (tn_topic_part_hold).
 * A lease whose REQ is refused (tn_consumer_req: out of memory, a log
 * that cannot take the record) stays out, and cb gets that error (the
 * first one) once the others' records are durable: the caller tries
 * again. cb runs exactly once, possibly before this returns; UV_ENOMEM
 * (cb does not run, nothing requeued) or 0. Loop thread. */
typedef void (*tn_requeue_cb)(void *arg, int status);
int tn_topic_part_requeue_leases(tn_topic_t *t, uint32_t p, tn_requeue_cb cb, void *arg);
/* Wait until what was queued so far to the logs of every partition of ch
 * held here is durable (tn_channel_sync of each), and the pause file
 * written for every tn_channel_pause before: an answer that says a
 * tn_channel_pause or tn_channel_empty is done waits for it. cb runs
 * exactly once, possibly before this returns, with 0 or the first error;
 * UV_ENOMEM (cb does not run) or 0. Loop thread. */
int tn_channel_sync_all(tn_channel_t *ch, tn_requeue_cb cb, void *arg);
/* Deliver from partition p of t (no-op past nparts) only before loop
 * time until (uv_now; 0: no bound): a replicated partition's leader
 * delivers only while its metastore replica is known to be current
 * (cluster/handfence.h). A lease renewed after it lapsed resumes the
 * deliveries. Loop thread. */
void tn_topic_part_lease(tn_topic_t *t, uint32_t p, uint64_t until);
/* Set the durability of every local partition log (tn_plog_set_durability)
 * and of those opened later. */
void tn_topic_set_durability(tn_topic_t *t, int mode);

#endif
