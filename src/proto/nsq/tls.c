/* TLS sessions over memory BIOs. See tls.h. */
#include "core/platform.h"

#include "proto/nsq/tls.h"

#include "core/alloc.h"
#include "core/err.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>

struct tn_tls_ctx_s {
    SSL_CTX *ssl;
    unsigned char alpn[32]; /* wire format: length byte + name; [0] == 0 when none */
};

struct tn_tls_s {
    SSL *ssl;
    BIO *rbio; /* network -> OpenSSL */
    BIO *wbio; /* OpenSSL -> network */
    bool done;
    char errmsg[256];
};

static void ossl_reason(char *out, size_t len)
{
    unsigned long e = ERR_get_error();
    if (e == 0)
        snprintf(out, len, "unknown error");
    else
        ERR_error_string_n(e, out, len);
    ERR_clear_error();
}

static int min_version(const char *v)
{
    if (v == NULL || *v == '\0' || strcmp(v, "tls1.2") == 0)
        return TLS1_2_VERSION;
    if (strcmp(v, "tls1.0") == 0)
        return TLS1_VERSION;
    if (strcmp(v, "tls1.1") == 0)
        return TLS1_1_VERSION;
    if (strcmp(v, "tls1.3") == 0)
        return TLS1_3_VERSION;
    return -1;
}

/* require (not verify): accept any certificate the client presents. */
static int accept_any(int ok, X509_STORE_CTX *ctx)
{
    (void)ok;
    (void)ctx;
    return 1;
}

int tn_tls_ctx_new(const char *cert, const char *key, const char *ca, tn_tls_client_policy_t policy,
                   const char *minv, tn_tls_ctx_t **out, char *err, size_t errlen)
{
    int ver = min_version(minv);
    if (ver < 0) {
        tn_errbuf(err, errlen, "tls-min-version \"%s\": expected tls1.0, tls1.1, tls1.2 or tls1.3",
                  minv);
        return TN_ECONFIG;
    }
    tn_tls_ctx_t *c = tn_calloc(1, sizeof(*c));
    if (c == NULL)
        return UV_ENOMEM;
    c->ssl = SSL_CTX_new(TLS_server_method());
    if (c->ssl == NULL) {
        tn_free(c);
        return UV_ENOMEM;
    }
    char why[200];
    SSL_CTX_set_min_proto_version(c->ssl, ver);
    SSL_CTX_set_mode(c->ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
    if (SSL_CTX_use_certificate_chain_file(c->ssl, cert) != 1) {
        ossl_reason(why, sizeof(why));
        tn_errbuf(err, errlen, "tls-cert \"%s\": %s", cert, why);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(c->ssl, key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(c->ssl) != 1) {
        ossl_reason(why, sizeof(why));
        tn_errbuf(err, errlen, "tls-key \"%s\": %s", key, why);
        goto fail;
    }
    if (ca != NULL && *ca != '\0') {
        if (SSL_CTX_load_verify_locations(c->ssl, ca, NULL) != 1) {
            ossl_reason(why, sizeof(why));
            tn_errbuf(err, errlen, "tls-root-ca-file \"%s\": %s", ca, why);
            goto fail;
        }
    }
    if (policy == TN_TLS_CLIENT_REQUIRE_VERIFY) {
        if (ca == NULL || *ca == '\0') {
            tn_errbuf(err, errlen, "tls-client-auth-policy require-verify needs tls-root-ca-file");
            goto fail;
        }
        SSL_CTX_set_verify(c->ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    } else if (policy == TN_TLS_CLIENT_REQUIRE) {
        SSL_CTX_set_verify(c->ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, accept_any);
    }
    *out = c;
    return 0;
fail:
    SSL_CTX_free(c->ssl);
    tn_free(c);
    return TN_ECONFIG;
}

/* Pick the context's protocol if the client offers it; otherwise carry on
 * without ALPN (a client that offers only h2 gets HTTP/1.1 or leaves). */
static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    (void)ssl;
    tn_tls_ctx_t *c = arg;
    unsigned char *sel = NULL;
    if (SSL_select_next_proto(&sel, outlen, c->alpn, c->alpn[0] + 1u, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

int tn_tls_ctx_set_alpn(tn_tls_ctx_t *ctx, const char *proto)
{
    size_t n = strlen(proto);
    if (n == 0 || n >= sizeof(ctx->alpn))
        return UV_EINVAL;
    ctx->alpn[0] = (unsigned char)n;
    memcpy(ctx->alpn + 1, proto, n);
    SSL_CTX_set_alpn_select_cb(ctx->ssl, select_alpn, ctx);
    return 0;
}

void tn_tls_ctx_fingerprint(const tn_tls_ctx_t *ctx, char *out, size_t len)
{
    out[0] = '\0';
    X509 *cert = SSL_CTX_get0_certificate(ctx->ssl);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (cert == NULL || X509_digest(cert, EVP_sha256(), md, &mdlen) != 1)
        return;
    size_t n = 0;
    for (unsigned int i = 0; i < mdlen && n + 4 <= len; i++)
        n += (size_t)snprintf(out + n, len - n, "%s%02X", i ? ":" : "", md[i]);
}

void tn_tls_ctx_free(tn_tls_ctx_t *ctx)
{
    if (ctx == NULL)
        return;
    SSL_CTX_free(ctx->ssl);
    tn_free(ctx);
}

tn_tls_t *tn_tls_new(tn_tls_ctx_t *ctx)
{
    tn_tls_t *t = tn_calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->ssl = SSL_new(ctx->ssl);
    t->rbio = BIO_new(BIO_s_mem());
    t->wbio = BIO_new(BIO_s_mem());
    if (t->ssl == NULL || t->rbio == NULL || t->wbio == NULL) {
        if (t->ssl != NULL)
            SSL_free(t->ssl);
        BIO_free(t->rbio);
        BIO_free(t->wbio);
        tn_free(t);
        return NULL;
    }
    SSL_set_bio(t->ssl, t->rbio, t->wbio); /* the session owns the BIOs now */
    SSL_set_accept_state(t->ssl);
    return t;
}

void tn_tls_free(tn_tls_t *t)
{
    if (t == NULL)
        return;
    SSL_free(t->ssl);
    tn_free(t);
}

int tn_tls_close_notify(tn_tls_t *t, tn_buf_t *wire)
{
    if (!t->done)
        return 0;
    (void)SSL_shutdown(t->ssl); /* queues close_notify; the peer's answer is not awaited */
    ERR_clear_error();
    return tn_tls_drain(t, wire);
}

const char *tn_tls_errmsg(const tn_tls_t *t)
{
    return t->errmsg;
}

int tn_tls_drain(tn_tls_t *t, tn_buf_t *wire)
{
    for (;;) {
        size_t pending = BIO_ctrl_pending(t->wbio);
        if (pending == 0)
            return 0;
        int rc = tn_buf_reserve(wire, pending);
        if (rc != 0)
            return rc;
        int n = BIO_read(t->wbio, wire->base + wire->len, (int)pending);
        if (n <= 0)
            return 0;
        wire->len += (size_t)n;
    }
}

static int failed(tn_tls_t *t, const char *what)
{
    char why[200];
    ossl_reason(why, sizeof(why));
    snprintf(t->errmsg, sizeof(t->errmsg), "%s: %s", what, why);
    return TN_EPROTO;
}

int tn_tls_feed(tn_tls_t *t, const char *data, size_t len, tn_buf_t *plain, bool *done)
{
    if (len > 0 && BIO_write(t->rbio, data, (int)len) != (int)len)
        return UV_ENOMEM;
    if (!t->done) {
        int rc = SSL_do_handshake(t->ssl);
        if (rc != 1) {
            int e = SSL_get_error(t->ssl, rc);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                *done = false;
                return 0;
            }
            return failed(t, "TLS handshake failed");
        }
        t->done = true;
    }
    *done = true;
    for (;;) {
        int rc = tn_buf_reserve(plain, 16384);
        if (rc != 0)
            return rc;
        int n = SSL_read(t->ssl, plain->base + plain->len, 16384);
        if (n > 0) {
            plain->len += (size_t)n;
            continue;
        }
        int e = SSL_get_error(t->ssl, n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            return 0;
        if (e == SSL_ERROR_ZERO_RETURN)
            return TN_EPROTO; /* close_notify: the peer is done */
        return failed(t, "TLS read failed");
    }
}

int tn_tls_write(tn_tls_t *t, const char *data, size_t len, tn_buf_t *wire)
{
    while (len > 0) {
        int chunk = len > (1 << 20) ? (1 << 20) : (int)len;
        int n = SSL_write(t->ssl, data, chunk);
        if (n <= 0)
            return failed(t, "TLS write failed");
        data += n;
        len -= (size_t)n;
        int rc = tn_tls_drain(t, wire);
        if (rc != 0)
            return rc;
    }
    return tn_tls_drain(t, wire);
}

void tn_tls_info(tn_tls_t *t, tn_tls_info_t *out)
{
    memset(out, 0, sizeof(*out));
    int v = SSL_version(t->ssl);
    snprintf(out->version, sizeof(out->version), "%s",
             v == TLS1_3_VERSION   ? "TLS1.3"
             : v == TLS1_2_VERSION ? "TLS1.2"
             : v == TLS1_1_VERSION ? "TLS1.1"
             : v == TLS1_VERSION   ? "TLS1.0"
                                   : "Unknown");
    const SSL_CIPHER *c = SSL_get_current_cipher(t->ssl);
    const char *name = c != NULL ? SSL_CIPHER_standard_name(c) : NULL;
    snprintf(out->cipher, sizeof(out->cipher), "%s", name != NULL ? name : "");
    const unsigned char *proto = NULL;
    unsigned int plen = 0;
    SSL_get0_alpn_selected(t->ssl, &proto, &plen);
    if (proto != NULL && plen < sizeof(out->alpn)) {
        memcpy(out->alpn, proto, plen);
        out->alpn[plen] = '\0';
    }
}

void tn_tls_common_name(tn_tls_t *t, char *out, size_t len)
{
    out[0] = '\0';
    X509 *cert = SSL_get1_peer_certificate(t->ssl);
    if (cert == NULL)
        return;
    X509_NAME *name = X509_get_subject_name(cert);
    if (name != NULL)
        X509_NAME_get_text_by_NID(name, NID_commonName, out, (int)len);
    X509_free(cert);
}
