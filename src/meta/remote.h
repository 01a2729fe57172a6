/* Remotes in the metastore (docs/remotes.md): other tern clusters a remote
 * child sends to, each with its URL, the username it sends as, an
 * optional CA bundle and the password sealed (meta/seal.h), never in
 * clear. Replicated state, changed only by REMOTE_PUT and REMOTE_DELETE
 * (meta/cmd.h), kept sorted by name; the cluster's seal salt lives beside
 * them.
 *
 * REMOTE_PUT payload: [1] condition (0 none, 1 if_absent, 2 if_unchanged,
 * then [8] expect after the record; bit 7 again, as USER_PUT's), [32] the
 * salt the password was sealed under, the record: [s] name [8] id (not 0)
 * [s] url [s] username [s] ca_pem ("" none) [2] sealed length + sealed
 * bytes (TN_SEAL_OVERHEAD.. bytes) [4] credential version (>= 1) [8]
 * created ms [8] updated ms [s] created_by [s] updated_by [s] request id.
 * REMOTE_DELETE payload: [s] name [s] by [s] request id (who asked, for the
 * leader's audit line; the state keeps nothing of them). REMOTE_SALT
 * payload: [32] salt.
 *
 * REMOTE_CHILD_PUT (33) payload: [1] condition (0 none, 1 if_absent) [s]
 * parent [s] remote [8] remote id [s] child [8] epoch (not 0) [8] delay ms
 * (0..1 year) [8] created ms [s] created_by [s] request id.
 * REMOTE_CHILD_DELETE (34): [s] parent [s] remote [s] child [s] by [s]
 * request id.
 *
 * Remote children (rules, docs/remotes.md "Remote children"): a record
 * names a parent topic of this cluster, a remote, the id of that remote
 * when attached (a remote deleted and made again under the same name is
 * another one: its children are not inherited), the child topic on the
 * remote cluster, the attach epoch (the parent's cursor channel
 * `remote.<epoch>`), and the delay. Kept sorted by (parent, remote,
 * child). A PUT needs the parent (the state machine checks it: UV_ENOENT)
 * and the remote with that id (TN_ENOTFOUND); if_absent finding the same
 * epoch answers 0 (its own copy sent again), another one UV_EEXIST. A
 * REMOTE_DELETE of a remote some child names answers UV_EBUSY; deleting a
 * parent topic drops its remote children (state.c). The snapshot writes
 * them after the remotes, each a REMOTE_CHILD_PUT (condition 0).
 *
 * The salt (rule): the metastore leader makes the cluster's salt once
 * (REMOTE_SALT with 32 random bytes, proposed from its tick while the
 * state has none: meta.h); the first one applied stays for good, a later
 * one answers UV_EEXIST and changes nothing. A REMOTE_PUT carries the
 * salt its password was sealed under: applied only when it is the
 * cluster's (TN_ECHANGED otherwise: the door seals again), and answered
 * UV_EAGAIN while there is no salt yet. The snapshot writes the salt
 * (REMOTE_SALT) and then every remote as a REMOTE_PUT (condition 0).
 *
 * Threads: the caller's (pure). */
#ifndef TN_META_REMOTE_H
#define TN_META_REMOTE_H

#include "core/platform.h"

#include "core/buf.h"
#include "core/name.h"
#include "meta/seal.h"

#define TN_REMOTE_NAME_MAX     64
#define TN_REMOTE_URL_MAX      2048
#define TN_REMOTE_USER_MAX     64
#define TN_REMOTE_CA_MAX       60000
#define TN_REMOTE_PASSWORD_MAX 1024
#define TN_REMOTE_SEALED_MAX   (TN_REMOTE_PASSWORD_MAX + TN_SEAL_OVERHEAD)
#define TN_REMOTE_REQUEST_MAX  32
#define TN_REMOTE_BY_MAX       64
#define TN_REMOTE_AGAIN        128 /* REMOTE_PUT's condition byte */
#define TN_RCHILD_MAX_DELAY_MS (365LL * 24 * 3600 * 1000)

typedef struct {
    char name[TN_REMOTE_NAME_MAX + 1];
    uint64_t id;
    char url[TN_REMOTE_URL_MAX + 1];
    char username[TN_REMOTE_USER_MAX + 1];
    char *ca_pem; /* owned by the record ("" none); never NULL in a stored one */
    uint8_t sealed[TN_REMOTE_SEALED_MAX];
    uint16_t sealed_len;
    uint32_t cred_version;
    int64_t created_at_ms, updated_at_ms;
    char created_by[TN_REMOTE_BY_MAX + 1];
    char updated_by[TN_REMOTE_BY_MAX + 1];
    char request[TN_REMOTE_REQUEST_MAX + 1]; /* the request id of the last write */
} tn_meta_remote_t;

/* A remote child (above). */
typedef struct {
    char parent[TN_NAME_MAX + 1];
    char remote[TN_REMOTE_NAME_MAX + 1];
    uint64_t remote_id;
    char child[TN_NAME_MAX + 1]; /* the topic on the remote cluster */
    uint64_t epoch;
    int64_t delay_ms;
    int64_t created_at_ms;
    char created_by[TN_REMOTE_BY_MAX + 1];
    char request[TN_REMOTE_REQUEST_MAX + 1];
} tn_meta_rchild_t;

/* A REMOTE_PUT's or REMOTE_DELETE's arguments (DELETE: rec.name,
 * rec.updated_by as who asked, rec.request). */
typedef struct tn_meta_remote_cmd_s {
    uint8_t cond; /* 0 none, 1 if_absent, 2 if_unchanged */
    bool again;
    uint64_t expect; /* if_unchanged: the stored record's fingerprint */
    uint8_t salt[TN_SEAL_SALT];
    tn_meta_remote_t rec; /* rec.ca_pem: borrowed to encode, owned after decode */
    /* REMOTE_CHILD_PUT/DELETE (cond 0 or 1; DELETE: parent, remote, child,
     * created_by as who asked, request). */
    tn_meta_rchild_t child;
} tn_meta_remote_cmd_t;

typedef struct {
    tn_meta_remote_t **v; /* sorted by name, owned */
    size_t n, cap;
    bool has_salt; /* once a REMOTE_SALT was applied */
    uint8_t salt[TN_SEAL_SALT];
    tn_meta_rchild_t **children; /* sorted by (parent, remote, child), owned */
    size_t nchildren, capchildren;
} tn_meta_remotes_t;

/* Whether s[0..n) is a remote name: [A-Za-z0-9._-]{1,64}. */
bool tn_meta_remote_name_valid(const char *s, size_t n);

/* The payload of a REMOTE_PUT, REMOTE_DELETE or REMOTE_SALT (type) appended to out.
 * 0, UV_EINVAL (a field out of range) or UV_ENOMEM. */
int tn__meta_remote_encode(uint8_t type, const tn_meta_remote_cmd_t *c, tn_buf_t *out);
/* Decode p[0..n), exactly one payload, into c (zeroed first): 0 (c->rec
 * owns its ca_pem: tn__meta_remote_cmd_fini), TN_ECORRUPT or UV_ENOMEM. */
int tn__meta_remote_decode(uint8_t type, const uint8_t *p, size_t n, tn_meta_remote_cmd_t *c);
void tn__meta_remote_cmd_fini(tn_meta_remote_cmd_t *c);

/* FNV-1a over every field of r (if_unchanged). */
uint64_t tn_meta_remote_fingerprint(const tn_meta_remote_t *r);

/* Apply a REMOTE_PUT, REMOTE_DELETE or REMOTE_SALT (restoring: a snapshot
 * record, which names each remote once). 0; UV_EEXIST (if_absent found
 * one; restoring: a duplicate; a salt when there is one); TN_ENOTFOUND (a
 * delete, or if_unchanged, of a missing remote); TN_ECHANGED (if_unchanged
 * found another record; a salt other than the cluster's: header);
 * UV_EAGAIN (a PUT before any salt); TN_ECORRUPT (restoring: another salt,
 * or a remote before the salt); UV_ENOMEM. A PUT marked again that finds
 * exactly its record answers 0. */
int tn__meta_remotes_apply(tn_meta_remotes_t *rs, uint8_t type, const tn_meta_remote_cmd_t *c,
                           bool restoring);
void tn__meta_remotes_fini(tn_meta_remotes_t *rs);
/* Append every remote to out as snapshot records, adding their number to
 * *count. 0 or UV_ENOMEM/UV_EINVAL. */
int tn__meta_remotes_snapshot(const tn_meta_remotes_t *rs, tn_buf_t *out, uint64_t *count);

/* The metastore leader's audit line for an applied REMOTE_PUT or
 * REMOTE_DELETE (nothing for a REMOTE_SALT) with the state machine's answer status: who (as the
 * door recorded), what, which remote, the request id; never a credential. */
void tn_meta_remote_audit(uint8_t type, const tn_meta_remote_cmd_t *c, int status);

/* The remote children of parent (NULL: of every parent) that send to
 * remote (NULL: to any): how many, and the first in *first (an index into
 * rs->children, ordered: those of one parent are adjacent). */
size_t tn_meta_rchild_count(const tn_meta_remotes_t *rs, const char *parent, const char *remote,
                            size_t *first);
/* The remote child (parent, remote, child) (borrowed: valid until the next
 * apply or restore), or NULL. */
const tn_meta_rchild_t *tn_meta_rchild_find(const tn_meta_remotes_t *rs, const char *parent,
                                            const char *remote, const char *child);
/* Drop every remote child of parent (its topic was deleted). */
void tn__meta_rchild_drop_parent(tn_meta_remotes_t *rs, const char *parent);

/* The remote named name (borrowed: valid until the next apply or
 * restore), or NULL. */
const tn_meta_remote_t *tn_meta_remote_find(const tn_meta_remotes_t *rs, const char *name);

#endif
