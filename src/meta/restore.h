/* A whole cluster restored from one backup (restore.c; `ternctl restore`
 * without --rejoin; docs/operations.md, "Backup and restore", and
 * docs/replication.md, "Incarnations"): the metastore snapshot every
 * restored node starts from, rewritten so that every replicated partition
 * has a leader again and every restored member its incarnation.
 *
 * Every member's restore runs this on the same inputs (the backup's
 * snapshot, its id, its members and every member's copy of every
 * replicated partition, all read from the backup directory), so every
 * node writes the same snapshot: the choice and the incarnations are
 * pure functions of them.
 *
 * DESIGN: the rewrite of one replicated partition.
 *   1. Each copy in the backup (tn_meta_restore_copy_t: its latest epoch
 *      and log end as storage would recover them) is a candidate unless
 *      it is missing or damaged: the copies of the replicas the snapshot
 *      lists, and those of the other restored members. A member's copy
 *      is in the backup only if the member held the partition (led or
 *      followed it) when its session was made; the snapshot restored is
 *      the member's with the highest applied index, taken maybe after a
 *      move (or a factor change) dropped a member whose copy was taken
 *      before, the whole one, while the replicas it lists copied theirs
 *      before they caught up (short, or none).
 *   2. The best candidate has the highest (latest epoch, log end), as an
 *      election would choose; a tie goes to the earlier copy, replicas
 *      (in replicas order) before the others (in members order)
 *      (tn_meta_restore_choose). An empty copy is a candidate (epoch 0,
 *      end 0): when every copy is empty, the preferred one leads.
 *   3a. A best copy on a member the snapshot does not list makes it a
 *      replica: the first one (the preferred leader, and owners[p]), or,
 *      with a move under way, the last one and an old replica of the move
 *      (replicas stays the target followed by the old replicas not in
 *      it; the move copies from it before it completes). The partition
 *      then has a replica more than its topic's factor: the metastore
 *      leader's factor rule moves it back, keeping the first replica.
 *      No room (TN_PSTATE_MAX_REPLICAS replicas already): the restore is
 *      refused (UV_E2BIG), naming the partition, rather than lose it.
 *   3. The state (tn_meta_restore_pstate): leader = best, ISR = {best}
 *      with best's restored incarnation, ELR empty, CRC failures and the
 *      unclean mark cleared; leader_epoch one above every epoch the
 *      snapshot's state or any copy names (a leader must never append
 *      under an epoch below one its followers hold); partition_epoch one
 *      above the snapshot's. An epoch at the top of its range (UINT32_MAX,
 *      none above it: a damaged backup) refuses the restore (UV_ERANGE),
 *      naming the partition. The other replicas copy from best, cut their
 *      logs where they part from its history (KIP-279, as after any
 *      failover), and rejoin the ISR through the leader's CAS once caught
 *      up (which also checks their channel state).
 *   4. No candidate: the partition stays offline (no leader, ISR and ELR
 *      empty) until an admin forces a leader; the restore says so.
 * The members of the backup get tn_meta_restore_incarnation(backup id,
 * member id), their boot id is cleared (the first registration of a
 * restored process is no restart of one the state knew: it fences
 * nothing) and so is a fence of their old session.
 *
 * Threads: any (ternctl). */
#ifndef TN_META_RESTORE_H
#define TN_META_RESTORE_H

#include "core/platform.h"

#include "core/buf.h"
#include "meta/partstate.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One replica's copy of a partition, as the backup holds it. */
typedef struct {
    uint32_t node;
    bool present;        /* the backup holds this replica's copy */
    bool damaged;        /* storage would open it isolated: never chosen */
    uint32_t last_epoch; /* its latest epoch after recovery's cut; 0: none */
    uint64_t log_end;    /* the offset its next record would get */
    uint32_t max_epoch;  /* the highest epoch it names at all; 0: none */
} tn_meta_restore_copy_t;

/* The index of the copy to lead among copies[0..n) (the replicas', then
 * the other members'): the candidate with the highest (last_epoch,
 * log_end), the earlier one on a tie; -1 when none is a candidate. Pure. */
int tn_meta_restore_choose(const tn_meta_restore_copy_t *copies, uint32_t n);

/* The rewritten state of a partition whose snapshot state is old and
 * whose copies are copies[0..ncopies) (its replicas' first, in replicas
 * order, then other members'), best from tn_meta_restore_choose,
 * best_incarnation the restored incarnation of its node: step 3, 3a or 4
 * above, into *out. 0, UV_E2BIG (step 3a: no room for another replica)
 * or UV_ERANGE (old or a copy names epoch UINT32_MAX, or old's
 * partition_epoch is UINT32_MAX: no epoch above it); on an error *out is
 * untouched. Pure. */
int tn_meta_restore_pstate(const tn_pstate_t *old, const tn_meta_restore_copy_t *copies,
                           uint32_t ncopies, int best, uint64_t best_incarnation, tn_pstate_t *out);

/* The incarnation of member in every data directory restored from the
 * backup named backup_id (borrowed): the first 8 bytes of
 * SHA-256("tern-restore-incarnation" NUL backup_id NUL member in decimal),
 * never 0. Pure. */
uint64_t tn_meta_restore_incarnation(const char *backup_id, uint64_t member);

/* Fill copies[0..ncopies) (node set: ps's replicas in replicas order,
 * then every other restored member) for partition p of topic. 0, or an
 * error that ends the rewrite (err says why: the callback writes it). */
typedef int (*tn_meta_restore_copies_cb)(void *arg, const char *topic, uint32_t p,
                                         const tn_pstate_t *ps, tn_meta_restore_copy_t *copies,
                                         uint32_t ncopies, char *err, size_t errlen);
/* Told the decision for partition p of topic (every pointer borrowed for
 * the call): copies[0..ncopies) as filled, best -1 when it stays
 * offline (old->nreplicas or more: a member old does not list leads). */
typedef void (*tn_meta_restore_told_cb)(void *arg, const char *topic, uint32_t p,
                                        const tn_pstate_t *old, const tn_pstate_t *now,
                                        const tn_meta_restore_copy_t *copies, uint32_t ncopies,
                                        int best);

/* Rewrite the metastore snapshot snap[0..len) (borrowed) for a whole
 * cluster restored from the backup backup_id: every placed replicated
 * partition as above (copies from copies_cb, each decision told to
 * told_cb), and each member of members[0..n) (distinct node ids,
 * 1..UINT32_MAX) given its restored incarnation. The new snapshot is
 * appended to out. 0; UV_EINVAL (a member id no node has, or one named
 * twice), TN_ECORRUPT or UV_ENOTSUP (a snapshot this build cannot read),
 * a copies_cb error, UV_E2BIG (step 3a), UV_ERANGE (step 3: no epoch
 * above the backup's) or UV_ENOMEM, with err saying what; on an error
 * nothing is appended to out. */
int tn_meta_restore_rewrite(const void *snap, size_t len, const char *backup_id,
                            const uint64_t *members, size_t n, tn_meta_restore_copies_cb copies_cb,
                            tn_meta_restore_told_cb told_cb, void *arg, tn_buf_t *out, char *err,
                            size_t errlen);

/* Write incarnation into data_dir's `incarnation` file, in the format
 * tn_meta_incarnation_load reads (16 hex digits and a newline),
 * crash-safely. data_dir must not have one yet (UV_EEXIST). 0 or an
 * error with err filled. Blocks. */
int tn_meta_restore_incarnation_write(const char *data_dir, uint64_t incarnation, char *err,
                                      size_t errlen);

#endif
