/* tern's own users (native API accounts): the root admin seeded at first
 * start. The /v1/users routes come with the native API.
 *
 * DESIGN: seeding the root admin.
 *   1. Once the metastore is ready and holds no user at all, take the
 *      password from TERN_ADMIN_PASSWORD, or generate one (24 random
 *      bytes, URL-safe base64) and write it to <data>/admin-password
 *      (mode 0600, atomically and durably) before anything refers to it.
 *   2. Hash it with bcrypt on a worker thread.
 *   3. Propose the user `admin` (root, grant admin) if absent. A crash in
 *      between leaves no user, so the next start seeds again (a generated
 *      password is then replaced in the file). The password is never
 *      logged.
 *   4. In a cluster every node seeds when it first finds no user; the
 *      first proposal the leader applies wins, and a node whose proposal
 *      found the user there removes the password file it wrote (that
 *      password is nobody's). The file is then on the node that won.
 *   5. Until the root user is in this node's replica (and the replica is
 *      ready and caught up: tn_users_ready), credentials cannot be judged
 *      here: the node is not ready (/readyz 503, no READY=1), and a
 *      credential the replica does not confirm is answered "not yet"
 *      (503 with Retry-After; NSQ AUTH E_AUTH_FAILED, as nsqd answers
 *      when its auth server cannot be reached), never "wrong". A node
 *      whose seed failed (logged) stays so until a start seeds.
 *
 * Threads: the loop thread. */
#ifndef TN_API_USERS_H
#define TN_API_USERS_H

#include "core/platform.h"

#include "meta/meta.h"

#define TN_ROOT_USER           "admin"
#define TN_ADMIN_PASSWORD_FILE "admin-password"

typedef struct tn_seed_s tn_seed_t;

/* Start seeding (a no-op when users exist). env_password may be NULL.
 * data_path and env_password are copied. While it runs *handle points at
 * it; it sets *handle to NULL when it ends. 0 or an error (UV_EINVAL:
 * env_password is longer than TN_BCRYPT_PASSWORD_MAX, auth/passwd.h). */
int tn_users_seed_root(uv_loop_t *loop, tn_meta_t *meta, const char *data_path,
                       const char *env_password, tn_seed_t **handle);
/* The metastore is closing: the seed ends without proposing. */
void tn_users_seed_cancel(tn_seed_t *s);
/* Whether this node can judge credentials now: its metastore replica is
 * ready (what its log held at start is applied, so after a restart every
 * user it held is back), caught up (tn_meta_caught_up: a leader known and
 * heard from, everything committed applied; so not while the metastore
 * has no quorum), and holds users (the root user's seed is applied here:
 * the seed runs while the replica holds none, and the root user cannot be
 * deleted). Before that, a user may be unknown here only for now. */
bool tn_users_ready(tn_meta_t *meta);

#endif
