/* Remotes in the metastore: their codec and replicated state. See
 * remote.h. */
#include "core/platform.h"

#include "meta/remote.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "meta/cmd.h"
#include "meta/codec.h"
#include "meta/state.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

/* --- codec --------------------------------------------------------------------------- */

bool tn_meta_remote_name_valid(const char *s, size_t n)
{
    if (n == 0 || n > TN_REMOTE_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* Printable ASCII, no spaces: a request id or a user name as recorded. */
static bool token_valid(const char *s, bool may_be_empty)
{
    size_t n = strlen(s);
    if (n == 0)
        return may_be_empty;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
            return false;
    return true;
}

static bool rec_valid(const tn_meta_remote_t *r)
{
    return tn_meta_remote_name_valid(r->name, strlen(r->name)) && r->id != 0 &&
           strncmp(r->url, "https://", 8) == 0 && token_valid(r->username, false) &&
           r->sealed_len >= TN_SEAL_OVERHEAD && r->sealed_len <= TN_REMOTE_SEALED_MAX &&
           r->cred_version >= 1 && r->created_at_ms >= 0 && r->updated_at_ms >= 0 &&
           token_valid(r->created_by, true) && token_valid(r->updated_by, true) &&
           token_valid(r->request, true);
}

static bool child_valid(const tn_meta_rchild_t *ch)
{
    return tn_name_valid_any(ch->parent, strlen(ch->parent)) &&
           tn_meta_remote_name_valid(ch->remote, strlen(ch->remote)) && ch->remote_id != 0 &&
           tn_name_valid_any(ch->child, strlen(ch->child)) && ch->epoch != 0 && ch->delay_ms >= 0 &&
           ch->delay_ms <= TN_RCHILD_MAX_DELAY_MS && ch->created_at_ms >= 0 &&
           token_valid(ch->created_by, true) && token_valid(ch->request, true);
}

static bool child_key_valid(const tn_meta_rchild_t *ch)
{
    return tn_name_valid_any(ch->parent, strlen(ch->parent)) &&
           tn_meta_remote_name_valid(ch->remote, strlen(ch->remote)) &&
           tn_name_valid_any(ch->child, strlen(ch->child)) && token_valid(ch->created_by, true) &&
           token_valid(ch->request, true);
}

static int child_encode(uint8_t type, const tn_meta_remote_cmd_t *c, tn__meta_wr_t *w)
{
    const tn_meta_rchild_t *ch = &c->child;
    if (type == TN_MC_REMOTE_CHILD_DELETE) {
        if (!child_key_valid(ch))
            return UV_EINVAL;
        tn__meta_w_str(w, ch->parent, TN_NAME_MAX);
        tn__meta_w_str(w, ch->remote, TN_REMOTE_NAME_MAX);
        tn__meta_w_str(w, ch->child, TN_NAME_MAX);
        tn__meta_w_str(w, ch->created_by, TN_REMOTE_BY_MAX);
        tn__meta_w_str(w, ch->request, TN_REMOTE_REQUEST_MAX);
        return w->rc;
    }
    if (c->cond > 1 || !child_valid(ch))
        return UV_EINVAL;
    tn__meta_w_bytes(w, &c->cond, 1);
    tn__meta_w_str(w, ch->parent, TN_NAME_MAX);
    tn__meta_w_str(w, ch->remote, TN_REMOTE_NAME_MAX);
    tn__meta_w_u64(w, ch->remote_id);
    tn__meta_w_str(w, ch->child, TN_NAME_MAX);
    tn__meta_w_u64(w, ch->epoch);
    tn__meta_w_u64(w, (uint64_t)ch->delay_ms);
    tn__meta_w_u64(w, (uint64_t)ch->created_at_ms);
    tn__meta_w_str(w, ch->created_by, TN_REMOTE_BY_MAX);
    tn__meta_w_str(w, ch->request, TN_REMOTE_REQUEST_MAX);
    return w->rc;
}

int tn__meta_remote_encode(uint8_t type, const tn_meta_remote_cmd_t *c, tn_buf_t *out)
{
    tn__meta_wr_t w = {out, 0};
    const tn_meta_remote_t *r = &c->rec;
    if (type == TN_MC_REMOTE_CHILD_PUT || type == TN_MC_REMOTE_CHILD_DELETE)
        return child_encode(type, c, &w);
    if (type == TN_MC_REMOTE_SALT) {
        tn__meta_w_bytes(&w, c->salt, TN_SEAL_SALT);
        return w.rc;
    }
    if (type == TN_MC_REMOTE_DELETE) {
        if (!tn_meta_remote_name_valid(r->name, strlen(r->name)))
            return UV_EINVAL;
        tn__meta_w_str(&w, r->name, TN_REMOTE_NAME_MAX);
        tn__meta_w_str(&w, r->updated_by, TN_REMOTE_BY_MAX);
        tn__meta_w_str(&w, r->request, TN_REMOTE_REQUEST_MAX);
        return w.rc;
    }
    if (c->cond > 2 || !rec_valid(r))
        return UV_EINVAL;
    uint8_t cond = (uint8_t)(c->cond | (c->again ? TN_REMOTE_AGAIN : 0));
    tn__meta_w_bytes(&w, &cond, 1);
    tn__meta_w_bytes(&w, c->salt, TN_SEAL_SALT);
    tn__meta_w_str(&w, r->name, TN_REMOTE_NAME_MAX);
    tn__meta_w_u64(&w, r->id);
    tn__meta_w_str(&w, r->url, TN_REMOTE_URL_MAX);
    tn__meta_w_str(&w, r->username, TN_REMOTE_USER_MAX);
    tn__meta_w_str(&w, r->ca_pem != NULL ? r->ca_pem : "", TN_REMOTE_CA_MAX);
    tn__meta_w_u16(&w, r->sealed_len);
    tn__meta_w_bytes(&w, r->sealed, r->sealed_len);
    tn__meta_w_u32(&w, r->cred_version);
    tn__meta_w_u64(&w, (uint64_t)r->created_at_ms);
    tn__meta_w_u64(&w, (uint64_t)r->updated_at_ms);
    tn__meta_w_str(&w, r->created_by, TN_REMOTE_BY_MAX);
    tn__meta_w_str(&w, r->updated_by, TN_REMOTE_BY_MAX);
    tn__meta_w_str(&w, r->request, TN_REMOTE_REQUEST_MAX);
    if (c->cond == 2)
        tn__meta_w_u64(&w, c->expect);
    return w.rc;
}

static int child_decode(uint8_t type, tn__meta_rd_t *r, tn_meta_remote_cmd_t *c)
{
    tn_meta_rchild_t *ch = &c->child;
    if (type == TN_MC_REMOTE_CHILD_DELETE) {
        tn__meta_r_str(r, ch->parent, TN_NAME_MAX);
        tn__meta_r_str(r, ch->remote, TN_REMOTE_NAME_MAX);
        tn__meta_r_str(r, ch->child, TN_NAME_MAX);
        tn__meta_r_str(r, ch->created_by, TN_REMOTE_BY_MAX);
        tn__meta_r_str(r, ch->request, TN_REMOTE_REQUEST_MAX);
        if (r->rc == 0 && (r->left != 0 || !child_key_valid(ch)))
            r->rc = TN_ECORRUPT;
        return r->rc;
    }
    const unsigned char *cond = tn__meta_r_take(r, 1);
    if (cond != NULL) {
        c->cond = cond[0];
        if (c->cond > 1)
            r->rc = TN_ECORRUPT;
    }
    tn__meta_r_str(r, ch->parent, TN_NAME_MAX);
    tn__meta_r_str(r, ch->remote, TN_REMOTE_NAME_MAX);
    ch->remote_id = tn__meta_r_u64(r);
    tn__meta_r_str(r, ch->child, TN_NAME_MAX);
    ch->epoch = tn__meta_r_u64(r);
    ch->delay_ms = (int64_t)tn__meta_r_u64(r);
    ch->created_at_ms = (int64_t)tn__meta_r_u64(r);
    tn__meta_r_str(r, ch->created_by, TN_REMOTE_BY_MAX);
    tn__meta_r_str(r, ch->request, TN_REMOTE_REQUEST_MAX);
    if (r->rc == 0 && (r->left != 0 || !child_valid(ch)))
        r->rc = TN_ECORRUPT;
    return r->rc;
}

int tn__meta_remote_decode(uint8_t type, const uint8_t *p, size_t n, tn_meta_remote_cmd_t *c)
{
    memset(c, 0, sizeof(*c));
    tn__meta_rd_t r = {p, n, 0};
    tn_meta_remote_t *rec = &c->rec;
    if (type == TN_MC_REMOTE_CHILD_PUT || type == TN_MC_REMOTE_CHILD_DELETE)
        return child_decode(type, &r, c);
    if (type == TN_MC_REMOTE_SALT) {
        const unsigned char *salt = tn__meta_r_take(&r, TN_SEAL_SALT);
        if (salt != NULL)
            memcpy(c->salt, salt, TN_SEAL_SALT);
        return r.rc == 0 && r.left != 0 ? TN_ECORRUPT : r.rc;
    }
    if (type == TN_MC_REMOTE_DELETE) {
        tn__meta_r_str(&r, rec->name, TN_REMOTE_NAME_MAX);
        tn__meta_r_str(&r, rec->updated_by, TN_REMOTE_BY_MAX);
        tn__meta_r_str(&r, rec->request, TN_REMOTE_REQUEST_MAX);
        if (r.rc == 0 && (!tn_meta_remote_name_valid(rec->name, strlen(rec->name)) ||
                          !token_valid(rec->updated_by, true) || !token_valid(rec->request, true)))
            r.rc = TN_ECORRUPT;
        return r.rc == 0 && r.left != 0 ? TN_ECORRUPT : r.rc;
    }
    const unsigned char *cond = tn__meta_r_take(&r, 1);
    if (cond != NULL) {
        c->again = (cond[0] & TN_REMOTE_AGAIN) != 0;
        c->cond = (uint8_t)(cond[0] & ~TN_REMOTE_AGAIN);
        if (c->cond > 2)
            r.rc = TN_ECORRUPT;
    }
    const unsigned char *salt = tn__meta_r_take(&r, TN_SEAL_SALT);
    if (salt != NULL)
        memcpy(c->salt, salt, TN_SEAL_SALT);
    tn__meta_r_str(&r, rec->name, TN_REMOTE_NAME_MAX);
    rec->id = tn__meta_r_u64(&r);
    tn__meta_r_str(&r, rec->url, TN_REMOTE_URL_MAX);
    tn__meta_r_str(&r, rec->username, TN_REMOTE_USER_MAX);
    uint16_t calen = tn__meta_r_u16(&r);
    if (r.rc == 0 && calen > TN_REMOTE_CA_MAX)
        r.rc = TN_ECORRUPT;
    const unsigned char *ca = tn__meta_r_take(&r, calen);
    if (ca != NULL) {
        if (memchr(ca, '\0', calen) != NULL) {
            r.rc = TN_ECORRUPT;
        } else if ((rec->ca_pem = tn_malloc((size_t)calen + 1)) == NULL) {
            r.rc = UV_ENOMEM;
        } else {
            memcpy(rec->ca_pem, ca, calen);
            rec->ca_pem[calen] = '\0';
        }
    }
    rec->sealed_len = tn__meta_r_u16(&r);
    if (r.rc == 0 && rec->sealed_len > TN_REMOTE_SEALED_MAX)
        r.rc = TN_ECORRUPT;
    const unsigned char *sealed = tn__meta_r_take(&r, rec->sealed_len);
    if (sealed != NULL)
        memcpy(rec->sealed, sealed, rec->sealed_len);
    rec->cred_version = tn__meta_r_u32(&r);
    rec->created_at_ms = (int64_t)tn__meta_r_u64(&r);
    rec->updated_at_ms = (int64_t)tn__meta_r_u64(&r);
    tn__meta_r_str(&r, rec->created_by, TN_REMOTE_BY_MAX);
    tn__meta_r_str(&r, rec->updated_by, TN_REMOTE_BY_MAX);
    tn__meta_r_str(&r, rec->request, TN_REMOTE_REQUEST_MAX);
    if (c->cond == 2)
        c->expect = tn__meta_r_u64(&r);
    if (r.rc == 0 && (r.left != 0 || !rec_valid(rec)))
        r.rc = TN_ECORRUPT;
    if (r.rc != 0)
        tn__meta_remote_cmd_fini(c);
    return r.rc;
}

void tn__meta_remote_cmd_fini(tn_meta_remote_cmd_t *c)
{
    tn_free(c->rec.ca_pem);
    c->rec.ca_pem = NULL;
}

/* --- fingerprint ----------------------------------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    unsigned char len[4];
    tn_put_u32(len, (uint32_t)n);
    return fnv(fnv(h, len, 4), s, n);
}

uint64_t tn_meta_remote_fingerprint(const tn_meta_remote_t *r)
{
    uint64_t h = 0xcbf29ce484222325ull;
    unsigned char b[8];
    h = fnv_str(h, r->name);
    tn_put_u64(b, r->id);
    h = fnv(h, b, 8);
    h = fnv_str(h, r->url);
    h = fnv_str(h, r->username);
    h = fnv_str(h, r->ca_pem);
    tn_put_u32(b, r->sealed_len);
    h = fnv(fnv(h, b, 4), r->sealed, r->sealed_len);
    tn_put_u32(b, r->cred_version);
    h = fnv(h, b, 4);
    tn_put_u64(b, (uint64_t)r->created_at_ms);
    h = fnv(h, b, 8);
    tn_put_u64(b, (uint64_t)r->updated_at_ms);
    h = fnv(h, b, 8);
    h = fnv_str(h, r->created_by);
    h = fnv_str(h, r->updated_by);
    return fnv_str(h, r->request);
}

/* --- state ------------------------------------------------------------------------------ */

static size_t find(const tn_meta_remotes_t *rs, const char *name, bool *found)
{
    return tn__meta_search((void *const *)rs->v, rs->n, name, offsetof(tn_meta_remote_t, name),
                           found);
}

const tn_meta_remote_t *tn_meta_remote_find(const tn_meta_remotes_t *rs, const char *name)
{
    bool found;
    size_t i = find(rs, name, &found);
    return found ? rs->v[i] : NULL;
}

static void rec_free(tn_meta_remote_t *r)
{
    if (r == NULL)
        return;
    tn_free(r->ca_pem);
    OPENSSL_cleanse(r->sealed, sizeof(r->sealed));
    tn_free(r);
}

/* A stored copy of src (its own ca_pem), or NULL. */
static tn_meta_remote_t *rec_copy(const tn_meta_remote_t *src)
{
    tn_meta_remote_t *r = tn_malloc(sizeof(*r));
    if (r == NULL)
        return NULL;
    *r = *src;
    r->ca_pem = tn_strdup(src->ca_pem != NULL ? src->ca_pem : "");
    if (r->ca_pem == NULL) {
        tn_free(r);
        return NULL;
    }
    return r;
}

static int remote_put(tn_meta_remotes_t *rs, const tn_meta_remote_cmd_t *c, bool restoring)
{
    bool found;
    size_t i = find(rs, c->rec.name, &found);
    uint64_t fp = tn_meta_remote_fingerprint(&c->rec);
    if (found && c->again && tn_meta_remote_fingerprint(rs->v[i]) == fp)
        return 0; /* the copy sent again finds its first copy applied */
    if (!rs->has_salt)
        return restoring ? TN_ECORRUPT : UV_EAGAIN;
    if (memcmp(rs->salt, c->salt, TN_SEAL_SALT) != 0)
        return restoring ? TN_ECORRUPT : TN_ECHANGED;
    if (found && (c->cond == 1 || restoring))
        return UV_EEXIST;
    if (c->cond == 2 && !found)
        return TN_ENOTFOUND;
    if (c->cond == 2 && tn_meta_remote_fingerprint(rs->v[i]) != c->expect)
        return TN_ECHANGED;
    tn_meta_remote_t *r = rec_copy(&c->rec);
    if (r == NULL)
        return UV_ENOMEM;
    if (found) {
        rec_free(rs->v[i]);
        rs->v[i] = r;
    } else {
        if (rs->n == rs->cap) {
            size_t cap = rs->cap ? rs->cap * 2 : 8;
            tn_meta_remote_t **v = tn_realloc(rs->v, cap * sizeof(*v));
            if (v == NULL) {
                rec_free(r);
                return UV_ENOMEM;
            }
            rs->v = v;
            rs->cap = cap;
        }
        memmove(rs->v + i + 1, rs->v + i, (rs->n - i) * sizeof(*rs->v));
        rs->v[i] = r;
        rs->n++;
    }
    return 0;
}

/* --- remote children ----------------------------------------------------------------------- */

static int child_cmp(const tn_meta_rchild_t *a, const char *parent, const char *remote,
                     const char *child)
{
    int c = strcmp(a->parent, parent);
    if (c == 0)
        c = strcmp(a->remote, remote);
    if (c == 0)
        c = strcmp(a->child, child);
    return c;
}

static size_t child_find(const tn_meta_remotes_t *rs, const char *parent, const char *remote,
                         const char *child, bool *found)
{
    size_t lo = 0, hi = rs->nchildren;
    *found = false;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = child_cmp(rs->children[mid], parent, remote, child);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const tn_meta_rchild_t *tn_meta_rchild_find(const tn_meta_remotes_t *rs, const char *parent,
                                            const char *remote, const char *child)
{
    bool found;
    size_t i = child_find(rs, parent, remote, child, &found);
    return found ? rs->children[i] : NULL;
}

size_t tn_meta_rchild_count(const tn_meta_remotes_t *rs, const char *parent, const char *remote,
                            size_t *first)
{
    size_t n = 0;
    *first = 0;
    for (size_t i = 0; i < rs->nchildren; i++) {
        const tn_meta_rchild_t *ch = rs->children[i];
        if ((parent == NULL || strcmp(ch->parent, parent) == 0) &&
            (remote == NULL || strcmp(ch->remote, remote) == 0)) {
            if (n++ == 0)
                *first = i;
        }
    }
    return n;
}

static int child_put(tn_meta_remotes_t *rs, const tn_meta_remote_cmd_t *c, bool restoring)
{
    const tn_meta_rchild_t *in = &c->child;
    const tn_meta_remote_t *r = tn_meta_remote_find(rs, in->remote);
    if (r == NULL || r->id != in->remote_id)
        return restoring ? TN_ECORRUPT : TN_ENOTFOUND;
    bool found;
    size_t i = child_find(rs, in->parent, in->remote, in->child, &found);
    if (found && c->cond == 1 && rs->children[i]->epoch == in->epoch)
        return 0; /* its own copy sent again */
    if (found && (c->cond == 1 || restoring))
        return UV_EEXIST;
    tn_meta_rchild_t *ch = tn_malloc(sizeof(*ch));
    if (ch == NULL)
        return UV_ENOMEM;
    *ch = *in;
    if (found) {
        tn_free(rs->children[i]);
        rs->children[i] = ch;
        return 0;
    }
    if (rs->nchildren == rs->capchildren) {
        size_t cap = rs->capchildren ? rs->capchildren * 2 : 8;
        tn_meta_rchild_t **v = tn_realloc(rs->children, cap * sizeof(*v));
        if (v == NULL) {
            tn_free(ch);
            return UV_ENOMEM;
        }
        rs->children = v;
        rs->capchildren = cap;
    }
    memmove(rs->children + i + 1, rs->children + i, (rs->nchildren - i) * sizeof(*rs->children));
    rs->children[i] = ch;
    rs->nchildren++;
    return 0;
}

static void child_remove(tn_meta_remotes_t *rs, size_t i)
{
    tn_free(rs->children[i]);
    memmove(rs->children + i, rs->children + i + 1,
            (rs->nchildren - i - 1) * sizeof(*rs->children));
    rs->nchildren--;
}

static int child_delete(tn_meta_remotes_t *rs, const tn_meta_rchild_t *in)
{
    bool found;
    size_t i = child_find(rs, in->parent, in->remote, in->child, &found);
    if (!found)
        return TN_ENOTFOUND;
    child_remove(rs, i);
    return 0;
}

void tn__meta_rchild_drop_parent(tn_meta_remotes_t *rs, const char *parent)
{
    for (size_t i = rs->nchildren; i > 0; i--)
        if (strcmp(rs->children[i - 1]->parent, parent) == 0)
            child_remove(rs, i - 1);
}

static int remote_delete(tn_meta_remotes_t *rs, const char *name)
{
    bool found;
    size_t i = find(rs, name, &found);
    if (!found)
        return TN_ENOTFOUND;
    size_t first;
    if (tn_meta_rchild_count(rs, NULL, name, &first) > 0)
        return UV_EBUSY; /* a remote child sends through it */
    rec_free(rs->v[i]);
    memmove(rs->v + i, rs->v + i + 1, (rs->n - i - 1) * sizeof(*rs->v));
    rs->n--;
    return 0;
}

static int remote_salt(tn_meta_remotes_t *rs, const uint8_t salt[TN_SEAL_SALT])
{
    if (rs->has_salt)
        return UV_EEXIST; /* made once: the first one applied stays */
    memcpy(rs->salt, salt, TN_SEAL_SALT);
    rs->has_salt = true;
    return 0;
}

int tn__meta_remotes_apply(tn_meta_remotes_t *rs, uint8_t type, const tn_meta_remote_cmd_t *c,
                           bool restoring)
{
    if (c == NULL)
        return UV_EINVAL;
    if (type == TN_MC_REMOTE_PUT)
        return remote_put(rs, c, restoring);
    if (type == TN_MC_REMOTE_DELETE && !restoring)
        return remote_delete(rs, c->rec.name);
    if (type == TN_MC_REMOTE_SALT)
        return remote_salt(rs, c->salt);
    if (type == TN_MC_REMOTE_CHILD_PUT)
        return child_put(rs, c, restoring);
    if (type == TN_MC_REMOTE_CHILD_DELETE && !restoring)
        return child_delete(rs, &c->child);
    return UV_EINVAL;
}

void tn__meta_remotes_fini(tn_meta_remotes_t *rs)
{
    for (size_t i = 0; i < rs->n; i++)
        rec_free(rs->v[i]);
    tn_free(rs->v);
    for (size_t i = 0; i < rs->nchildren; i++)
        tn_free(rs->children[i]);
    tn_free(rs->children);
    OPENSSL_cleanse(rs->salt, sizeof(rs->salt));
    memset(rs, 0, sizeof(*rs));
}

int tn__meta_remotes_snapshot(const tn_meta_remotes_t *rs, tn_buf_t *out, uint64_t *count)
{
    int rc = 0;
    if (rs->has_salt) {
        tn_meta_remote_cmd_t salt;
        memset(&salt, 0, sizeof(salt));
        memcpy(salt.salt, rs->salt, TN_SEAL_SALT);
        tn_meta_cmd_t c;
        memset(&c, 0, sizeof(c));
        c.type = TN_MC_REMOTE_SALT;
        c.remote = &salt;
        rc = tn_meta_cmd_encode(&c, out);
        (*count)++;
    }
    for (size_t i = 0; i < rs->n && rc == 0; i++) {
        tn_meta_remote_cmd_t rc_args;
        memset(&rc_args, 0, sizeof(rc_args));
        memcpy(rc_args.salt, rs->salt, TN_SEAL_SALT);
        rc_args.rec = *rs->v[i]; /* borrowed ca_pem: encode only reads it */
        tn_meta_cmd_t c;
        memset(&c, 0, sizeof(c));
        c.type = TN_MC_REMOTE_PUT;
        c.remote = &rc_args;
        rc = tn_meta_cmd_encode(&c, out);
        (*count)++;
    }
    for (size_t i = 0; i < rs->nchildren && rc == 0; i++) {
        tn_meta_remote_cmd_t args;
        memset(&args, 0, sizeof(args));
        args.child = *rs->children[i];
        tn_meta_cmd_t c;
        memset(&c, 0, sizeof(c));
        c.type = TN_MC_REMOTE_CHILD_PUT;
        c.remote = &args;
        rc = tn_meta_cmd_encode(&c, out);
        (*count)++;
    }
    return rc;
}

void tn_meta_remote_audit(uint8_t type, const tn_meta_remote_cmd_t *c, int status)
{
    if (c == NULL || type == TN_MC_REMOTE_SALT)
        return;
    if (type == TN_MC_REMOTE_CHILD_PUT || type == TN_MC_REMOTE_CHILD_DELETE) {
        const tn_meta_rchild_t *ch = &c->child;
        TN_LOG(
            TN_LOG_NOTICE,
            "audit (metastore leader): %s %s remote child %s on remote %s %s %s (request %s): %s",
            ch->created_by[0] != '\0' ? ch->created_by : "(security off)",
            type == TN_MC_REMOTE_CHILD_PUT ? "attached" : "detached", ch->child, ch->remote,
            type == TN_MC_REMOTE_CHILD_PUT ? "to" : "from", ch->parent,
            ch->request[0] != '\0' ? ch->request : "-",
            status == 0 ? "applied" : tn_strerror(status));
        return;
    }
    const char *what = type == TN_MC_REMOTE_DELETE ? "deleted"
                       : c->cond == 1              ? "created"
                                                   : "changed";
    char version[40] = "";
    if (type != TN_MC_REMOTE_DELETE)
        snprintf(version, sizeof(version), ", credential version %u", c->rec.cred_version);
    TN_LOG(TN_LOG_NOTICE, "audit (metastore leader): %s %s remote %s (request %s%s): %s",
           c->rec.updated_by[0] != '\0' ? c->rec.updated_by : "(security off)", what, c->rec.name,
           c->rec.request[0] != '\0' ? c->rec.request : "-", version,
           status == 0 ? "applied" : tn_strerror(status));
}
