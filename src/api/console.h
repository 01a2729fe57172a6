/* The web console: the HTML, CSS and JavaScript of console/ in the source
 * tree, turned into C arrays at build time (scripts/embed_console.py writes
 * console_assets.c into the build directory) and served under /console/ on
 * the API port. The assets are static and hold no data: the page asks
 * /v1 (and nsqd's /stats and /channel/... endpoints, /healthz, /readyz) for
 * everything it shows, with the Basic credentials the user typed, so the
 * console has exactly the rights of its user and /v1's guard decides
 * every call (docs/console.md).
 *
 * DESIGN: serving an asset.
 *   1. tn_console_register routes GET (and so HEAD) /console/<name> for
 *      every embedded file, /console/ for index.html, and /console
 *      (redirected to /console/, so relative URLs resolve under it).
 *   2. Each answer carries its Content-Type, an ETag (the CRC32C of the
 *      bytes, computed once at registration), Cache-Control: no-cache (a
 *      browser revalidates, and gets 304 while the build is the same) and
 *      the security headers: a Content-Security-Policy allowing only this
 *      origin's scripts, styles and connections (no inline script), no
 *      framing (frame-ancestors 'none', X-Frame-Options), nosniff, no
 *      referrer.
 *   3. A request whose If-None-Match names the ETag gets 304 without a
 *      body.
 * Unknown names under /console/ get the server's 404. With the `console`
 * option off nothing is registered: /console/ is 404 like any unknown
 * path.
 *
 * Threads: the loop thread. */
#ifndef TN_API_CONSOLE_H
#define TN_API_CONSOLE_H

#include "core/platform.h"

#include "proto/http/server.h"

#include <stddef.h>
#include <stdint.h>

/* One embedded file (the generated console_assets.c defines the table). */
typedef struct {
    const char *name; /* "app.js": its path under console/ */
    const unsigned char *data;
    size_t len;
} tn_console_file_t;

extern const tn_console_file_t tn_console_files[];
extern const size_t tn_console_nfiles;

typedef struct tn_console_s tn_console_t;

/* Route the console's assets on srv. *out (freed with tn_console_free after
 * the server closed) holds each file's headers; it is set on failure too
 * when routes were added, since they point into it. 0, UV_ENOMEM, or
 * UV_ENAMETOOLONG for a file name too long to route (the embedding script
 * refuses those). */
int tn_console_register(tn_http_server_t *srv, tn_console_t **out);
void tn_console_free(tn_console_t *c);

/* The Content-Type of a file name by its extension (borrowed, static);
 * application/octet-stream for one the console does not use. */
const char *tn_console_content_type(const char *name);

#endif
