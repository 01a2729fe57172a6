/* Sealed remote credentials. See seal.h. */
#include "core/platform.h"

#include "meta/seal.h"

#include "core/err.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <string.h>

#define AD_LABEL "tern remote credential v1"
#define KDF_INFO "tern remote credentials"

int tn_seal_key(const uint8_t *secret, size_t slen, const uint8_t salt[TN_SEAL_SALT],
                uint8_t key[TN_SEAL_KEY])
{
    EVP_PKEY_CTX *k = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    size_t klen = TN_SEAL_KEY;
    int ok = k != NULL && EVP_PKEY_derive_init(k) > 0 &&
             EVP_PKEY_CTX_set_hkdf_md(k, EVP_sha256()) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_salt(k, salt, TN_SEAL_SALT) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_key(k, secret, (int)slen) > 0 &&
             EVP_PKEY_CTX_add1_hkdf_info(k, (const unsigned char *)KDF_INFO,
                                         (int)strlen(KDF_INFO)) > 0 &&
             EVP_PKEY_derive(k, key, &klen) > 0 && klen == TN_SEAL_KEY;
    EVP_PKEY_CTX_free(k);
    if (!ok)
        OPENSSL_cleanse(key, TN_SEAL_KEY);
    return ok ? 0 : TN_EFAILED;
}

static int ad_field(EVP_CIPHER_CTX *c, const void *p, size_t n)
{
    unsigned char len[4];
    tn_put_u32(len, (uint32_t)n);
    int out;
    return EVP_EncryptUpdate(c, NULL, &out, len, 4) > 0 &&
                   (n == 0 || EVP_EncryptUpdate(c, NULL, &out, p, (int)n) > 0)
               ? 0
               : -1;
}

static int ad_field_dec(EVP_CIPHER_CTX *c, const void *p, size_t n)
{
    unsigned char len[4];
    tn_put_u32(len, (uint32_t)n);
    int out;
    return EVP_DecryptUpdate(c, NULL, &out, len, 4) > 0 &&
                   (n == 0 || EVP_DecryptUpdate(c, NULL, &out, p, (int)n) > 0)
               ? 0
               : -1;
}

/* Feed the associated data (seal.h) to c. */
static int feed_ad(EVP_CIPHER_CTX *c, const tn_seal_ad_t *ad, bool enc)
{
    int (*f)(EVP_CIPHER_CTX *, const void *, size_t) = enc ? ad_field : ad_field_dec;
    unsigned char id[8];
    tn_put_u64(id, ad->id);
    const char *ca = ad->ca_pem != NULL ? ad->ca_pem : "";
    if (f(c, AD_LABEL, strlen(AD_LABEL)) != 0 || f(c, ad->name, strlen(ad->name)) != 0 ||
        f(c, id, 8) != 0 || f(c, ad->url, strlen(ad->url)) != 0 ||
        f(c, ad->username, strlen(ad->username)) != 0 || f(c, ca, strlen(ca)) != 0)
        return -1;
    return 0;
}

int tn_seal(const uint8_t key[TN_SEAL_KEY], const tn_seal_ad_t *ad, const char *pw, size_t plen,
            tn_buf_t *out)
{
    size_t start = tn_buf_size(out);
    if (tn_buf_reserve(out, plen + TN_SEAL_OVERHEAD) != 0)
        return UV_ENOMEM;
    uint8_t nonce[TN_SEAL_NONCE];
    if (RAND_bytes(nonce, sizeof(nonce)) != 1)
        return TN_EFAILED;
    uint8_t *ct = (uint8_t *)out->base + out->len; /* reserved above */
    memcpy(ct, nonce, TN_SEAL_NONCE);
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int n = 0, fin = 0;
    bool ok =
        c != NULL && EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL) > 0 &&
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, TN_SEAL_NONCE, NULL) > 0 &&
        EVP_EncryptInit_ex(c, NULL, NULL, key, nonce) > 0 && feed_ad(c, ad, true) == 0 &&
        (plen == 0 ||
         EVP_EncryptUpdate(c, ct + TN_SEAL_NONCE, &n, (const unsigned char *)pw, (int)plen) > 0) &&
        EVP_EncryptFinal_ex(c, ct + TN_SEAL_NONCE + n, &fin) > 0 && (size_t)(n + fin) == plen &&
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TN_SEAL_TAG, ct + TN_SEAL_NONCE + plen) > 0;
    EVP_CIPHER_CTX_free(c);
    if (!ok) {
        OPENSSL_cleanse(ct, plen + TN_SEAL_OVERHEAD);
        out->len = out->off + start;
        return TN_EFAILED;
    }
    out->len += plen + TN_SEAL_OVERHEAD;
    return 0;
}

int tn_seal_open(const uint8_t key[TN_SEAL_KEY], const tn_seal_ad_t *ad, const uint8_t *sealed,
                 size_t len, char *pw, size_t cap, size_t *plen, char *err, size_t errlen)
{
    *plen = 0;
    if (len < TN_SEAL_OVERHEAD) {
        tn_errbuf(err, errlen, "sealed credential of remote %s is too short: damaged", ad->name);
        return TN_ECORRUPT;
    }
    size_t n = len - TN_SEAL_OVERHEAD;
    if (cap < n + 1)
        return UV_ENOBUFS;
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int out = 0, fin = 0;
    uint8_t tag[TN_SEAL_TAG];
    memcpy(tag, sealed + len - TN_SEAL_TAG, TN_SEAL_TAG);
    bool set = c != NULL && EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL) > 0 &&
               EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, TN_SEAL_NONCE, NULL) > 0 &&
               EVP_DecryptInit_ex(c, NULL, NULL, key, sealed) > 0 && feed_ad(c, ad, false) == 0 &&
               (n == 0 || EVP_DecryptUpdate(c, (unsigned char *)pw, &out, sealed + TN_SEAL_NONCE,
                                            (int)n) > 0) &&
               EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TN_SEAL_TAG, tag) > 0;
    bool opened = set && EVP_DecryptFinal_ex(c, (unsigned char *)pw + out, &fin) > 0;
    EVP_CIPHER_CTX_free(c);
    if (!opened) {
        OPENSSL_cleanse(pw, cap);
        if (!set)
            return TN_EFAILED;
        tn_errbuf(err, errlen,
                  "sealed credential of remote %s does not open: tampered or sealed under another "
                  "cluster secret",
                  ad->name);
        return TN_ECORRUPT;
    }
    pw[n] = '\0';
    *plen = n;
    return 0;
}
