/* TLS for NSQ connections (OpenSSL), as the IDENTIFY tls_v1 upgrade uses
 * it: the socket stays a libuv stream and OpenSSL works on memory BIOs, so
 * nothing blocks and the connection decides when bytes move.
 *
 *   network bytes in  -> tn_tls_feed  -> plaintext out (after the handshake)
 *   plaintext in      -> tn_tls_write -> network bytes out
 *
 * Handshake records produced while feeding are collected with
 * tn_tls_drain. A context holds the certificate, key, optional client CA
 * (mutual TLS) and the minimum protocol version.
 *
 * Thread safety: a context may be shared; a session belongs to one
 * connection (one thread). */
#ifndef TN_PROTO_NSQ_TLS_H
#define TN_PROTO_NSQ_TLS_H

#include "core/platform.h"

#include "core/buf.h"

typedef struct tn_tls_ctx_s tn_tls_ctx_t;
typedef struct tn_tls_s tn_tls_t;

typedef enum {
    TN_TLS_CLIENT_NONE = 0,      /* no client certificate asked for */
    TN_TLS_CLIENT_REQUIRE,       /* a certificate must be sent (not verified) */
    TN_TLS_CLIENT_REQUIRE_VERIFY /* and must verify against the root CA */
} tn_tls_client_policy_t;

/* Build a server context. cert and key are PEM files; ca (may be NULL or
 * "") verifies client certificates; min_version is "tls1.0".."tls1.3".
 * On failure returns TN_ECONFIG with a line naming the file and OpenSSL's
 * reason in err. */
int tn_tls_ctx_new(const char *cert, const char *key, const char *ca, tn_tls_client_policy_t policy,
                   const char *min_version, tn_tls_ctx_t **out, char *err, size_t errlen);
void tn_tls_ctx_free(tn_tls_ctx_t *ctx);
/* Answer ALPN with proto ("http/1.1") when the client offers it; a client
 * that offers only others proceeds without ALPN. 0 or UV_EINVAL. Before
 * the first session is made. */
int tn_tls_ctx_set_alpn(tn_tls_ctx_t *ctx, const char *proto);
/* The SHA-256 fingerprint of the context's certificate, "AB:CD:..." (95
 * characters and a NUL fit 96 bytes); "" if none. For logs. */
void tn_tls_ctx_fingerprint(const tn_tls_ctx_t *ctx, char *out, size_t len);

/* Sessions hold their own reference to what a context loaded: a context
 * may be freed (after a certificate reload, say) while sessions made
 * from it live on. */

/* A server session. NULL when out of memory. */
tn_tls_t *tn_tls_new(tn_tls_ctx_t *ctx);
void tn_tls_free(tn_tls_t *t);

/* Feed bytes from the network; append decrypted plaintext to plain. Sets
 * *done once the handshake has completed. Returns 0, or TN_EPROTO when the
 * peer broke the protocol or failed verification (errmsg set). */
int tn_tls_feed(tn_tls_t *t, const char *data, size_t len, tn_buf_t *plain, bool *done);
/* Encrypt plaintext and append the records to wire. 0, TN_EPROTO, UV_ENOMEM. */
int tn_tls_write(tn_tls_t *t, const char *data, size_t len, tn_buf_t *wire);
/* Append pending records (handshake, alerts) to wire. */
int tn_tls_drain(tn_tls_t *t, tn_buf_t *wire);
/* Append a close_notify alert to wire (after the handshake; nothing
 * before it). 0 or UV_ENOMEM. */
int tn_tls_close_notify(tn_tls_t *t, tn_buf_t *wire);
/* The client certificate's common name, or "" (after the handshake). */
void tn_tls_common_name(tn_tls_t *t, char *out, size_t len);

/* What the handshake agreed, in the words of nsqd's /stats: version
 * "TLS1.2" or "TLS1.3", the cipher suite's standard (IANA) name, and the
 * ALPN protocol ("" when none was negotiated). */
typedef struct {
    char version[16];
    char cipher[64];
    char alpn[64];
} tn_tls_info_t;
void tn_tls_info(tn_tls_t *t, tn_tls_info_t *out);
const char *tn_tls_errmsg(const tn_tls_t *t);

#endif
