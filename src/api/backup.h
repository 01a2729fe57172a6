/* Online backup of a running node (backup.c): the /v1/backup routes, for
 * admins. A session pins a consistent set of the data directory's files
 * and answers their bytes; `ternctl backup` copies them and `ternctl
 * restore` writes them into an empty data directory. The full reference
 * is docs/http-api.md ("Backup") and docs/operations.md ("Backup and
 * restore").
 *
 * DESIGN: a session.
 *   1. POST /v1/backup, on the loop thread: take the metastore's state as
 *      a snapshot (tn_meta_backup), then read every local partition log's
 *      written and durable ends (tn_plog_written_next, _durable_next) and
 *      the ingress log's durable seq. A partition with records written
 *      but not durable (write_ack and relaxed acknowledge at the write)
 *      is polled until they are (at most 15 s), and its end is then what
 *      was written. Everything acknowledged before the POST is below
 *      those ends, and every end is durable. Likewise every channel log
 *      of a local partition with records queued but not completed (a
 *      /v1 ack or nack is answered after its record's sync, but an NSQ
 *      FIN or REQ, which has no answer, a timeout or an admin action
 *      applies to the live cursor before the WAL committer writes it):
 *      the POST waits, within the
 *      same 15 s, until as many records as were queued at the POST have
 *      completed (written and synced, tn_chanlog_completed), so every
 *      settle answered before the POST is in the WAL that step 2 copies.
 *   2. On a worker thread, under <data>/backup/<id>/ (same file system):
 *      hard links to every segment with records below the durable end,
 *      the sidecars of those that are not the last, the floor file, the
 *      `epochs` file of a replicated partition and the `damage` file of a
 *      partition that has one (after its segments), the
 *      ingress segments, FORMAT and the data directory's incarnation
 *      (meta.h TN_META_INCARNATION_FILE); copies of each channel WAL (it
 *      is truncated in place at a checkpoint, so a link would not keep its
 *      bytes) made before the link to its checkpoint (renamed into place
 *      at each checkpoint, so a link keeps the file as it was); a copy of
 *      the ingress checkpoint lowered to the durable seq. A link keeps a
 *      file's bytes when GC, retention, compaction or a topic deletion
 *      unlinks it: that is the pin. Each file's length is what is copied
 *      (a segment's: up to its last record below the durable end, so
 *      never past it) and its CRC32C is computed over exactly those bytes.
 *      A partition isolated for damage at the POST (TN_ECORRUPT,
 *      TN_EFORMAT) is taken whole instead: every segment and sidecar of
 *      its directory as they stand, unchecked (its durable end stops at
 *      the damage, and a copy cut there would restore as a clean, shorter
 *      log); the manifest's "isolated" names it with its error. Then
 *      each topic's pause files (also of a topic whose directory here
 *      holds no partition, only a pause's files), each channel's stamp
 *      (`.cstamp`, which record its files are of) and last the topic's
 *      (`stamp`), each when it still holds what it held before the first
 *      file was copied (a channel or topic deleted and made again as its
 *      files were copied has none: backup.c take_stamp, take_topic_stamp).
 *   3. Answer 201 with the manifest (backup.c's manifest_json). The
 *      session lives until DELETE /v1/backup/{id} or until it has not
 *      been used for its TTL (every download renews it); then its
 *      directory is removed. A restart removes <data>/backup/.
 *   4. GET /v1/backup/{id}/file?path=P[&offset=N] answers at most 8 MiB
 *      of the pinned file P (a path of the manifest, compared exactly, so
 *      nothing else can be named) from N, never past the manifest length;
 *      the client asks again from where the answer ended.
 *
 * Threads: the loop thread; file work runs on libuv's thread pool. */
#ifndef TN_API_BACKUP_H
#define TN_API_BACKUP_H

#include "core/platform.h"

#include "api/v1.h"
#include "storage/ilog.h"

#define TN_BACKUP_CHUNK_MAX (8u * 1024 * 1024) /* bytes per GET answer */
#define TN_BACKUP_SESSIONS  4                  /* sessions at once */
#define TN_BACKUP_TTL_MS    (10 * 60 * 1000)   /* unused this long: removed */
#define TN_BACKUP_FORMAT    "tern-backup 1"

typedef struct tn_backup_s tn_backup_t;

typedef struct {
    const char *data_path; /* borrowed for the module's lifetime */
    uint64_t node_id;
    int64_t ttl_ms; /* 0: TN_BACKUP_TTL_MS */
} tn_backup_opts_t;

/* Remove what a previous run left in <data>/backup/ (blocking: at start,
 * before serving) and make the module. v (its metastore, broker and admin
 * checks), ilog (NULL outside a cluster) are borrowed for its lifetime.
 * 0 or an error with err filled. */
int tn_backup_new(uv_loop_t *loop, tn_v1_t *v, tn_ilog_t *ilog, const tn_backup_opts_t *o,
                  tn_backup_t **out, char *err, size_t errlen);
/* The routes, under the /v1 guard (so authenticated). 0 or UV_ENOMEM. */
int tn_backup_register(tn_http_server_t *srv, tn_backup_t *bk);
/* Stop: no more sessions; the module frees itself once its worker jobs
 * end. The sessions' links stay for the next start to remove. */
void tn_backup_close(tn_backup_t *bk);

#endif
