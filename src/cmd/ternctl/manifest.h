/* The backup manifest (manifest.c): what `ternctl restore` reads from
 * DIR[/<node-id>]/manifest.json, the document POST /v1/backup answers
 * (api/backup.c writes it; docs/storage-format.md "Backup manifest"
 * describes it). The decoder is strict: the file comes from disk, where
 * anything may have happened to it, and a path in it names where restore
 * writes, so every path is checked before it is used.
 *
 * Threads: any. */
#ifndef TN_CMD_TERNCTL_MANIFEST_H
#define TN_CMD_TERNCTL_MANIFEST_H

#include "core/platform.h"

#include "meta/meta.h"

#include <stdio.h>

#define TN_MANIFEST_FORMAT    "tern-backup 1"
#define TN_MANIFEST_MAX_BYTES (256u * 1024 * 1024)
#define TN_MANIFEST_PATH_MAX  1024

typedef struct {
    char *path; /* relative to the data directory; tn_manifest_path_ok holds */
    uint64_t len;
    uint32_t crc; /* CRC32C of exactly len bytes */
} tn_manifest_file_t;

/* A partition the node had isolated for damage at the backup: its files
 * are copied whole, the damage included (api/backup.c take_whole). */
typedef struct {
    char *topic;
    uint32_t partition;
    char *error; /* why the node isolated it, as it said */
} tn_manifest_isolated_t;

typedef struct {
    char session[65];
    uint64_t node_id;
    int64_t created_ms;
    uint64_t ttl_ms;   /* the session's backup-session-ttl; 0: not said (optional) */
    uint64_t meta_len; /* the metastore snapshot, in the file "metastore.snapshot" */
    uint32_t meta_crc;
    uint64_t applied_index;
    tn_meta_peer_t *voters; /* node ids and Raft addresses */
    size_t nvoters;
    tn_manifest_file_t *files;
    size_t nfiles;
    tn_manifest_isolated_t *isolated; /* "isolated" (absent from older servers' manifests) */
    size_t nisolated;
} tn_manifest_t;

/* Decode buf (len bytes, borrowed) into m (owned by the caller: fini it,
 * also after a failure). 0, UV_EINVAL with err saying what is wrong, or
 * UV_ENOMEM. */
int tn_manifest_parse(const char *buf, size_t len, tn_manifest_t *m, char *err, size_t errlen);
void tn_manifest_fini(tn_manifest_t *m);

#define TN_MANIFEST_SET_FORMAT    "tern-backup-set 1"
#define TN_MANIFEST_SET_MAX_NODES 64
#define TN_MANIFEST_SET_MAX_BYTES (1u << 20)

/* DIR/backup.json: the members copied and where the metastore comes from. */
typedef struct {
    uint64_t ids[TN_MANIFEST_SET_MAX_NODES]; /* every member copied, each positive, once */
    size_t n;                                /* 1.. */
    uint64_t meta_from;                      /* one of ids */
    char id[65]; /* the set's id, 16 to 64 lowercase hex digits; "" in a set made before sets
                    had one */
} tn_manifest_set_t;

/* Decode backup.json (buf, len bytes, borrowed) into set. 0, or UV_EINVAL
 * with err saying what is wrong (fit to follow the file's name). */
int tn_manifest_set_parse(const char *buf, size_t len, tn_manifest_set_t *set, char *err,
                          size_t errlen);

/* The file of m (decoded, borrowed) at path, or NULL: a binary search
 * (the decoder sorts the files by path). */
const tn_manifest_file_t *tn_manifest_find(const tn_manifest_t *m, const char *path);

/* Whether p is a path a backup may hold: "FORMAT", "incarnation", or
 * under "topics/" or "ingress/", made of segments of [A-Za-z0-9._-] that
 * are not "." or "..",
 * no empty segment, at most TN_MANIFEST_PATH_MAX bytes. Nothing else (no
 * absolute path, no "..", not meta/ or LOCK) can come out of a manifest. */
bool tn_manifest_path_ok(const char *p);

/* `ternctl restore`'s check of the channel files of m (decoded, borrowed):
 * files that do not go together (a WAL without its checkpoint, the
 * reverse, a factor-1 partition without a channel its topic's other
 * partitions have: a replicated partition's copy, with an epochs file,
 * gets its channels from its leader), each said as one warning line on out with what ternd makes of
 * it. Returns how many were said, or -1 out of memory. */
long tn_manifest_check_channels(const tn_manifest_t *m, FILE *out);

/* `ternctl restore`'s removal of a topic directory dir (borrowed) of its
 * target that is an earlier topic's of the name (backup.c stamp_bare): dir
 * and everything in it. A symbolic link, at dir or under it, is removed as
 * a link and never followed (tn_io_remove_tree), so nothing outside the
 * data path is touched. 0 (also when dir is gone) or the first error. */
int tn_manifest_remove_dir(const char *dir);

#endif
