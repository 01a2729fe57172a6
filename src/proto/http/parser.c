/* The HTTP/1.1 request parser. See parser.h for the rules. */
#include "core/platform.h"

#include "proto/http/parser.h"

#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int fail(tn_http_req_t *req, int status, const char *fmt, ...) TN_PRINTF(3, 4);
static int fail(tn_http_req_t *req, int status, const char *fmt, ...)
{
    req->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(req->errmsg, sizeof(req->errmsg), fmt, ap);
    va_end(ap);
    return TN_EPROTO;
}

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Visible characters and obs-text, as a request target or field value. */
static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_vchar(unsigned char c)
{
    return (c > 0x20 && c != 0x7f);
}

static bool iov_ieq(tn_iov_t v, const char *s)
{
    size_t n = strlen(s);
    return v.len == n && strncasecmp(v.base, s, n) == 0;
}

/* Find the end of the line starting at p: returns the index of its LF
 * and sets *eol to the length of the line without CRLF; -1 when no LF
 * yet, -2 for a bare CR or a bare LF (a proxy that ends lines only at
 * CRLF would read another head). */
static long line_end(const char *buf, size_t len, size_t p, size_t *eol)
{
    for (size_t i = p; i < len; i++) {
        if (buf[i] == '\n') {
            if (i == p || buf[i - 1] != '\r')
                return -2;
            *eol = i - 1 - p;
            return (long)i;
        }
        if (buf[i] == '\r' && i + 1 < len && buf[i + 1] != '\n')
            return -2;
    }
    return -1;
}

/* The next element of a comma-separated header value from *i on, its
 * whitespace trimmed; false at the end. Empty elements are skipped. */
static bool list_next(tn_iov_t v, size_t *i, tn_iov_t *elem)
{
    while (*i < v.len) {
        while (*i < v.len && (v.base[*i] == ' ' || v.base[*i] == '\t' || v.base[*i] == ','))
            (*i)++;
        size_t start = *i;
        while (*i < v.len && v.base[*i] != ',')
            (*i)++;
        size_t end = *i;
        while (end > start && (v.base[end - 1] == ' ' || v.base[end - 1] == '\t'))
            end--;
        if (end > start) {
            *elem = tn_iov(v.base + start, end - start);
            return true;
        }
    }
    return false;
}

/* Comma-separated tokens of a header value: does it hold tok? */
static bool has_token(tn_iov_t v, const char *tok)
{
    size_t i = 0;
    tn_iov_t e;
    while (list_next(v, &i, &e))
        if (iov_ieq(e, tok))
            return true;
    return false;
}

/* Whether v is a host with an optional port as Host or an authority may
 * hold (RFC 3986 3.2.2: reg-name, IPv4 or an IP literal in brackets, then
 * ":" port): unreserved, pct-encoded and sub-delims characters, ':', '['
 * and ']'. No userinfo, no space, no path. */
static bool host_valid(tn_iov_t v)
{
    for (size_t i = 0; i < v.len; i++) {
        unsigned char c = (unsigned char)v.base[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("-._~%!$&'()*+,;=:[]", c) != NULL) ||
            c == '\0')
            return false;
    }
    return true;
}

/* The absolute form (RFC 9112 3.2.2), which a server must accept:
 * `http` or `https`, "://", a non-empty authority without userinfo (RFC
 * 9110 4.2.1, 4.2.4), then the path and query that *path receives. */
static bool absolute_path(tn_iov_t target, tn_iov_t *path)
{
    size_t i;
    if (target.len > 7 && strncasecmp(target.base, "http://", 7) == 0)
        i = 7;
    else if (target.len > 8 && strncasecmp(target.base, "https://", 8) == 0)
        i = 8;
    else
        return false;
    size_t host = i;
    while (i < target.len && target.base[i] != '/' && target.base[i] != '?')
        i++;
    if (i == host || !host_valid(tn_iov(target.base + host, i - host)))
        return false;
    *path = tn_iov(target.base + i, target.len - i);
    return true;
}

static int parse_request_line(const char *line, size_t len, tn_http_req_t *req)
{
    size_t i = 0;
    while (i < len && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0 || i >= len || line[i] != ' ')
        return fail(req, 400, "malformed request line");
    req->method = tn_iov(line, i);
    size_t t = ++i;
    while (i < len && line[i] != ' ') {
        if (!is_vchar((unsigned char)line[i]))
            return fail(req, 400, "invalid character in the request target");
        i++;
    }
    if (i == t || i >= len)
        return fail(req, 400, "malformed request line");
    req->target = tn_iov(line + t, i - t);
    tn_iov_t path = req->target;
    if (req->target.len == 1 && line[t] == '*') {
        if (req->method.len != 7 || memcmp(req->method.base, "OPTIONS", 7) != 0)
            return fail(req, 400, "the asterisk form is for OPTIONS only");
    } else if (line[t] != '/' && !absolute_path(req->target, &path)) {
        return fail(req, 400, "the request target must be a path or an http(s) URI");
    }
    i++;
    /* HTTP-version is exactly "HTTP/" DIGIT "." DIGIT and ends the line:
     * anything else there is a malformed line (400), and only a well-formed
     * version other than 1.0 or 1.1 is 505. */
    const char *v = line + i;
    if (len - i != 8 || memcmp(v, "HTTP/", 5) != 0 || !is_digit(v[5]) || v[6] != '.' ||
        !is_digit(v[7]))
        return fail(req, 400, "malformed request line");
    if (v[5] != '1' || v[7] > '1')
        return fail(req, 505, "only HTTP/1.0 and HTTP/1.1 are supported");
    req->minor = v[7] - '0';
    const char *q = memchr(path.base, '?', path.len);
    if (q != NULL) {
        req->path = tn_iov(path.base, (size_t)(q - path.base));
        req->query = tn_iov(q + 1, path.len - req->path.len - 1);
    } else {
        req->path = path;
        req->query = tn_iov(NULL, 0);
    }
    if (req->path.len == 0)
        req->path = tn_iov("/", 1); /* "http://host?q": the path is "/" (RFC 9110 4.2.3) */
    return 0;
}

static int parse_header(const char *line, size_t len, tn_http_req_t *req)
{
    if (line[0] == ' ' || line[0] == '\t')
        return fail(req, 400, "obsolete header line folding");
    size_t i = 0;
    while (i < len && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0 || i >= len || line[i] != ':')
        return fail(req, 400, "malformed header line");
    if (req->nheaders == TN_HTTP_MAX_HEADERS)
        return fail(req, 431, "more than %d header lines", TN_HTTP_MAX_HEADERS);
    tn_iov_t name = tn_iov(line, i);
    i++;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    size_t end = len;
    while (end > i && (line[end - 1] == ' ' || line[end - 1] == '\t'))
        end--;
    for (size_t k = i; k < end; k++) {
        unsigned char c = (unsigned char)line[k];
        if (c != '\t' && (c < 0x20 || c == 0x7f))
            return fail(req, 400, "invalid character in header %.*s", (int)TN_MIN(name.len, 64),
                        name.base);
    }
    tn_http_header_t *h = &req->headers[req->nheaders++];
    h->name = name;
    h->value = tn_iov(line + i, end - i);
    return 0;
}

/* Count the codings of a Transfer-Encoding value (a comma-separated
 * list, empty elements skipped): how many, how many are chunked, and
 * whether the last one is. */
static void codings_read(tn_iov_t v, uint32_t *n, uint32_t *nchunked, bool *last_chunked)
{
    size_t i = 0;
    tn_iov_t e;
    while (list_next(v, &i, &e)) {
        bool chunked = iov_ieq(e, "chunked");
        (*n)++;
        *nchunked += chunked;
        *last_chunked = chunked;
    }
}

/* Content-Length, Transfer-Encoding, Host, Authorization, Connection,
 * Expect. */
static int check_headers(tn_http_req_t *req)
{
    bool host = false, te = false, auth = false, last_chunked = false;
    uint32_t codings = 0, nchunked = 0;
    bool conn_close = false, conn_keep = false;
    for (uint32_t k = 0; k < req->nheaders; k++) {
        tn_http_header_t *h = &req->headers[k];
        if (iov_ieq(h->name, "content-length")) {
            if (h->value.len == 0 || h->value.len > 18)
                return fail(req, 400, "invalid Content-Length");
            int64_t v = 0;
            for (size_t i = 0; i < h->value.len; i++) {
                char c = h->value.base[i];
                if (c < '0' || c > '9')
                    return fail(req, 400, "invalid Content-Length");
                v = v * 10 + (c - '0');
            }
            if (req->content_length >= 0 && req->content_length != v)
                return fail(req, 400, "conflicting Content-Length headers");
            req->content_length = v;
        } else if (iov_ieq(h->name, "transfer-encoding")) {
            /* The codings of every such line, in order (RFC 9110 5.3). */
            te = true;
            codings_read(h->value, &codings, &nchunked, &last_chunked);
        } else if (iov_ieq(h->name, "host")) {
            if (host)
                return fail(req, 400, "more than one Host header");
            if (!host_valid(h->value))
                return fail(req, 400, "the Host header is no host[:port]");
            host = true;
        } else if (iov_ieq(h->name, "authorization")) {
            /* Whose credentials: a proxy in front may have read the other. */
            if (auth)
                return fail(req, 400, "more than one Authorization header");
            auth = true;
        } else if (iov_ieq(h->name, "connection")) {
            conn_close = conn_close || has_token(h->value, "close");
            conn_keep = conn_keep || has_token(h->value, "keep-alive");
        } else if (iov_ieq(h->name, "expect")) {
            if (!iov_ieq(h->value, "100-continue"))
                return fail(req, 417, "unsupported expectation");
            req->expect_continue = true;
        }
    }
    /* RFC 9112 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty
     * framing, and without chunked last (once) no length can be known. */
    if (te && req->minor == 0)
        return fail(req, 400, "Transfer-Encoding in an HTTP/1.0 request");
    if (te && (!last_chunked || nchunked > 1))
        return fail(req, 400, "Transfer-Encoding must end in chunked, applied once");
    if (te && req->content_length >= 0)
        return fail(req, 400, "Content-Length together with Transfer-Encoding");
    if (te && codings > 1)
        return fail(req, 501, "only Transfer-Encoding: chunked is supported");
    if (req->minor == 1 && !host)
        return fail(req, 400, "HTTP/1.1 request without Host");
    req->chunked = te;
    req->keep_alive = req->minor == 1 ? !conn_close : conn_keep && !conn_close;
    if (req->minor == 0)
        req->expect_continue = false;
    return 0;
}

int tn_http_parse_head(const char *buf, size_t len, size_t max_head, tn_http_req_t *req,
                       size_t *consumed)
{
    req->nheaders = 0;
    req->content_length = -1;
    req->chunked = false;
    req->keep_alive = false;
    req->expect_continue = false;
    req->status = 0;
    req->errmsg[0] = '\0';
    size_t limit = TN_MIN(len, max_head);
    size_t p = 0;
    /* Empty lines (CRLF) before a request are allowed (RFC 9112 2.2), a
     * few: each may cost the server a parse of what came so far. */
    while (p + 1 < limit && buf[p] == '\r' && buf[p + 1] == '\n')
        p += 2;
    if (p > 2 * TN_HTTP_MAX_EMPTY_LINES)
        return fail(req, 400, "more than %d empty lines before the request line",
                    TN_HTTP_MAX_EMPTY_LINES);
    size_t eol;
    long lf = line_end(buf, limit, p, &eol);
    if (lf == -2)
        return fail(req, 400, "bare CR or LF in the request line");
    if (lf < 0)
        return len >= max_head ? fail(req, 431, "request head over %zu bytes", max_head)
                               : TN_ESHORT;
    int rc = parse_request_line(buf + p, eol, req);
    if (rc != 0)
        return rc;
    p = (size_t)lf + 1;
    for (;;) {
        lf = line_end(buf, limit, p, &eol);
        if (lf == -2)
            return fail(req, 400, "bare CR or LF in a header line");
        if (lf < 0)
            return len >= max_head ? fail(req, 431, "request head over %zu bytes", max_head)
                                   : TN_ESHORT;
        if (eol == 0) {
            p = (size_t)lf + 1;
            break;
        }
        rc = parse_header(buf + p, eol, req);
        if (rc != 0)
            return rc;
        p = (size_t)lf + 1;
    }
    rc = check_headers(req);
    if (rc != 0)
        return rc;
    *consumed = p;
    return 0;
}

const tn_iov_t *tn_http_header(const tn_http_req_t *req, const char *name)
{
    for (uint32_t k = 0; k < req->nheaders; k++)
        if (iov_ieq(req->headers[k].name, name))
            return &req->headers[k].value;
    return NULL;
}

uint32_t tn_http_header_count(const tn_http_req_t *req, const char *name)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < req->nheaders; k++)
        n += iov_ieq(req->headers[k].name, name);
    return n;
}

/* --- chunked bodies ---------------------------------------------------------- */

/* RFC 9112 7.1, strictly: every line ends in CRLF, the size is hex digits
 * alone, an extension is `BWS ";" BWS name [BWS "=" BWS (token |
 * quoted-string)]`, a trailer line is a field line. Anything else is
 * malformed: a front proxy could read other chunk sizes from it. */
enum {
    CH_SIZE = 0,  /* reading hex digits */
    CH_SIZE_BWS,  /* whitespace after them: a ';' must follow */
    CH_EXT_NAME0, /* before an extension's name */
    CH_EXT_NAME,
    CH_EXT_NAME_BWS, /* after the name: '=', ';' or more whitespace */
    CH_EXT_VAL0,     /* after '=' */
    CH_EXT_VAL,      /* a token value */
    CH_EXT_QUOTED,   /* a quoted-string value */
    CH_EXT_QPAIR,    /* after a backslash in it */
    CH_EXT_VAL_BWS,  /* after a value: ';' or the line's end */
    CH_SIZE_LF,      /* the LF ending the size line */
    CH_DATA,         /* chunk bytes */
    CH_DATA_CR,      /* the CRLF after them */
    CH_DATA_LF,
    CH_TRAILER, /* the start of a trailer line, or of the final CRLF */
    CH_TR_NAME,
    CH_TR_VALUE,
    CH_TR_LF, /* the LF ending a trailer line */
    CH_END_LF,
    CH_DONE,
};

#define CHUNK_LINE_MAX 4096

void tn_http_chunked_init(tn_http_chunked_t *d)
{
    memset(d, 0, sizeof(*d));
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The next state of a size line at byte c past the digits (CH_SIZE_BWS up
 * to CH_EXT_VAL_BWS), or -1 when c cannot come there. */
static int size_line_next(int state, unsigned char c)
{
    bool ws = c == ' ' || c == '\t';
    switch (state) {
    case CH_SIZE:
        return ws ? CH_SIZE_BWS : c == ';' ? CH_EXT_NAME0 : c == '\r' ? CH_SIZE_LF : -1;
    case CH_SIZE_BWS:
        return ws ? CH_SIZE_BWS : c == ';' ? CH_EXT_NAME0 : -1;
    case CH_EXT_NAME0:
        return ws ? CH_EXT_NAME0 : is_tchar(c) ? CH_EXT_NAME : -1;
    case CH_EXT_NAME:
        if (is_tchar(c))
            return CH_EXT_NAME;
        return ws          ? CH_EXT_NAME_BWS
               : c == '='  ? CH_EXT_VAL0
               : c == ';'  ? CH_EXT_NAME0
               : c == '\r' ? CH_SIZE_LF
                           : -1;
    case CH_EXT_NAME_BWS:
        return ws ? CH_EXT_NAME_BWS : c == '=' ? CH_EXT_VAL0 : c == ';' ? CH_EXT_NAME0 : -1;
    case CH_EXT_VAL0:
        return ws ? CH_EXT_VAL0 : c == '"' ? CH_EXT_QUOTED : is_tchar(c) ? CH_EXT_VAL : -1;
    case CH_EXT_VAL:
        if (is_tchar(c))
            return CH_EXT_VAL;
        return ws ? CH_EXT_VAL_BWS : c == ';' ? CH_EXT_NAME0 : c == '\r' ? CH_SIZE_LF : -1;
    case CH_EXT_QUOTED: /* qdtext: HTAB, SP, VCHAR but '"' and '\\', obs-text */
        if (c == '"')
            return CH_EXT_VAL_BWS;
        if (c == '\\')
            return CH_EXT_QPAIR;
        return ws || (c > 0x20 && c != 0x7f) ? CH_EXT_QUOTED : -1;
    case CH_EXT_QPAIR:
        return ws || (c > 0x20 && c != 0x7f) ? CH_EXT_QUOTED : -1;
    case CH_EXT_VAL_BWS:
        return ws ? CH_EXT_VAL_BWS : c == ';' ? CH_EXT_NAME0 : c == '\r' ? CH_SIZE_LF : -1;
    default:
        return -1;
    }
}

/* The next state of a trailer section at byte c, or -1. */
static int trailer_next(int state, unsigned char c)
{
    switch (state) {
    case CH_TRAILER:
        return c == '\r' ? CH_END_LF : is_tchar(c) ? CH_TR_NAME : -1;
    case CH_TR_NAME:
        return is_tchar(c) ? CH_TR_NAME : c == ':' ? CH_TR_VALUE : -1;
    case CH_TR_VALUE:
        if (c == '\r')
            return CH_TR_LF;
        return c == '\t' || (c >= 0x20 && c != 0x7f) ? CH_TR_VALUE : -1;
    case CH_TR_LF:
        return c == '\n' ? CH_TRAILER : -1;
    case CH_END_LF:
        return c == '\n' ? CH_DONE : -1;
    default:
        return -1;
    }
}

int tn_http_chunked_decode(tn_http_chunked_t *d, const char *in, size_t len, size_t *consumed,
                           tn_buf_t *out, uint64_t max_total, bool *done)
{
    size_t i = 0;
    *done = d->state == CH_DONE;
    while (i < len && d->state != CH_DONE) {
        unsigned char c = (unsigned char)in[i];
        if (d->state == CH_SIZE) {
            int v = hexval((char)c);
            if (v >= 0) {
                if (d->line >= 15) /* 2^60 bytes is plenty */
                    return TN_EPROTO;
                d->left = d->left * 16 + (uint64_t)v;
                d->line++;
                i++;
                continue;
            }
            if (d->line == 0)
                return TN_EPROTO; /* no size */
        }
        switch (d->state) {
        case CH_SIZE: /* the rest of the size line */
        case CH_SIZE_BWS:
        case CH_EXT_NAME0:
        case CH_EXT_NAME:
        case CH_EXT_NAME_BWS:
        case CH_EXT_VAL0:
        case CH_EXT_VAL:
        case CH_EXT_QUOTED:
        case CH_EXT_QPAIR:
        case CH_EXT_VAL_BWS: {
            int next = size_line_next(d->state, c);
            if (next < 0 || ++d->line > CHUNK_LINE_MAX)
                return TN_EPROTO;
            d->state = next;
            i++;
            break;
        }
        case CH_SIZE_LF:
            if (c != '\n')
                return TN_EPROTO;
            i++;
            d->line = 0;
            if (d->left > max_total - TN_MIN(max_total, d->total))
                return TN_ETOOBIG;
            d->state = d->left == 0 ? CH_TRAILER : CH_DATA;
            break;
        case CH_DATA: {
            size_t n = (size_t)TN_MIN((uint64_t)(len - i), d->left);
            int rc = tn_buf_append(out, in + i, n);
            if (rc != 0)
                return rc;
            i += n;
            d->left -= n;
            d->total += n;
            if (d->left == 0)
                d->state = CH_DATA_CR;
            break;
        }
        case CH_DATA_CR:
        case CH_DATA_LF:
            if (c != (d->state == CH_DATA_CR ? '\r' : '\n'))
                return TN_EPROTO;
            i++;
            d->state = d->state == CH_DATA_CR ? CH_DATA_LF : CH_SIZE;
            break;
        default: {
            /* Trailer lines until an empty one; their content is dropped,
             * their length bounded (no end of them would keep a request
             * going). */
            int next = trailer_next(d->state, c);
            if (next < 0 || ++d->trailers > TN_HTTP_TRAILERS_MAX)
                return TN_EPROTO;
            d->line = next == CH_TRAILER ? 0 : d->line + 1;
            if (d->line > CHUNK_LINE_MAX)
                return TN_EPROTO;
            d->state = next;
            i++;
            break;
        }
        }
    }
    *consumed = i;
    *done = d->state == CH_DONE;
    return 0;
}

/* --- query parameters -------------------------------------------------------- */

int tn_http_query(tn_iov_t query, const char *name, char *out, size_t outlen)
{
    size_t nlen = strlen(name);
    size_t i = 0;
    while (i <= query.len && query.len > 0) {
        size_t start = i;
        while (i < query.len && query.base[i] != '&')
            i++;
        tn_iov_t pair = tn_iov(query.base + start, i - start);
        const char *eq = memchr(pair.base, '=', pair.len);
        size_t klen = eq != NULL ? (size_t)(eq - pair.base) : pair.len;
        if (klen == nlen && memcmp(pair.base, name, nlen) == 0) {
            const char *v = eq != NULL ? eq + 1 : pair.base + pair.len;
            size_t vlen = eq != NULL ? pair.len - klen - 1 : 0;
            size_t o = 0;
            for (size_t k = 0; k < vlen; k++) {
                char c = v[k];
                if (c == '+') {
                    c = ' ';
                } else if (c == '%') {
                    if (k + 2 >= vlen)
                        return UV_EINVAL;
                    int hi = hexval(v[k + 1]), lo = hexval(v[k + 2]);
                    /* %00 too: out is a C string, and a value cut at its
                     * NUL would be another value than the one sent. */
                    if (hi < 0 || lo < 0 || hi + lo == 0)
                        return UV_EINVAL;
                    c = (char)(hi * 16 + lo);
                    k += 2;
                }
                if (o + 1 >= outlen)
                    return TN_ETOOBIG;
                out[o++] = c;
            }
            if (outlen == 0)
                return TN_ETOOBIG;
            out[o] = '\0';
            return 1;
        }
        i++;
    }
    return 0;
}
