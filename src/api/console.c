/* The web console's assets under /console/: routes, content types, ETags,
 * conditional requests and the security headers. See console.h.
 *
 * Threads: the loop thread. */
#include "core/platform.h"

#include "api/console.h"

#include "core/alloc.h"
#include "core/crc32c.h"

#include <stdio.h>
#include <string.h>

/* Scripts, styles, images and fetches from this origin only; nothing
 * inline (no 'unsafe-inline'), no plugins, no framing, forms post only
 * here. */
#define CSP                                                                                        \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "                    \
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "                 \
    "frame-ancestors 'none'"

#define SECURITY_HEADERS                                                                           \
    "Content-Security-Policy: " CSP "\r\n"                                                         \
    "X-Content-Type-Options: nosniff\r\n"                                                          \
    "X-Frame-Options: DENY\r\n"                                                                    \
    "Referrer-Policy: no-referrer\r\n"                                                             \
    "Cross-Origin-Opener-Policy: same-origin\r\n"

typedef struct {
    const tn_console_file_t *file;
    const char *type;
    char etag[16];     /* "\"1a2b3c4d\"" */
    char headers[640]; /* ETag, Cache-Control and the security headers */
} asset_t;

struct tn_console_s {
    size_t n;
    asset_t assets[]; /* tn_console_nfiles of them */
};

const char *tn_console_content_type(const char *name)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
        {".json", "application/json; charset=utf-8"},
        {".txt", "text/plain; charset=utf-8"},
    };
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot != NULL && i < TN_ARRAY_SIZE(types); i++) {
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    }
    return "application/octet-stream";
}

/* Whether an If-None-Match value (a list of entity tags, weak or strong,
 * or "*") names etag. */
static bool etag_listed(const tn_iov_t *h, const char *etag)
{
    size_t elen = strlen(etag);
    size_t i = 0;
    while (i < h->len) {
        while (i < h->len && (h->base[i] == ' ' || h->base[i] == '\t' || h->base[i] == ','))
            i++;
        size_t start = i;
        while (i < h->len && h->base[i] != ',')
            i++;
        size_t end = i;
        while (end > start && (h->base[end - 1] == ' ' || h->base[end - 1] == '\t'))
            end--;
        const char *tag = h->base + start;
        size_t tlen = end - start;
        if (tlen == 1 && tag[0] == '*')
            return true;
        if (tlen > 2 && tag[0] == 'W' && tag[1] == '/') { /* weak comparison, RFC 9110 13.1.2 */
            tag += 2;
            tlen -= 2;
        }
        if (tlen == elen && memcmp(tag, etag, elen) == 0)
            return true;
    }
    return false;
}

static void on_asset(tn_http_request_t *r, void *arg)
{
    const asset_t *a = arg;
    const tn_iov_t *inm = tn_http_header(&r->head, "if-none-match");
    if (inm != NULL && etag_listed(inm, a->etag)) {
        tn_http_respond(r, 304, NULL, a->headers, NULL, 0);
        return;
    }
    tn_http_respond(r, 200, a->type, a->headers, a->file->data, a->file->len);
}

/* /console without the slash: the page's relative URLs (app.js) resolve
 * against the directory, so send the browser there. */
static void on_bare(tn_http_request_t *r, void *arg)
{
    (void)arg;
    static const char body[] = "see /console/\n";
    tn_http_respond(r, 301, "text/plain; charset=utf-8", "Location: /console/\r\n" SECURITY_HEADERS,
                    body, sizeof(body) - 1);
}

int tn_console_register(tn_http_server_t *srv, tn_console_t **out)
{
    *out = NULL;
    tn_console_t *c = tn_calloc(1, sizeof(*c) + tn_console_nfiles * sizeof(asset_t));
    if (c == NULL)
        return UV_ENOMEM;
    c->n = tn_console_nfiles;
    int rc = tn_http_route(srv, "GET", "/console", 0, NULL, on_bare, NULL);
    for (size_t i = 0; rc == 0 && i < c->n; i++) {
        asset_t *a = &c->assets[i];
        a->file = &tn_console_files[i];
        a->type = tn_console_content_type(a->file->name);
        unsigned crc = (unsigned)tn_crc32c(0, a->file->data, a->file->len);
        snprintf(a->etag, sizeof(a->etag), "\"%08x\"", crc);
        int hn = snprintf(a->headers, sizeof(a->headers),
                          "ETag: \"%08x\"\r\nCache-Control: no-cache\r\n" SECURITY_HEADERS, crc);
        char path[160];
        int pn = snprintf(path, sizeof(path), "/console/%s", a->file->name);
        if (hn < 0 || (size_t)hn >= sizeof(a->headers) || pn < 0 || (size_t)pn >= sizeof(path)) {
            rc = UV_ENAMETOOLONG; /* embed_console.py refuses names over 128 bytes */
            break;
        }
        rc = tn_http_route(srv, "GET", path, 0, NULL, on_asset, a);
        if (rc == 0 && strcmp(a->file->name, "index.html") == 0)
            rc = tn_http_route(srv, "GET", "/console/", 0, NULL, on_asset, a);
    }
    *out = c; /* even on failure: the routes added point into it until srv closes */
    return rc;
}

void tn_console_free(tn_console_t *c)
{
    tn_free(c);
}
