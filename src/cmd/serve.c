/* ternd's serving helpers. See serve.h for the reload's design. */
#include "core/platform.h"

#include "cmd/serve.h"

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"

#include <stdio.h>
#include <string.h>

/* nsqd's "fatal" (the entry after error in config.c's list) means
 * errors only. */
static int effective_level(int level)
{
    return level > TN_LOG_ERROR ? TN_LOG_ERROR : level;
}

static const char *env_value(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (char **e = envp; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    }
    return NULL;
}

void tn_serve_logging(const tn_config_t *cfg, char **envp)
{
    tn_log_level = effective_level(cfg->log_level);
    tn_log_set_format(cfg->log_format, tn_log_journal_stream(env_value(envp, "JOURNAL_STREAM"), 2));
}

void tn_serve_log_source(const tn_config_t *cfg, int argc, char **argv, char **envp)
{
    bool flags = false;
    for (int i = 1; i < argc; i++)
        flags = flags || (strncmp(argv[i], "--", 2) == 0 && strncmp(argv[i], "--config", 8) != 0);
    /* The variables' names (never their values: TERN_CLUSTER_SECRET). */
    char vars[512] = "";
    size_t vn = 0;
    for (char **e = envp; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        if (eq == NULL || !tn_config_env_is_setting(*e))
            continue;
        int n = (int)(eq - *e);
        if (vn + (size_t)n + 8 >= sizeof(vars)) {
            vn += (size_t)snprintf(vars + vn, sizeof(vars) - vn, ", ...");
            break;
        }
        vn += (size_t)snprintf(vars + vn, sizeof(vars) - vn, "%s%.*s", vn ? ", " : "", n, *e);
    }
    const char *file = cfg->config_file != NULL ? cfg->config_file : "";
    TN_LOG(TN_LOG_NOTICE, "configuration: %s%s%s%s%s%s%s%s",
           file[0] != '\0' ? "config file " : "built-in defaults", file,
           file[0] != '\0' ? " over the built-in defaults" : "",
           vn ? ", then the environment (" : "", vars, vn ? ")" : "", flags ? ", then flags" : "",
           tn_log_journal() ? "; logging to journald" : "");
}

int tn_serve_https_ctx(const tn_config_t *cfg, tn_tls_ctx_t **out, char *err, size_t errlen)
{
    /* HTTPS never goes below TLS 1.2, whatever the NSQ door allows. */
    const char *minv = strcmp(cfg->tls_min_version, "tls1.3") == 0 ? "tls1.3" : "tls1.2";
    tn_tls_ctx_t *ctx = NULL;
    int rc = tn_tls_ctx_new(cfg->tls_cert, cfg->tls_key, cfg->tls_root_ca_file,
                            (tn_tls_client_policy_t)cfg->tls_client_auth_policy, minv, &ctx, err,
                            errlen);
    if (rc != 0)
        return rc;
    if ((rc = tn_tls_ctx_set_alpn(ctx, "http/1.1")) != 0) {
        tn_tls_ctx_free(ctx);
        tn_errbuf(err, errlen, "HTTPS: cannot set ALPN: %s", tn_strerror(rc));
        return rc;
    }
    *out = ctx;
    return 0;
}

/* --- reload ------------------------------------------------------------- */

struct tn_reload_s {
    uv_work_t work;
    tn_reload_target_t t;
    void (*done)(void *arg);
    void *arg;
    bool detached;
    /* decided on the loop thread: the worker touches no server, which may
     * be closing while it reads files */
    bool want_https;
    bool want_nsq;
    /* results of the worker */
    tn_config_t cfg;
    bool cfg_ok;
    char err[1024];
    tn_tls_ctx_t *https;
    char https_err[1024];
    tn_tls_ctx_t *nsq;
    char nsq_err[1024];
};

static void reload_work(uv_work_t *w)
{
    tn_reload_t *r = w->data;
    if (tn_config_init(&r->cfg) != 0) {
        snprintf(r->err, sizeof(r->err), "out of memory");
        return;
    }
    r->cfg_ok =
        tn_config_load(&r->cfg, r->t.argc, r->t.argv, r->t.envp, r->err, sizeof(r->err)) == 0;
    if (!r->cfg_ok || r->cfg.tls_cert[0] == '\0')
        return;
    if (r->want_https)
        (void)tn_serve_https_ctx(&r->cfg, &r->https, r->https_err, sizeof(r->https_err));
    if (r->want_nsq)
        (void)tn_tls_ctx_new(r->cfg.tls_cert, r->cfg.tls_key, r->cfg.tls_root_ca_file,
                             (tn_tls_client_policy_t)r->cfg.tls_client_auth_policy,
                             r->cfg.tls_min_version, &r->nsq, r->nsq_err, sizeof(r->nsq_err));
}

/* Options a reload applies; every other change needs a restart. */
static bool is_live(const char *name)
{
    static const char *const live[] = {"log-level",        "log-format",
                                       "tls-cert",         "tls-key",
                                       "tls-root-ca-file", "tls-client-auth-policy",
                                       "tls-min-version"};
    for (size_t i = 0; i < TN_ARRAY_SIZE(live); i++)
        if (strcmp(name, live[i]) == 0)
            return true;
    return false;
}

typedef struct {
    char text[1024];
    size_t len;
} namelist_t;

static void add_restart(const char *name, void *arg)
{
    namelist_t *l = arg;
    if (is_live(name) || l->len + strlen(name) + 3 >= sizeof(l->text))
        return;
    l->len += (size_t)snprintf(l->text + l->len, sizeof(l->text) - l->len, "%s%s",
                               l->len ? ", " : "", name);
}

static void reload_apply(tn_reload_t *r)
{
    const char *file =
        r->cfg.config_file != NULL && r->cfg.config_file[0] != '\0' ? r->cfg.config_file : NULL;
    if (!r->cfg_ok) {
        TN_LOG(TN_LOG_ERROR, "SIGHUP: configuration not reloaded, nothing changed: %s", r->err);
        return;
    }
    tn_serve_logging(&r->cfg, r->t.envp);
    char tls[512] = "";
    bool had_tls = r->t.started->tls_cert[0] != '\0';
    if (had_tls && r->cfg.tls_cert[0] != '\0') {
        char fp[96] = "";
        if (r->https != NULL) {
            tn_tls_ctx_fingerprint(r->https, fp, sizeof(fp));
            tn_http_server_set_tls(r->t.https, r->https);
            tn_tls_ctx_free(*r->t.https_ctx);
            *r->t.https_ctx = r->https;
            r->https = NULL;
        } else if (r->t.https != NULL) {
            TN_LOG(TN_LOG_ERROR, "SIGHUP: HTTPS keeps its certificate: %s", r->https_err);
        }
        if (r->nsq != NULL) {
            if (fp[0] == '\0')
                tn_tls_ctx_fingerprint(r->nsq, fp, sizeof(fp));
            tn_nsq_server_set_tls(r->t.nsq, r->nsq); /* transferred */
            r->nsq = NULL;
        } else if (r->want_nsq) {
            TN_LOG(TN_LOG_ERROR, "SIGHUP: NSQ TLS keeps its certificate: %s", r->nsq_err);
        }
        if (fp[0] != '\0')
            snprintf(tls, sizeof(tls), ", TLS certificate %s (SHA-256 %s)", r->cfg.tls_cert, fp);
    }
    namelist_t restart = {"", 0};
    tn_config_each_change(r->t.started, &r->cfg, add_restart, &restart);
    if (had_tls != (r->cfg.tls_cert[0] != '\0'))
        add_restart("tls-cert (turning TLS on or off)", &restart);
    TN_LOG(TN_LOG_NOTICE, "SIGHUP: reloaded %s%s: applied log-level=%s, log-format=%s%s; %s%s",
           file != NULL ? "config file " : "(no config file)", file != NULL ? file : "",
           tn_log_level_name(tn_log_level), tn_log_format() == TN_LOG_JSON ? "json" : "text", tls,
           restart.len ? "changed but needs a restart: " : "nothing else changed", restart.text);
}

static void reload_after(uv_work_t *w, int status)
{
    tn_reload_t *r = w->data;
    if (status == 0 && !r->detached)
        reload_apply(r);
    tn_tls_ctx_free(r->https);
    tn_tls_ctx_free(r->nsq);
    tn_config_fini(&r->cfg);
    void (*done)(void *) = r->done;
    void *arg = r->arg;
    tn_free(r);
    done(arg);
}

int tn_reload_start(uv_loop_t *loop, const tn_reload_target_t *target, void (*done)(void *arg),
                    void *arg, tn_reload_t **out)
{
    tn_reload_t *r = tn_calloc(1, sizeof(*r));
    if (r == NULL)
        return UV_ENOMEM;
    r->t = *target;
    r->want_https = target->https != NULL;
    r->want_nsq = target->nsq != NULL && tn_nsq_server_has_tls(target->nsq);
    r->done = done;
    r->arg = arg;
    r->work.data = r;
    int rc = uv_queue_work(loop, &r->work, reload_work, reload_after);
    if (rc != 0) {
        tn_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void tn_reload_detach(tn_reload_t *r)
{
    if (r != NULL)
        r->detached = true;
}
