/* Root admin seeding. See users.h. */
#include "core/platform.h"

#include "api/users.h"

#include "auth/passwd.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/time.h"
#include "storage/io.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

struct tn_seed_s {
    uv_work_t work;
    tn_meta_req_t req;
    tn_meta_t *meta; /* NULL once cancelled */
    tn_seed_t **handle;
    char path[4096];
    bool from_env;
    char password[TN_PASSWORD_MAX + 1];
    size_t len;
    char hash[TN_BCRYPT_HASH_MAX + 1];
    int rc;
};

typedef struct tn_seed_s seed_t;

static void seed_free(seed_t *s)
{
    if (s->handle != NULL)
        *s->handle = NULL;
    OPENSSL_cleanse(s->password, sizeof(s->password));
    tn_free(s);
}

static void on_seeded(tn_meta_req_t *req, int status)
{
    seed_t *s = req->data;
    if (status == 0) {
        if (s->from_env)
            TN_LOG(TN_LOG_NOTICE, "root user %s created with the password from TERN_ADMIN_PASSWORD",
                   TN_ROOT_USER);
        else
            TN_LOG(TN_LOG_NOTICE, "root user %s created; its password is in %s/%s", TN_ROOT_USER,
                   s->path, TN_ADMIN_PASSWORD_FILE);
    } else if (status == UV_EEXIST && !s->from_env) {
        /* Another node of the cluster seeded first: the password written
         * here is not the root user's, so it must not stay to mislead. */
        char file[sizeof(s->path) + sizeof(TN_ADMIN_PASSWORD_FILE) + 1];
        snprintf(file, sizeof(file), "%s/%s", s->path, TN_ADMIN_PASSWORD_FILE);
        int rc = tn_io_unlink(file);
        TN_LOG(TN_LOG_NOTICE, "root user %s was created by another node%s", TN_ROOT_USER,
               rc == 0 ? "; removed the unused password file" : "");
    } else if (status != UV_EEXIST && status != TN_ECLOSED) {
        TN_LOG(TN_LOG_ERROR, "creating the root user failed: %s (the next start tries again)",
               tn_strerror(status));
    }
    seed_free(s);
}

static void hash_work(uv_work_t *w)
{
    seed_t *s = w->data;
    s->rc = tn_bcrypt_hash(s->password, s->len, s->hash);
}

static void hash_done(uv_work_t *w, int status)
{
    seed_t *s = w->data;
    if (s->meta == NULL) { /* cancelled: the metastore is closing */
        seed_free(s);
        return;
    }
    if (status != 0 || s->rc != 0) {
        TN_LOG(TN_LOG_ERROR, "hashing the root password failed: %s",
               tn_strerror(status != 0 ? status : s->rc));
        seed_free(s);
        return;
    }
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_USER_PUT;
    c.if_absent = true;
    snprintf(c.user.name, sizeof(c.user.name), "%s", TN_ROOT_USER);
    snprintf(c.user.hash, sizeof(c.user.hash), "%s", s->hash);
    c.user.root = true;
    c.user.created_at_ms = c.user.updated_at_ms = tn_now_wall_ms();
    tn_meta_grant_t admin = {TN_GRANT_ADMIN, 0, NULL};
    c.user.ngrants = 1;
    c.user.grants = &admin; /* borrowed: encoding copies */
    s->req.data = s;
    int rc = tn_meta_propose(s->meta, &s->req, &c, on_seeded);
    if (rc != 0) {
        TN_LOG(TN_LOG_ERROR, "creating the root user failed: %s", tn_strerror(rc));
        seed_free(s);
    }
}

void tn_users_seed_cancel(tn_seed_t *s)
{
    if (s != NULL && s->meta != NULL && s->req.meta == NULL)
        s->meta = NULL; /* still hashing; once proposed, the metastore answers it */
}

int tn_users_seed_root(uv_loop_t *loop, tn_meta_t *meta, const char *data_path,
                       const char *env_password, tn_seed_t **handle)
{
    if (tn_meta_state(meta)->nusers > 0)
        return 0;
    seed_t *s = tn_calloc(1, sizeof(*s));
    if (s == NULL)
        return UV_ENOMEM;
    s->meta = meta;
    snprintf(s->path, sizeof(s->path), "%s", data_path);
    int rc = 0;
    if (env_password != NULL && env_password[0] != '\0') {
        s->len = strlen(env_password);
        if (s->len > TN_BCRYPT_PASSWORD_MAX) {
            seed_free(s);
            return UV_EINVAL;
        }
        memcpy(s->password, env_password, s->len);
        s->from_env = true;
    } else {
        rc = tn_password_generate(s->password);
        s->len = strlen(s->password);
        char line[40];
        int n = snprintf(line, sizeof(line), "%s\n", s->password);
        /* On disk before anything refers to it. */
        if (rc == 0)
            rc = tn_io_write_file_atomic_mode(data_path, TN_ADMIN_PASSWORD_FILE, line, (size_t)n,
                                              0600);
        OPENSSL_cleanse(line, sizeof(line));
        if (rc != 0) {
            seed_free(s);
            return rc;
        }
    }
    s->work.data = s;
    rc = uv_queue_work(loop, &s->work, hash_work, hash_done);
    if (rc != 0) {
        seed_free(s);
        return rc;
    }
    s->handle = handle;
    *handle = s;
    return 0;
}

bool tn_users_ready(tn_meta_t *meta)
{
    return tn_meta_ready(meta) && tn_meta_caught_up(meta) && tn_meta_state(meta)->nusers > 0;
}
