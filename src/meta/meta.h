/* The metastore: the state machine of meta/state.h replicated with
 * libraft (libuv I/O, tern's TCP transport of meta/transport.h, with
 * mutual TLS when the certificate files are given), its log and snapshots in
 * <data>/meta/. A node with no Raft state bootstraps: with no peers as the
 * single voter of a new cluster, with peers as one of exactly that voter
 * set (every initial node bootstraps the same configuration); a join_only
 * node never bootstraps and waits for the leader to add it
 * (tn_meta_join there). A cluster of one runs the same code path as a
 * larger one.
 *
 * DESIGN: a metadata write.
 *   1. The door builds a command (meta/cmd.h) and proposes it
 *      (tn_meta_propose). On the leader it goes to libraft at once. On a
 *      follower it goes to the leader through opts->forward (node RPC,
 *      where the leader's handler calls tn_meta_propose_encoded) and the
 *      caller gets the leader's answer. With no leader known, proposals
 *      wait in order, each at most NO_LEADER_MS (5 s), then get
 *      TN_ENOLEADER (TN_ENOTLEADER when a leader is known but cannot be
 *      reached: no forward hook, or no API address recorded for it).
 *   2. libraft appends it to the log (fsynced) and commits it once a
 *      majority has it (a single voter: at once).
 *   3. Every replica applies it to its state in log order; on the
 *      proposing node the request's callback then runs with the state
 *      machine's answer (0, UV_EEXIST, TN_ENOTFOUND, UV_ENOTSUP for a
 *      command this build does not know). A forwarded proposal's answer
 *      is the leader's, which may come before this replica has applied
 *      the entry; a TOPIC_DELETE or CHANNEL_DELETE is answered only once
 *      it has (the error of that wait if it fails), since the doors
 *      delete the engine's part at the answer and the catalog would make
 *      it again from a record still here (docs/cluster.md "Deleting
 *      through a follower"). The leader's answer carries the index at
 *      which it applied the entry (META_PROPOSE_AT), and the follower
 *      waits until its replica has applied that index (within 10 s);
 *      from a leader of an older build, which does not say, it confirms
 *      instead (tn_meta_confirm: a no-op of its own through the leader,
 *      applied here). The leader sends its commit index to the followers
 *      at once after applying such an entry (its heartbeats, early: meta.c
 *      push_commit), rather than with its next heartbeat; a topic made or
 *      grown likewise, whose replicas the followers open, and a change of
 *      a partition's leader or ISR (meta.c pushes). A successful change a client may read
 * back from this node (a topic, channel, user or remote put or deleted, a drain, move, forced
 * leader, rebalance, factor or member removal: meta.c read_back; a copy sent again answered success
 * by answer(), too) is answered once this replica has it too, the same way, but with the leader's
 * answer even if that wait fails or is still under way when the proposal's PROPOSE_MS are up.
 *
 * A failover under a forwarded proposal: a proposal has PROPOSE_MS (10 s,
 * the forward call's own bound) from tn_meta_propose. While its forward is
 * out, the tick watches the leader: once this node learns of another
 * leader (or leads itself), the forward is abandoned (its late answer is
 * dropped) and the proposal goes to the new leader at once; a forward
 * that failed without the leader's answer (unreachable, timed out, the
 * leader closing or losing leadership: TN_ENOTLEADER, TN_ENOLEADER,
 * TN_ECLOSED, UV_ETIMEDOUT, connection errors) is sent again too, to the
 * same leader no sooner than RESEND_MS later. Past PROPOSE_MS the caller
 * gets UV_ETIMEDOUT (or the last failure). A create through a follower
 * during a failover thus takes about an election, not the full 10 s.
 *
 * Why sending a command again is safe: the old leader may have appended
 * the first copy, and the new leader commits it, then the second copy
 * too. Every command is idempotent in effect: a PUT writes a whole record
 * (placement only places partitions a topic did not have), a delete of
 * what is gone and a NOOP change nothing, registrations and drains
 * overwrite. The answers are made idempotent as well: a copy sent again
 * is marked so (cmd.h), and a marked TOPIC_PUT or USER_PUT that finds
 * exactly the record it writes answers 0 (state.h),
 * and on the proposer a re-sent delete that finds nothing, or a re-sent
 * CHANNEL_PUT if_absent that finds the channel, answers 0 (what was asked
 * holds). A CHANNEL_PUT sent again also carries a new stamp: should its
 * first copy commit and the channel be deleted before the second
 * commits, the second makes a new channel, never one with the deleted
 * channel's identity (a copy that finds the channel keeps its stamp).
 * The one effect a second copy can have is on a write that another
 * proposer made between the two copies (a re-sent delete after someone
 * re-created the topic in those milliseconds): the same as the
 * client's own retry after a 503, which is what the re-send replaces.
 *
 * Heard recently (placement, meta/state.h): the leader samples libraft's
 * per-server contact flag (a message received from it in the current
 * election timeout) at every tick, on loop (monotonic) time, and counts
 * a member as heard recently while that was within RECENT_ELECTIONS (2)
 * election timeouts: 2 s with the default 1 s, against 30 s of
 * dead_after. A new leader counts every member as heard when it took
 * over. As the leader submits a TOPIC_PUT it lists the alive members not
 * heard recently in the command's skip list, so placement is decided
 * from the leader's view and every replica applies the same owners.
 *
 * Members: every heartbeat_interval each node registers itself
 * (MEMBER_REC: id, Raft and API address, its wall clock, and how NSQ
 * clients reach it: tn_meta_set_nsq), proposed like
 * any write; the leader marks a member dead (MEMBER_STATUS) once its
 * recorded heartbeat is dead_after old by the leader's wall clock, and a
 * registration brings it back.
 *
 * Sessions (replicated partitions, docs/replication.md): the leader keeps,
 * on loop (monotonic) time, when it last heard from each member (the
 * contact sampling above, and its registrations applied); a member not
 * heard for session_timeout_ms (member-session-timeout, 6 s) gets one
 * proposed MEMBER_FENCE (id, incarnation), which moves the leadership of
 * every partition it led (one log entry per failure). A new leader counts
 * every member as heard when it takes over. A fenced member that
 * registers again is live (its registration elects leaders for offline
 * partitions). The incarnation, a random id of this node's data directory,
 * comes with every registration (opts->incarnation), and so does a random
 * id of this process, so that a restart's first registration fences the
 * old session (meta/state.h). The leader also
 * proposes PART_REBALANCE for a partition whose preferred leader has been
 * ready (tn_pstate_preferred_ready) for rebalance_delay_ms on end. No
 * wall clock takes part in these decisions.
 *
 * Remotes (meta/remote.h): the leader, once ready, proposes the cluster's
 * seal salt (REMOTE_SALT, 32 random bytes) while the state has none; the
 * first applied stays for good. The leader also logs an audit line for
 * every REMOTE_PUT and REMOTE_DELETE it applies.
 * Removal (DELETE /v1/cluster/members/{id}, docs/cluster.md "Removing a
 * member"): the door proposes MEMBER_REMOVE, which the state machine
 * applies only to a member holding no partition, and never below three
 * members in a cluster of three or more (meta/state.h); the member's
 * record goes and its tombstone (id, data directory incarnation) stays.
 *   1. The leader, each tick, takes every server of the Raft configuration
 *      with a tombstone and no member record out of it (raft_remove), one
 *      change at a time; a new leader finishes what the last began. A
 *      removed member it still hears from first gets REMOVE_WAIT_MS (3 s)
 *      to receive the tombstone. The leader itself, removed, hands
 *      leadership over (tn_meta_transfer) and the next leader removes it.
 *   2. The removed node, applying its own tombstone (its id and its
 *      incarnation), writes <dir>/removed, logs one error line, stops
 *      registering and calls on_removed (the daemon stops). tn_meta_open
 *      refuses a Raft directory holding that file: a removed node never
 *      takes part again with its old state.
 *   3. A removed node that was down through the removal and restarts on
 *      its old data: its registrations are refused (UV_EPERM, one error
 *      line a minute) if they reach a leader; nobody sends it entries any
 *      more, so it never becomes ready; its elections cannot win (its log
 *      lacks the removal, which a majority of the new configuration
 *      holds) and are ignored while the others have a leader.
 *   4. An empty data directory reusing the id joins as today (a join
 *      comes only from a node with no Raft state); the leader that admits
 *      it does not take it out again, and its registration, with a new
 *      incarnation, clears the tombstone.
 *
 * Ready (tn_meta_ready, latched once): caught up and everything in the
 * log at start applied. Caught up (tn_meta_caught_up, now): a leader is
 * known, this node is a voter, a follower heard from the leader within
 * CONTACT_MS (5 s), and applied >= commit; /readyz and destructive
 * actions check it.
 *
 * Threads: the loop thread. */
#ifndef TN_META_META_H
#define TN_META_META_H

#include "core/platform.h"

#include "meta/cmd.h"
#include "meta/state.h"

#include <raft.h>
#include <uv.h>

typedef struct tn_meta_s tn_meta_t;
typedef struct tn_meta_req_s tn_meta_req_t;

/* status: the state machine's answer, or an error that kept the command
 * out of the log (TN_ECLOSED when the metastore closed first). */
typedef void (*tn_meta_cb)(tn_meta_req_t *req, int status);

/* Caller-owned; in use until cb. */
struct tn_meta_req_s {
    void *data;
    /* Set before cb: the log index of the command's entry once it was
     * applied (by the leader, as the leader's answer to a forward tells
     * it); 0 when not applied or not known (a leader of an older build). */
    uint64_t index;
    /* Private. */
    struct raft_apply apply;
    tn_meta_t *meta;
    tn_meta_cb cb;
    struct raft_buffer buf;
    tn_meta_req_t *next; /* waiting for a leader */
    uint64_t deadline;   /* loop ms: TN_ENOLEADER after it */
    uint64_t expires;    /* loop ms: no forward (or re-send) after it */
    uint64_t avoid;      /* a leader a forward failed at: not again before avoid_until */
    uint64_t avoid_until;
    uint8_t type;   /* the command's, for the answer of a re-sent one */
    bool if_absent; /* likewise */
    bool resent;    /* forwarded more than once */
    bool push;      /* on the leader, applied: its commit goes out at once (meta.c pushes) */
};

typedef struct {
    uint64_t id;
    char raft_addr[TN_META_ADDR_MAX + 1];
} tn_meta_peer_t;

/* Forwarding a proposal made on a follower to the leader (node RPC):
 * returns 0 (done follows, exactly once, possibly before forward returns)
 * or an error (done never runs). cmd is valid during the call only.
 * done's index: the log index at which the leader applied the command (0:
 * not applied, or a leader of an older build that does not say; the
 * follower then confirms with a no-op instead, above). done's status: the
 * leader's state-machine answer, or an error
 * (TN_ENOTLEADER when the node asked was not the leader; that and the
 * other failures without the leader's answer send the proposal again
 * while its budget allows: above). cmd's first forward may be followed by
 * others of the same proposal (to a new leader, marked again) before done
 * runs; done must still run once per call, and an abandoned call's is
 * ignored. */
typedef void (*tn_meta_forward_done)(void *done_arg, int status, uint64_t index);
typedef int (*tn_meta_forward_fn)(void *arg, uint64_t leader_id, const char *leader_api_addr,
                                  const void *cmd, size_t len, tn_meta_forward_done done,
                                  void *done_arg);

typedef struct {
    const char *dir;     /* the Raft directory (<data>/meta), created if missing */
    uint64_t node_id;    /* >= 1 */
    const char *address; /* this node's Raft address as recorded: IPv4 or DNS name, host:port */
    /* The numeric IPv4 host:port to listen on when address is a name (its
     * resolution at start); NULL: address itself, which is numeric. */
    const char *listen;
    unsigned election_ms; /* election timeout */
    unsigned heartbeat_ms;
    unsigned snapshot_threshold; /* log entries between snapshots */
    void (*on_ready)(void *arg); /* optional: once, when first ready */
    void *ready_arg;
    const tn_meta_peer_t *peers; /* the initial voters incl. this node; 0 = a lone node */
    size_t npeers;
    bool join_only;                 /* --join given and no Raft state: never bootstrap */
    const char *api_addr;           /* this node's advertised API address (host:port); NULL = "" */
    unsigned heartbeat_interval_ms; /* member registration interval; 0 = 5000 */
    unsigned dead_after_ms;         /* dead after this without a registration; 0 = 30000 */
    tn_meta_forward_fn forward;     /* NULL: a follower answers TN_ENOTLEADER after 5 s */
    void *forward_arg;
    /* PEM files, borrowed for tn_meta_open: all three for Raft over mutual
     * TLS (peers must present a certificate signed by tls_ca), or none
     * for plaintext. */
    const char *tls_cert, *tls_key, *tls_ca;
    /* This node's incarnation (tn_meta_incarnation_load); 0 = unknown. */
    uint64_t incarnation;
    unsigned session_timeout_ms; /* member-session-timeout; 0 = 6000 */
    unsigned rebalance_delay_ms; /* leader-rebalance-delay; 0 = 30000 */
    /* replace-dead-after: a member dead this long (the leader's loop time,
     * from its own leadership) has its replicas re-created elsewhere;
     * 0 = never */
    uint64_t replace_dead_ms;
    /* max-moves-per-node: replica-copying moves under way that may touch
     * one member, for decommission, self-healing and rebalance alike;
     * 0 = TN_META_MOVES_PER_NODE (meta/rebalance.h) */
    unsigned max_moves_per_node;
    /* auto-rebalance off: only POST /v1/cluster/rebalance rebalances (a
     * member joining does not) */
    bool no_auto_rebalance;
} tn_meta_opts_t;

/* The name of that file in the data directory. A backup copies it (the
 * copy's identity, for the record); a restore never writes that copy
 * back: a cluster restored whole gets incarnations derived from the
 * backup (meta/restore.h), a node restored with --rejoin a new one at
 * its start (docs/operations.md, "Backup and restore"). */
#define TN_META_INCARNATION_FILE "incarnation"

/* The incarnation of the data directory data_dir: read from its file
 * `incarnation` (16 hex digits and a newline), or, when there is none
 * (a new data directory, or one from before incarnations), a new random
 * non-zero one written there crash-safely (a temporary file, fsync,
 * rename, directory fsync). 0, or an error with err filled (TN_ECORRUPT:
 * a file that is not an incarnation). Any thread; blocking I/O. */
int tn_meta_incarnation_load(const char *data_dir, uint64_t *out, char *err, size_t errlen);

/* Open (and bootstrap when new) and start. On failure err has a line. */
int tn_meta_open(uv_loop_t *loop, const tn_meta_opts_t *o, tn_meta_t **out, char *err,
                 size_t errlen);
/* This node's NSQ door (copied) for its member registrations: the next
 * one is proposed at the next tick when it changed. Call it once the
 * listeners have bound (the ports they got). 0, or UV_EINVAL (a string
 * without its terminating NUL). */
int tn_meta_set_nsq(tn_meta_t *m, const tn_meta_nsq_t *nsq);
/* Propose c (copied). A CHANNEL_PUT without a stamp gets one, drawn at
 * random (cmd.h: the channel's identity). 0 (cb follows: never inside
 * this call, so a caller may mark itself busy once it returns 0),
 * UV_EINVAL (c does not encode), TN_ECLOSED, UV_ENOMEM or TN_EFAILED (no
 * random bytes for a stamp). */
int tn_meta_propose(tn_meta_t *m, tn_meta_req_t *req, const tn_meta_cmd_t *c, tn_meta_cb cb);
/* A proposal's whole budget (above): a caller whose request takes
 * several metastore steps bounds them all by one (tn_meta_propose_until,
 * tn_meta_confirm_until). */
#define TN_META_PROPOSE_MS 10000
/* tn_meta_propose, given up at until too (loop ms of m's loop, uv_now;
 * 0: its own bound alone): past it, answered as past its own bound
 * (TN_ENOLEADER waiting for a leader, else the forward's last failure or
 * UV_ETIMEDOUT); a change read back waits no longer either. Or at once
 * UV_ETIMEDOUT when until has passed, or tn_meta_propose's errors. */
int tn_meta_propose_until(tn_meta_t *m, tn_meta_req_t *req, const tn_meta_cmd_t *c, uint64_t until,
                          tn_meta_cb cb);
/* On the leader, for the node RPC handler: propose a command another
 * node encoded (len bytes, copied), decoded and checked first. 0 (cb
 * follows), TN_ENOTLEADER (this node is not the leader: the caller
 * answers 421; also while it transfers its leadership), TN_ECORRUPT (not
 * exactly one valid command), UV_ENOTSUP (a version or type this build
 * does not know), UV_EINVAL (a snapshot-only record), TN_ECLOSED,
 * UV_ENOMEM, TN_EFAILED (libraft refused it). */
int tn_meta_propose_encoded(tn_meta_t *m, tn_meta_req_t *req, const void *buf, size_t len,
                            tn_meta_cb cb);
/* The leader as this node knows it: 0 with its id and API address (from
 * its member record; "" before it registered; valid until the next
 * callback from the metastore), or TN_ENOLEADER. */
int tn_meta_leader(tn_meta_t *m, uint64_t *id, const char **api_addr);
/* The leader's side of a join: add id at raft_addr as a spare, then make
 * it a voter once caught up (libraft promotes it after catch-up rounds).
 * 0 and cb(arg, status) later, from the loop: 0 (a voter now, or it was
 * one at that address already), TN_IDTAKEN (id is in the configuration
 * at another address), UV_EADDRINUSE (another id has that address),
 * TN_ENOTLEADER (leadership moved: ask the new leader), UV_ETIMEDOUT
 * (another change kept the configuration busy for JOIN_MS), TN_EFAILED
 * (libraft refused; logged), TN_ECLOSED. Or at once: TN_ENOTLEADER,
 * UV_EINVAL (id 0 or a bad address), TN_ECLOSED, UV_ENOMEM. */
int tn_meta_join(tn_meta_t *m, uint64_t id, const char *raft_addr,
                 void (*cb)(void *arg, int status), void *arg);
/* Hand leadership to another voter before a graceful stop (meta.c's
 * DESIGN under "leadership transfer"): the leader appends a barrier and,
 * once a majority stored it, hands over (raft_transfer) to the voter that
 * answered holding the most of the log; then waits until libraft shows
 * another leader (stepping down is not enough: it waits up to an election
 * timeout more to learn the new one). No handover when no majority of the
 * voters stored the barrier within an election timeout (nobody could win
 * the election; logged). 0 and
 * cb(arg, status) later: 0 (another node leads; or this one did not lead,
 * or stepped down and learnt of no new leader in that time), TN_ENOTFOUND
 * (no other voter, or none that could take over), UV_ETIMEDOUT (the
 * target did not take over within libraft's bound of an election timeout;
 * at most 3 election timeouts + 2 s in all), TN_EFAILED, TN_ECLOSED. Or at
 * once UV_EBUSY (a transfer is under way) or TN_ECLOSED. Loop thread. */
int tn_meta_transfer(tn_meta_t *m, void (*cb)(void *arg, int status), void *arg);
/* Confirm with the leader that this node's view is current, for a
 * destructive action: on the leader a raft_barrier (every earlier entry
 * committed and applied); on a follower a NOOP of this node's (id and
 * nonce) proposed, so forwarded to the leader, which commits it, and then
 * applied to this replica too (so everything committed before the call is
 * here). 0 and cb(arg, status) later: 0, the proposal's error
 * (TN_ENOLEADER, TN_ECLOSED, ...), or UV_ETIMEDOUT (committed but not
 * applied here within 10 s). Or at once TN_ECLOSED / UV_ENOMEM. */
int tn_meta_confirm(tn_meta_t *m, void (*cb)(void *arg, int status), void *arg);
/* tn_meta_confirm, given up at until too (loop ms, as
 * tn_meta_propose_until; 0: its own bounds alone): on a follower cb's
 * status is then the no-op's failure or UV_ETIMEDOUT. On the leader a
 * barrier, as tn_meta_confirm's (answered once committed or leadership
 * is lost). Or at once UV_ETIMEDOUT when until has passed. */
int tn_meta_confirm_until(tn_meta_t *m, uint64_t until, void (*cb)(void *arg, int status),
                          void *arg);
/* Be told (cb(arg), on the loop thread, from the metastore's tick, which
 * a change wakes: at the loop's next turn, before the requests that turn
 * reads) after applied log entries or a restored snapshot changed the
 * local replica, once it is ready; cb NULL: no more. For followers of
 * the state (the catalog follows topic records and placement). */
void tn_meta_on_change(tn_meta_t *m, void (*cb)(void *arg), void *arg);
/* On the leader: how long ago it last had Raft contact with member id
 * (loop time, ms; 0 for itself) into *ago_ms, and whether that counts as
 * heard recently (placement's view) into *recent. 0, TN_ENOTLEADER (this
 * node does not lead: only the leader hears from every member) or
 * TN_ENOTFOUND (id is not in the Raft configuration). Loop thread. */
int tn_meta_heard(tn_meta_t *m, uint64_t id, uint64_t *ago_ms, bool *recent);
/* The local replica, for reads. */
const tn_meta_state_t *tn_meta_state(const tn_meta_t *m);
/* The local replica's access generation (meta/state.h access_gen): it
 * moves whenever a topic's owner, a user or a grant may have changed,
 * here or through a snapshot, so a decision about access taken at one
 * value holds while it reads the same. Borrowed: valid until m is freed
 * (tn_meta_close; tn_meta_drain leaves it), read on the loop thread,
 * which alone applies; a door reads it per delivery, for a few
 * instructions. */
const uint64_t *tn_meta_access_gen(const tn_meta_t *m);
/* This node's incarnation (opts->incarnation). */
uint64_t tn_meta_incarnation(const tn_meta_t *m);
/* This process's random boot id, which its registrations carry (0 when
 * they carry none: no incarnation). Any thread. */
uint64_t tn_meta_boot(const tn_meta_t *m);

/* Replicated partitions (meta/partstate.h). Each proposes one command,
 * like tn_meta_propose (forwarded to the leader from a follower): 0 and
 * cb(req, the state machine's answer) later, or at once UV_EINVAL (bad
 * arguments: a name, n outside 1..TN_PSTATE_MAX_REPLICAS), TN_ECLOSED,
 * UV_ENOMEM. Loop thread. A proposal sent again after a metastore
 * failover (above) may find its first copy applied: a PART_ISR then
 * answers TN_ECHANGED though the ISR is the one asked, so a proposer
 * reads the partition's state (tn_meta_state_pstate) after a refusal.
 *
 * The leader's ISR compare-and-set (PART_ISR) of partition p, proposed by
 * this node in leader_epoch given partition_epoch expected_pe; isr[0..n)
 * is copied. Answers: 0 (applied: partition_epoch is expected_pe + 1),
 * TN_ECHANGED (stale epoch, or this node does not lead), UV_EINVAL (a
 * malformed ISR, or not a replicated partition), UV_EPERM (an added member
 * not current or not live, or any added member when !channels_checked),
 * TN_ENOTFOUND. channels_checked: this node checked that every member it
 * adds has the partition's channel state caught up (cluster/setrepl.h). */
int tn_meta_propose_isr(tn_meta_t *m, tn_meta_req_t *req, const char *topic, uint32_t p,
                        uint32_t leader_epoch, uint32_t expected_pe, const tn_pstate_member_t *isr,
                        uint32_t n, bool channels_checked, tn_meta_cb cb);
/* An admin's election of node for partition p (PART_LEADER): 0, UV_EINVAL
 * (node not a replica), UV_EPERM (node not live, or not an eligible ISR
 * member and !unclean), TN_ENOTFOUND. */
int tn_meta_force_leader(tn_meta_t *m, tn_meta_req_t *req, const char *topic, uint32_t p,
                         uint32_t node, bool unclean, tn_meta_cb cb);
/* A partition move (PART_MOVE, partstate.h rules 6 to 8) of partition p:
 * kind TN_MOVE_BEGIN with target[0..n) (copied), or TN_MOVE_COMPLETE,
 * TN_MOVE_ABORT or TN_MOVE_FAIL (an abort kept as failed; target unused;
 * reason copied, NULL or "" for none, at
 * most TN_META_MOVE_REASON_MAX bytes), for the move id (not 0: the
 * proposer makes it, unique). The command carries this node's wall clock
 * (the start, or the end). Answers: 0; begin UV_EBUSY (a move under way),
 * UV_EINVAL (a bad target, or a factor-1 or unplaced partition);
 * complete UV_EAGAIN (not ready); abort and fail UV_EPERM (no old replica
 * could lead); TN_ENOTFOUND (no such topic, partition or move under way).
 * The metastore leader proposes the completion itself once it holds. */
int tn_meta_propose_move(tn_meta_t *m, tn_meta_req_t *req, const char *topic, uint32_t p,
                         uint8_t kind, uint64_t id, const uint32_t *target, uint32_t n,
                         const char *reason, tn_meta_cb cb);
/* The stall marks of the move id of partition p (MOVE_MARK, partstate.h
 * rule 10): mark[0..n) (copied; n <= TN_PSTATE_MAX_REPLICAS), proposed by
 * the partition's leader (cluster/movestall.h). Answers: 0; TN_ENOTFOUND
 * (no such topic, partition or move under way); UV_EINVAL (a mark of a
 * member outside the target, or bad arguments). */
int tn_meta_propose_move_mark(tn_meta_t *m, tn_meta_req_t *req, const char *topic, uint32_t p,
                              uint64_t id, const tn_pstate_mark_t *mark, uint32_t n, tn_meta_cb cb);
/* Ask for a rebalance of the replicas over the members (wanted, only if
 * none is wanted now), or end the one wanted with id (CLUSTER_REBALANCE;
 * meta/rebalance.h). reason is a tn_meta_rebal_reason_t; id not 0 (the
 * proposer makes it). Answers: 0; UV_EBUSY a rebalance is wanted already;
 * TN_ECHANGED (over) the one wanted has another id; UV_EINVAL bad
 * arguments. The metastore leader drives it. */
int tn_meta_propose_rebalance(tn_meta_t *m, tn_meta_req_t *req, bool wanted, uint8_t reason,
                              uint64_t id, tn_meta_cb cb);
/* node's replica of partition p failed a CRC check (PART_CORRUPT): it
 * leaves the ISR and elections until a CAS adds it back. 0, UV_EINVAL,
 * TN_ENOTFOUND. */
int tn_meta_mark_corrupt(tn_meta_t *m, tn_meta_req_t *req, const char *topic, uint32_t p,
                         uint32_t node, tn_meta_cb cb);
/* Be told of partition states: cb(arg, topic, p, ps) on the loop thread,
 * soon after (never inside) the apply of a command that changed or made
 * the state of partition p (ps borrowed, valid during the call: the
 * current state, so several changes in a row may come as one), with ps
 * NULL when the partition or its topic went away; for every replicated
 * partition after a snapshot restore, and at once (from this call) for
 * every one the replica holds now. cb NULL: no more. topic is borrowed. */
void tn_meta_on_pstate(tn_meta_t *m,
                       void (*cb)(void *arg, const char *topic, uint32_t p, const tn_pstate_t *ps),
                       void *arg);
bool tn_meta_ready(tn_meta_t *m);
/* Removal (above): cb runs once, from the tick, when this node applies its
 * own tombstone; tn_meta_removed says whether it did. */
void tn_meta_on_removed(tn_meta_t *m, void (*cb)(void *arg), void *arg);
bool tn_meta_removed(const tn_meta_t *m);
/* The voters of this node's view of the Raft configuration: up to cap ids
 * into ids (caller-owned); returns how many there are. */
size_t tn_meta_voters(tn_meta_t *m, uint64_t *ids, size_t cap);
bool tn_meta_caught_up(tn_meta_t *m);

/* Readiness (/readyz): caught up as tn_meta_caught_up says, but for its
 * last condition, which may lag a little: everything this node has known
 * for STEADY_LAG_MS (2 s) to be committed is applied. A follower hears of
 * a commit once a majority stored the entry, its own write perhaps still
 * under way; that lag, a write's time, does not take it out of
 * readiness, one that lasts does. Decisions that must see every commit
 * (credentials, destructive actions) ask tn_meta_caught_up. */
bool tn_meta_steady(tn_meta_t *m);
/* The loop time (ms) of this replica's newest confirmation that it is
 * current: a follower's last append from the Raft leader at a moment
 * when everything it knew committed was applied and told to the
 * partition listeners (tn_meta_on_pstate); a leader's, an election
 * timeout ago. A change committed before it is known here. 0: none yet.
 * A partition leader's delivery lease counts from it
 * (cluster/handfence.h). */
uint64_t tn_meta_confirmed_at(tn_meta_t *m);
/* The Raft election timeout and member-session-timeout in force (ms). */
void tn_meta_timeouts(const tn_meta_t *m, unsigned *election_ms, unsigned *session_ms);
/* The index of the last log entry applied to the local replica. */
uint64_t tn_meta_applied_index(tn_meta_t *m);
/* The index of the last log entry this replica held when it started: 0
 * or 1 when it held none of the cluster's log then (a new member, one
 * that joins, or one restored with `ternctl restore --rejoin`: at most
 * its bootstrap entry), whose "ready" can come before the leader's log
 * has reached it (tn_catalog, following deletions). */
uint64_t tn_meta_start_index(const tn_meta_t *m);
/* This replica's current Raft term. */
uint64_t tn_meta_term(tn_meta_t *m);
/* Close: no more proposals, waiting ones get TN_ECLOSED; those already
 * handed to libraft get their answers first, and libraft is closed only
 * once it writes nothing (at most 3 s of waiting): libraft 0.15 corrupts
 * its in-memory log when raft_close fails two or more appends in flight
 * (the crash tern saw at raft_close; meta.c's settled() has the detail).
 * cb runs once libraft, its transport and every handle of theirs have
 * closed, and m is freed then. Also after tn_meta_stop. */
void tn_meta_close(tn_meta_t *m, void (*cb)(void *arg), void *arg);
/* Stop taking proposals (waiting ones get TN_ECLOSED) without closing
 * libraft yet: for a start that fails part way, so the metastore does not
 * come up while the rest closes. tn_meta_close follows. */
void tn_meta_stop(tn_meta_t *m);
/* As tn_meta_close up to the point where libraft would be closed (no
 * more proposals, the ones handed to libraft answered, nothing being
 * written, bounded at 3 s), then cb(arg) with libraft still open and m
 * not freed: for a process that exits next. ternd stops this way: closing
 * libraft 0.15 still crashed inside it, rarely, under load, after every
 * wait tern can make (see docs/dependencies.md), and its log is fsynced
 * at every commit, so leaving it open is a crash-like stop that it
 * recovers from at the next start. */
void tn_meta_drain(tn_meta_t *m, void (*cb)(void *arg), void *arg);

/* For an online backup (api/backup.c): the local replica as a snapshot
 * (tn_meta_state_snapshot's buffer, appended to snap, caller-owned), the
 * voters of the latest Raft configuration (*voters allocated with
 * tn_malloc, the caller frees it; their ids are the member ids, which are
 * the Raft ids) and the index of
 * the last applied entry, all as of this call. Loop thread. 0 or
 * UV_ENOMEM. */
int tn_meta_backup(tn_meta_t *m, tn_buf_t *snap, tn_meta_peer_t **voters, size_t *nvoters,
                   uint64_t *applied);

/* Offline (no loop running, no daemon on dir): make dir, an empty Raft
 * directory, hold the restored metastore: libraft's own snapshot files
 * (written by its uv I/O) at term 1, index 1, with snap (a
 * tn_meta_state_snapshot buffer, borrowed) as the state and voters as the
 * configuration (ids are member ids = Raft ids), and the term 1. Every node of a
 * restored cluster gets the same snapshot and voters, so their logs agree
 * from index 1 on, as after a bootstrap. self_id/self_addr name this
 * node (in voters). 0, or an error with err filled. */
int tn_meta_restore_write(const char *dir, const void *snap, size_t len,
                          const tn_meta_peer_t *voters, size_t nvoters, uint64_t self_id, char *err,
                          size_t errlen);

#endif
