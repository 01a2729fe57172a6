/* Names shared by the files of src/queue and no one else. */
#ifndef TN_QUEUE_INTERNAL_H
#define TN_QUEUE_INTERNAL_H

#include "core/platform.h"

#include "queue/queue.h"

/* A pending entry: a message of a channel partition waiting for a time. */
typedef struct {
    tn_heap_node_t node; /* pending: key = due, monotonic ms; ready: key = offset */
    uint64_t offset;
    uint32_t attempts; /* deliveries so far */
    bool ready;
} tn__pend_t;

/* broker.c */
static inline void tn__broker_event(tn_broker_t *b, tn_broker_event_t ev, const char *topic,
                                    const char *channel)
{
    for (uint32_t i = 0; i < b->nlisteners && !b->closing; i++)
        b->listeners[i].cb(b->listeners[i].arg, ev, topic, channel);
}
void tn__broker_pump_later(tn_channel_t *ch);
/* Recompute when cp next needs the timer (lease deadline, pending due). */
void tn__broker_rewake(tn_chpart_t *cp);
/* cache.c: the tail cache. */
tn_centry_t *tn__cache_get(tn_part_t *p, uint64_t offset);
/* A record just appended (offsets arrive in order per partition): into the
 * ring. Takes over one reference to body and to key (NULL: none). */
void tn__cache_append(tn_part_t *p, uint64_t offset, int64_t publish_ns, int64_t deliver_at_ms,
                      tn_msg_t *body, tn_msg_t *key);
/* A record read from disk (body NULL for an offset with no record): into
 * the cold map. Takes over one reference to body and to key. */
int tn__cache_put(tn_part_t *p, uint64_t offset, int64_t publish_ns, int64_t deliver_at_ms,
                  tn_msg_t *body, tn_msg_t *key, bool control);
void tn__cache_drop_part(tn_part_t *p);
/* Start reading records from `from` into the cache, unless a read is under
 * way; the topic's channels are pumped when it ends. */
void tn__part_fetch(tn_part_t *p, uint64_t from);
void tn__broker_work_done(tn_broker_t *b);
int64_t tn__ttl_for(const tn_broker_t *b, const char *name);
void tn__topic_unlink(tn_broker_t *b, tn_topic_t *t);
tn_topic_t *tn__topic_find(tn_broker_t *b, const char *name, size_t len);

/* topic.c */
/* Close a partition log whose deletion waited for a read to end. */
void tn__part_close_deferred(tn_part_t *p);
/* p's log is open here (loaded, made, grown, placed, led again): ready
 * to serve; a pause kept in memory for want of the topic's directory here
 * is written now (tn__topic_pause_dir_made). */
void tn__part_ready(tn_part_t *p);
/* A directory of t is here now: a pause its last write found none for is
 * written. */
void tn__topic_pause_dir_made(tn_topic_t *t);
/* t paused as its pause file says (rc: the read's status, a file that
 * cannot be read keeps it paused from each partition's end; holds: the
 * file's n points, borrowed), its partitions' logs opened. _clamp takes
 * each point above its partition's end here (0 with no log here) down to
 * it, writing the file with them at once (blocking: before the loop runs
 * or on the worker making the topic); _take sets the pause in memory
 * (loop thread, or before it runs). */
void tn__topic_pause_clamp(tn_topic_t *t, int rc, uint64_t *holds, uint32_t n);
/* A pause file write (of wrote) failed, answered with the error: the
 * pause (*paused, a channel's or a topic's) goes back to kept, what the
 * file held before, as a restart would load it, and one more write is
 * asked (*asked) when the failed one may have left the file holding
 * wrote (its rename done, the directory's sync failed). Whether *paused
 * changed. */
static inline bool tn__pause_take_back(bool *paused, bool kept, bool wrote, uint64_t *asked)
{
    bool was = *paused;
    *paused = kept;
    if (wrote != kept)
        (*asked)++;
    return was != kept;
}
void tn__topic_pause_take(tn_topic_t *t, int rc, const uint64_t *holds, uint32_t n);
/* Partition p of t had its log cut at cut (storage/store.h,
 * tn_store_set_cut_watch): while t is paused, p's hold points come down
 * to cut and the pause file is written with them. True when wait is kept
 * (ended by tn_store_cut_done once that write has ended); false: nothing
 * to wait for. */
bool tn__topic_hold_cut(tn_topic_t *t, uint32_t p, uint64_t cut, tn_store_cut_t *wait);
void tn__broker_unstarve(tn_broker_t *b);
void tn__topic_pump_all(tn_topic_t *t);
void tn__topic_free(tn_topic_t *t);
/* Whether t has a directory here for a stamp to go in: a log the engine
 * holds (served, or set aside for another owner), or, copy_here, a
 * replica's own copy, which it does not. */
bool tn__topic_dir_here(const tn_topic_t *t, bool copy_here);
void tn__waiters_fire(tn_waiter_t **list, int status);
/* Load a topic found on disk: the partitions present are opened, the
 * others (a cluster node holds only its own) are remote, not placed yet. */
int tn__topic_load(tn_broker_t *b, const char *name, uint32_t nparts, const bool *present,
                   tn_topic_t **out);
void tn__topic_insert(tn_broker_t *b, tn_topic_t *t);
tn_topic_t *tn__topic_new(tn_broker_t *b, const char *name, size_t len, uint32_t nparts);

/* A creation the gate holds: the worker job to queue once it opens. */
struct tn_gate_s {
    tn_broker_t *b;
    uv_work_t *work;
    uv_work_cb run;
    uv_after_work_cb after;
    bool asking;   /* inside the gate function */
    bool answered; /* it answered before returning */
    int status;
    tn_topic_t *place; /* a topic being created: placed once the gate opens */
    /* A channel being created: its stamp, matched by the gate, is the one
     * its creation writes (tn__channel_gate_passed). */
    tn_channel_t *chan;
};
/* The gate opened for ch's creation: its job writes ch->stamp (0: removes
 * a stamp file left by an earlier channel of the name). */
void tn__channel_gate_passed(tn_channel_t *ch);
/* Ask the placement about every partition of t (being created): marks the
 * remote ones, which the creation does not open. */
void tn__topic_place_new(tn_topic_t *t, uint32_t from);
#ifdef TN_TEST
/* TERN_TEST_PLACE_DELAY_MS (topic.c): a worker about to open partitions
 * of t here waits first. */
void tn__place_test_delay(const tn_topic_t *t);
#else
#define tn__place_test_delay(t) ((void)(t))
#endif
/* A creation, growth or channel creation of t ended: run a placement
 * follow that waited for it. */
void tn__topic_place_resume(tn_topic_t *t);
/* Ask the gate (if any) before queueing work; else queue it at once. 0
 * (queued, or waiting for the gate: after runs in any case), or an error
 * (nothing will run: the gate refused at once, or uv_queue_work failed). */
int tn__gate_then_queue(tn_broker_t *b, uv_work_t *work, uv_work_cb run, uv_after_work_cb after,
                        tn_topic_t *t, tn_channel_t *ch);

/* channel.c */
/* Give cp, the idle state of a channel on a partition that was remote,
 * the log (NULL: in memory; transferred: cp's until it is closed) and
 * cursor (taken over) of the partition now opened here. cp must hold no
 * log: one it held is closed first (topic.c, place_close_held), never
 * overwritten. 0 or UV_ENOMEM. */
int tn__chpart_reset(tn_chpart_t *cp, tn_chanlog_t *cl, tn_cursor_t *cur);
/* cp's partition is led here now: its deliveries follow this node's pause
 * (ch->paused), and so does its own flag, which travels with it (a move,
 * a follower's copy): a PAUSE record when they differ. Loop thread. */
void tn__chpart_take_pause(tn_chpart_t *cp);
/* Set up a channel's state on one partition from its log (NULL: in
 * memory) and recovered cursor (taken over on success). 0 or UV_ENOMEM. */
int tn__chpart_init(tn_chpart_t *cp, tn_channel_t *ch, tn_part_t *part, tn_chanlog_t *cl,
                    tn_cursor_t *cur);
/* Kick the consumers of ch, unlink it from its topic and close its channel
 * logs. Returns the number of logs being closed; when it is more than 0,
 * done(arg) runs once, after the last of them closed, and with 0 it never
 * runs (an ephemeral channel is gone when this returns). */
uint32_t tn__channel_drop(tn_channel_t *ch, void (*done)(void *arg), void *arg);
/* Free the pooled channel-log requests (at broker close). */
void tn__channel_spares_free(void);
/* Topic dlq is being deleted, or was: the copies its channels' dead-letter
 * moves put there (tn_chpart_t.dlq_copied) go with it, so each such
 * message moves again, copy and all (not its FIN alone, which would leave
 * it in no topic). Called when the deletion starts and when it ends (a
 * move's FIN refused meanwhile). Loop thread. */
void tn__channel_dlq_gone(tn_broker_t *b, const char *dlq);
void tn__channel_pump(tn_channel_t *ch);
/* Expire leases and release pending entries that are due. */
void tn__chpart_wake(tn_chpart_t *cp, int64_t now_ms);
void tn__channel_free(tn_channel_t *ch);
/* The partition of cp stopped being served here (another node leads it,
 * or owns it): every lease on it ends as a consumer's detach ends them,
 * back among the pending entries in memory with nothing recorded (the
 * channel log follows the new leader from now on, which delivers them
 * again; a FIN, REQ or TOUCH sent here for them fails, and their
 * consumers' credit is free for the partitions still served here). A
 * dead-letter move's lease (no owner) finishes on its own, writing no
 * FIN (TN_EREMOTE), the message pending here like the others. */
void tn__chpart_left(tn_chpart_t *cp);
/* A partition of t served here went to another node: the consumers of
 * its channels that have a moved callback are detached and told
 * (queue.h, tn_consumer_t.moved), then those with a left callback are
 * told, attached still (tn_consumer_t.left). */
void tn__topic_moved_away(tn_topic_t *t);
/* Load a durable channel found on disk (startup). */
int tn__channel_load(tn_topic_t *t, const char *name);
/* The frontier GC may go below: the lowest durable frontier of the
 * topic's durable channels on partition p, or UINT64_MAX when it has none. */
uint64_t tn__topic_gc_bound(tn_topic_t *t, uint32_t p);
/* The offset below which the partition's channels may deliver: what is
 * visible and appended, and while the topic is paused, its hold point. */
uint64_t tn__part_limit(const tn_part_t *p);
/* An ephemeral topic's partition p: every channel is done below this
 * (0 while the topic has no channel: it holds everything for the first). */
uint64_t tn__topic_mem_bound(tn_topic_t *t, uint32_t p);
/* Drop what the channels of an ephemeral topic's partition are done with. */
void tn__part_mem_trim(tn_part_t *p);
/* Delete an ephemeral topic that has no channel left (others: nothing). */
void tn__topic_vanish_if_unused(tn_topic_t *t);
/* Settle every offset below `below` on partition p of each channel (GC by
 * age passed them). */
void tn__topic_settle_below(tn_topic_t *t, uint32_t p, uint64_t below);
/* Wait until what was queued so far to the logs of every channel of t,
 * on every partition held here, is durable: as tn_channel_sync_all, for
 * all the topic's channels at once. */
int tn__topic_sync_channels(tn_topic_t *t, tn_requeue_cb cb, void *arg);

#endif
