/* bcrypt hashes, Basic credentials and generated passwords. See passwd.h. */
#include "core/platform.h"

#include "auth/passwd.h"

#include "core/buf.h"

#include <crypt.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

int tn_bcrypt_hash(const char *password, size_t len, char out[TN_BCRYPT_HASH_MAX + 1])
{
    if (len == 0 || len > TN_BCRYPT_PASSWORD_MAX || memchr(password, '\0', len) != NULL)
        return UV_EINVAL;
    char pw[TN_BCRYPT_PASSWORD_MAX + 1];
    memcpy(pw, password, len);
    pw[len] = '\0';
    unsigned char rnd[16];
    char salt[CRYPT_GENSALT_OUTPUT_SIZE];
    struct crypt_data data;
    memset(&data, 0, sizeof(data));
    int rc = UV_EIO;
    if (RAND_bytes(rnd, sizeof(rnd)) == 1 &&
        crypt_gensalt_rn("$2b$", TN_BCRYPT_COST, (const char *)rnd, sizeof(rnd), salt,
                         sizeof(salt)) != NULL) {
        const char *h = crypt_rn(pw, salt, &data, sizeof(data));
        if (h != NULL && h[0] == '$' && strlen(h) <= TN_BCRYPT_HASH_MAX) {
            memcpy(out, h, strlen(h) + 1);
            rc = 0;
        }
    }
    OPENSSL_cleanse(pw, sizeof(pw));
    OPENSSL_cleanse(&data, sizeof(data));
    return rc;
}

bool tn_bcrypt_verify(const char *password, size_t len, const char *hash)
{
    /* Longer: bcrypt would compare the first 72 bytes only. */
    if (len > TN_BCRYPT_PASSWORD_MAX || memchr(password, '\0', len) != NULL ||
        strncmp(hash, "$2b$", 4) != 0)
        return false;
    char pw[TN_BCRYPT_PASSWORD_MAX + 1];
    memcpy(pw, password, len);
    pw[len] = '\0';
    struct crypt_data data;
    memset(&data, 0, sizeof(data));
    const char *h = crypt_rn(pw, hash, &data, sizeof(data));
    size_t hl = strlen(hash);
    bool ok = h != NULL && h[0] == '$' && strlen(h) == hl && CRYPTO_memcmp(h, hash, hl) == 0;
    OPENSSL_cleanse(pw, sizeof(pw));
    OPENSSL_cleanse(&data, sizeof(data));
    return ok;
}

bool tn_username_valid(const char *s, size_t len)
{
    if (len == 0 || len > TN_USERNAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

int tn_basic_parse(const char *value, size_t len, char user[TN_USERNAME_MAX + 1],
                   char password[TN_PASSWORD_MAX + 1], size_t *password_len)
{
    static const char scheme[] = "Basic ";
    size_t sl = sizeof(scheme) - 1;
    if (len <= sl || strncasecmp(value, scheme, sl) != 0)
        return UV_EINVAL;
    const char *b = value + sl;
    size_t bl = len - sl;
    while (bl > 0 && *b == ' ') {
        b++;
        bl--;
    }
    while (bl > 0 && b[bl - 1] == ' ')
        bl--;
    unsigned char raw[TN_USERNAME_MAX + 1 + TN_PASSWORD_MAX];
    size_t n = 0;
    if (bl > 4 * ((sizeof(raw) + 2) / 3) || tn_base64_decode(b, bl, raw, sizeof(raw), &n) != 0)
        return UV_EINVAL;
    unsigned char *colon = memchr(raw, ':', n);
    if (colon == NULL)
        return UV_EINVAL;
    size_t ul = (size_t)(colon - raw), pl = n - ul - 1;
    if (!tn_username_valid((const char *)raw, ul) || pl > TN_PASSWORD_MAX ||
        memchr(colon + 1, '\0', pl) != NULL)
        return UV_EINVAL;
    memcpy(user, raw, ul);
    user[ul] = '\0';
    memcpy(password, colon + 1, pl);
    password[pl] = '\0';
    *password_len = pl;
    OPENSSL_cleanse(raw, sizeof(raw));
    return 0;
}

int tn_password_generate(char out[33])
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned char rnd[24];
    if (RAND_bytes(rnd, sizeof(rnd)) != 1)
        return UV_EIO;
    for (int i = 0; i < 8; i++) {
        uint32_t w = (uint32_t)rnd[3 * i] << 16 | (uint32_t)rnd[3 * i + 1] << 8 | rnd[3 * i + 2];
        for (int k = 0; k < 4; k++)
            out[4 * i + k] = alphabet[(w >> (18 - 6 * k)) & 63];
    }
    out[32] = '\0';
    OPENSSL_cleanse(rnd, sizeof(rnd));
    return 0;
}
