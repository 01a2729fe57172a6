/* Tests of remotes in the metastore: sealed credentials (meta/seal.h:
 * open, and refusal after tampering with each bound field, the sealed
 * bytes, or under another secret or salt), the REMOTE_PUT / REMOTE_DELETE
 * and REMOTE_SALT codec (meta/remote.h, through meta/cmd.h), their apply
 * rules (if_absent, if_unchanged, again, the salt made once and required)
 * and the snapshot round trip, in which the password never appears in
 * clear. */
#include "core/platform.h"

#include "testutil.h"

#include "core/buf.h"
#include "core/err.h"
#include "fixture_meta.h"
#include "meta/cmd.h"
#include "meta/remote.h"
#include "meta/seal.h"
#include "meta/state.h"

#include <stdio.h>
#include <string.h>

#define PASSWORD "s3cret-pass-phrase-XYZ"
#define CA       "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

static const uint8_t secret[32] = "0123456789abcdef0123456789abcde";
static const uint8_t salt[TN_SEAL_SALT] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

static void seal_into(tn_meta_remote_t *r, const uint8_t *sec, const uint8_t *sl)
{
    uint8_t key[TN_SEAL_KEY];
    assert_int_equal(tn_seal_key(sec, 32, sl, key), 0);
    tn_seal_ad_t ad = {r->name, r->id, r->url, r->username, r->ca_pem};
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_seal(key, &ad, PASSWORD, strlen(PASSWORD), &b), 0);
    assert_int_equal(tn_buf_size(&b), strlen(PASSWORD) + TN_SEAL_OVERHEAD);
    assert_null(memmem(tn_buf_data(&b), tn_buf_size(&b), PASSWORD, strlen(PASSWORD)));
    memcpy(r->sealed, tn_buf_data(&b), tn_buf_size(&b));
    r->sealed_len = (uint16_t)tn_buf_size(&b);
    tn_buf_fini(&b);
}

static tn_meta_remote_t record(const char *name)
{
    tn_meta_remote_t r;
    memset(&r, 0, sizeof(r));
    snprintf(r.name, sizeof(r.name), "%s", name);
    r.id = 0x1122334455667788ull;
    snprintf(r.url, sizeof(r.url), "https://eu.example.com:4443");
    snprintf(r.username, sizeof(r.username), "mirror");
    r.ca_pem = (char *)CA;
    r.cred_version = 1;
    r.created_at_ms = r.updated_at_ms = 1000;
    snprintf(r.created_by, sizeof(r.created_by), "admin");
    snprintf(r.updated_by, sizeof(r.updated_by), "admin");
    snprintf(r.request, sizeof(r.request), "00000000deadbeef");
    seal_into(&r, secret, salt);
    return r;
}

/* Open r under (sec, sl): 0 with the password checked, or the error and
 * its message. */
static int open_it(const tn_meta_remote_t *r, const uint8_t *sec, const uint8_t *sl, char *err)
{
    uint8_t key[TN_SEAL_KEY];
    assert_int_equal(tn_seal_key(sec, 32, sl, key), 0);
    tn_seal_ad_t ad = {r->name, r->id, r->url, r->username, r->ca_pem};
    char pw[TN_REMOTE_PASSWORD_MAX + 1];
    size_t plen = 99;
    int rc = tn_seal_open(key, &ad, r->sealed, r->sealed_len, pw, sizeof(pw), &plen, err, 200);
    if (rc == 0) {
        assert_int_equal(plen, strlen(PASSWORD));
        assert_string_equal(pw, PASSWORD);
    } else {
        assert_int_equal(plen, 0);
    }
    return rc;
}

static void refused(const tn_meta_remote_t *r, const uint8_t *sec, const uint8_t *sl)
{
    char err[200] = "";
    assert_int_equal(open_it(r, sec, sl, err), TN_ECORRUPT);
    char want[200];
    snprintf(want, sizeof(want),
             "sealed credential of remote %s does not open: tampered or sealed under another "
             "cluster secret",
             r->name);
    assert_string_equal(err, want);
}

static void test_seal_open_and_tamper(void **state)
{
    (void)state;
    tn_meta_remote_t r = record("eu");
    char err[200];
    assert_int_equal(open_it(&r, secret, salt, err), 0);
    /* Two seals of the same password differ (random nonce). */
    tn_meta_remote_t r2 = record("eu");
    assert_memory_not_equal(r.sealed, r2.sealed, r.sealed_len);

    /* Every bound field, changed alone, makes it refuse. */
    tn_meta_remote_t t = r;
    snprintf(t.name, sizeof(t.name), "us");
    refused(&t, secret, salt);
    t = r;
    t.id ^= 1;
    refused(&t, secret, salt);
    t = r;
    snprintf(t.url, sizeof(t.url), "https://evil.example.com:4443");
    refused(&t, secret, salt);
    t = r;
    snprintf(t.username, sizeof(t.username), "mirror2");
    refused(&t, secret, salt);
    t = r;
    t.ca_pem = (char *)"";
    refused(&t, secret, salt);
    /* Moving bytes between fields (length-prefixed AD): "eu"+"mirror"
     * vs "eum"+"irror" with the same concatenation. */
    t = r;
    snprintf(t.url, sizeof(t.url), "https://eu.example.com:444");
    snprintf(t.username, sizeof(t.username), "3mirror");
    refused(&t, secret, salt);
    /* Each byte of the sealed bytes: nonce, ciphertext, tag. */
    for (size_t i = 0; i < r.sealed_len; i++) {
        t = r;
        t.sealed[i] ^= 0x80;
        refused(&t, secret, salt);
    }
    t = r;
    t.sealed_len--;
    refused(&t, secret, salt);
    t = r;
    t.sealed_len = TN_SEAL_OVERHEAD - 1;
    assert_int_equal(open_it(&t, secret, salt, err), TN_ECORRUPT);
    assert_non_null(strstr(err, "too short"));
    /* Another cluster secret, another salt. */
    uint8_t other[32];
    memcpy(other, secret, 32);
    other[5] ^= 1;
    refused(&r, other, salt);
    uint8_t salt2[TN_SEAL_SALT];
    memcpy(salt2, salt, sizeof(salt2));
    salt2[31] = 9;
    refused(&r, secret, salt2);
    /* The caller's buffer too small: not opened. */
    uint8_t key[TN_SEAL_KEY];
    assert_int_equal(tn_seal_key(secret, 32, salt, key), 0);
    tn_seal_ad_t ad = {r.name, r.id, r.url, r.username, r.ca_pem};
    char small[8];
    size_t plen;
    assert_int_equal(
        tn_seal_open(key, &ad, r.sealed, r.sealed_len, small, sizeof(small), &plen, err, 200),
        UV_ENOBUFS);
}

static tn_meta_cmd_t put_cmd(tn_meta_remote_cmd_t *a, uint8_t cond)
{
    a->cond = cond;
    memcpy(a->salt, salt, TN_SEAL_SALT);
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_REMOTE_PUT;
    c.remote = a;
    return c;
}

/* Encode c, decode it again into *out (the caller finis it). */
static void roundtrip(const tn_meta_cmd_t *c, tn_meta_cmd_t *out)
{
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_cmd_encode(c, &b), 0);
    assert_int_equal(tn_buf_size(&b) % 8, 0);
    assert_null(memmem(tn_buf_data(&b), tn_buf_size(&b), PASSWORD, strlen(PASSWORD)));
    size_t used;
    assert_int_equal(tn_meta_cmd_decode(tn_buf_data(&b), tn_buf_size(&b), out, &used), 0);
    assert_int_equal(used, tn_buf_size(&b));
    /* Every shorter prefix is refused. */
    for (size_t n = 0; n < tn_buf_size(&b); n += 7) {
        tn_meta_cmd_t x;
        assert_int_not_equal(tn_meta_cmd_decode(tn_buf_data(&b), n, &x, &used), 0);
    }
    tn_buf_fini(&b);
}

static void test_codec(void **state)
{
    (void)state;
    tn_meta_remote_cmd_t a;
    memset(&a, 0, sizeof(a));
    a.rec = record("eu");
    a.again = true;
    a.expect = 42;
    tn_meta_cmd_t c = put_cmd(&a, 2), d;
    roundtrip(&c, &d);
    assert_int_equal(d.type, TN_MC_REMOTE_PUT);
    assert_non_null(d.remote);
    assert_int_equal(d.remote->cond, 2);
    assert_true(d.remote->again);
    assert_int_equal(d.remote->expect, 42);
    assert_memory_equal(d.remote->salt, salt, TN_SEAL_SALT);
    assert_int_equal(tn_meta_remote_fingerprint(&d.remote->rec),
                     tn_meta_remote_fingerprint(&a.rec));
    assert_string_equal(d.remote->rec.ca_pem, CA);
    assert_string_equal(d.remote->rec.request, "00000000deadbeef");
    tn_meta_cmd_fini(&d);
    assert_null(d.remote);

    memset(&c, 0, sizeof(c));
    c.type = TN_MC_REMOTE_DELETE;
    c.remote = &a;
    roundtrip(&c, &d);
    assert_string_equal(d.remote->rec.name, "eu");
    assert_string_equal(d.remote->rec.updated_by, "admin");
    tn_meta_cmd_fini(&d);

    /* Not encodable: a bad name, not https, no id, version 0, a short seal. */
    tn_buf_t b;
    tn_buf_init(&b);
    c = put_cmd(&a, 1);
    tn_meta_remote_cmd_t bad = a;
    c.remote = &bad;
    snprintf(bad.rec.name, sizeof(bad.rec.name), "e u");
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    bad = a;
    snprintf(bad.rec.url, sizeof(bad.rec.url), "http://eu.example.com");
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    bad = a;
    bad.rec.id = 0;
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    bad = a;
    bad.rec.cred_version = 0;
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    bad = a;
    bad.rec.sealed_len = 3;
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    bad = a;
    bad.cond = 3;
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    c.remote = NULL;
    assert_int_equal(tn_meta_cmd_encode(&c, &b), UV_EINVAL);
    assert_int_equal(tn_buf_size(&b), 0);

    /* Damage found by the decoder: a condition of 3, trailing bytes. */
    c.remote = &a;
    a.cond = 1;
    assert_int_equal(tn_meta_cmd_encode(&c, &b), 0);
    unsigned char *p = (unsigned char *)tn_buf_data(&b);
    size_t used;
    p[TN_META_HDR] = 3;
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    p[TN_META_HDR] = 1;
    tn_put_u32(p + 4, tn_get_u32(p + 4) + 1); /* one padding byte counted as payload */
    assert_int_equal(tn_meta_cmd_decode(p, tn_buf_size(&b), &d, &used), TN_ECORRUPT);
    tn_buf_fini(&b);
}

/* Apply the REMOTE_SALT of sl to s: rc. */
static int apply_salt(tn_meta_state_t *s, const uint8_t *sl)
{
    tn_meta_remote_cmd_t a;
    memset(&a, 0, sizeof(a));
    memcpy(a.salt, sl, TN_SEAL_SALT);
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = TN_MC_REMOTE_SALT;
    c.remote = &a;
    tn_meta_cmd_t d;
    roundtrip(&c, &d); /* through the codec, as a log entry comes */
    assert_memory_equal(d.remote->salt, sl, TN_SEAL_SALT);
    int rc = tn_meta_state_apply(s, &d);
    tn_meta_cmd_fini(&d);
    return rc;
}

static void test_apply_rules(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    tn_meta_remote_cmd_t a;
    memset(&a, 0, sizeof(a));
    a.rec = record("eu");
    tn_meta_cmd_t c = put_cmd(&a, 1);
    /* No salt yet: a PUT waits for the leader's (UV_EAGAIN). */
    assert_int_equal(tn_meta_state_apply(&s, &c), UV_EAGAIN);
    assert_int_equal(s.remotes.n, 0);
    assert_int_equal(apply_salt(&s, salt), 0);
    assert_true(s.remotes.has_salt);
    assert_memory_equal(s.remotes.salt, salt, TN_SEAL_SALT);
    /* Made once: a second salt (another leader's) changes nothing. */
    uint8_t other_salt[TN_SEAL_SALT];
    memset(other_salt, 0x5a, sizeof(other_salt));
    assert_int_equal(apply_salt(&s, other_salt), UV_EEXIST);
    assert_memory_equal(s.remotes.salt, salt, TN_SEAL_SALT);
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    assert_int_equal(tn_meta_state_apply(&s, &c), UV_EEXIST);
    /* The same copy sent again after a failover answers as the first. */
    a.again = true;
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    a.again = false;
    const tn_meta_remote_t *eu = tn_meta_remote_find(&s.remotes, "eu");
    assert_non_null(eu);
    assert_ptr_not_equal(eu->ca_pem, CA); /* the state's own copy */
    /* if_unchanged: right fingerprint, then a stale one. */
    uint64_t fp = tn_meta_remote_fingerprint(eu);
    a.rec.cred_version = 2;
    c = put_cmd(&a, 2);
    a.expect = fp;
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    assert_int_equal(tn_meta_remote_find(&s.remotes, "eu")->cred_version, 2);
    assert_int_equal(tn_meta_state_apply(&s, &c), TN_ECHANGED);
    snprintf(a.rec.name, sizeof(a.rec.name), "nope");
    assert_int_equal(tn_meta_state_apply(&s, &c), TN_ENOTFOUND);
    /* Another salt while remotes exist: refused (the door seals again). */
    tn_meta_remote_cmd_t b;
    memset(&b, 0, sizeof(b));
    b.rec = record("us");
    tn_meta_cmd_t cb = put_cmd(&b, 1);
    b.salt[0] = 0xee;
    assert_int_equal(tn_meta_state_apply(&s, &cb), TN_ECHANGED);
    assert_null(tn_meta_remote_find(&s.remotes, "us"));
    b.salt[0] = salt[0];
    assert_int_equal(tn_meta_state_apply(&s, &cb), 0);
    assert_int_equal(s.remotes.n, 2);
    assert_string_equal(s.remotes.v[0]->name, "eu"); /* sorted */
    /* Deletes; the salt stays. */
    tn_meta_cmd_t del;
    memset(&del, 0, sizeof(del));
    del.type = TN_MC_REMOTE_DELETE;
    del.remote = &b;
    assert_int_equal(tn_meta_state_apply(&s, &del), 0);
    assert_int_equal(tn_meta_state_apply(&s, &del), TN_ENOTFOUND);
    assert_true(s.remotes.has_salt);
    snprintf(b.rec.name, sizeof(b.rec.name), "eu");
    assert_int_equal(tn_meta_state_apply(&s, &del), 0);
    assert_true(s.remotes.has_salt);
    assert_int_equal(s.remotes.n, 0);
    assert_memory_equal(s.remotes.salt, salt, TN_SEAL_SALT);
    /* A snapshot of no remotes keeps the salt. */
    tn_meta_state_t r;
    tu_meta_state_reload(&s, &r);
    assert_true(r.remotes.has_salt);
    assert_memory_equal(r.remotes.salt, salt, TN_SEAL_SALT);
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
}

static void test_snapshot_roundtrip(void **state)
{
    (void)state;
    tn_meta_state_t s, r;
    tn_meta_state_init(&s);
    assert_int_equal(apply_salt(&s, salt), 0);
    const char *names[] = {"eu", "us.east", "ap_1"};
    for (size_t i = 0; i < 3; i++) {
        tn_meta_remote_cmd_t a;
        memset(&a, 0, sizeof(a));
        a.rec = record(names[i]);
        a.rec.ca_pem = (char *)(i == 1 ? "" : CA);
        seal_into(&a.rec, secret, salt);
        tn_meta_cmd_t c = put_cmd(&a, 1);
        assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    }
    tn_buf_t b;
    tn_buf_init(&b);
    assert_int_equal(tn_meta_state_snapshot(&s, &b), 0);
    assert_null(memmem(tn_buf_data(&b), tn_buf_size(&b), PASSWORD, strlen(PASSWORD)));
    tn_buf_fini(&b);
    tu_meta_state_reload(&s, &r);
    assert_int_equal(r.remotes.n, 3);
    assert_true(r.remotes.has_salt);
    assert_memory_equal(r.remotes.salt, salt, TN_SEAL_SALT);
    for (size_t i = 0; i < 3; i++) {
        const tn_meta_remote_t *x = tn_meta_remote_find(&s.remotes, names[i]);
        const tn_meta_remote_t *y = tn_meta_remote_find(&r.remotes, names[i]);
        assert_non_null(y);
        assert_int_equal(tn_meta_remote_fingerprint(x), tn_meta_remote_fingerprint(y));
        char err[200];
        assert_int_equal(open_it(y, secret, salt, err), 0); /* it still opens */
    }
    /* A snapshot whose remote comes before the salt, or with two salts, is
     * refused, and the state restored into stays as it was. */
    tn_buf_t b2;
    tn_buf_init(&b2);
    assert_int_equal(tn_meta_state_snapshot(&s, &b2), 0);
    unsigned char *p = (unsigned char *)tn_buf_data(&b2);
    size_t n = tn_buf_size(&b2);
    /* the REMOTE_SALT record (48 bytes: header 8 + salt 32, padded) follows
     * the 24-byte header here (no other records); drop it */
    assert_int_equal(p[24 + 3], TN_MC_REMOTE_SALT);
    tn_put_u64(p + 16, tn_get_u64(p + 16) - 1);
    memmove(p + 24, p + 24 + 40, n - 24 - 40);
    tn_meta_state_t x;
    tn_meta_state_init(&x);
    assert_int_equal(tn_meta_state_restore(&x, p, n - 40), TN_ECORRUPT);
    assert_int_equal(x.remotes.n, 0);
    tn_meta_state_fini(&x);
    tn_buf_fini(&b2);
    tn_meta_state_fini(&r);
    tn_meta_state_fini(&s);
}

/* A REMOTE_CHILD_PUT (cond) or DELETE of parent -> remote:child. */
static tn_meta_cmd_t child_cmd(tn_meta_remote_cmd_t *a, uint8_t type, uint8_t cond,
                               const char *parent, const char *remote, uint64_t remote_id,
                               const char *child, uint64_t epoch)
{
    memset(a, 0, sizeof(*a));
    a->cond = cond;
    tn_meta_rchild_t *ch = &a->child;
    snprintf(ch->parent, sizeof(ch->parent), "%s", parent);
    snprintf(ch->remote, sizeof(ch->remote), "%s", remote);
    ch->remote_id = remote_id;
    snprintf(ch->child, sizeof(ch->child), "%s", child);
    ch->epoch = epoch;
    ch->delay_ms = 250;
    ch->created_at_ms = 1796002927631;
    snprintf(ch->created_by, sizeof(ch->created_by), "admin");
    snprintf(ch->request, sizeof(ch->request), "00000000cafef00d");
    tn_meta_cmd_t c;
    memset(&c, 0, sizeof(c));
    c.type = type;
    c.remote = a;
    return c;
}

/* Apply c through the codec, as a log entry comes: rc. */
static int apply_coded(tn_meta_state_t *s, const tn_meta_cmd_t *c)
{
    tn_meta_cmd_t d;
    roundtrip(c, &d);
    int rc = tn_meta_state_apply(s, &d);
    tn_meta_cmd_fini(&d);
    return rc;
}

static void test_remote_children(void **state)
{
    (void)state;
    tn_meta_state_t s;
    tn_meta_state_init(&s);
    assert_int_equal(apply_salt(&s, salt), 0);
    tn_meta_remote_cmd_t a;
    memset(&a, 0, sizeof(a));
    a.rec = record("eu");
    tn_meta_cmd_t c = put_cmd(&a, 1);
    assert_int_equal(tn_meta_state_apply(&s, &c), 0);
    uint64_t eu_id = a.rec.id;
    tn_meta_cmd_t t = tu_meta_topic_cmd("orders", 4);
    assert_int_equal(tn_meta_state_apply(&s, &t), 0);
    tn_meta_cmd_fini(&t);

    tn_meta_remote_cmd_t x;
    /* The codec: every field comes back; bad records are not encodable. */
    tn_meta_cmd_t cc = child_cmd(&x, TN_MC_REMOTE_CHILD_PUT, 1, "orders", "eu", eu_id, "orders", 7);
    tn_meta_cmd_t d;
    roundtrip(&cc, &d);
    assert_int_equal(d.remote->cond, 1);
    assert_memory_equal(&d.remote->child, &x.child, sizeof(x.child));
    tn_meta_cmd_fini(&d);
    tn_buf_t b;
    tn_buf_init(&b);
    tn_meta_remote_cmd_t bad;
    tn_meta_cmd_t cb = child_cmd(&bad, TN_MC_REMOTE_CHILD_PUT, 1, "orders", "e u", eu_id, "o", 7);
    assert_int_equal(tn_meta_cmd_encode(&cb, &b), UV_EINVAL);
    cb = child_cmd(&bad, TN_MC_REMOTE_CHILD_PUT, 1, "orders", "eu", eu_id, "o", 0);
    assert_int_equal(tn_meta_cmd_encode(&cb, &b), UV_EINVAL); /* epoch 0 */
    cb = child_cmd(&bad, TN_MC_REMOTE_CHILD_PUT, 1, "orders", "eu", 0, "o", 7);
    assert_int_equal(tn_meta_cmd_encode(&cb, &b), UV_EINVAL); /* remote id 0 */
    cb = child_cmd(&bad, TN_MC_REMOTE_CHILD_PUT, 1, "orders", "eu", eu_id, "o", 7);
    bad.child.delay_ms = -1;
    assert_int_equal(tn_meta_cmd_encode(&cb, &b), UV_EINVAL);
    cb = child_cmd(&bad, TN_MC_REMOTE_CHILD_PUT, 2, "orders", "eu", eu_id, "o", 7);
    assert_int_equal(tn_meta_cmd_encode(&cb, &b), UV_EINVAL); /* no if_unchanged */
    assert_int_equal(tn_buf_size(&b), 0);
    tn_buf_fini(&b);

    /* The rules: the parent must exist, the remote with that id too. */
    cc = child_cmd(&x, TN_MC_REMOTE_CHILD_PUT, 1, "nope", "eu", eu_id, "orders", 7);
    assert_int_equal(apply_coded(&s, &cc), UV_ENOENT);
    cc = child_cmd(&x, TN_MC_REMOTE_CHILD_PUT, 1, "orders", "us", eu_id, "orders", 7);
    assert_int_equal(apply_coded(&s, &cc), TN_ENOTFOUND);
    cc = child_cmd(&x, TN_MC_REMOTE_CHILD_PUT, 1, "orders", "eu", eu_id + 1, "orders", 7);
    assert_int_equal(apply_coded(&s, &cc), TN_ENOTFOUND);
    cc = child_cmd(&x, TN_MC_REMOTE_CHILD_PUT, 1, "orders", "eu", eu_id, "orders", 7);
    assert_int_equal(apply_coded(&s, &cc), 0);
    assert_int_equal(apply_coded(&s, &cc), 0); /* its own copy again: the same epoch */
    x.child.epoch = 8;
    assert_int_equal(apply_coded(&s, &cc), UV_EEXIST); /* another attach */
    cc = child_cmd(&x, TN_MC_REMOTE_CHILD_PUT, 1, "orders", "eu", eu_id, "audit", 9);
    assert_int_equal(apply_coded(&s, &cc), 0);
    assert_int_equal(s.remotes.nchildren, 2);
    assert_string_equal(s.remotes.children[0]->child, "audit"); /* sorted */
    size_t first;
    assert_int_equal(tn_meta_rchild_count(&s.remotes, "orders", NULL, &first), 2);
    assert_int_equal(tn_meta_rchild_count(&s.remotes, NULL, "eu", &first), 2);
    assert_int_equal(tn_meta_rchild_count(&s.remotes, "other", NULL, &first), 0);
    const tn_meta_rchild_t *o = tn_meta_rchild_find(&s.remotes, "orders", "eu", "orders");
    assert_non_null(o);
    assert_int_equal(o->epoch, 7);
    assert_int_equal(o->delay_ms, 250);

    /* A remote some child uses cannot be deleted. */
    tn_meta_cmd_t del;
    memset(&del, 0, sizeof(del));
    del.type = TN_MC_REMOTE_DELETE;
    del.remote = &a;
    assert_int_equal(tn_meta_state_apply(&s, &del), UV_EBUSY);
    assert_non_null(tn_meta_remote_find(&s.remotes, "eu"));

    /* The snapshot keeps them (after the remotes). */
    tn_meta_state_t r;
    tu_meta_state_reload(&s, &r);
    assert_int_equal(r.remotes.nchildren, 2);
    for (size_t i = 0; i < 2; i++)
        assert_memory_equal(r.remotes.children[i], s.remotes.children[i], sizeof(tn_meta_rchild_t));
    tn_meta_state_fini(&r);

    /* Detach one; then the parent's deletion takes the other with it, and
     * the remote can go. */
    cc = child_cmd(&x, TN_MC_REMOTE_CHILD_DELETE, 0, "orders", "eu", 0, "audit", 0);
    assert_int_equal(apply_coded(&s, &cc), 0);
    assert_int_equal(apply_coded(&s, &cc), TN_ENOTFOUND);
    assert_int_equal(s.remotes.nchildren, 1);
    tn_meta_cmd_t td;
    memset(&td, 0, sizeof(td));
    td.type = TN_MC_TOPIC_DELETE;
    snprintf(td.topic.name, sizeof(td.topic.name), "orders");
    assert_int_equal(tn_meta_state_apply(&s, &td), 0);
    assert_int_equal(s.remotes.nchildren, 0);
    assert_int_equal(tn_meta_state_apply(&s, &del), 0);
    tn_meta_state_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seal_open_and_tamper), cmocka_unit_test(test_codec),
        cmocka_unit_test(test_apply_rules),          cmocka_unit_test(test_snapshot_roundtrip),
        cmocka_unit_test(test_remote_children),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
