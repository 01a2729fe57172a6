/* Passwords of tern's own users: bcrypt hashes (libcrypt, `$2b$`, cost
 * 10), HTTP Basic credentials, and generated passwords. Hashing and
 * verifying take tens of milliseconds by design: callers run them on
 * worker threads (see auth/authn.h), never on the loop thread while it
 * serves requests.
 *
 * Threads: any (no shared state). */
#ifndef TN_AUTH_PASSWD_H
#define TN_AUTH_PASSWD_H

#include "core/platform.h"

#define TN_BCRYPT_COST     10
#define TN_BCRYPT_HASH_MAX 128
#define TN_PASSWORD_MAX    1024 /* what credentials may carry (Basic, NSQ AUTH) */
#define TN_USERNAME_MAX    64
/* The longest password a user may have: bcrypt reads no more than 72
 * bytes, so a longer one would let in every password sharing its first
 * 72 (Go's x/crypto/bcrypt refuses those too). */
#define TN_BCRYPT_PASSWORD_MAX 72

/* Hash password into out (a `$2b$10$...` string). 0, UV_EINVAL (empty or
 * longer than TN_BCRYPT_PASSWORD_MAX, or with a NUL), or UV_EIO (no
 * randomness or libcrypt refused). */
int tn_bcrypt_hash(const char *password, size_t len, char out[TN_BCRYPT_HASH_MAX + 1]);

/* Whether password matches hash (constant time in the comparison); never
 * for one longer than TN_BCRYPT_PASSWORD_MAX, which no hash was made of. */
bool tn_bcrypt_verify(const char *password, size_t len, const char *hash);

/* Parse an Authorization header value `Basic <base64(user:password)>`.
 * 0 with user (NUL-terminated, [A-Za-z0-9._-]{1,64}) and password (may be
 * empty, no NUL inside, at most TN_PASSWORD_MAX bytes) filled, or
 * UV_EINVAL. */
int tn_basic_parse(const char *value, size_t len, char user[TN_USERNAME_MAX + 1],
                   char password[TN_PASSWORD_MAX + 1], size_t *password_len);

/* Whether s is a valid user name: [A-Za-z0-9._-]{1,64}. */
bool tn_username_valid(const char *s, size_t len);

/* A random password of 32 URL-safe base64 characters (24 random bytes).
 * 0 or UV_EIO. */
int tn_password_generate(char out[33]);

#endif
