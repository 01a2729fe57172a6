/* ternctl's connection and the helpers its commands share (ctl.h).
 *
 * Where the connection comes from, first found wins per setting:
 *   1. flags: --url, --user, --password-file, --ca-file, --timeout;
 *   2. the environment: TERN_URL, TERN_USER, TERN_PASSWORD or
 *      TERN_PASSWORD_FILE, TERN_CA_FILE;
 *   3. the config file (--config, else $XDG_CONFIG_HOME/tern/ternctl.conf or
 *      ~/.config/tern/ternctl.conf; a missing default file is no error):
 *      `key = value` lines as ternd's config reads them (# comments, values
 *      optionally in double quotes), keys url, user, password,
 *      password-file, ca-file, timeout;
 *   4. defaults: http://127.0.0.1:4151, no credentials, 30 s.
 * When none of them gives a user or a password and the URL names this
 * machine (127.0.0.0/8, ::1, localhost), ternctl looks for the password
 * file a local ternd wrote when it seeded its root user, as rabbitmqctl
 * finds its cookie: $TERN_DATA_PATH/admin-password (when ternd's variable
 * is set), ./data/admin-password (where `make run` keeps its data),
 * /var/lib/tern/admin-password (the package's data path). The search runs at
 * the first request (a command that reaches no node never searches); the
 * first file it can read is used as admin's password and named on stderr;
 * one that exists but cannot be read is skipped with a note; none at all
 * leaves no credentials, as before.
 * A password never comes from the command line (it would show in ps and
 * shell history): main.c refuses --password. A password given without a
 * user is for `admin`, the root user; a user given without a password is
 * asked for one on the terminal (when stdin is one). A password file or a config file
 * holding a password that group or others may read draws a warning.
 *
 * One kept-alive HTTP client per base URL, made on first use. */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"

#include "core/alloc.h"
#include "core/config.h"
#include "core/err.h"
#include "proto/http/client.h"
#include "proto/http/json.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#define DEFAULT_URL "http://127.0.0.1:4151"
#define MAX_CLIENTS 16

/* Whether the connection carries credentials, and the local node's password
 * file they were found in ("": given, or none), for tn_ctl_fail's hint
 * (one tn_ctl_t per process). */
static bool g_had_user;
static char g_found_file[4096];

struct tn_ctl_s {
    char *url;
    char *user;     /* NULL: no credentials */
    char *password; /* with user */
    char *ca_file;  /* NULL: the system store */
    int timeout_ms;
    bool json;
    bool find_password; /* no credentials and a local URL: search at first use */
    char *data_path;    /* TERN_DATA_PATH, for that search; NULL if unset */
    struct {
        char *url;
        tn_hc_t *hc;
    } clients[MAX_CLIENTS];
    int nclients;
};

/* Settings as each source gives them (NULL: that source says nothing). */
typedef struct {
    char *url, *user, *password, *password_file, *ca_file, *timeout;
} src_t;

static void src_fini(src_t *s)
{
    if (s->password != NULL)
        memset(s->password, 0, strlen(s->password));
    free(s->url);
    free(s->user);
    free(s->password);
    free(s->password_file);
    free(s->ca_file);
    free(s->timeout);
    memset(s, 0, sizeof(*s));
}

static char *dup_or_die(const char *s)
{
    char *d = strdup(s);
    if (d == NULL) {
        fprintf(stderr, "ternctl: out of memory\n");
        exit(TN_CTL_FAIL);
    }
    return d;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

static void warn_mode(const char *path, const char *what)
{
    struct stat st;
    if (stat(path, &st) == 0 && (st.st_mode & 077) != 0)
        fprintf(stderr,
                "ternctl: warning: %s %s holds a password and group or others may read it "
                "(mode %03o; chmod 600 %s)\n",
                what, path, (unsigned)(st.st_mode & 0777), path);
}

/* Read the config file into s. explicit: named by --config (a missing file
 * is then an error). */
static int read_config(const char *path, bool explicit, src_t *s)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        if (!explicit && errno == ENOENT)
            return TN_CTL_OK;
        fprintf(stderr, "ternctl: cannot open config file %s: %s\n", path, strerror(errno));
        return TN_CTL_USAGE;
    }
    char line[4096];
    int lineno = 0, rc = TN_CTL_OK;
    while (rc == TN_CTL_OK && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        if (strchr(line, '\n') == NULL && !feof(f)) {
            fprintf(stderr, "ternctl: config %s:%d: line longer than %zu bytes\n", path, lineno,
                    sizeof(line) - 1);
            rc = TN_CTL_USAGE;
            break;
        }
        char *l = trim(line);
        if (*l == '\0' || *l == '#')
            continue;
        char *eq = strchr(l, '=');
        if (eq == NULL) {
            fprintf(stderr, "ternctl: config %s:%d: expected `key = value`\n", path, lineno);
            rc = TN_CTL_USAGE;
            break;
        }
        *eq = '\0';
        char *key = trim(l), *val = trim(eq + 1);
        if (val[0] == '"') {
            char *close = strchr(val + 1, '"');
            if (close == NULL) {
                fprintf(stderr, "ternctl: config %s:%d: unterminated string\n", path, lineno);
                rc = TN_CTL_USAGE;
                break;
            }
            *close = '\0';
            val++;
        } else {
            char *hash = strchr(val, '#');
            if (hash != NULL) {
                *hash = '\0';
                val = trim(val);
            }
        }
        char **slot = strcmp(key, "url") == 0             ? &s->url
                      : strcmp(key, "user") == 0          ? &s->user
                      : strcmp(key, "password") == 0      ? &s->password
                      : strcmp(key, "password-file") == 0 ? &s->password_file
                      : strcmp(key, "ca-file") == 0       ? &s->ca_file
                      : strcmp(key, "timeout") == 0       ? &s->timeout
                                                          : NULL;
        if (slot == NULL) {
            fprintf(stderr,
                    "ternctl: config %s:%d: unknown key \"%s\" (known: url, user, password, "
                    "password-file, ca-file, timeout)\n",
                    path, lineno, key);
            rc = TN_CTL_USAGE;
            break;
        }
        free(*slot);
        *slot = dup_or_die(val);
    }
    fclose(f);
    if (rc == TN_CTL_OK && s->password != NULL && s->password_file != NULL) {
        fprintf(stderr, "ternctl: config %s: give password or password-file, not both\n", path);
        rc = TN_CTL_USAGE;
    }
    if (rc == TN_CTL_OK && s->password != NULL)
        warn_mode(path, "config file");
    return rc;
}

/* The first line of a password file, without its line end. */
static int read_password_file(const char *path, char **out)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "ternctl: cannot read password file %s: %s\n", path, strerror(errno));
        return TN_CTL_USAGE;
    }
    char buf[1100];
    bool got = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    size_t n = got ? strlen(buf) : 0;
    if (n > 0 && buf[n - 1] == '\n')
        buf[--n] = '\0';
    if (n > 0 && buf[n - 1] == '\r')
        buf[--n] = '\0';
    if (n == 0) {
        fprintf(stderr, "ternctl: password file %s is empty\n", path);
        return TN_CTL_USAGE;
    }
    if (n > 1024) {
        fprintf(stderr, "ternctl: password file %s: the password is longer than 1024 bytes\n",
                path);
        return TN_CTL_USAGE;
    }
    warn_mode(path, "password file");
    *out = dup_or_die(buf);
    memset(buf, 0, sizeof(buf));
    return TN_CTL_OK;
}

static const char *env_get(char **envp, const char *name)
{
    size_t nl = strlen(name);
    for (char **e = envp; e != NULL && *e != NULL; e++)
        if (strncmp(*e, name, nl) == 0 && (*e)[nl] == '=')
            return (*e)[nl + 1] != '\0' ? *e + nl + 1 : NULL;
    return NULL;
}

/* Whether url's host is this machine: a loopback address or localhost. */
static bool url_is_local(const char *url)
{
    tn_hc_url_t u;
    char err[256];
    if (tn_hc_url_parse(url, &u, err, sizeof(err)) != 0)
        return false;
    return strcmp(u.host, "localhost") == 0 || strcmp(u.host, "::1") == 0 ||
           strncmp(u.host, "127.", 4) == 0;
}

/* No credentials were given and the node is local: the password ternd
 * wrote when it seeded the root user, from the first of the conventional
 * data paths (this file's opening comment) that holds one this user can
 * read. data: $TERN_DATA_PATH or NULL. Sets *out (or leaves it NULL) and
 * g_found_file. */
static void find_local_password(const char *data, char **out)
{
    char paths[3][sizeof(g_found_file)];
    int n = 0;
    if (data != NULL)
        snprintf(paths[n++], sizeof(paths[0]), "%s/%s", data, "admin-password");
    snprintf(paths[n++], sizeof(paths[0]), "./data/admin-password");
    snprintf(paths[n++], sizeof(paths[0]), "/var/lib/tern/admin-password");
    for (int i = 0; i < n; i++) {
        const char *p = paths[i];
        FILE *f = fopen(p, "r");
        if (f == NULL) {
            if (errno != ENOENT && errno != ENOTDIR)
                fprintf(stderr, "ternctl: note: cannot read %s (%s); skipped it\n", p,
                        strerror(errno));
            continue;
        }
        fclose(f);
        /* read_password_file says what is wrong with a file it opens (empty,
         * too long); such a file is skipped too. */
        if (read_password_file(p, out) != TN_CTL_OK) {
            fprintf(stderr, "ternctl: note: skipped %s\n", p);
            continue;
        }
        memcpy(g_found_file, p, strlen(p) + 1); /* paths[i] has g_found_file's size */
        fprintf(stderr, "ternctl: using the password in %s\n", p);
        return;
    }
}

static char *pick(const char *a, const char *b, const char *c)
{
    const char *v = a ? a : b ? b : c;
    return v ? dup_or_die(v) : NULL;
}

int tn_ctl_new(const tn_ctl_flags_t *f, char **envp, tn_ctl_t **out)
{
    src_t file = {0};
    char cfgpath[4096];
    const char *cfg = f->config;
    if (cfg == NULL) {
        const char *xdg = env_get(envp, "XDG_CONFIG_HOME");
        const char *home = env_get(envp, "HOME");
        if (xdg != NULL)
            snprintf(cfgpath, sizeof(cfgpath), "%s/tern/ternctl.conf", xdg);
        else if (home != NULL)
            snprintf(cfgpath, sizeof(cfgpath), "%s/.config/tern/ternctl.conf", home);
        else
            cfgpath[0] = '\0';
    } else {
        snprintf(cfgpath, sizeof(cfgpath), "%s", cfg);
    }
    int rc = cfgpath[0] ? read_config(cfgpath, cfg != NULL, &file) : TN_CTL_OK;
    if (rc != TN_CTL_OK) {
        src_fini(&file);
        return rc;
    }
    tn_ctl_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        src_fini(&file);
        fprintf(stderr, "ternctl: out of memory\n");
        return TN_CTL_FAIL;
    }
    c->json = f->json;
    c->url = pick(f->url, env_get(envp, "TERN_URL"), file.url ? file.url : DEFAULT_URL);
    c->user = pick(f->user, env_get(envp, "TERN_USER"), file.user);
    c->ca_file = pick(f->ca_file, env_get(envp, "TERN_CA_FILE"), file.ca_file);
    size_t ul = strlen(c->url);
    while (ul > 0 && c->url[ul - 1] == '/')
        c->url[--ul] = '\0';

    /* The password: the first source that gives one, in precedence order. */
    const char *env_pw = env_get(envp, "TERN_PASSWORD");
    const char *env_pwf = env_get(envp, "TERN_PASSWORD_FILE");
    if (f->password_file != NULL) {
        rc = read_password_file(f->password_file, &c->password);
    } else if (env_pw != NULL && env_pwf != NULL) {
        fprintf(stderr, "ternctl: TERN_PASSWORD and TERN_PASSWORD_FILE are both set; unset one\n");
        rc = TN_CTL_USAGE;
    } else if (env_pw != NULL) {
        c->password = dup_or_die(env_pw);
    } else if (env_pwf != NULL) {
        rc = read_password_file(env_pwf, &c->password);
    } else if (file.password != NULL) {
        c->password = dup_or_die(file.password);
    } else if (file.password_file != NULL) {
        rc = read_password_file(file.password_file, &c->password);
    } else if (c->user == NULL && url_is_local(c->url)) {
        c->find_password = true;
        const char *data = env_get(envp, "TERN_DATA_PATH");
        c->data_path = data != NULL ? dup_or_die(data) : NULL;
    }
    if (rc == TN_CTL_OK && c->password != NULL && c->user == NULL)
        c->user = dup_or_die("admin");
    /* A user without a password: ask on the terminal, if there is one. */
    if (rc == TN_CTL_OK && c->user != NULL && c->password == NULL && isatty(0) && isatty(2)) {
        char prompt[160], pw[1100];
        snprintf(prompt, sizeof(prompt), "Password for %.64s: ", c->user);
        rc = tn_ctl_read_secret(prompt, false, pw, sizeof(pw));
        if (rc == TN_CTL_OK)
            c->password = dup_or_die(pw);
        memset(pw, 0, sizeof(pw));
    }

    const char *timeout = f->timeout ? f->timeout : file.timeout;
    c->timeout_ms = 30000;
    if (rc == TN_CTL_OK && timeout != NULL) {
        int64_t ms = 0;
        if (tn_ctl_parse_ms(timeout, &ms) != 0 || ms <= 0 || ms > INT32_MAX) {
            fprintf(stderr, "ternctl: --timeout %s: expected a positive duration (5s, 500ms)\n",
                    timeout);
            rc = TN_CTL_USAGE;
        } else {
            c->timeout_ms = (int)ms;
        }
    }
    if (rc == TN_CTL_OK) {
        tn_hc_url_t u;
        char err[512];
        if (tn_hc_url_parse(c->url, &u, err, sizeof(err)) != 0) {
            fprintf(stderr, "ternctl: %s\n", err);
            rc = TN_CTL_USAGE;
        }
    }
    src_fini(&file);
    if (rc != TN_CTL_OK) {
        tn_ctl_free(c);
        return rc;
    }
    g_had_user = c->user != NULL;
    *out = c;
    return TN_CTL_OK;
}

void tn_ctl_free(tn_ctl_t *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < c->nclients; i++) {
        tn_hc_free(c->clients[i].hc);
        free(c->clients[i].url);
    }
    if (c->password != NULL)
        memset(c->password, 0, strlen(c->password));
    free(c->url);
    free(c->user);
    free(c->password);
    free(c->ca_file);
    free(c->data_path);
    free(c);
}

/* The local node's password, looked for once, before the first use of the
 * credentials (see the opening comment). */
static void find_password_once(tn_ctl_t *c)
{
    if (!c->find_password)
        return;
    c->find_password = false;
    find_local_password(c->data_path, &c->password);
    if (c->password != NULL) {
        c->user = dup_or_die("admin");
        g_had_user = true;
    }
}

bool tn_ctl_json(const tn_ctl_t *c)
{
    return c->json;
}

const char *tn_ctl_base_url(const tn_ctl_t *c)
{
    return c->url;
}

int tn_ctl_timeout_ms(const tn_ctl_t *c)
{
    return c->timeout_ms;
}

/* A new client for base_url with c's credentials and CA, and timeout_ms
 * its bound on each wait; NULL with the reason printed. c is only read. */
static tn_hc_t *client_new(const tn_ctl_t *c, const char *base_url, int timeout_ms)
{
    tn_hc_opts_t o = {.ca_file = c->ca_file,
                      .timeout_ms = timeout_ms,
                      .user = c->user,
                      .password = c->password,
                      .headers = "X-Tern-Client: ternctl\r\n"};
    tn_hc_t *hc = NULL;
    char err[512];
    int rc = tn_hc_new(base_url, &o, &hc, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "ternctl: %s\n", rc == UV_ENOMEM ? "out of memory" : err);
        return NULL;
    }
    return hc;
}

/* The client for base_url, made on first use; NULL with the reason printed. */
static tn_hc_t *client_for(tn_ctl_t *c, const char *base_url)
{
    for (int i = 0; i < c->nclients; i++)
        if (strcmp(c->clients[i].url, base_url) == 0)
            return c->clients[i].hc;
    find_password_once(c);
    if (c->nclients == MAX_CLIENTS) {
        /* More nodes than a command talks to at once: drop the oldest. */
        tn_hc_free(c->clients[0].hc);
        free(c->clients[0].url);
        memmove(&c->clients[0], &c->clients[1], sizeof(c->clients[0]) * (MAX_CLIENTS - 1));
        c->nclients--;
    }
    tn_hc_t *hc = client_new(c, base_url, c->timeout_ms);
    if (hc == NULL)
        return NULL;
    c->clients[c->nclients].url = dup_or_die(base_url);
    c->clients[c->nclients].hc = hc;
    c->nclients++;
    return hc;
}

/* One request on hc to base_url (see tn_ctl_call). */
static int call_on(tn_hc_t *hc, const char *base_url, const char *method, const char *path,
                   const char *body, size_t len, int fd, uint64_t *written, tn_ctl_resp_t *out)
{
    tn_hc_req_t req = {.method = method,
                       .path = path,
                       .headers = len > 0 ? "Content-Type: application/json\r\n" : NULL,
                       .body = body,
                       .len = len,
                       .body_fd = fd};
    tn_hc_resp_t resp;
    char err[512];
    int rc = tn_hc_request(hc, &req, &resp, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "ternctl: cannot reach %s: %s\n", base_url, err);
        tn_hc_resp_fini(&resp);
        return rc;
    }
    out->status = resp.status;
    out->body = resp.body;
    out->len = resp.len;
    memcpy(out->retry_after, resp.retry_after, sizeof(out->retry_after));
    if (written != NULL)
        *written = resp.streamed;
    return 0;
}

static int call(tn_ctl_t *c, const char *base_url, const char *method, const char *path,
                const char *body, size_t len, int fd, uint64_t *written, tn_ctl_resp_t *out)
{
    memset(out, 0, sizeof(*out));
    tn_hc_t *hc = client_for(c, base_url);
    if (hc == NULL)
        return TN_ECONFIG;
    return call_on(hc, base_url, method, path, body, len, fd, written, out);
}

int tn_ctl_call_own(tn_ctl_t *c, const char *base_url, const char *method, const char *path,
                    int timeout_ms, tn_ctl_resp_t *out)
{
    memset(out, 0, sizeof(*out));
    tn_hc_t *hc = client_new(c, base_url, timeout_ms > 0 ? timeout_ms : c->timeout_ms);
    if (hc == NULL)
        return TN_ECONFIG;
    int rc = call_on(hc, base_url, method, path, NULL, 0, -1, NULL, out);
    tn_hc_free(hc);
    return rc;
}

int tn_ctl_call(tn_ctl_t *c, const char *method, const char *path, const char *body, size_t len,
                tn_ctl_resp_t *out)
{
    return call(c, c->url, method, path, body, len, -1, NULL, out);
}

int tn_ctl_call_url(tn_ctl_t *c, const char *base_url, const char *method, const char *path,
                    const char *body, size_t len, tn_ctl_resp_t *out)
{
    return call(c, base_url, method, path, body, len, -1, NULL, out);
}

int tn_ctl_get_to_fd(tn_ctl_t *c, const char *base_url, const char *path, int fd, uint64_t *written,
                     tn_ctl_resp_t *out)
{
    *written = 0;
    return call(c, base_url, "GET", path, NULL, 0, fd, written, out);
}

void tn_ctl_resp_fini(tn_ctl_resp_t *r)
{
    tn_free(r->body);
    r->body = NULL;
    r->len = 0;
}

/* The server's message: the "error" (native API) or "message" (nsqd's
 * endpoints) string of a JSON body, else the body's first line. */
static void server_message(const tn_ctl_resp_t *r, char *out, size_t cap)
{
    out[0] = '\0';
    if (r->body == NULL || r->len == 0)
        return;
    yajl_val v = tn_ctl_tree(r->body);
    const char *m = NULL;
    if (v != NULL) {
        m = tn_ctl_get_str(v, "error");
        if (m == NULL)
            m = tn_ctl_get_str(v, "message");
        if (m == NULL)
            m = tn_ctl_get_str(v, "status");
    }
    char line[301];
    if (m == NULL) {
        size_t n = strcspn(r->body, "\r\n");
        snprintf(line, sizeof(line), "%.*s", (int)TN_MIN(n, (size_t)300), r->body);
        m = line;
    }
    tn_ctl_shown(m, out, cap);
    if (v != NULL)
        yajl_tree_free(v);
}

int tn_ctl_fail(const tn_ctl_resp_t *r, const char *what)
{
    char msg[512];
    server_message(r, msg, sizeof(msg));
    fprintf(stderr, "ternctl: %s: %d%s%s", what, r->status, msg[0] ? " " : "", msg);
    if (r->retry_after[0] != '\0')
        fprintf(stderr, " (retry after %ss)", r->retry_after);
    fputc('\n', stderr);
    if (r->status == 401 && !g_had_user)
        fprintf(stderr, "ternctl: no credentials were given: set --user and --password-file "
                        "(or TERN_USER and TERN_PASSWORD_FILE / TERN_PASSWORD)\n");
    else if (r->status == 401 && g_found_file[0] != '\0')
        fprintf(stderr,
                "ternctl: the password came from %s (no credentials were given and the node is "
                "local); give --password-file (or TERN_PASSWORD_FILE / TERN_PASSWORD) for "
                "another\n",
                g_found_file);
    return TN_CTL_FAIL;
}

int tn_ctl_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ternctl %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see `ternctl %s --help`)\n", cmd);
    return TN_CTL_USAGE;
}

yajl_val tn_ctl_tree(const char *text)
{
    return text != NULL && tn_json_valid(text, strlen(text)) ? yajl_tree_parse(text, NULL, 0)
                                                             : NULL;
}

yajl_val tn_ctl_parse(const tn_ctl_resp_t *r, const char *what)
{
    yajl_val v = tn_ctl_tree(r->body);
    if (v == NULL)
        fprintf(stderr, "ternctl: %s: the server's answer (%d) is not JSON\n", what, r->status);
    return v;
}

yajl_val tn_ctl_get(yajl_val obj, const char *key)
{
    if (obj == NULL || !YAJL_IS_OBJECT(obj))
        return NULL;
    for (size_t i = 0; i < obj->u.object.len; i++)
        if (strcmp(obj->u.object.keys[i], key) == 0)
            return obj->u.object.values[i];
    return NULL;
}

const char *tn_ctl_get_str(yajl_val obj, const char *key)
{
    yajl_val v = tn_ctl_get(obj, key);
    return YAJL_IS_STRING(v) ? YAJL_GET_STRING(v) : NULL;
}

bool tn_ctl_get_int(yajl_val obj, const char *key, int64_t *out)
{
    yajl_val v = tn_ctl_get(obj, key);
    if (v == NULL || !YAJL_IS_NUMBER(v))
        return false;
    if (YAJL_IS_INTEGER(v))
        *out = YAJL_GET_INTEGER(v);
    else
        *out = (int64_t)YAJL_GET_DOUBLE(v);
    return true;
}

bool tn_ctl_get_bool(yajl_val obj, const char *key, bool *out)
{
    yajl_val v = tn_ctl_get(obj, key);
    if (v == NULL || !(YAJL_IS_TRUE(v) || YAJL_IS_FALSE(v)))
        return false;
    *out = YAJL_IS_TRUE(v);
    return true;
}

char *tn_ctl_esc(const char *s, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        bool plain = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                     (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' || ch == '~';
        size_t need = plain ? 1 : 3;
        if (o + need + 1 > cap)
            break;
        if (plain) {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    if (cap > 0)
        out[o] = '\0';
    return out;
}

char *tn_ctl_shown(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        char esc[8];
        int n = 0;
        if (*p < 0x20 || *p == 0x7f)
            n = snprintf(esc, sizeof(esc), "\\x%02x", *p);
        else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            n = snprintf(esc, sizeof(esc), "\\u%04x", *++p);
        if (n > 0) {
            if (o + (size_t)n + 1 > cap)
                break;
            memcpy(out + o, esc, (size_t)n);
            o += (size_t)n;
            continue;
        }
        /* A character's bytes go together: a lead byte and its
         * continuation bytes, or none of them. */
        size_t len = 1;
        while (p[len] != '\0' && (p[len] & 0xc0) == 0x80 && *p >= 0xc0)
            len++;
        if (o + len + 1 > cap)
            break;
        memcpy(out + o, p, len);
        o += len;
        p += len - 1;
    }
    if (cap > 0)
        out[o] = '\0';
    return out;
}

int tn_ctl_parse_ms(const char *s, int64_t *out)
{
    int64_t ns = 0;
    if (tn_parse_duration_ns(s, &ns) != 0)
        return UV_EINVAL;
    *out = ns / 1000000;
    return 0;
}

void tn_ctl_print_json(const char *s, size_t len)
{
    while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == '\r'))
        len--;
    fwrite(s, 1, len, stdout);
    fputc('\n', stdout);
}

void tn_ctl_table_init(tn_ctl_table_t *t, int ncols)
{
    memset(t, 0, sizeof(*t));
    t->ncols = TN_MIN(ncols, TN_CTL_MAX_COLS);
}

int tn_ctl_table_row(tn_ctl_table_t *t, const char *const *cells)
{
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        char **n = realloc(t->cells, cap * (size_t)t->ncols * sizeof(char *));
        if (n == NULL)
            return UV_ENOMEM;
        t->cells = n;
        t->cap = cap;
    }
    char **row = t->cells + t->nrows * (size_t)t->ncols;
    for (int i = 0; i < t->ncols; i++) {
        const char *cell = cells[i] != NULL ? cells[i] : "-";
        size_t cap = 4 * strlen(cell) + 1; /* each byte at most \xNN */
        char *shown = malloc(cap);
        if (shown == NULL) {
            fprintf(stderr, "ternctl: out of memory\n");
            exit(TN_CTL_FAIL);
        }
        row[i] = tn_ctl_shown(cell, shown, cap);
    }
    t->nrows++;
    return 0;
}

void tn_ctl_table_print(const tn_ctl_table_t *t, FILE *out)
{
    size_t w[TN_CTL_MAX_COLS] = {0};
    for (size_t r = 0; r < t->nrows; r++)
        for (int i = 0; i < t->ncols; i++)
            w[i] = TN_MAX(w[i], strlen(t->cells[r * (size_t)t->ncols + (size_t)i]));
    for (size_t r = 0; r < t->nrows; r++) {
        for (int i = 0; i < t->ncols; i++) {
            const char *cell = t->cells[r * (size_t)t->ncols + (size_t)i];
            if (i + 1 == t->ncols)
                fprintf(out, "%s\n", cell);
            else
                fprintf(out, "%-*s  ", (int)w[i], cell);
        }
    }
}

void tn_ctl_table_fini(tn_ctl_table_t *t)
{
    for (size_t i = 0; i < t->nrows * (size_t)t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof(*t));
}

const char *tn_ctl_fmt_bytes(uint64_t n, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}

bool tn_ctl_wait_opt(const char *cmd, int ch, bool *wait, int64_t *wait_ms, int *rc)
{
    *rc = TN_CTL_OK;
    if (ch == 'w') {
        *wait = true;
        return true;
    }
    if (ch != 't')
        return false;
    if (tn_ctl_opt_ms(cmd, "--wait-timeout", optarg, 1, INT64_MAX / 2, wait_ms) != TN_CTL_OK)
        *rc = TN_CTL_USAGE;
    return true;
}

void tn_ctl_sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

int64_t tn_ctl_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int tn_ctl_wait_for(tn_ctl_t *c, int64_t wait_ms, int64_t poll_ms, tn_ctl_look_cb look,
                    tn_ctl_expired_cb expired, void *arg)
{
    int64_t until = tn_ctl_mono_ms() + wait_ms;
    for (;;) {
        bool more = false;
        int rc = look(c, arg, &more);
        if (!more)
            return rc;
        if (tn_ctl_mono_ms() > until) {
            expired(arg);
            return TN_CTL_FAIL;
        }
        tn_ctl_sleep_ms(poll_ms);
    }
}

const char *tn_ctl_fmt_ms(int64_t ms, char *buf, size_t cap)
{
    if (ms < 0)
        ms = 0;
    int64_t s = ms / 1000;
    if (s < 60)
        snprintf(buf, cap, "%lld.%llds", (long long)s, (long long)(ms % 1000) / 100);
    else if (s < 3600)
        snprintf(buf, cap, "%lldm%llds", (long long)(s / 60), (long long)(s % 60));
    else if (s < 86400)
        snprintf(buf, cap, "%lldh%lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
    else
        snprintf(buf, cap, "%lldd%lldh", (long long)(s / 86400), (long long)(s % 86400 / 3600));
    return buf;
}

const char *tn_ctl_user(tn_ctl_t *c)
{
    find_password_once(c);
    return c->user ? c->user : "";
}

const char *tn_ctl_password(tn_ctl_t *c)
{
    find_password_once(c);
    return c->password;
}

int tn_ctl_json_write(tn_buf_t *b, yajl_val v)
{
    int rc = 0;
    if (YAJL_IS_STRING(v)) {
        rc = tn_buf_append(b, "\"", 1);
        rc = rc ? rc : tn_buf_json_escape(b, YAJL_GET_STRING(v));
        rc = rc ? rc : tn_buf_append(b, "\"", 1);
    } else if (YAJL_IS_NUMBER(v)) {
        rc = tn_buf_append(b, v->u.number.r, strlen(v->u.number.r));
    } else if (YAJL_IS_OBJECT(v)) {
        rc = tn_buf_append(b, "{", 1);
        for (size_t i = 0; rc == 0 && i < v->u.object.len; i++) {
            rc = i ? tn_buf_append(b, ",\"", 2) : tn_buf_append(b, "\"", 1);
            rc = rc ? rc : tn_buf_json_escape(b, v->u.object.keys[i]);
            rc = rc ? rc : tn_buf_append(b, "\":", 2);
            rc = rc ? rc : tn_ctl_json_write(b, v->u.object.values[i]);
        }
        rc = rc ? rc : tn_buf_append(b, "}", 1);
    } else if (YAJL_IS_ARRAY(v)) {
        rc = tn_buf_append(b, "[", 1);
        for (size_t i = 0; rc == 0 && i < v->u.array.len; i++) {
            rc = i ? tn_buf_append(b, ",", 1) : 0;
            rc = rc ? rc : tn_ctl_json_write(b, v->u.array.values[i]);
        }
        rc = rc ? rc : tn_buf_append(b, "]", 1);
    } else if (YAJL_IS_TRUE(v)) {
        rc = tn_buf_append(b, "true", 4);
    } else if (YAJL_IS_FALSE(v)) {
        rc = tn_buf_append(b, "false", 5);
    } else {
        rc = tn_buf_append(b, "null", 4);
    }
    return rc;
}

/* One line from fd 0 into out (without its line end); false at EOF with
 * nothing read or when the line does not fit. */
static bool read_line(char *out, size_t cap, bool *toolong)
{
    size_t n = 0;
    *toolong = false;
    for (;;) {
        char ch;
        ssize_t r = read(0, &ch, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        if (ch == '\n')
            break;
        if (n + 1 >= cap) {
            *toolong = true;
            continue;
        }
        out[n++] = ch;
    }
    if (n > 0 && out[n - 1] == '\r')
        n--;
    out[n] = '\0';
    return n > 0 && !*toolong;
}

/* The terminal's settings while a prompt has echo off, for on_interrupt. */
static struct termios g_saved_tty;

/* Ctrl-C (or a termination) at a prompt: echo back on, then die of it. */
static void on_interrupt(int sig)
{
    tcsetattr(0, TCSANOW, &g_saved_tty);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Echo goes off before the prompt shows, so nothing typed after it is
 * echoed, and no typed-ahead input is thrown away (TCSANOW, not
 * TCSAFLUSH). */
static bool prompt_noecho(const char *prompt, char *out, size_t cap, bool *toolong)
{
    struct termios quiet;
    struct sigaction sa = {.sa_handler = on_interrupt}, old_int, old_term, old_hup;
    bool tty = tcgetattr(0, &g_saved_tty) == 0;
    if (tty) {
        /* A signal the caller ignores stays ignored. */
        sigaction(SIGINT, &sa, &old_int);
        sigaction(SIGTERM, &sa, &old_term);
        sigaction(SIGHUP, &sa, &old_hup);
        if (old_int.sa_handler == SIG_IGN)
            sigaction(SIGINT, &old_int, NULL);
        if (old_term.sa_handler == SIG_IGN)
            sigaction(SIGTERM, &old_term, NULL);
        if (old_hup.sa_handler == SIG_IGN)
            sigaction(SIGHUP, &old_hup, NULL);
        quiet = g_saved_tty;
        quiet.c_lflag &= ~(tcflag_t)(ECHO | ECHONL);
        quiet.c_lflag |= ICANON;
        tcsetattr(0, TCSANOW, &quiet);
    }
    fprintf(stderr, "%s", prompt);
    fflush(stderr);
    bool ok = read_line(out, cap, toolong);
    if (tty) {
        tcsetattr(0, TCSANOW, &g_saved_tty);
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
        sigaction(SIGHUP, &old_hup, NULL);
        fputc('\n', stderr);
    }
    return ok;
}

int tn_ctl_read_secret(const char *prompt, bool confirm, char *out, size_t cap)
{
    bool toolong = false;
    if (!isatty(0)) {
        if (!read_line(out, cap, &toolong)) {
            fprintf(stderr, "ternctl: %s\n",
                    toolong ? "the password on stdin is too long"
                            : "no password on stdin (its first line is the password)");
            return TN_CTL_FAIL;
        }
        return TN_CTL_OK;
    }
    if (!prompt_noecho(prompt, out, cap, &toolong)) {
        fprintf(stderr, "ternctl: %s\n", toolong ? "password too long" : "empty password");
        return TN_CTL_FAIL;
    }
    if (confirm) {
        char again[1100];
        bool ok = prompt_noecho("Again: ", again, sizeof(again), &toolong);
        bool same = ok && strcmp(again, out) == 0;
        memset(again, 0, sizeof(again));
        if (!same) {
            memset(out, 0, cap);
            fprintf(stderr, "ternctl: the two passwords differ\n");
            return TN_CTL_FAIL;
        }
    }
    return TN_CTL_OK;
}

int tn_ctl_opt_int(const char *cmd, const char *flag, const char *v, int64_t min, int64_t max,
                   int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < min || x > max)
        return tn_ctl_usage(cmd, "%s %s: expected an integer from %lld to %lld", flag, v,
                            (long long)min, (long long)max);
    *out = x;
    return TN_CTL_OK;
}

int tn_ctl_opt_ms(const char *cmd, const char *flag, const char *v, int64_t min, int64_t max,
                  int64_t *out)
{
    int64_t ms = 0;
    if (tn_ctl_parse_ms(v, &ms) != 0 || ms < min || ms > max) {
        char lo[32], hi[32];
        return tn_ctl_usage(cmd, "%s %s: expected a duration from %s to %s (250ms, 90s, 1h)", flag,
                            v, tn_ctl_fmt_dur(min, lo, sizeof(lo)),
                            tn_ctl_fmt_dur(max, hi, sizeof(hi)));
    }
    *out = ms;
    return TN_CTL_OK;
}

const char *tn_ctl_fmt_dur(int64_t ms, char *buf, size_t cap)
{
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {{"h", 3600000}, {"m", 60000}, {"s", 1000}};
    for (size_t i = 0; ms != 0 && i < TN_ARRAY_SIZE(units); i++) {
        if (ms % units[i].ms == 0) {
            snprintf(buf, cap, "%lld%s", (long long)(ms / units[i].ms), units[i].unit);
            return buf;
        }
    }
    if (ms == 0)
        snprintf(buf, cap, "0");
    else
        snprintf(buf, cap, "%lldms", (long long)ms);
    return buf;
}
