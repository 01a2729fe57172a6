/* The metastore's state machine: topics (with their channels), users and
 * members, changed only by applying commands (meta/cmd.h) in log order, so
 * every replica that applies the same log holds the same state. Topics and
 * users are kept sorted by name (pages of GET /v1/topics come in that
 * order).
 *
 * Placement (in the state machine, so every replica agrees): a TOPIC_PUT
 * that makes or grows a topic gives each new partition p the owner = the
 * alive members not on the command's skip list, sorted by id, index p mod
 * n. The skip list is the leader's: the members it had not heard from
 * recently when it proposed the command (meta.h), carried in the command
 * so that no replica consults a clock of its own; when it would leave no
 * member, every alive member is eligible (a fallback to the placement
 * before skip lists, rather than refusing the create). A partition with no owner (no
 * member alive then, or a snapshot from before owners were kept) gets one
 * by the same rule when a member registers or comes back alive. Owners are
 * sticky: a dead owner keeps its partitions. An NSQ topic (not native)
 * also grows by TOPIC_GROW_FOR: one partition more, owned by the member
 * that asks, when it owns none of the topic yet (the way a fleet of nsqd
 * spreads a topic over the nodes its producers publish to).
 *
 * Snapshot layout: [4] "TMS1" [4] 0 [8] users_version [8] record count,
 * then that many records in the command encoding: topics, each followed by
 * its channels and its PART_OWNERS (when any partition has an owner), then
 * users, then members (MEMBER_REC, then MEMBER_STATUS when dead and
 * MEMBER_DRAIN when draining). An older snapshot (MEMBER_REG or MEMBER_PUT
 * members, no owners) still restores.
 *
 * Replicated partitions (replication_factor > 1; docs/replication.md): a
 * TOPIC_PUT with clamp (cmd.h) that makes a topic records
 * min(asked, members alive and live) as its factor, decided here at apply
 * so that every replica records the same whichever node proposed it;
 * placement picks min(factor, n) members from the same eligible list,
 * starting at index p mod n and wrapping, so that leadership spreads, and
 * makes the partition's tn_pstate_t (meta/partstate.h) over them; owners[p]
 * is the first of them (the preferred leader) and tn_meta_state_owner
 * answers the current leader. A PUT never changes a topic's factor: the
 * stored one stays (TOPIC_FACTOR changes it, state.c topic_factor: raised
 * above 1, every partition without a state gets one over its owner); a
 * new min_insync reaches every partition state. A member is live for elections unless a
 * MEMBER_FENCE ended its session and it has not registered since; a
 * registration with another incarnation than the recorded one, or another
 * boot id (a restart), fences the old session first (the same apply), and a registration that makes
 * a member live runs tn_pstate_elect over the offline partitions. The snapshot adds PART_STATE
 * after a replicated topic's owners, and MEMBER_FENCE after a fenced member's record;
 * the removed members' tombstones (MEMBER_REMOVE) and the finished moves
 * (MOVE_DONE, oldest first) come next, then the remotes (REMOTE_SALT, then
 * REMOTE_PUT each: meta/remote.h), and a rebalance wanted
 * (CLUSTER_REBALANCE) last.
 *
 * Creation marks (cmd.h tn_meta_topic_t.creating): a /v1 creation's
 * TOPIC_PUT makes its record marked with the creating member's id; the
 * mark stays across updates, and goes by TOPIC_READY (the creator made
 * its part; compare-and-set on created_at_ms, so a stale one never
 * readies a record made again) or when that member's session is fenced
 * (MEMBER_FENCE, or a registration with another incarnation or boot id:
 * fence_member). A fenced creator can no longer answer the creation, nor
 * take its record back; what it made of the topic stays, and nothing was
 * acknowledged on a marked topic (every produce path holds publishes to
 * it: cluster/router.h), so the topic is simply ready, as one whose
 * creator crashed after its 201 would be. The snapshot writes the mark
 * in the topic's record. A creator whose part failed takes its record
 * back with a TOPIC_DELETE naming the record's created_at_ms (if_created):
 * the record made again under the name since (deleted and made again by
 * another client, through any node, after the creator looked at its
 * replica) is refused as TN_ECHANGED and stays.
 *
 * Removed members (MEMBER_REMOVE, DELETE /v1/cluster/members/{id}): a
 * member that holds no partition (no replica of a replicated one, no
 * factor-1 one) leaves the members, so it counts no more for placement,
 * liveness or quorum checks; refused (nothing changes) when it still holds
 * partitions (UV_EBUSY), when it is the last member or one of the last
 * three of a cluster of three or more (UV_EPERM: the metastore keeps three
 * voters), or when it registered with another data directory since the
 * door looked (TN_ECHANGED). Its tombstone (id, the incarnation of the
 * data directory it had, when) stays: a registration of that id with that
 * incarnation (or none) is refused with UV_EPERM, so a removed process
 * still running, or restarted on its old data directory, never comes back
 * as a member; one with another incarnation (an empty data directory that
 * reuses the id) clears the tombstone and registers as a new member. The
 * metastore leader takes tombstoned ids out of the Raft configuration
 * (meta.h). The snapshot writes tombstones (MEMBER_REMOVE) after the
 * members.
 *
 * Threads: the caller's (the loop thread in ternd). */
#ifndef TN_META_STATE_H
#define TN_META_STATE_H

#include "core/platform.h"

#include "meta/cmd.h"

typedef struct {
    tn_meta_topic_t rec;
    char **channels; /* sorted, owned */
    /* The stamp of each channel (CHANNEL_PUT, cmd.h; 0: made by an older
     * build), beside its name (chcap slots). */
    uint64_t *chstamps;
    uint32_t nchannels;
    uint32_t chcap;
    uint32_t nchildren; /* topics whose parent this is (derived, not stored) */
    /* Owner member id of each of rec.partitions partitions, 0 = none yet
     * (owners_cap slots, zero past rec.partitions). */
    uint64_t *owners;
    uint32_t owners_cap;
    /* Replicated topics: the state of each partition (owners_cap slots;
     * nreplicas 0 = not placed yet). NULL for a factor-1 topic. */
    tn_pstate_t *pstates;
    /* tn__meta_owner_carry's mark between its two walks (meta/owner.h;
     * false outside it). */
    bool carry;
} tn_meta_topic_entry_t;

/* Told of every partition state an applied command changed, made or
 * removed (ps NULL), as the change is applied. */
typedef void (*tn_meta_pstate_cb)(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps);

/* A removed member's tombstone (above). */
typedef struct {
    uint64_t id;
    uint64_t incarnation; /* its data directory's when removed (0: unknown) */
    int64_t removed_ms;   /* the proposer's wall clock */
} tn_meta_removed_t;

typedef struct {
    tn_meta_topic_entry_t **topics; /* sorted by name */
    size_t ntopics;
    size_t tcap;
    tn_meta_user_t **users; /* sorted by name */
    size_t nusers;
    size_t ucap;
    tn_meta_member_t *members; /* sorted by id */
    size_t nmembers;
    size_t mcap;
    uint64_t users_version; /* bumped by every user change (credential caches key on it) */
    /* Bumped by every apply of a topic or user command (TOPIC_*,
     * USER_*), applied or refused, and by every restore: who may touch a
     * topic (its owner, a dead-letter parent's owner, users and their
     * grants) changes only with it. This replica's own count, not in
     * snapshots; the doors key decisions they cache on it
     * (tn_meta_access_gen). */
    uint64_t access_gen;
    uint64_t unassigned;     /* partitions with no owner, over every topic */
    tn_pstate_node_t *nodes; /* the members as partstate sees them (derived) */
    size_t nodes_cap;
    tn_meta_pstate_cb pstate_cb; /* optional; kept across a restore */
    void *pstate_arg;
    /* Finished moves, a ring of the last TN_META_MOVES_KEPT (the oldest at
     * moves_next once full): tn_meta_state_move_done. */
    tn_meta_move_t moves[TN_META_MOVES_KEPT];
    uint32_t nmoves, moves_next;
    tn_meta_remotes_t remotes; /* meta/remote.h */
    /* The rebalance wanted (CLUSTER_REBALANCE; wanted false: none), which
     * the metastore leader drives (meta/rebalance.h). */
    tn_meta_rebal_t rebal;
    tn_meta_removed_t *removed; /* tombstones, sorted by id */
    size_t nremoved, rcap;
} tn_meta_state_t;

void tn_meta_state_init(tn_meta_state_t *s);
void tn_meta_state_fini(tn_meta_state_t *s);

/* Apply one command. 0; UV_EEXIST (a PUT with if_absent found the record);
 * TN_ENOTFOUND (a delete of a missing record, a channel of a missing
 * topic, a PUT with if_unchanged of a missing record); TN_ECHANGED (a
 * PUT with if_unchanged found another record; but a TOPIC_PUT or
 * USER_PUT marked again (cmd.h) that finds exactly the record it would
 * write answers 0 and changes nothing: the second copy of a proposal
 * re-sent to a new leader answers as the first did); UV_ENOENT (a TOPIC_PUT
 * naming a parent that is not there); UV_EPERM (a TOPIC_PUT whose owner
 * rule CHECK finds a dead-letter name's parent owned by another: meta/owner.h
 * rule 3; a USER_DELETE of the root user); UV_EINVAL (a TOPIC_PUT naming the
 * topic itself as its parent; PART_OWNERS, a snapshot record); TN_ECHANGED
 * also for a MEMBER_STATUS whose heartbeat is not the member's; for
 * TOPIC_GROW_FOR TN_ENOTFOUND (no such topic), UV_EPERM (a native topic),
 * UV_ENOENT (no such member) or UV_ERANGE (the most partitions there can
 * be), and 0 also when the member owns a partition of it already (nothing
 * changes then); UV_ENOMEM. A refused command changes nothing.
 * Replicated partitions: PART_ISR, PART_LEADER, PART_REBALANCE and
 * PART_CORRUPT answer TN_ENOTFOUND (no such topic or partition) or
 * UV_EINVAL (a factor-1 or unplaced partition), else partstate.h's answer
 * (PART_REBALANCE: UV_EAGAIN when the preferred leader is not ready);
 * MEMBER_FENCE TN_ENOTFOUND (no such member) or TN_ECHANGED (the member
 * registered with another incarnation since); PART_STATE (a snapshot
 * record) UV_EINVAL. PART_MOVE answers like the other PART_* for the
 * partition, then partstate.h's (begin UV_EBUSY / UV_EINVAL, complete
 * TN_ENOTFOUND / UV_EAGAIN, abort and fail TN_ENOTFOUND / UV_EPERM); a
 * completed, aborted or failed move is kept among the finished ones (owners[p] becomes the
 * new list's first); MOVE_DONE (a snapshot record) UV_EINVAL. MOVE_MARK
 * answers like the other PART_*, then TN_ENOTFOUND (not the move id under
 * way) or UV_EINVAL (a mark of a member outside the target); it bumps no
 * epoch and tells nobody (partstate.h rule 10).
 * CLUSTER_REBALANCE: wanted with if_absent UV_EBUSY while one is wanted
 * (else it replaces it); not wanted TN_ECHANGED unless the one wanted has
 * that id (a leader's "over" never ends a newer one).
 *
 * Owners (meta/owner.h): a USER_DELETE marked disown gives the user's
 * topics to the root user; a TOPIC_PUT's owner rule decides a
 * dead-letter name's owner at its create and carries an owner change to
 * the topic's dead-letter topics, all in the same apply.
 *
 * Links: a child's record names its parent, which is always there.
 * TOPIC_DELETE of a parent detaches its children in the same change
 * (parent, fanout_delay_ms and attach_epoch cleared: they stand alone,
 * keeping their channels). */
int tn_meta_state_apply(tn_meta_state_t *s, const tn_meta_cmd_t *c);

const tn_meta_topic_entry_t *tn_meta_topic_find(const tn_meta_state_t *s, const char *name);
const tn_meta_user_t *tn_meta_user_find(const tn_meta_state_t *s, const char *name);
/* A member by id (members are sorted by id), or NULL. */
const tn_meta_member_t *tn_meta_member_find(const tn_meta_state_t *s, uint64_t id);
/* Whether m (NULL: no such member) is alive and not fenced: a member that
 * may hold, copy or serve a replica now. */
bool tn_meta_member_live(const tn_meta_member_t *m);
bool tn_meta_channel_exists(const tn_meta_state_t *s, const char *topic, const char *channel);
/* Whether the channel is recorded, and then its stamp in *stamp (cmd.h
 * CHANNEL_PUT; 0: none, a record of an older build). */
bool tn_meta_channel_find(const tn_meta_state_t *s, const char *topic, const char *channel,
                          uint64_t *stamp);
/* Index of the first topic whose name sorts after `after` ("" = 0). */
size_t tn_meta_topic_after(const tn_meta_state_t *s, const char *after);

/* The owner (member id) of partition p of topic, 0 = unassigned (or no
 * such partition). */
uint64_t tn_meta_state_owner(const tn_meta_state_t *s, const char *topic, uint32_t p);
/* How many partitions, over every topic, member owns. */
uint64_t tn_meta_state_owned(const tn_meta_state_t *s, uint64_t member);

/* The state of partition p of a replicated topic (borrowed: valid until
 * the next apply or restore), or NULL (a factor-1 topic, no such
 * partition, or not placed yet: no member was alive). */
const tn_pstate_t *tn_meta_state_pstate(const tn_meta_state_t *s, const char *topic, uint32_t p);
/* The state a move of partition p of topic starts from, in *out: the
 * partition's own, or for a factor-1 partition that has none, the one
 * the move's PART_MOVE begin makes it (rule 1 over its owner alone:
 * replicas and ISR the owner, leading in epoch 1, min_insync 1), so the
 * move is a replicated partition's (docs/replication.md, "Moving a
 * factor-1 partition"). 0; TN_ENOTFOUND no such topic or partition;
 * UV_EINVAL not placed (no owner yet); UV_EPERM the owner is not alive
 * (its only copy cannot be copied). The reason is in err. */
int tn_meta_state_move_from(const tn_meta_state_t *s, const char *topic, uint32_t p,
                            tn_pstate_t *out, char *err, size_t errlen);
/* The members as partition states see them: id, incarnation and live
 * (registered and not fenced since). buf[0..cap) is caller-owned; out->v =
 * buf, out->n = min(members, cap). */
void tn_meta_state_nodes(const tn_meta_state_t *s, tn_pstate_node_t *buf, size_t cap,
                         tn_pstate_nodes_t *out);
/* The replication factor a new topic gets for asked (1..5): at most the
 * members that are alive and live (a lone node: 1), at least 1. The
 * apply of a TOPIC_PUT with clamp set decides it so (cmd.h); a door only
 * uses it for a guess. */
uint8_t tn_meta_state_clamp_factor(const tn_meta_state_t *s, unsigned asked);
/* Calls cb for every placed replicated partition (for a new listener). */
void tn_meta_state_each_pstate(const tn_meta_state_t *s, tn_meta_pstate_cb cb, void *arg);

/* The k-th newest finished move (0: the newest), or NULL past the last
 * kept (borrowed: valid until the next apply or restore). */
const tn_meta_move_t *tn_meta_state_move_done(const tn_meta_state_t *s, size_t k);
/* The move id under way: its partition state (borrowed as above) with
 * *topic (borrowed likewise) and *p, or NULL. */
const tn_pstate_t *tn_meta_state_move_find(const tn_meta_state_t *s, uint64_t id,
                                           const char **topic, uint32_t *p);

/* How many moves under way take a replica off member (it is an old
 * replica and not in the target). */
uint64_t tn_meta_state_outbound_moves(const tn_meta_state_t *s, uint64_t member);

/* How many replicated partitions hold member in their replica list (a
 * move's old and target members both, while it runs): what a
 * decommission still has to move off it. */
uint64_t tn_meta_state_replicas_held(const tn_meta_state_t *s, uint64_t member);

/* The partitions member still holds: replicated ones naming it in their
 * replica list, and factor-1 ones it owns. */
uint64_t tn_meta_state_held(const tn_meta_state_t *s, uint64_t member);

/* Whether MEMBER_REMOVE of member would apply to s as it is: 0;
 * TN_ENOTFOUND (no such member); UV_EPERM (the last member, or the
 * cluster has three or more and would drop below three: checked first);
 * UV_EBUSY (it holds partitions). *held (held may be NULL) says how many
 * partitions it holds, whatever the answer. The apply decides with
 * this very function; a door calls it for a clear answer first. */
int tn_meta_state_remove_check(const tn_meta_state_t *s, uint64_t member, uint64_t *held);

/* Member id's tombstone (borrowed: valid until the next apply or
 * restore), or NULL: it was never removed, or an empty data directory
 * registered under the id since. */
const tn_meta_removed_t *tn_meta_state_removed(const tn_meta_state_t *s, uint64_t id);
/* How many factor-1 partitions member owns that have no state (never
 * moved): what a decommission has to move off it besides its replicas. */
uint64_t tn_meta_state_single_held(const tn_meta_state_t *s, uint64_t member);

/* Binary search over arr, n pointers to records sorted by the name at
 * byte offset name_off of each (a NUL-terminated char array): the index of
 * name, or where it would go (*found false). Shared by state.c and
 * remote.c. */
size_t tn__meta_search(void *const *arr, size_t n, const char *name, size_t name_off, bool *found);

/* Append a snapshot of s to out. 0 or UV_ENOMEM. */
int tn_meta_state_snapshot(const tn_meta_state_t *s, tn_buf_t *out);
/* Replace s with the snapshot in buf. 0, TN_ECORRUPT (s unchanged),
 * UV_ENOTSUP (a newer format) or UV_ENOMEM. */
int tn_meta_state_restore(tn_meta_state_t *s, const void *buf, size_t len);

#endif
