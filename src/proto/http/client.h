/* The blocking HTTP/1.1 client, for tools (ternctl, tern-v1-bench), not
 * for the daemon's event loop: one request at a time on one keep-alive
 * connection, over plain TCP or TLS (OpenSSL, verifying the server's
 * certificate chain against a CA file or the system store, and its name
 * against the URL's host).
 *
 * Two layers:
 *   - tn_hc_parser_t: the response parser, a pure state machine fed with
 *     whatever bytes arrived (split anywhere). It reads the status line and
 *     headers, then a body framed by Content-Length, by chunked transfer
 *     coding (extensions and trailers skipped), or by the connection's
 *     close; 1xx interim answers are skipped; HEAD, 204 and 304 answers
 *     have no body. Body bytes go to a callback as they are decoded.
 *   - tn_hc_t: a connection to one base URL that sends requests and feeds
 *     the answers to the parser. It reconnects when the server closed the
 *     kept-alive connection, and resends a request once when a reused
 *     connection turned out closed before any answer byte came (the server
 *     closed it idle; it never saw the request).
 *
 * Timeouts: every wait (connect, each write, each read) has the same bound;
 * a server that keeps sending stays within it however long the body is.
 * Name resolution (getaddrinfo) is not bounded.
 *
 * Thread safety: a tn_hc_t belongs to one thread at a time; separate ones
 * may be used from separate threads at once. The parser is pure. */
#ifndef TN_PROTO_HTTP_CLIENT_H
#define TN_PROTO_HTTP_CLIENT_H

#include "core/platform.h"

#include "core/buf.h"

#define TN_HC_MAX_HEAD       (64 * 1024) /* status line + headers */
#define TN_HC_MAX_CHUNK_LINE 1024        /* a chunk-size line with its extensions */

/* Body bytes, borrowed for the call. Return 0 to go on, or a negative code
 * that tn_hc_parser_feed then returns (the response is abandoned). */
typedef int (*tn_hc_body_cb)(void *ud, const char *data, size_t len);

typedef struct {
    /* Known once the head is parsed (state past the head). */
    int status;
    int minor;              /* HTTP/1.minor */
    int64_t content_length; /* -1: none given */
    bool chunked;
    bool keep_alive;      /* the connection may carry another request after this */
    char retry_after[32]; /* "" if none (or too long to keep) */
    char content_type[128];
    char errmsg[128]; /* why TN_EPROTO */
    /* Private. */
    int state;
    bool head_request;
    bool head_done;
    uint64_t left; /* body or chunk bytes still to come */
    size_t line_start;
    tn_buf_t line; /* head, chunk-size line or trailer being gathered */
    tn_hc_body_cb body_cb;
    void *ud;
} tn_hc_parser_t;

/* Ready a parser for one response. head_request: the request was HEAD (no
 * body follows whatever the headers say). body_cb may be NULL (the body is
 * read and dropped). */
void tn_hc_parser_init(tn_hc_parser_t *p, bool head_request, tn_hc_body_cb body_cb, void *ud);
void tn_hc_parser_fini(tn_hc_parser_t *p);

/* Feed len bytes. Returns 0 when the response is complete (*used = the
 * bytes it took; any after them are not part of it), TN_ESHORT when all
 * len bytes were taken and more are needed, TN_EPROTO when the bytes are
 * not a valid response (p->errmsg says why), UV_ENOMEM, or the callback's
 * error. */
int tn_hc_parser_feed(tn_hc_parser_t *p, const char *buf, size_t len, size_t *used);

/* The connection closed. 0 when that ends the response (a body that runs to
 * the close), else TN_EPROTO with p->errmsg ("connection closed after N of
 * M body bytes", ...). */
int tn_hc_parser_eof(tn_hc_parser_t *p);

/* Whether the head has been parsed (status and headers are known). */
static inline bool tn_hc_parser_head_done(const tn_hc_parser_t *p)
{
    return p->head_done;
}

/* --- URLs ------------------------------------------------------------------ */

typedef struct {
    bool tls;           /* https */
    char host[256];     /* without brackets for IPv6 */
    char port[8];       /* "443" */
    char hostport[272]; /* for the Host header: as written in the URL (with brackets) */
    char prefix[512];   /* path before every request path, without a trailing '/' ("" usually) */
} tn_hc_url_t;

/* Parse "http[s]://host[:port][/prefix]". 0, or UV_EINVAL with err saying
 * what is wrong (no scheme, another scheme, credentials in the URL, a bad
 * port, a query or fragment). */
int tn_hc_url_parse(const char *url, tn_hc_url_t *out, char *err, size_t errlen);

/* --- connections ------------------------------------------------------------ */

typedef struct {
    const char *ca_file;  /* PEM CA bundle for https; NULL: the system store (copied) */
    int timeout_ms;       /* bound on each wait; <= 0: 30 s */
    const char *user;     /* Basic credentials, copied; NULL: none sent */
    const char *password; /* with user; NULL is "" */
    const char *headers;  /* extra header lines sent with every request, each ending in
                           * CRLF ("X-Tern-Client: bench\r\n"), copied; NULL: none */
    size_t max_body;      /* bodies kept in memory above this are refused; 0: 64 MiB */
} tn_hc_opts_t;

typedef struct tn_hc_s tn_hc_t;

typedef struct {
    const char *method;  /* "GET" */
    const char *path;    /* origin-form, after the URL's prefix: "/v1/topics?limit=10" */
    const char *headers; /* extra lines for this request (each ending in CRLF) or NULL */
    const char *body;    /* borrowed; NULL with len 0: none (Content-Length: 0 on POST/PUT/PATCH) */
    size_t len;
    int body_fd; /* >= 0: a 2xx body is written here rather than kept; -1: kept */
} tn_hc_req_t;

typedef struct {
    int status;
    char *body; /* NUL-terminated, owned (tn_free); NULL when the body was empty or streamed */
    size_t len;
    uint64_t streamed; /* bytes written to body_fd */
    char retry_after[32];
    char content_type[128];
} tn_hc_resp_t;

/* A client for base_url (nothing connects yet). 0 with *out, UV_EINVAL (bad
 * URL, err says why), TN_ECONFIG (the CA file cannot be loaded, err says
 * why) or UV_ENOMEM. */
int tn_hc_new(const char *base_url, const tn_hc_opts_t *o, tn_hc_t **out, char *err, size_t errlen);
void tn_hc_free(tn_hc_t *h);

/* The URL as parsed (borrowed, valid while h lives). */
const tn_hc_url_t *tn_hc_url(const tn_hc_t *h);

/* Send one request and read its answer into resp (which the call inits;
 * release it with tn_hc_resp_fini even on failure). 0 when an answer came
 * (any status), else a negative code with err saying what failed, in words
 * a user can act on ("connection refused", "timed out after 5000 ms waiting
 * for the answer", "TLS: certificate verify failed: self-signed certificate",
 * "bad response: ..."). */
int tn_hc_request(tn_hc_t *h, const tn_hc_req_t *req, tn_hc_resp_t *resp, char *err, size_t errlen);

void tn_hc_resp_fini(tn_hc_resp_t *resp);

#endif
