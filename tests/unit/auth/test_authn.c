/* Tests of tern's own credentials: bcrypt hashes, Basic headers, generated
 * passwords, and the verifier (unknown users, the verified-credential
 * cache and the stored hash it keys on, shared runs, cancellation, the
 * per-user throttle and the node-wide failure budget). */
#include "core/platform.h"

#include "testutil.h"

#include "auth/authn.h"
#include "core/alloc.h"
#include "core/time.h"

#include <stdio.h>
#include <string.h>

static void test_bcrypt(void **state)
{
    (void)state;
    char h[TN_BCRYPT_HASH_MAX + 1];
    assert_int_equal(tn_bcrypt_hash("s3cret", 6, h), 0);
    assert_memory_equal(h, "$2b$10$", 7);
    assert_int_equal(strlen(h), 60);
    assert_true(tn_bcrypt_verify("s3cret", 6, h));
    assert_false(tn_bcrypt_verify("s3creT", 6, h));
    assert_false(tn_bcrypt_verify("", 0, h));
    char h2[TN_BCRYPT_HASH_MAX + 1];
    assert_int_equal(tn_bcrypt_hash("s3cret", 6, h2), 0);
    assert_string_not_equal(h, h2); /* salted */
    assert_int_equal(tn_bcrypt_hash("", 0, h2), UV_EINVAL);
    assert_int_equal(tn_bcrypt_hash("a\0b", 3, h2), UV_EINVAL);
    assert_false(tn_bcrypt_verify("s3cret", 6, "$1$notbcrypt"));
    assert_false(tn_bcrypt_verify("s3cret", 6, "$2b$10$short"));
}

static int parse(const char *v, char *user, char *pw, size_t *pl)
{
    return tn_basic_parse(v, strlen(v), user, pw, pl);
}

static void test_basic_header(void **state)
{
    (void)state;
    char user[TN_USERNAME_MAX + 1], pw[TN_PASSWORD_MAX + 1];
    size_t pl;
    assert_int_equal(parse("Basic dXNlcjpwYXNz", user, pw, &pl), 0); /* user:pass */
    assert_string_equal(user, "user");
    assert_string_equal(pw, "pass");
    assert_int_equal(pl, 4);
    assert_int_equal(parse("basic  dXNlcjpwYTpzcw== ", user, pw, &pl), 0); /* user:pa:ss */
    assert_string_equal(pw, "pa:ss");
    assert_int_equal(parse("Basic dXNlcjo=", user, pw, &pl), 0); /* user: */
    assert_int_equal(pl, 0);
    assert_int_equal(parse("Basic dXNlcnBhc3M=", user, pw, &pl), UV_EINVAL);  /* no colon */
    assert_int_equal(parse("Basic dXNlcjpwYXNz=", user, pw, &pl), UV_EINVAL); /* bad length */
    assert_int_equal(parse("Basic dXNl*jpwYXNz", user, pw, &pl), UV_EINVAL);
    assert_int_equal(parse("Bearer dXNlcjpwYXNz", user, pw, &pl), UV_EINVAL);
    assert_int_equal(parse("Basic", user, pw, &pl), UV_EINVAL);
    assert_int_equal(parse("Basic dSB4OnA=", user, pw, &pl), UV_EINVAL); /* "u x:p" */
    assert_int_equal(parse("Basic OnBhc3M=", user, pw, &pl), UV_EINVAL); /* ":pass" */
}

static void test_generated_password(void **state)
{
    (void)state;
    char a[33], b[33];
    assert_int_equal(tn_password_generate(a), 0);
    assert_int_equal(tn_password_generate(b), 0);
    assert_int_equal(strlen(a), 32);
    assert_string_not_equal(a, b);
    for (size_t i = 0; i < 32; i++)
        assert_non_null(
            strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", a[i]));
}

/* --- the verifier ------------------------------------------------------------ */

#define NUSERS 40

typedef struct {
    char names[NUSERS][16];
    char hashes[NUSERS][TN_BCRYPT_HASH_MAX + 1];
} users_t;

static users_t U;

static const char *lookup(void *arg, const char *user)
{
    users_t *u = arg;
    for (int i = 0; i < NUSERS; i++) {
        if (strcmp(u->names[i], user) == 0)
            return u->hashes[i];
    }
    return NULL;
}

typedef struct {
    tn_authn_req_t req;
    int done;
    tn_authn_result_t result;
} probe_t;

static void on_result(tn_authn_req_t *req, tn_authn_result_t r)
{
    probe_t *p = req->data;
    p->done++;
    p->result = r;
}

static void wait_done(uv_loop_t *loop, probe_t *p)
{
    int64_t deadline = tn_now_mono_ms() + 30000;
    while (p->done == 0) {
        assert_true(tn_now_mono_ms() < deadline);
        uv_run(loop, UV_RUN_ONCE);
    }
}

static tn_authn_result_t check(uv_loop_t *loop, tn_authn_t *a, const char *user, const char *pw)
{
    probe_t p;
    memset(&p, 0, sizeof(p));
    p.req.data = &p;
    tn_authn_check(a, &p.req, user, pw, strlen(pw), on_result);
    wait_done(loop, &p);
    assert_int_equal(p.done, 1);
    return p.result;
}

static int setup_users(void **state)
{
    (void)state;
    static bool done;
    if (!done) {
        for (int i = 0; i < NUSERS; i++) {
            snprintf(U.names[i], sizeof(U.names[i]), "u%d", i);
            assert_int_equal(tn_bcrypt_hash("right", 5, U.hashes[i]), 0);
        }
        done = true;
    }
    return 0;
}

static void test_verifier_cache_and_shared_runs(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_authn_opts_t o;
    tn_authn_opts_default(&o);
    tn_authn_t *a;
    assert_int_equal(tn_authn_new(&loop, &o, lookup, &U, &a), 0);
    tn_authn_stats_t st;

    /* Unknown user: denied at once, no bcrypt. */
    probe_t p;
    memset(&p, 0, sizeof(p));
    p.req.data = &p;
    tn_authn_check(a, &p.req, "nobody", "x", 1, on_result);
    assert_int_equal(p.done, 1);
    assert_int_equal(p.result, TN_AUTHN_DENIED);
    tn_authn_stats(a, &st);
    assert_int_equal(st.bcrypt_runs, 0);

    assert_int_equal(check(&loop, a, "u0", "right"), TN_AUTHN_OK);
    /* Cached: answered before tn_authn_check returns. */
    memset(&p, 0, sizeof(p));
    p.req.data = &p;
    tn_authn_check(a, &p.req, "u0", "right", 5, on_result);
    assert_int_equal(p.done, 1);
    assert_int_equal(p.result, TN_AUTHN_OK);
    tn_authn_stats(a, &st);
    assert_int_equal(st.bcrypt_runs, 1);
    assert_int_equal(st.cache_hits, 1);
    /* The cache holds a MAC of this password only: another password, the
     * same one cut short or run on (the length counts), is no hit and goes
     * to bcrypt, which denies it. */
    assert_int_equal(check(&loop, a, "u0", "wrong"), TN_AUTHN_DENIED);
    memset(&p, 0, sizeof(p));
    p.req.data = &p;
    tn_authn_check(a, &p.req, "u0", "right!", 5, on_result); /* "right" */
    assert_int_equal(p.done, 1);
    assert_int_equal(p.result, TN_AUTHN_OK);
    assert_int_equal(check(&loop, a, "u0", "righ"), TN_AUTHN_DENIED);
    assert_int_equal(check(&loop, a, "u0", "right!"), TN_AUTHN_DENIED);
    tn_authn_stats(a, &st);
    assert_int_equal(st.bcrypt_runs, 4);
    assert_int_equal(st.cache_hits, 2);
    /* Another user's new password (any change of another user's, or of
     * this one's grants, leaves its hash as it is) keeps it cached. */
    char was[TN_BCRYPT_HASH_MAX + 1];
    memcpy(was, U.hashes[5], sizeof(was));
    assert_int_equal(tn_bcrypt_hash("other", 5, U.hashes[5]), 0);
    assert_int_equal(check(&loop, a, "u0", "right"), TN_AUTHN_OK);
    tn_authn_stats(a, &st);
    assert_int_equal(st.bcrypt_runs, 4);
    memcpy(U.hashes[5], was, sizeof(was));
    /* Its own new password, even the same one (a user made again under
     * the name: another salt, another hash), sends it back to bcrypt. */
    memcpy(was, U.hashes[0], sizeof(was));
    assert_int_equal(tn_bcrypt_hash("right", 5, U.hashes[0]), 0);
    assert_int_equal(check(&loop, a, "u0", "right"), TN_AUTHN_OK);
    tn_authn_stats(a, &st);
    assert_int_equal(st.bcrypt_runs, 5);
    assert_int_equal(tn_bcrypt_hash("new", 3, U.hashes[0]), 0);
    assert_int_equal(check(&loop, a, "u0", "right"), TN_AUTHN_DENIED);
    memcpy(U.hashes[0], was, sizeof(was));

    /* Three identical checks share one run; the one that leaves does not
     * hurt the others. */
    probe_t q[3];
    memset(q, 0, sizeof(q));
    for (int i = 0; i < 3; i++) {
        q[i].req.data = &q[i];
        tn_authn_check(a, &q[i].req, "u1", "right", 5, on_result);
    }
    tn_authn_cancel(&q[1].req);
    wait_done(&loop, &q[0]);
    wait_done(&loop, &q[2]);
    assert_int_equal(q[0].result, TN_AUTHN_OK);
    assert_int_equal(q[2].result, TN_AUTHN_OK);
    assert_int_equal(q[1].done, 0);
    tn_authn_stats(a, &st);
    assert_int_equal(st.bcrypt_runs, 7); /* and the new password's refusal */

    tn_authn_close(a, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_verifier_throttle_and_budget(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    tn_authn_opts_t o;
    tn_authn_opts_default(&o);
    tn_authn_t *a;
    assert_int_equal(tn_authn_new(&loop, &o, lookup, &U, &a), 0);
    /* Refills follow the advances below only: a bcrypt run that takes a
     * second on a loaded machine would otherwise earn 4 budget tokens. */
    tn__authn_pin(a);

    /* Five failures, then 429 without bcrypt, even for the right password. */
    for (int i = 0; i < 5; i++)
        assert_int_equal(check(&loop, a, "u2", "wrong"), TN_AUTHN_DENIED);
    tn_authn_stats_t st;
    tn_authn_stats(a, &st);
    uint64_t runs = st.bcrypt_runs;
    assert_int_equal(check(&loop, a, "u2", "right"), TN_AUTHN_THROTTLED);
    tn_authn_stats(a, &st);
    assert_int_equal(st.bcrypt_runs, runs);
    /* One attempt earned back per 12 s. */
    tn__authn_advance(a, 12100);
    assert_int_equal(check(&loop, a, "u2", "right"), TN_AUTHN_OK);

    /* The node budget: users with a recent failure need a token of it
     * (32), users without are never refused by it. */
    tn__authn_advance(a, 60000); /* u2's bucket full again */
    for (int i = 3; i < 3 + 34; i++)
        assert_int_equal(check(&loop, a, U.names[i], "wrong"), TN_AUTHN_DENIED);
    /* Those 34 first failures spent what was left; now suspects queue for
     * tokens that are not there. */
    int throttled = 0;
    for (int i = 3; i < 3 + 34; i++)
        throttled += check(&loop, a, U.names[i], "wrong") == TN_AUTHN_THROTTLED;
    assert_int_equal(throttled, 34);
    assert_int_equal(check(&loop, a, "u38", "right"), TN_AUTHN_OK); /* clean user */
    tn_authn_close(a, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bcrypt),
        cmocka_unit_test(test_basic_header),
        cmocka_unit_test(test_generated_password),
        cmocka_unit_test_setup(test_verifier_cache_and_shared_runs, setup_users),
        cmocka_unit_test_setup(test_verifier_throttle_and_budget, setup_users),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
