/* ternd's serving helpers: log setup, where the configuration came from,
 * the HTTPS listener's TLS context, and SIGHUP reload.
 *
 * DESIGN: a reload (SIGHUP).
 *   1. On the loop thread: start one reload (a second SIGHUP while one
 *      runs is logged and ignored).
 *   2. On a libuv worker thread: read the configuration again as at
 *      startup (defaults, config file, TERN_* environment, flags), and
 *      build new TLS contexts from its tls-cert and tls-key for the doors
 *      that have TLS (HTTPS, NSQ tls_v1). Files are read here, never on
 *      the loop.
 *   3. Back on the loop thread: a configuration that does not load
 *      changes nothing (the error is logged). Otherwise log-level and
 *      log-format apply at once; each TLS context that built replaces the
 *      door's (new handshakes use it, open sessions keep theirs), and one
 *      that did not keeps the old pair and logs why. One line says what
 *      was applied and which other changed options need a restart.
 *
 * Threads: the loop thread, except the reload's step 2. */
#ifndef TN_CMD_SERVE_H
#define TN_CMD_SERVE_H

#include "core/platform.h"

#include "core/config.h"
#include "proto/http/server.h"
#include "proto/nsq/server.h"
#include "proto/nsq/tls.h"

#include <uv.h>

/* Apply cfg's log-level and log-format; text lines carry journald's
 * priority prefixes when JOURNAL_STREAM (from envp) names stderr. */
void tn_serve_logging(const tn_config_t *cfg, char **envp);

/* Log one line saying where the configuration came from: the config file
 * (or "built-in defaults") and how many flags and TERN_* variables. */
void tn_serve_log_source(const tn_config_t *cfg, int argc, char **argv, char **envp);

/* The HTTPS listener's context from cfg: tls-cert and tls-key (with
 * tls-root-ca-file and tls-client-auth-policy, as nsqd's HTTPS uses its
 * one TLS configuration), TLS 1.2 or newer (tls-min-version when it asks
 * for more), ALPN http/1.1. On failure TN_ECONFIG and a line naming the
 * file in err. *out is the caller's. */
int tn_serve_https_ctx(const tn_config_t *cfg, tn_tls_ctx_t **out, char *err, size_t errlen);

/* What a reload applies to. The pointers are borrowed for the reload's
 * lifetime; https_ctx is where the HTTPS listener's context lives (the
 * reload frees the old one after replacing it). */
typedef struct {
    const tn_config_t *started; /* the configuration ternd started with */
    int argc;
    char **argv;
    char **envp;
    tn_http_server_t *https; /* NULL: no HTTPS listener */
    tn_tls_ctx_t **https_ctx;
    tn_nsq_server_t *nsq; /* NULL, or a server without TLS: not reloaded */
} tn_reload_target_t;

typedef struct tn_reload_s tn_reload_t;

/* Start a reload (step 1); *out is its handle until done. done runs on
 * the loop thread after step 3 (or when the work was detached); the
 * reload frees itself after done returns. 0, UV_ENOMEM, or libuv's error
 * queueing the work. target is copied. */
int tn_reload_start(uv_loop_t *loop, const tn_reload_target_t *target, void (*done)(void *arg),
                    void *arg, tn_reload_t **out);

/* The daemon is shutting down: the reload under way (if r is not NULL)
 * applies nothing when its work returns. */
void tn_reload_detach(tn_reload_t *r);

#endif
