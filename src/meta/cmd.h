/* Metastore commands: what the Raft log carries, and the records a
 * snapshot holds. A versioned binary encoding; the decoder refuses unknown
 * versions and command types, bad lengths, invalid names and trailing
 * bytes with an error, never by guessing.
 *
 * Layout (all integers little-endian):
 *   [2] magic "TM"  [1] version (1)  [1] type  [4] payload length
 *   payload, then zero padding to a multiple of 8 bytes (libraft wants
 *   entries in 8-byte multiples).
 * Strings are [2] length + bytes; lists are [2] count + items.
 * TOPIC_PUT's flag byte: bit 0 if_absent, bit 1 native, bit 2 if_unchanged
 * (then [8] expect follows the topic), never bits 0 and 2 together; bit 3
 * a skip list (after expect, if any: [2] count 1..TN_META_MAX_SKIP, count
 * x [8] member id, strictly ascending, none 0: the members the leader had
 * not heard from recently when it proposed the command, which placement
 * passes over; meta/state.h), bit 4 again (below);
 * TOPIC_PUT's flag bit 7 (TN_META_TOPIC_OWNER): [1] owner rule follows,
 * last in the payload (after factor and min_insync, if any), not 0, of
 * the TN_META_OWN_* bits (meta/owner.h rule 3); without it (every older
 * entry) no owner rule applies. USER_DELETE ([s] name) may end with [1]
 * flags, TN_META_USER_DISOWN (meta/owner.h rule 2); an older build's
 * entry has none, and its user's topics keep their owner.
 * USER_PUT's condition byte: 0 none, 1 if_absent, 2 if_unchanged (then
 * [8] expect follows the user), plus bit 7 again, plus bit 6 fresh (only
 * with if_absent: TN_META_USER_FRESH; an older build's create has none). A PUT marked again is a
 * copy a follower sent once more after a failover (meta.h): finding exactly
 * the record it writes, it answers 0 where it would answer UV_EEXIST or
 * TN_ECHANGED (state.h). The proposer sets the bit in the encoded bytes
 * (TN_META_TOPIC_AGAIN or TN_META_USER_AGAIN in the payload's first byte).
 * Members: MEMBER_PUT ([8] id, Raft address) is the first build's
 * registration and still decodes; MEMBER_REG carries the full record
 * ([8] id, Raft address, API address, [8] heartbeat ms) and still decodes
 * too (the previous build's); MEMBER_REC is today's registration: MEMBER_REG's
 * fields, then the NSQ door's ([s] broadcast address, [s] hostname, [2] NSQ
 * TCP port, [2] HTTP port, [s] version); MEMBER_STATUS
 * ([8] id, [1] status, [8] the heartbeat the decision was made from).
 * CHANNEL_PUT ([1] if_absent [s] topic [s] channel, then [8] stamp, not 0,
 * when it has one): the stamp is the channel's identity, a random id the
 * proposer draws (tn_meta_propose), so that every node tells a channel
 * deleted and made again under its name from the old one (the catalog,
 * cluster/setrepl.h); an entry or snapshot record of an older build has
 * none and reads as stamp 0 (unknown), encoded so again.
 * TOPIC_GROW_FOR ([s] topic, [8] member id): one partition more, owned by
 * that member, unless it owns one already (NSQ topics: meta/state.h).
 * NOOP ([8] proposer id, [8] nonce) changes nothing (a follower's
 * confirmation with the leader, through the log). PART_OWNERS
 * ([s] topic, [4] count, count x [8] owner) is a snapshot record only.
 *
 * Replicated partitions (docs/replication.md). TOPIC_PUT's flag bit 5: the
 * topic is replicated, [1] replication_factor (1..TN_META_MAX_FACTOR) [1]
 * min_insync (1..factor) follow, last in the payload; without it a topic
 * reads as factor 1, min_insync 1 (every older encoding). Flag bit 6
 * (TN_META_TOPIC_CLAMP): the factor is the one asked; the apply that makes
 * the topic clamps it to the members alive and live in the replicated
 * state, and min_insync to that (a door never clamps: its copy may lag;
 * meta/state.h). Without it the factor is taken as written (older builds'
 * entries, snapshot records). MEMBER_REC may
 * end with [8] incarnation (a random id of the member's data directory;
 * absent: 0, unknown), then maybe [8] boot (a random id of the process:
 * another one than recorded is a restart; absent: 0). Partition commands name [s] topic [4]
 * partition, then: PART_ISR [4] proposer node [4] leader_epoch [4] expected partition_epoch [1] n
 * (1..TN_PSTATE_MAX_REPLICAS) n x ([4] node [8] incarnation) [1] flags (bit 0: the proposer
 * checked that every member it adds has the partition's channel state caught up; absent in
 * entries of older builds, which the apply takes as checked), the leader's compare-and-set;
 * PART_LEADER [4] node [1] unclean, an admin's election; PART_REBALANCE nothing more; PART_CORRUPT
 * [4] node, its replica failed a CRC check. MEMBER_FENCE ([8] node [8]
 * incarnation, 0 = any) ends a member's session. PART_STATE (a snapshot
 * record only) is the partition's whole tn_pstate_t: [1] nreplicas,
 * replicas as [4] each, [4] leader [4] leader_epoch [4] partition_epoch
 * [1] nisr, members as [4] node [8] incarnation, [1] nelr, members, [1]
 * min_insync [4] corrupt bits [1] unclean, then, only while a move is under
 * way (absent in older records: none): [1] ntarget, target as [4] each,
 * [1] nold, old replicas as [4] each, [8] move id [8] started ms, then,
 * only while the move has stall marks (absent in older records: none), [1]
 * nmark (1..TN_PSTATE_MAX_REPLICAS) nmark x ([4] node [8] end [8] ms).
 * MOVE_MARK ([s] topic [4] partition [8] move id [1] n
 * (0..TN_PSTATE_MAX_REPLICAS) n x ([4] node [8] end [8] ms)): the
 * partition leader's stall marks of the move under way (partstate.h rule
 * 10, cluster/movestall.h); a build before it refuses the entry as an
 * unknown type (UV_ENOTSUP) and keeps no marks, which only costs it the
 * stall clocks' memory across a leader change.
 * PART_MOVE ([s] topic [4] partition [1] kind [8] move id [8] ms, then
 * for BEGIN [1] n (1..TN_PSTATE_MAX_REPLICAS) n x [4] node, for ABORT and
 * FAIL (kind 3) [s] reason [1] flags (bit 0: rule 8 refuses an abort that
 * would leave too few in-sync copies; absent in older builds' entries,
 * applied without that refusal), for COMPLETE [1] flags (bit 0: the
 * partition's min_insync follows the topic's; absent in older builds'
 * entries)): a reassignment (partstate.h rules 6 to 8). MOVE_DONE (a
 * snapshot record only): [8] id [s] topic [4] partition [1] end (1 done, 2
 * aborted, 3 failed) [8] started ms [8] finished ms [1] nfrom from as [4] each [1]
 * nto to as [4] each [s] reason.
 * TOPIC_PUT's creation mark: [8] the creating member's id (not 0) ends
 * the payload (after the owner rule, if any) of a record being created
 * through /v1 (tn_meta_topic_t.creating); absent (every older entry and
 * snapshot record): ready. An older build refuses an entry or snapshot
 * with it (trailing bytes). TOPIC_READY (27): [s] topic [8] created_at_ms,
 * the mark cleared; an older build refuses it as an unknown type
 * (UV_ENOTSUP), its state unchanged (it kept no mark). TOPIC_DELETE: [s]
 * topic, then, only for a creation's take-back (if_created: a /v1
 * create's, or a lone node's gate record, tn_meta_cmd_take_back), [8]
 * created_at_ms: only the record made then is deleted; absent (a user's
 * delete, every older entry): any. An older build refuses an entry with
 * it (trailing bytes), its state unchanged: the record stays there.
 * REMOTE_PUT (30) and REMOTE_DELETE (31): a remote's record with its
 * sealed credential, and its removal; REMOTE_SALT (32): the cluster's
 * seal salt, made once by the metastore leader; REMOTE_CHILD_PUT (33) and
 * REMOTE_CHILD_DELETE (34): a remote child attached (and a snapshot
 * record) and detached (meta/remote.h has the payloads and rules).
 * CLUSTER_REBALANCE ([1] flags: bit 0 wanted, bit 1 only if none is wanted
 * now; [1] reason 1 api, 2 join; [8] rebalance id (not 0) [8] the
 * proposer's wall ms): a rebalance of the replicas over the members is
 * wanted, or is over (the id must be the one wanted); the metastore leader
 * drives it (meta/rebalance.h). The snapshot carries it while wanted.
 * MEMBER_REMOVE ([8] id [8] incarnation [8] wall ms): an admin's removal
 * of a member that holds nothing (meta/state.h "Removed members"); the
 * incarnation is the one the door saw recorded (0: any); a log entry and
 * a snapshot record (the removed member's tombstone).
 *
 * Threads: any (pure functions). */
#ifndef TN_META_CMD_H
#define TN_META_CMD_H

#include "core/platform.h"

#include "core/buf.h"
#include "core/name.h"
#include "meta/partstate.h"
#include "meta/remote.h"

#define TN_META_VERSION        1
#define TN_META_HDR            8
#define TN_META_MAX_CMD        (1024 * 1024)
#define TN_META_USER_MAX       64
#define TN_META_HASH_MAX       128
#define TN_META_ADDR_MAX       256
#define TN_META_MAX_GRANTS     64
#define TN_META_MAX_PATTERNS   64
#define TN_META_MAX_PARTITIONS 65535
#define TN_META_HOST_MAX       255
#define TN_META_RELEASE_MAX    32
#define TN_META_MAX_SKIP       1024
#define TN_META_TOPIC_AGAIN    16  /* TOPIC_PUT's flag byte */
#define TN_META_USER_AGAIN     128 /* USER_PUT's condition byte */
#define TN_META_TOPIC_REPL     32  /* TOPIC_PUT's flag byte: factor and min_insync follow */
#define TN_META_TOPIC_CLAMP    64  /* TOPIC_PUT's flag byte: clamp the factor at apply */
#define TN_META_MAX_FACTOR     5   /* replication_factor 1..5 */
/* TOPIC_PUT's flag byte: the owner rule byte follows, last (below). */
#define TN_META_TOPIC_OWNER 128
/* The owner rule byte's bits (meta/owner.h rule 3). CHECK and FOLLOW go
 * with if_absent and not together, CARRY without if_absent. */
#define TN_META_OWN_CHECK  1 /* a dead-letter name's owned parents must be the record's owner's */
#define TN_META_OWN_FOLLOW 2 /* a dead-letter name takes its owned parent's owner */
#define TN_META_OWN_CARRY  4 /* an owner change carries the topic's dead-letter topics */
#define TN_META_OWN_ALL    7
/* USER_DELETE's flags byte: the user's topics pass to the root user. */
#define TN_META_USER_DISOWN 1
/* USER_PUT's condition byte, with if_absent: the new user takes over no
 * topic (meta/owner.h rule 2). */
#define TN_META_USER_FRESH 64

typedef enum {
    TN_MC_TOPIC_PUT = 1,
    TN_MC_TOPIC_DELETE = 2,
    TN_MC_CHANNEL_PUT = 3,
    TN_MC_CHANNEL_DELETE = 4,
    TN_MC_USER_PUT = 5,
    TN_MC_USER_DELETE = 6,
    TN_MC_MEMBER_PUT = 7,
    TN_MC_MEMBER_DRAIN = 8, /* [8] id [1] draining */
    TN_MC_MEMBER_REG = 9,
    TN_MC_MEMBER_STATUS = 10,
    TN_MC_NOOP = 11,
    TN_MC_PART_OWNERS = 12,
    TN_MC_TOPIC_GROW_FOR = 13,
    TN_MC_MEMBER_REC = 14,
    TN_MC_PART_ISR = 15,       /* the leader's ISR compare-and-set */
    TN_MC_MEMBER_FENCE = 16,   /* a member's session ended */
    TN_MC_PART_LEADER = 17,    /* an admin's forced election */
    TN_MC_PART_REBALANCE = 18, /* back to the preferred leader */
    TN_MC_PART_CORRUPT = 19,   /* a replica failed a CRC check */
    TN_MC_PART_STATE = 20,     /* snapshot record only */
    TN_MC_PART_MOVE = 21,      /* begin, complete or abort a reassignment */
    TN_MC_MOVE_DONE = 22,      /* snapshot record only: a finished move */
    /* A rebalance wanted, or over. */
    TN_MC_CLUSTER_REBALANCE = 23,
    TN_MC_MEMBER_REMOVE = 24, /* a member removed (and its tombstone) */
    TN_MC_MOVE_MARK = 25,     /* a move's stall marks (partstate.h rule 10) */
    /* A topic's replication factor changed (topic.name, .replication_factor,
     * .min_insync; if_unchanged with expect always): state.c topic_factor. */
    TN_MC_TOPIC_FACTOR = 26,
    /* A /v1 creation's part is made: its mark (tn_meta_topic_t.creating)
     * is cleared, if the record is the one made at topic.created_at_ms
     * ([s] topic [8] created_at_ms): state.c topic_ready. */
    TN_MC_TOPIC_READY = 27,
    /* Remotes (meta/remote.h has their payloads). */
    TN_MC_REMOTE_PUT = 30,
    TN_MC_REMOTE_DELETE = 31,
    TN_MC_REMOTE_SALT = 32,         /* the cluster's seal salt, made once by the leader */
    TN_MC_REMOTE_CHILD_PUT = 33,    /* a remote child attached */
    TN_MC_REMOTE_CHILD_DELETE = 34, /* and detached */
} tn_meta_cmd_type_t;

/* PART_MOVE's kind byte. */
/* FAIL is the abort of a move that cannot finish, proposed by the
 * metastore leader (its target member dead past replace-dead-after: meta.c
 * check_moves) or by the partition's leader (its target member, alive,
 * copied nothing for move-stall-timeout: cluster/movestall.h): applied as
 * ABORT (partstate.h rule 8; the move id must be the one under way), kept
 * as failed with its reason. */
typedef enum {
    TN_MOVE_BEGIN = 0,
    TN_MOVE_COMPLETE = 1,
    TN_MOVE_ABORT = 2,
    TN_MOVE_FAIL = 3
} tn_meta_move_kind_t;

/* How a finished move ended. */
typedef enum { TN_MOVE_DONE = 1, TN_MOVE_ABORTED = 2, TN_MOVE_FAILED = 3 } tn_meta_move_end_t;

/* Why a rebalance is wanted (CLUSTER_REBALANCE's reason byte). */
typedef enum { TN_REBAL_API = 1, TN_REBAL_JOIN = 2 } tn_meta_rebal_reason_t;

/* A rebalance as the state keeps it (wanted false: none) and as
 * CLUSTER_REBALANCE carries it. */
typedef struct {
    bool wanted;
    uint8_t reason;   /* tn_meta_rebal_reason_t */
    uint64_t id;      /* the proposer's, not 0 */
    int64_t since_ms; /* the proposer's wall clock when it was asked */
} tn_meta_rebal_t;

#define TN_META_MOVE_REASON_MAX 160
#define TN_META_MOVES_KEPT      64 /* finished moves the state keeps */

/* A finished move, as the state keeps it (the last TN_META_MOVES_KEPT). */
typedef struct {
    uint64_t id;
    char topic[TN_NAME_MAX + 1];
    uint32_t part;
    uint8_t end; /* tn_meta_move_end_t */
    int64_t started_ms, finished_ms;
    uint32_t nfrom;
    uint32_t from[TN_PSTATE_MAX_REPLICAS]; /* the replicas before it */
    uint32_t nto;
    uint32_t to[TN_PSTATE_MAX_REPLICAS];      /* its target */
    char reason[TN_META_MOVE_REASON_MAX + 1]; /* "" for done */
} tn_meta_move_t;

/* The names docs/replication.md and the helpers' contracts use. */
#define TN_META_CMD_PART_ISR       TN_MC_PART_ISR
#define TN_META_CMD_MEMBER_FENCE   TN_MC_MEMBER_FENCE
#define TN_META_CMD_PART_LEADER    TN_MC_PART_LEADER
#define TN_META_CMD_PART_REBALANCE TN_MC_PART_REBALANCE
#define TN_META_CMD_PART_CORRUPT   TN_MC_PART_CORRUPT

typedef enum { TN_MEMBER_ALIVE = 0, TN_MEMBER_DEAD = 1 } tn_member_status_t;

typedef enum { TN_DELIVERY_RELIABLE = 0, TN_DELIVERY_TTL_DISCARD = 1 } tn_delivery_mode_t;
typedef enum {
    TN_GRANT_PRODUCE = 1,
    TN_GRANT_CONSUME,
    TN_GRANT_CREATE,
    TN_GRANT_ADMIN
} tn_grant_action_t;

typedef struct {
    char name[TN_NAME_MAX + 1];
    uint32_t partitions;
    int64_t retention_ms;
    int64_t visibility_timeout_ms;
    int64_t max_inflight;    /* per partition */
    int64_t max_acked_ahead; /* per partition */
    uint8_t delivery_mode;   /* tn_delivery_mode_t */
    uint8_t durability;      /* 0 durable, 1 write_ack, 2 relaxed */
    int64_t ttl_ms;
    uint32_t max_attempts;
    int64_t created_at_ms;
    char owner[TN_META_USER_MAX + 1];
    char parent[TN_NAME_MAX + 1]; /* "" for none */
    int64_t fanout_delay_ms;
    uint64_t attach_epoch;
    /* Created through /v1: its settings are its own. (NSQ-created topics
     * follow the server's options, which the record only shows.) Carried
     * in bit 1 of TOPIC_PUT's flag byte. */
    bool native;
    /* Replicas per partition (1..TN_META_MAX_FACTOR) and the in-sync
     * replicas an acknowledged write needs (1..replication_factor). 0 reads
     * as 1 (a record made before these fields). */
    uint8_t replication_factor;
    uint8_t min_insync;
    /* Being created through /v1 by this member (0: ready). Every produce
     * path holds publishes to a marked topic (cluster/router.h), so that
     * a creation taken back (its TOPIC_DELETE) takes no acknowledged
     * message with it. Set only when the record is made (an update keeps
     * the stored mark, whatever it carries); cleared by TOPIC_READY, or
     * when the member's session is fenced (meta/state.h). Not in the
     * fingerprint: a PATCH made from a marked copy still lands. Encoded
     * last in TOPIC_PUT, [8] not 0, only when set. */
    uint64_t creating;
} tn_meta_topic_t;

typedef struct {
    uint8_t action; /* tn_grant_action_t */
    uint16_t npatterns;
    char **patterns; /* owned */
} tn_meta_grant_t;

typedef struct {
    char name[TN_META_USER_MAX + 1];
    char hash[TN_META_HASH_MAX + 1]; /* bcrypt $2b$ */
    bool root;
    int64_t created_at_ms;
    int64_t updated_at_ms;
    uint16_t ngrants;
    tn_meta_grant_t *grants; /* owned */
} tn_meta_user_t;

/* How NSQ clients reach a member (what nsqlookupd's producer entries
 * say): the address they dial with the NSQ TCP port the listener bound,
 * the HTTP port, the host name and the release it runs. Empty (ports 0)
 * until a MEMBER_REC. */
typedef struct {
    char broadcast[TN_META_HOST_MAX + 1];
    char hostname[TN_META_HOST_MAX + 1];
    uint16_t tcp_port;
    uint16_t http_port;
    char version[TN_META_RELEASE_MAX + 1];
} tn_meta_nsq_t;

typedef struct {
    uint64_t id;
    char addr[TN_META_ADDR_MAX + 1];     /* Raft address */
    char api_addr[TN_META_ADDR_MAX + 1]; /* host:port; "" until a MEMBER_REG */
    uint8_t status;                      /* tn_member_status_t */
    bool draining;                       /* set by MEMBER_DRAIN (registrations keep it) */
    int64_t heartbeat_ms;                /* the registering node's wall clock; 0 = never */
    tn_meta_nsq_t nsq;                   /* MEMBER_REC (MEMBER_REG and MEMBER_PUT keep it) */
    /* The random id of its data directory (MEMBER_REC; 0 = unknown). A
     * registration with another one fences the member's old replicas. */
    uint64_t incarnation;
    /* A random id of the registering process (MEMBER_REC; 0 = unknown):
     * another one than the recorded one is a restart, which fences the
     * member's old session like a new incarnation does. */
    uint64_t boot;
    /* Its session ended (MEMBER_FENCE) and it has not registered since:
     * not live for elections (meta/state.h). */
    bool fenced;
} tn_meta_member_t;

/* A decoded command. */
typedef struct {
    uint8_t type;
    bool if_absent; /* TOPIC_PUT, CHANNEL_PUT, USER_PUT: fail with UV_EEXIST if present */
    /* TOPIC_PUT, USER_PUT: apply only while the stored record is the one
     * the update was made from (its fingerprint is `expect`): TN_ECHANGED
     * otherwise, TN_ENOTFOUND when it is gone. Two updates made from the
     * same read copy then never undo each other (the loser reads again),
     * and an update never brings back a record deleted meanwhile. */
    bool if_unchanged;
    uint64_t expect;
    /* TOPIC_DELETE: delete only the record made at topic.created_at_ms
     * (TN_ECHANGED for another made under the name since, TN_ENOTFOUND for
     * none): a /v1 creation's take-back, which must never delete a topic
     * made again meanwhile. false: any record under the name (a user's
     * delete, and every older build's entry). */
    bool if_created;
    bool again; /* TOPIC_PUT, USER_PUT: a copy sent again (above) */
    /* TOPIC_PUT: topic.replication_factor is the one asked; the apply that
     * makes the topic clamps it (TN_META_TOPIC_CLAMP above). */
    bool clamp;
    /* TOPIC_PUT: the TN_META_OWN_* bits the apply enforces (0: none, an
     * older build's entry). */
    uint8_t owner_rule;
    /* USER_DELETE: the user's topics pass to the root user (false: an
     * older build's entry, whose apply leaves them as they are). */
    bool disown;
    /* USER_PUT with if_absent: topics whose owner names the new user (left
     * by an older build's deletion, or by a create that landed after the
     * deletion) pass to the root user first (false: an older build's). */
    bool fresh;
    tn_meta_topic_t topic;
    char channel[TN_NAME_MAX + 1];
    /* CHANNEL_PUT: the channel's stamp (above; 0: none, an older build's
     * entry, or one tn_meta_propose draws). */
    uint64_t chan_stamp;
    tn_meta_user_t user;
    /* MEMBER_STATUS: member.heartbeat_ms is the expected one; TOPIC_GROW_FOR
     * (topic.name): member.id is the member the partition is for. */
    tn_meta_member_t member;
    /* PART_OWNERS (topic.name): owner member id per partition, 0 = none. */
    uint64_t *owners; /* owned */
    uint32_t nowners;
    uint64_t nonce; /* NOOP (with member.id, the proposer) */
    /* TOPIC_PUT: members new partitions are not placed on (ascending ids;
     * set by the leader as it proposes, never by a door). */
    uint64_t *skip; /* owned */
    uint16_t nskip;
    /* PART_* (topic.name): the partition and the command's arguments.
     * MEMBER_FENCE uses member.id and member.incarnation. */
    uint32_t part;
    uint32_t node;         /* PART_ISR: the proposer; PART_LEADER, PART_CORRUPT */
    uint32_t leader_epoch; /* PART_ISR */
    uint32_t expected_pe;  /* PART_ISR */
    bool unclean;          /* PART_LEADER */
    uint32_t nisr;         /* PART_ISR */
    /* PART_ISR: the proposer checked the channel state of every member it
     * adds (cluster/setrepl.h tn_setrepl_catch_up); read true from an
     * entry without the flags byte (older builds had no such check). */
    bool channels_checked;
    bool isr_unflagged; /* PART_ISR decoded without the flags byte: encoded so again */
    tn_pstate_member_t isr[TN_PSTATE_MAX_REPLICAS];
    tn_pstate_t pstate; /* PART_STATE */
    /* PART_MOVE: the kind, the move's id (not 0) and the proposer's wall
     * clock (begin: the start; complete, abort: the end); begin: the
     * target (ntarget 1..TN_PSTATE_MAX_REPLICAS, distinct, none NONE);
     * abort: the reason kept with it (may be ""). */
    uint8_t move_kind;
    uint64_t move_id;
    int64_t move_ms;
    uint32_t ntarget;
    uint32_t target[TN_PSTATE_MAX_REPLICAS];
    char move_reason[TN_META_MOVE_REASON_MAX + 1];
    /* PART_MOVE COMPLETE decoded without the flags byte (an older build's
     * entry, whose apply left the partition's min_insync as it was; the
     * apply keeps doing so for it, state.c part_move): encoded so again. */
    bool move_unflagged;
    /* PART_MOVE ABORT or FAIL decoded without the flags byte (an older
     * build's entry, applied without rule 8's refusal for too few copies,
     * as that build did: partstate.h): encoded so again. */
    bool abort_unflagged;
    /* MOVE_MARK (with move_id): the marks (nodes distinct, none NONE). */
    uint32_t nmark;
    tn_pstate_mark_t mark[TN_PSTATE_MAX_REPLICAS];
    tn_meta_move_t move; /* MOVE_DONE */
    /* REMOTE_PUT, REMOTE_DELETE, REMOTE_SALT: owned after decode (tn_meta_cmd_fini),
     * borrowed to encode. */
    tn_meta_remote_cmd_t *remote;
    /* CLUSTER_REBALANCE; if_absent: only if none is wanted (else UV_EBUSY). */
    tn_meta_rebal_t rebal;
    /* MEMBER_REMOVE (with member.id and member.incarnation): the
     * proposer's wall clock. */
    int64_t removed_ms;
} tn_meta_cmd_t;

/* Append c's encoding (padded) to out. 0, UV_EINVAL (a field out of
 * range) or UV_ENOMEM. */
int tn_meta_cmd_encode(const tn_meta_cmd_t *c, tn_buf_t *out);

/* Decode one command from the front of buf. 0 (*used = its padded
 * length), TN_ESHORT (buf holds less than the header says), TN_ECORRUPT
 * (bad magic, lengths, names or padding), UV_ENOTSUP (a version or command
 * type this build does not know) or UV_ENOMEM. On success c owns memory:
 * tn_meta_cmd_fini. */
int tn_meta_cmd_decode(const void *buf, size_t len, tn_meta_cmd_t *c, size_t *used);
void tn_meta_cmd_fini(tn_meta_cmd_t *c);

/* Fill c (any contents, nothing owned) with the take-back of topic's
 * record made at created_at_ms: a TOPIC_DELETE of that record only
 * (if_created), which the state machine refuses with TN_ECHANGED once the
 * name was deleted and made again, TN_ENOTFOUND once it is gone. */
void tn_meta_cmd_take_back(tn_meta_cmd_t *c, const char *topic, int64_t created_at_ms);

void tn_meta_user_fini(tn_meta_user_t *u);
/* A 64-bit hash of every field of a record (FNV-1a over the fields in
 * encoding order), for if_unchanged. Allocates nothing, so every replica
 * computes the same. */
uint64_t tn_meta_topic_fingerprint(const tn_meta_topic_t *t);
uint64_t tn_meta_user_fingerprint(const tn_meta_user_t *u);
/* A topic's replication_factor and min_insync, 0 read as 1. */
uint8_t tn_meta_topic_factor(const tn_meta_topic_t *t);
uint8_t tn_meta_topic_min_insync(const tn_meta_topic_t *t);
/* Deep copy of a user's grants into dst (dst's own are released). */
int tn_meta_user_copy(tn_meta_user_t *dst, const tn_meta_user_t *src);

#endif
