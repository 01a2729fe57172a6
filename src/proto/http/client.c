/* The blocking HTTP/1.1 client (see client.h): the response parser, URL
 * parsing, and connections over TCP or TLS with poll-bounded waits.
 *
 * DESIGN (one request):
 *   1. If the kept connection is gone (never opened, closed by the last
 *      answer, or readable at rest: the server closed it), open a new one:
 *      resolve, connect each address in turn (non-blocking, poll-bounded),
 *      and for https run the handshake with SNI, chain verification and the
 *      host check (SSL_set1_host, or the IP address for a literal).
 *   2. Write the head (with Basic credentials and Content-Length) and the
 *      body.
 *   3. Read and feed the parser until it says complete; the body goes to
 *      memory or to the caller's fd.
 *   4. Keep the connection if the answer allows it and nothing followed it.
 * Failures: a reused connection that fails in step 2 or closes in step 3
 * before any answer byte is reopened and the request sent once more; any
 * other failure closes the connection and is reported with a reason.
 *
 * Parser states: HEAD (bytes gathered into `line` until an empty line),
 * BODY_LEN (left bytes), BODY_CLOSE (until EOF), CHUNK_SIZE (a size line),
 * CHUNK_DATA (left bytes), CHUNK_END (the CRLF after chunk data), TRAILER
 * (lines until an empty one), DONE. */
#include "core/platform.h"

#include "proto/http/client.h"

#include "core/alloc.h"
#include "core/err.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
    S_HEAD,
    S_BODY_LEN,
    S_BODY_CLOSE,
    S_CHUNK_SIZE,
    S_CHUNK_DATA,
    S_CHUNK_END,
    S_TRAILER,
    S_DONE
};

/* --- the response parser ------------------------------------------------------ */

void tn_hc_parser_init(tn_hc_parser_t *p, bool head_request, tn_hc_body_cb body_cb, void *ud)
{
    memset(p, 0, sizeof(*p));
    tn_buf_init(&p->line);
    p->head_request = head_request;
    p->body_cb = body_cb;
    p->ud = ud;
    p->content_length = -1;
    p->state = S_HEAD;
}

void tn_hc_parser_fini(tn_hc_parser_t *p)
{
    tn_buf_fini(&p->line);
}

static int proto_err(tn_hc_parser_t *p, const char *fmt, ...) TN_PRINTF(2, 3);
static int proto_err(tn_hc_parser_t *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->errmsg, sizeof(p->errmsg), fmt, ap);
    va_end(ap);
    return TN_EPROTO;
}

static bool span_eq(const char *s, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n == l && strncasecmp(s, lit, l) == 0;
}

static void trim(const char **s, size_t *n)
{
    while (*n > 0 && (**s == ' ' || **s == '\t')) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

/* Whether a comma-separated header value holds token tok (any case). */
static bool has_token(const char *v, size_t n, const char *tok)
{
    while (n > 0) {
        const char *comma = memchr(v, ',', n);
        size_t l = comma ? (size_t)(comma - v) : n;
        const char *t = v;
        size_t tl = l;
        trim(&t, &tl);
        if (span_eq(t, tl, tok))
            return true;
        if (comma == NULL)
            break;
        v = comma + 1;
        n -= l + 1;
    }
    return false;
}

/* The last coding of a Transfer-Encoding value is chunked. */
static bool last_is_chunked(const char *v, size_t n)
{
    const char *comma = NULL;
    for (size_t i = 0; i < n; i++)
        if (v[i] == ',')
            comma = v + i;
    const char *t = comma ? comma + 1 : v;
    size_t tl = n - (size_t)(t - v);
    trim(&t, &tl);
    return span_eq(t, tl, "chunked");
}

static void copy_value(char *dst, size_t cap, const char *v, size_t n)
{
    if (n >= cap) {
        dst[0] = '\0';
        return;
    }
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* Parse the gathered head in p->line (ending with its empty line). */
static int parse_head(tn_hc_parser_t *p)
{
    const char *s = tn_buf_data(&p->line);
    size_t n = tn_buf_size(&p->line);
    const char *eol = memchr(s, '\n', n);
    size_t sl = (size_t)(eol - s);
    if (sl > 0 && s[sl - 1] == '\r')
        sl--;
    /* HTTP/1.x SP 3DIGIT [SP reason] */
    if (sl < 12 || memcmp(s, "HTTP/1.", 7) != 0 || s[7] < '0' || s[7] > '9' || s[8] != ' ' ||
        s[9] < '1' || s[9] > '5' || s[10] < '0' || s[10] > '9' || s[11] < '0' || s[11] > '9' ||
        (sl > 12 && s[12] != ' '))
        return proto_err(p, "bad status line \"%.*s\"", (int)TN_MIN(sl, 60), s);
    p->minor = s[7] - '0';
    p->status = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
    p->keep_alive = p->minor >= 1;
    p->content_length = -1;
    p->chunked = false;
    p->retry_after[0] = '\0';
    p->content_type[0] = '\0';
    bool te = false;
    const char *line = eol + 1;
    const char *end = s + n;
    while (line < end) {
        const char *le = memchr(line, '\n', (size_t)(end - line));
        size_t ll = (size_t)(le - line);
        if (ll > 0 && line[ll - 1] == '\r')
            ll--;
        if (ll == 0)
            break;
        const char *colon = memchr(line, ':', ll);
        if (colon == NULL || colon == line || line[0] == ' ' || line[0] == '\t')
            return proto_err(p, "bad header line \"%.*s\"", (int)TN_MIN(ll, 60), line);
        size_t nl = (size_t)(colon - line);
        const char *v = colon + 1;
        size_t vl = ll - nl - 1;
        trim(&v, &vl);
        if (span_eq(line, nl, "content-length")) {
            if (vl == 0 || vl > 18)
                return proto_err(p, "bad Content-Length \"%.*s\"", (int)TN_MIN(vl, 30), v);
            int64_t cl = 0;
            for (size_t i = 0; i < vl; i++) {
                if (v[i] < '0' || v[i] > '9')
                    return proto_err(p, "bad Content-Length \"%.*s\"", (int)TN_MIN(vl, 30), v);
                cl = cl * 10 + (v[i] - '0');
            }
            if (p->content_length >= 0 && p->content_length != cl)
                return proto_err(p, "two different Content-Length headers");
            p->content_length = cl;
        } else if (span_eq(line, nl, "transfer-encoding")) {
            te = true;
            p->chunked = last_is_chunked(v, vl);
        } else if (span_eq(line, nl, "connection")) {
            if (has_token(v, vl, "close"))
                p->keep_alive = false;
            else if (has_token(v, vl, "keep-alive") && p->minor == 0)
                p->keep_alive = true;
        } else if (span_eq(line, nl, "retry-after")) {
            copy_value(p->retry_after, sizeof(p->retry_after), v, vl);
        } else if (span_eq(line, nl, "content-type")) {
            copy_value(p->content_type, sizeof(p->content_type), v, vl);
        }
        line = le + 1;
    }
    if (te) {
        /* RFC 9112 6.1: Transfer-Encoding overrides Content-Length, and such
         * a message must not be reused; a coding other than chunked last
         * runs to the close. */
        if (p->content_length >= 0)
            p->keep_alive = false;
        p->content_length = -1;
        if (!p->chunked)
            p->keep_alive = false;
    }
    return 0;
}

/* Start the body once the head is parsed. */
static void begin_body(tn_hc_parser_t *p)
{
    if (p->head_request || p->status == 204 || p->status == 304) {
        p->state = S_DONE;
    } else if (p->chunked) {
        p->state = S_CHUNK_SIZE;
    } else if (p->content_length >= 0) {
        p->left = (uint64_t)p->content_length;
        p->state = p->left > 0 ? S_BODY_LEN : S_DONE;
    } else {
        p->keep_alive = false;
        p->state = S_BODY_CLOSE;
    }
}

/* Gather one line (up to max bytes) into p->line. Returns true when its LF
 * arrived; *i advances over what was taken. */
static int gather_line(tn_hc_parser_t *p, const char *buf, size_t len, size_t *i, size_t max,
                       bool *got)
{
    const char *nl = memchr(buf + *i, '\n', len - *i);
    size_t take = nl ? (size_t)(nl - (buf + *i)) + 1 : len - *i;
    if (tn_buf_size(&p->line) + take > max)
        return proto_err(p, "%s longer than %zu bytes",
                         p->state == S_CHUNK_SIZE ? "chunk-size line" : "trailer line", max);
    int rc = tn_buf_append(&p->line, buf + *i, take);
    if (rc != 0)
        return rc;
    *i += take;
    *got = nl != NULL;
    return 0;
}

static int parse_chunk_size(tn_hc_parser_t *p)
{
    const char *s = tn_buf_data(&p->line);
    size_t n = tn_buf_size(&p->line) - 1; /* without LF */
    if (n > 0 && s[n - 1] == '\r')
        n--;
    uint64_t v = 0;
    size_t i = 0;
    for (; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            break;
        if (v > (UINT64_MAX >> 4) || i >= 15)
            return proto_err(p, "chunk size too large");
        v = (v << 4) | (uint64_t)d;
    }
    /* Extensions follow a ';' (optionally after whitespace); ignored. */
    size_t j = i;
    while (j < n && (s[j] == ' ' || s[j] == '\t'))
        j++;
    if (i == 0 || (j < n && s[j] != ';'))
        return proto_err(p, "bad chunk-size line \"%.*s\"", (int)TN_MIN(n, 40), s);
    p->left = v;
    return 0;
}

static int emit(tn_hc_parser_t *p, const char *data, size_t n)
{
    return p->body_cb && n > 0 ? p->body_cb(p->ud, data, n) : 0;
}

int tn_hc_parser_feed(tn_hc_parser_t *p, const char *buf, size_t len, size_t *used)
{
    size_t i = 0;
    int rc = 0;
    while (p->state != S_DONE) {
        if (i == len && p->state != S_HEAD) {
            *used = i;
            return TN_ESHORT;
        }
        switch (p->state) {
        case S_HEAD: {
            /* Take bytes through the first empty line. line_start is where
             * the current line began inside p->line. */
            bool ended = false;
            while (i < len) {
                char c = buf[i++];
                if ((rc = tn_buf_append(&p->line, &c, 1)) != 0)
                    return rc;
                size_t sz = tn_buf_size(&p->line);
                if (sz > TN_HC_MAX_HEAD)
                    return proto_err(p, "response head longer than %d bytes", TN_HC_MAX_HEAD);
                if (c == '\n') {
                    const char *b = tn_buf_data(&p->line);
                    size_t ll = sz - p->line_start; /* with the LF */
                    bool empty = ll == 1 || (ll == 2 && b[p->line_start] == '\r');
                    if (p->line_start == 0 && empty)
                        return proto_err(p, "empty line where the status line belongs");
                    p->line_start = sz;
                    if (empty) {
                        ended = true;
                        break;
                    }
                }
            }
            if (!ended) {
                *used = i;
                return TN_ESHORT;
            }
            if ((rc = parse_head(p)) != 0)
                return rc;
            tn_buf_reset(&p->line);
            p->line_start = 0;
            if (p->status >= 100 && p->status < 200) {
                if (p->status == 101)
                    return proto_err(p, "unexpected 101 Switching Protocols");
                break; /* an interim answer: the real one follows */
            }
            p->head_done = true;
            begin_body(p);
            break;
        }
        case S_BODY_LEN: {
            size_t n = (size_t)TN_MIN((uint64_t)(len - i), p->left);
            if ((rc = emit(p, buf + i, n)) != 0)
                return rc;
            i += n;
            p->left -= n;
            if (p->left == 0)
                p->state = S_DONE;
            break;
        }
        case S_BODY_CLOSE:
            if ((rc = emit(p, buf + i, len - i)) != 0)
                return rc;
            i = len;
            break;
        case S_CHUNK_SIZE: {
            bool got = false;
            if ((rc = gather_line(p, buf, len, &i, TN_HC_MAX_CHUNK_LINE, &got)) != 0)
                return rc;
            if (!got)
                break;
            rc = parse_chunk_size(p);
            tn_buf_reset(&p->line);
            if (rc != 0)
                return rc;
            p->state = p->left > 0 ? S_CHUNK_DATA : S_TRAILER;
            break;
        }
        case S_CHUNK_DATA: {
            size_t n = (size_t)TN_MIN((uint64_t)(len - i), p->left);
            if ((rc = emit(p, buf + i, n)) != 0)
                return rc;
            i += n;
            p->left -= n;
            if (p->left == 0)
                p->state = S_CHUNK_END;
            break;
        }
        case S_CHUNK_END:
        case S_TRAILER: {
            bool got = false;
            if ((rc = gather_line(p, buf, len, &i, TN_HC_MAX_CHUNK_LINE, &got)) != 0)
                return rc;
            if (!got)
                break;
            const char *s = tn_buf_data(&p->line);
            size_t n = tn_buf_size(&p->line);
            bool empty = n == 1 || (n == 2 && s[0] == '\r');
            tn_buf_reset(&p->line);
            if (p->state == S_CHUNK_END) {
                if (!empty)
                    return proto_err(p, "chunk data longer than its size");
                p->state = S_CHUNK_SIZE;
            } else if (empty) {
                p->state = S_DONE;
            }
            break;
        }
        default:
            return proto_err(p, "parser in an unknown state");
        }
    }
    *used = i;
    return 0;
}

int tn_hc_parser_eof(tn_hc_parser_t *p)
{
    switch (p->state) {
    case S_DONE:
    case S_BODY_CLOSE:
        p->state = S_DONE;
        return 0;
    case S_HEAD:
        return proto_err(p, tn_buf_size(&p->line) == 0 ? "connection closed before any answer"
                                                       : "connection closed inside the head");
    case S_BODY_LEN:
        return proto_err(p, "connection closed after %" PRIu64 " of %" PRId64 " body bytes",
                         (uint64_t)p->content_length - p->left, p->content_length);
    default:
        return proto_err(p, "connection closed inside the chunked body");
    }
}

/* --- URLs ------------------------------------------------------------------------ */

int tn_hc_url_parse(const char *url, tn_hc_url_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    const char *rest;
    if (strncasecmp(url, "http://", 7) == 0) {
        rest = url + 7;
    } else if (strncasecmp(url, "https://", 8) == 0) {
        out->tls = true;
        rest = url + 8;
    } else {
        tn_errbuf(err, errlen, "URL %s: must start with http:// or https://", url);
        return UV_EINVAL;
    }
    size_t alen = strcspn(rest, "/?#");
    const char *path = rest + alen;
    if (memchr(rest, '@', alen) != NULL) {
        tn_errbuf(err, errlen, "URL %s: credentials in the URL are not accepted", url);
        return UV_EINVAL;
    }
    if (*path == '?' || *path == '#' || strpbrk(path, "?#") != NULL) {
        tn_errbuf(err, errlen, "URL %s: a base URL takes no query or fragment", url);
        return UV_EINVAL;
    }
    const char *host = rest, *port = NULL;
    size_t hlen;
    if (alen > 0 && rest[0] == '[') {
        const char *close = memchr(rest, ']', alen);
        if (close == NULL) {
            tn_errbuf(err, errlen, "URL %s: unclosed '[' in the host", url);
            return UV_EINVAL;
        }
        host = rest + 1;
        hlen = (size_t)(close - host);
        if (close + 1 < rest + alen) {
            if (close[1] != ':') {
                tn_errbuf(err, errlen, "URL %s: junk after the IPv6 address", url);
                return UV_EINVAL;
            }
            port = close + 2;
        }
    } else {
        const char *colon = memchr(rest, ':', alen);
        hlen = colon ? (size_t)(colon - rest) : alen;
        port = colon ? colon + 1 : NULL;
    }
    if (hlen == 0 || hlen >= sizeof(out->host)) {
        tn_errbuf(err, errlen, "URL %s: %s host", url, hlen == 0 ? "no" : "too long a");
        return UV_EINVAL;
    }
    memcpy(out->host, host, hlen);
    if (port != NULL) {
        size_t pl = (size_t)(rest + alen - port);
        long v = 0;
        for (size_t i = 0; i < pl; i++) {
            if (port[i] < '0' || port[i] > '9' || v > 65535)
                break;
            v = v * 10 + (port[i] - '0');
            if (i + 1 == pl && v >= 1 && v <= 65535) {
                snprintf(out->port, sizeof(out->port), "%ld", v);
            }
        }
        if (out->port[0] == '\0') {
            tn_errbuf(err, errlen, "URL %s: bad port \"%.*s\" (1 to 65535)", url, (int)pl, port);
            return UV_EINVAL;
        }
    } else {
        snprintf(out->port, sizeof(out->port), "%s", out->tls ? "443" : "80");
    }
    snprintf(out->hostport, sizeof(out->hostport), "%.*s", (int)alen, rest);
    size_t pl = strlen(path);
    while (pl > 0 && path[pl - 1] == '/')
        pl--;
    if (pl >= sizeof(out->prefix)) {
        tn_errbuf(err, errlen, "URL %s: path too long", url);
        return UV_EINVAL;
    }
    memcpy(out->prefix, path, pl);
    return 0;
}

/* --- connections ------------------------------------------------------------------ */

struct tn_hc_s {
    tn_hc_url_t url;
    int timeout_ms;
    size_t max_body;
    char *auth;    /* "Authorization: Basic ...\r\n" or NULL */
    char *headers; /* extra lines or NULL */
    SSL_CTX *ctx;  /* https only */
    int fd;        /* -1: not connected */
    SSL *ssl;
    bool reused; /* the connection carried an earlier request */
    char rbuf[65536];
};

const tn_hc_url_t *tn_hc_url(const tn_hc_t *h)
{
    return &h->url;
}

/* The OpenSSL error queue's first entry as text ("" if none), cleared. */
static void ssl_errstr(char *out, size_t cap)
{
    unsigned long e = ERR_get_error();
    if (e == 0)
        snprintf(out, cap, "unknown error");
    else
        ERR_error_string_n(e, out, cap);
    ERR_clear_error();
}

int tn_hc_new(const char *base_url, const tn_hc_opts_t *o, tn_hc_t **out, char *err, size_t errlen)
{
    tn_hc_t *h = tn_malloc(sizeof(*h));
    if (h == NULL)
        return UV_ENOMEM;
    memset(h, 0, sizeof(*h));
    h->fd = -1;
    int rc = tn_hc_url_parse(base_url, &h->url, err, errlen);
    if (rc != 0)
        goto err_after_alloc;
    h->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
    h->max_body = o->max_body > 0 ? o->max_body : 64 * TN_MIB;
    rc = UV_ENOMEM;
    if (o->user != NULL) {
        const char *pw = o->password ? o->password : "";
        size_t cl = strlen(o->user) + 1 + strlen(pw);
        char *cred = tn_malloc(cl + 1);
        size_t cap = 4 * ((cl + 2) / 3) + 40;
        h->auth = tn_malloc(cap);
        if (cred == NULL || h->auth == NULL) {
            tn_free(cred);
            goto err_after_alloc;
        }
        snprintf(cred, cl + 1, "%s:%s", o->user, pw);
        memcpy(h->auth, "Authorization: Basic ", 21);
        int bl =
            EVP_EncodeBlock((unsigned char *)h->auth + 21, (const unsigned char *)cred, (int)cl);
        memcpy(h->auth + 21 + bl, "\r\n", 3);
        OPENSSL_cleanse(cred, cl);
        tn_free(cred);
    }
    if (o->headers != NULL && (h->headers = tn_strdup(o->headers)) == NULL)
        goto err_after_alloc;
    if (h->url.tls) {
        h->ctx = SSL_CTX_new(TLS_client_method());
        if (h->ctx == NULL)
            goto err_after_alloc;
        SSL_CTX_set_min_proto_version(h->ctx, TLS1_2_VERSION);
        SSL_CTX_set_verify(h->ctx, SSL_VERIFY_PEER, NULL);
        int ok = o->ca_file != NULL ? SSL_CTX_load_verify_locations(h->ctx, o->ca_file, NULL)
                                    : SSL_CTX_set_default_verify_paths(h->ctx);
        if (ok != 1) {
            char e[160];
            ssl_errstr(e, sizeof(e));
            if (o->ca_file != NULL)
                tn_errbuf(err, errlen, "cannot load CA file %s: %s", o->ca_file, e);
            else
                tn_errbuf(err, errlen, "cannot load the system's CA store: %s", e);
            rc = TN_ECONFIG;
            goto err_after_alloc;
        }
    }
    *out = h;
    return 0;

err_after_alloc:
    tn_hc_free(h);
    return rc;
}

static void conn_close(tn_hc_t *h)
{
    if (h->ssl != NULL) {
        SSL_free(h->ssl);
        h->ssl = NULL;
    }
    if (h->fd >= 0) {
        close(h->fd);
        h->fd = -1;
    }
    h->reused = false;
}

void tn_hc_free(tn_hc_t *h)
{
    if (h == NULL)
        return;
    conn_close(h);
    if (h->ctx != NULL)
        SSL_CTX_free(h->ctx);
    if (h->auth != NULL) {
        OPENSSL_cleanse(h->auth, strlen(h->auth));
        tn_free(h->auth);
    }
    tn_free(h->headers);
    tn_free(h);
}

/* Wait until fd is ready for events, at most the timeout. 0, UV_ETIMEDOUT,
 * or the poll error. */
static int wait_fd(tn_hc_t *h, short events)
{
    struct pollfd pfd = {.fd = h->fd, .events = events};
    for (;;) {
        int n = poll(&pfd, 1, h->timeout_ms);
        if (n > 0)
            return 0;
        if (n == 0)
            return UV_ETIMEDOUT;
        if (errno != EINTR)
            return tn_err_from_errno(errno);
    }
}

static int connect_one(tn_hc_t *h, const struct addrinfo *ai)
{
    h->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (h->fd < 0)
        return tn_err_from_errno(errno);
    int one = 1;
    setsockopt(h->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(h->fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return 0;
    if (errno != EINPROGRESS)
        return tn_err_from_errno(errno);
    int rc = wait_fd(h, POLLOUT);
    if (rc != 0)
        return rc;
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    if (getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
        return tn_err_from_errno(errno);
    return soerr == 0 ? 0 : tn_err_from_errno(soerr);
}

static bool is_ip_literal(const char *host)
{
    unsigned char a[16];
    return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

/* Run the TLS handshake on the connected fd. */
static int handshake(tn_hc_t *h, char *err, size_t errlen)
{
    h->ssl = SSL_new(h->ctx);
    if (h->ssl == NULL || SSL_set_fd(h->ssl, h->fd) != 1)
        return UV_ENOMEM;
    if (is_ip_literal(h->url.host)) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(h->ssl);
        if (X509_VERIFY_PARAM_set1_ip_asc(vp, h->url.host) != 1)
            return UV_ENOMEM;
    } else {
        SSL_set_tlsext_host_name(h->ssl, h->url.host);
        if (SSL_set1_host(h->ssl, h->url.host) != 1)
            return UV_ENOMEM;
    }
    for (;;) {
        ERR_clear_error();
        int r = SSL_connect(h->ssl);
        if (r == 1)
            return 0;
        int e = SSL_get_error(h->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            int rc = wait_fd(h, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT);
            if (rc == UV_ETIMEDOUT) {
                tn_errbuf(err, errlen, "TLS handshake timed out after %d ms", h->timeout_ms);
                return rc;
            }
            if (rc != 0)
                return rc;
            continue;
        }
        long vr = SSL_get_verify_result(h->ssl);
        if (vr != X509_V_OK) {
            tn_errbuf(err, errlen, "TLS: certificate verify failed: %s",
                      X509_verify_cert_error_string(vr));
        } else {
            char es[160];
            ssl_errstr(es, sizeof(es));
            tn_errbuf(err, errlen, "TLS handshake failed: %s",
                      e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 ? "connection closed" : es);
        }
        return TN_EPROTO;
    }
}

static int conn_open(tn_hc_t *h, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG};
    struct addrinfo *res = NULL;
    int g = getaddrinfo(h->url.host, h->url.port, &hints, &res);
    if (g != 0) {
        tn_errbuf(err, errlen, "cannot resolve %s: %s", h->url.host, gai_strerror(g));
        return UV_EAI_NONAME;
    }
    int rc = UV_ECONNREFUSED;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        rc = connect_one(h, ai);
        if (rc == 0)
            break;
        conn_close(h);
    }
    freeaddrinfo(res);
    if (rc != 0) {
        if (rc == UV_ETIMEDOUT)
            tn_errbuf(err, errlen, "connect timed out after %d ms", h->timeout_ms);
        else
            tn_errbuf(err, errlen, "%s", uv_strerror(rc));
        return rc;
    }
    if (h->ctx != NULL && (rc = handshake(h, err, errlen)) != 0) {
        if (rc == UV_ENOMEM)
            tn_errbuf(err, errlen, "out of memory setting up TLS");
        conn_close(h);
        return rc;
    }
    return 0;
}

/* Whether a kept connection is still usable: not readable at rest (a
 * readable idle connection is closed, or holds bytes nobody asked for). */
static bool conn_alive(tn_hc_t *h)
{
    struct pollfd pfd = {.fd = h->fd, .events = POLLIN};
    return poll(&pfd, 1, 0) == 0;
}

static int send_all(tn_hc_t *h, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w;
        if (h->ssl != NULL) {
            ERR_clear_error();
            int r = SSL_write(h->ssl, p, (int)TN_MIN(n, (size_t)1 << 30));
            if (r > 0) {
                w = r;
            } else {
                int e = SSL_get_error(h->ssl, r);
                if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
                    return UV_EPIPE;
                int rc = wait_fd(h, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT);
                if (rc != 0)
                    return rc;
                continue;
            }
        } else {
            w = send(h->fd, p, n, MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK)
                    return tn_err_from_errno(errno);
                int rc = wait_fd(h, POLLOUT);
                if (rc != 0)
                    return rc;
                continue;
            }
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Read what is there (waiting at most the timeout). >0 bytes, 0 at EOF, or
 * a negative code. */
static ssize_t recv_some(tn_hc_t *h, char *err, size_t errlen)
{
    for (;;) {
        if (h->ssl != NULL) {
            ERR_clear_error();
            int r = SSL_read(h->ssl, h->rbuf, (int)sizeof(h->rbuf));
            if (r > 0)
                return r;
            int e = SSL_get_error(h->ssl, r);
            if (e == SSL_ERROR_ZERO_RETURN)
                return 0;
            if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
                return 0; /* closed without close_notify: EOF (the parser judges) */
            if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
                char es[160];
                ssl_errstr(es, sizeof(es));
                tn_errbuf(err, errlen, "TLS read failed: %s", es);
                return TN_EPROTO;
            }
            int rc = wait_fd(h, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT);
            if (rc != 0)
                return rc;
        } else {
            ssize_t r = recv(h->fd, h->rbuf, sizeof(h->rbuf), 0);
            if (r >= 0)
                return r;
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return tn_err_from_errno(errno);
            int rc = wait_fd(h, POLLIN);
            if (rc != 0)
                return rc;
        }
    }
}

typedef struct {
    tn_hc_t *h;
    tn_hc_parser_t *p;
    tn_buf_t *mem;
    int fd;
    uint64_t streamed;
    int write_err; /* errno-based code when the fd write failed */
} sink_t;

static int on_body(void *ud, const char *data, size_t len)
{
    sink_t *s = ud;
    if (s->fd >= 0 && s->p->status >= 200 && s->p->status < 300) {
        while (len > 0) {
            ssize_t w = write(s->fd, data, len);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                s->write_err = tn_err_from_errno(errno);
                return s->write_err;
            }
            data += w;
            len -= (size_t)w;
            s->streamed += (uint64_t)w;
        }
        return 0;
    }
    if (tn_buf_size(s->mem) + len > s->h->max_body)
        return TN_ETOOBIG;
    return tn_buf_append(s->mem, data, len);
}

void tn_hc_resp_fini(tn_hc_resp_t *resp)
{
    tn_free(resp->body);
    resp->body = NULL;
    resp->len = 0;
}

/* One attempt on the current connection. *answered: some answer byte came. */
static int attempt(tn_hc_t *h, const tn_hc_req_t *req, const tn_buf_t *head, tn_hc_resp_t *resp,
                   bool *answered, char *err, size_t errlen)
{
    *answered = false;
    int rc = send_all(h, tn_buf_data(head), tn_buf_size(head));
    if (rc == 0 && req->len > 0)
        rc = send_all(h, req->body, req->len);
    if (rc != 0) {
        if (rc == UV_ETIMEDOUT)
            tn_errbuf(err, errlen, "timed out after %d ms sending the request", h->timeout_ms);
        else
            tn_errbuf(err, errlen, "sending the request: %s", uv_strerror(rc));
        return rc;
    }
    tn_hc_parser_t p;
    tn_buf_t mem;
    tn_buf_init(&mem);
    sink_t s = {.h = h, .p = &p, .mem = &mem, .fd = req->body_fd};
    tn_hc_parser_init(&p, strcmp(req->method, "HEAD") == 0, on_body, &s);
    bool leftover = false;
    for (;;) {
        ssize_t r = recv_some(h, err, errlen);
        if (r < 0) {
            rc = (int)r;
            if (rc == UV_ETIMEDOUT)
                tn_errbuf(err, errlen, "timed out after %d ms waiting for the answer",
                          h->timeout_ms);
            else if (rc != TN_EPROTO)
                tn_errbuf(err, errlen, "reading the answer: %s", uv_strerror(rc));
            break;
        }
        if (r == 0) {
            rc = tn_hc_parser_eof(&p);
            if (rc != 0)
                tn_errbuf(err, errlen, "bad response: %s", p.errmsg);
            p.keep_alive = false;
            break;
        }
        *answered = true;
        size_t used = 0;
        rc = tn_hc_parser_feed(&p, h->rbuf, (size_t)r, &used);
        if (rc == TN_ESHORT)
            continue;
        if (rc == 0) {
            leftover = used < (size_t)r;
        } else if (rc == TN_EPROTO) {
            tn_errbuf(err, errlen, "bad response: %s", p.errmsg);
        } else if (rc == TN_ETOOBIG) {
            tn_errbuf(err, errlen, "response body larger than %zu bytes", h->max_body);
        } else if (s.write_err != 0) {
            tn_errbuf(err, errlen, "writing the body: %s", uv_strerror(s.write_err));
        } else {
            tn_errbuf(err, errlen, "reading the answer: %s", uv_strerror(rc));
        }
        break;
    }
    if (rc == 0) {
        resp->status = p.status;
        memcpy(resp->retry_after, p.retry_after, sizeof(resp->retry_after));
        memcpy(resp->content_type, p.content_type, sizeof(resp->content_type));
        resp->streamed = s.streamed;
        if (tn_buf_size(&mem) > 0) {
            resp->len = tn_buf_size(&mem);
            resp->body = tn_malloc(resp->len + 1);
            if (resp->body == NULL) {
                resp->len = 0;
                rc = UV_ENOMEM;
                tn_errbuf(err, errlen, "out of memory for a %zu-byte body", tn_buf_size(&mem));
            } else {
                memcpy(resp->body, tn_buf_data(&mem), resp->len);
                resp->body[resp->len] = '\0';
            }
        }
    }
    if (rc != 0 || !p.keep_alive || leftover)
        conn_close(h);
    else
        h->reused = true;
    tn_hc_parser_fini(&p);
    tn_buf_fini(&mem);
    return rc;
}

int tn_hc_request(tn_hc_t *h, const tn_hc_req_t *req, tn_hc_resp_t *resp, char *err, size_t errlen)
{
    memset(resp, 0, sizeof(*resp));
    tn_buf_t head;
    tn_buf_init(&head);
    char line[1024];
    bool wants_len = req->len > 0 || strcmp(req->method, "POST") == 0 ||
                     strcmp(req->method, "PUT") == 0 || strcmp(req->method, "PATCH") == 0;
    int n = snprintf(line, sizeof(line), "%s ", req->method);
    int rc = tn_buf_append(&head, line, (size_t)n);
    rc = rc ? rc : tn_buf_append(&head, h->url.prefix, strlen(h->url.prefix));
    rc = rc ? rc : tn_buf_append(&head, req->path, strlen(req->path));
    n = snprintf(line, sizeof(line), " HTTP/1.1\r\nHost: %s\r\nUser-Agent: tern-client\r\n",
                 h->url.hostport);
    rc = rc ? rc : tn_buf_append(&head, line, (size_t)n);
    if (h->auth != NULL)
        rc = rc ? rc : tn_buf_append(&head, h->auth, strlen(h->auth));
    if (h->headers != NULL)
        rc = rc ? rc : tn_buf_append(&head, h->headers, strlen(h->headers));
    if (req->headers != NULL)
        rc = rc ? rc : tn_buf_append(&head, req->headers, strlen(req->headers));
    if (wants_len) {
        n = snprintf(line, sizeof(line), "Content-Length: %zu\r\n", req->len);
        rc = rc ? rc : tn_buf_append(&head, line, (size_t)n);
    }
    rc = rc ? rc : tn_buf_append(&head, "\r\n", 2);
    if (rc != 0) {
        tn_errbuf(err, errlen, "out of memory building the request");
        goto done;
    }
    for (int tries = 0; tries < 2; tries++) {
        if (h->fd >= 0 && !conn_alive(h))
            conn_close(h);
        if (h->fd < 0 && (rc = conn_open(h, err, errlen)) != 0)
            break;
        bool was_reused = h->reused, answered = false;
        rc = attempt(h, req, &head, resp, &answered, err, errlen);
        /* A kept connection the server closed just now: it never saw the
         * request; send it once more on a fresh one. */
        if (rc == 0 || !was_reused || answered || rc == UV_ETIMEDOUT)
            break;
    }
done:
    if (h->auth != NULL)
        OPENSSL_cleanse(tn_buf_data(&head), tn_buf_size(&head));
    tn_buf_fini(&head);
    return rc;
}
