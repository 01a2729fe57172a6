/* The HTTP/1.1 request parser: request line and headers from a byte
 * buffer, chunked request bodies as they arrive, and query parameters.
 * Strict on purpose (RFC 9112): whatever two parsers could read
 * differently is refused, so nothing can be smuggled past tern or a proxy
 * in front of it.
 *
 *   - Request line `METHOD SP request-target SP HTTP/1.x`, method a
 *     token; the target starts with `/`, or is an `http://` / `https://`
 *     URI with a non-empty host and no userinfo (the absolute form: path
 *     and query are its own, an empty path is `/`), or is `*` with
 *     OPTIONS; no controls or spaces in it; the version last on the line
 *     (anything after it is 400); a well-formed version `HTTP/d.d` other
 *     than 1.0 and 1.1 is 505, any other version text 400.
 *   - At most TN_HTTP_MAX_EMPTY_LINES empty lines before the request
 *     line (400).
 *   - Header lines `name: value`; every line ends in CRLF (a bare CR or
 *     a bare LF is 400); no whitespace before the colon and no obsolete
 *     line folding (400); at most TN_HTTP_MAX_HEADERS (431); the whole
 *     head at most the caller's max_head bytes (431).
 *   - Content-Length: digits only; several must agree; together with
 *     Transfer-Encoding it is 400. Transfer-Encoding (all its lines'
 *     codings) must end in `chunked`, once (400), and hold no other coding
 *     (501); in HTTP/1.0 it is 400 (RFC 9112 6.1). HTTP/1.1 needs Host
 *     (400), a host[:port] or empty (400). Host and Authorization come
 *     at most once (400).
 *     `Expect: 100-continue` is noted; other expectations are 417.
 *
 * Every span points into the parsed buffer (borrowed). Thread safety: pure
 * functions; any thread. */
#ifndef TN_PROTO_HTTP_PARSER_H
#define TN_PROTO_HTTP_PARSER_H

#include "core/platform.h"

#include "core/buf.h"

#define TN_HTTP_MAX_HEADERS     100
#define TN_HTTP_MAX_EMPTY_LINES 16 /* CRLFs before a request line */

typedef struct {
    tn_iov_t name;
    tn_iov_t value;
} tn_http_header_t;

typedef struct {
    tn_iov_t method;
    tn_iov_t target; /* path and query as sent */
    tn_iov_t path;
    tn_iov_t query; /* after '?', without it; empty when none */
    int minor;      /* HTTP/1.minor */
    /* Valid below nheaders only (the HTTP server leaves the rest
     * unzeroed: it zeroes the fields before and from nheaders on). */
    tn_http_header_t headers[TN_HTTP_MAX_HEADERS];
    uint32_t nheaders;
    int64_t content_length; /* -1: none given */
    bool chunked;
    bool keep_alive;
    bool expect_continue;
    /* When parsing fails: the status to answer and why. */
    int status;
    char errmsg[128];
} tn_http_req_t;

/* Parse a request head from the front of buf. Returns 0 (*consumed = the
 * head's bytes, body not included), TN_ESHORT (incomplete; more bytes
 * needed, and fewer than max_head arrived), or TN_EPROTO (req->status and
 * req->errmsg say why; the connection cannot continue). */
int tn_http_parse_head(const char *buf, size_t len, size_t max_head, tn_http_req_t *req,
                       size_t *consumed);

/* The value of header name (case-insensitive), first occurrence, or NULL. */
const tn_iov_t *tn_http_header(const tn_http_req_t *req, const char *name);
/* How many times header name (case-insensitive) came. */
uint32_t tn_http_header_count(const tn_http_req_t *req, const char *name);

/* Chunked body decoding, incrementally, strictly (RFC 9112 7.1): the
 * size is hex digits; extensions `BWS ";" BWS name [BWS "=" BWS (token |
 * quoted-string)]` are checked and dropped; every line ends in CRLF;
 * trailer lines are field lines. Anything else is malformed. */
#define TN_HTTP_TRAILERS_MAX (64 * 1024)
typedef struct {
    int state;
    uint64_t left;     /* bytes of the current chunk still to come */
    uint64_t total;    /* decoded so far */
    uint32_t line;     /* bytes of the current size/extension/trailer line */
    uint32_t trailers; /* bytes of trailer lines so far */
} tn_http_chunked_t;

void tn_http_chunked_init(tn_http_chunked_t *d);
/* Decode from in (borrowed), appending data to out. *consumed says how
 * much of in was used; *done is set after the last chunk and its
 * trailers (dropped unread, TN_HTTP_TRAILERS_MAX bytes at the most: past
 * it they are malformed). Returns 0, TN_ETOOBIG (the body would pass max_total), TN_EPROTO
 * (malformed) or UV_ENOMEM. */
int tn_http_chunked_decode(tn_http_chunked_t *d, const char *in, size_t len, size_t *consumed,
                           tn_buf_t *out, uint64_t max_total, bool *done);

/* Find query parameter name in query (a=b&c=d) and percent-decode its
 * value (`+` is a space) into out (NUL-terminated). Returns 1 found, 0 not
 * found, TN_ETOOBIG (the value does not fit outlen), UV_EINVAL (a bad
 * escape, or %00: a value holding a NUL is no C string). A parameter
 * given without `=` has the empty value. */
int tn_http_query(tn_iov_t query, const char *name, char *out, size_t outlen);

#endif
