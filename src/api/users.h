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
 * it; it sets *handle to NULL when it ends. 0 or an error. */
int tn_users_seed_root(uv_loop_t *loop, tn_meta_t *meta, const char *data_path,
                       const char *env_password, tn_seed_t **handle);
/* The metastore is closing: the seed ends without proposing. */
void tn_users_seed_cancel(tn_seed_t *s);

#endif
