/* `ternctl users list|create|delete|grant|revoke|password`: tern users and
 * their grants through /v1/users. grant and revoke read the user's grants,
 * change them and PUT them back (the API replaces grants as a whole).
 * New passwords never come from the command line: a prompt with echo off
 * on a terminal, else stdin's first line, or --new-password-file. */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CMD    "users"
#define PW_CAP 1100

static int new_password(const char *file, const char *who, char *out)
{
    if (file == NULL) {
        char prompt[200];
        snprintf(prompt, sizeof(prompt), "New password for %s: ", who);
        return tn_ctl_read_secret(prompt, true, out, PW_CAP);
    }
    FILE *f = fopen(file, "r");
    if (f == NULL) {
        fprintf(stderr, "ternctl: cannot read %s: %s\n", file, strerror(errno));
        return TN_CTL_FAIL;
    }
    bool got = fgets(out, PW_CAP, f) != NULL;
    fclose(f);
    size_t n = got ? strcspn(out, "\r\n") : 0;
    out[n] = '\0';
    if (n == 0) {
        fprintf(stderr, "ternctl: %s holds no password (its first line is the password)\n", file);
        return TN_CTL_FAIL;
    }
    return TN_CTL_OK;
}

/* "action[:p1,p2]" into a JSON grant object appended to b. */
static int grant_json(const char *spec, tn_buf_t *b)
{
    const char *colon = strchr(spec, ':');
    size_t al = colon ? (size_t)(colon - spec) : strlen(spec);
    tn_buf_append(b, "{\"action\":\"", 11);
    tn_buf_json_escape_n(b, spec, al);
    tn_buf_append(b, "\",\"patterns\":[", 14);
    if (colon != NULL) {
        const char *p = colon + 1;
        bool first = true;
        while (*p != '\0') {
            size_t pl = strcspn(p, ",");
            if (pl > 0) {
                tn_buf_append(b, first ? "\"" : ",\"", first ? 1 : 2);
                tn_buf_json_escape_n(b, p, pl);
                tn_buf_append(b, "\"", 1);
                first = false;
            }
            p += pl + (p[pl] == ',');
        }
    }
    return tn_buf_append(b, "]}", 2);
}

static const char *grants_text(yajl_val grants, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; YAJL_IS_ARRAY(grants) && i < grants->u.array.len && n < cap; i++) {
        yajl_val g = grants->u.array.values[i];
        const char *a = tn_ctl_get_str(g, "action");
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? " " : "", a ? a : "?");
        yajl_val ps = tn_ctl_get(g, "patterns");
        for (size_t k = 0; YAJL_IS_ARRAY(ps) && k < ps->u.array.len && n < cap; k++)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", k ? "," : ":",
                                  YAJL_GET_STRING(ps->u.array.values[k]));
    }
    return buf[0] ? buf : "-";
}

static int list(tn_ctl_t *c, int argc, char **argv)
{
    if (argc > 2)
        return tn_ctl_usage(CMD, "list takes at most one user name");
    char esc[300], path[512];
    if (argc == 2)
        snprintf(path, sizeof(path), "/v1/users/%s", tn_ctl_esc(argv[1], esc, sizeof(esc)));
    else
        snprintf(path, sizeof(path), "/v1/users");
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "GET", path, NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    int rc = TN_CTL_OK;
    if (r.status != 200) {
        rc = tn_ctl_fail(&r, argc == 2 ? "get user" : "list users");
    } else if (tn_ctl_json(c)) {
        tn_ctl_print_json(r.body, r.len);
    } else {
        yajl_val v = tn_ctl_parse(&r, "list users");
        tn_ctl_table_t t;
        tn_ctl_table_init(&t, 4);
        const char *head[] = {"USER", "ROOT", "GRANTS", "CREATED"};
        tn_ctl_table_row(&t, head);
        size_t n = YAJL_IS_ARRAY(v) ? v->u.array.len : v != NULL ? 1 : 0;
        for (size_t i = 0; i < n; i++) {
            yajl_val u = YAJL_IS_ARRAY(v) ? v->u.array.values[i] : v;
            bool root = false;
            int64_t created = 0;
            tn_ctl_get_bool(u, "root", &root);
            tn_ctl_get_int(u, "created_at_ms", &created);
            char gs[4096], when[40];
            time_t ts = (time_t)(created / 1000);
            struct tm tm;
            gmtime_r(&ts, &tm);
            strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
            const char *row[] = {tn_ctl_get_str(u, "username"), root ? "yes" : "no",
                                 grants_text(tn_ctl_get(u, "grants"), gs, sizeof(gs)), when};
            tn_ctl_table_row(&t, row);
        }
        tn_ctl_table_print(&t, stdout);
        tn_ctl_table_fini(&t);
        if (v == NULL)
            rc = TN_CTL_FAIL;
        else
            yajl_tree_free(v);
    }
    tn_ctl_resp_fini(&r);
    return rc;
}

static int create(tn_ctl_t *c, int argc, char **argv)
{
    enum { O_GRANT = 1000, O_PWFILE };
    static const struct option longs[] = {{"grant", required_argument, NULL, O_GRANT},
                                          {"new-password-file", required_argument, NULL, O_PWFILE},
                                          {NULL, 0, NULL, 0}};
    tn_buf_t grants;
    tn_buf_init(&grants);
    tn_buf_append(&grants, "[", 1);
    const char *pwfile = NULL;
    size_t ng = 0;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        if (ch == O_GRANT) {
            if (ng++ > 0)
                tn_buf_append(&grants, ",", 1);
            grant_json(optarg, &grants);
        } else if (ch == O_PWFILE) {
            pwfile = optarg;
        } else {
            tn_buf_fini(&grants);
            return tn_ctl_usage(CMD, "create: unknown option %s", argv[optind - 1]);
        }
    }
    tn_buf_append(&grants, "]", 1);
    if (argc - optind != 1) {
        tn_buf_fini(&grants);
        return tn_ctl_usage(CMD, "create takes one user name (and --grant options)");
    }
    const char *name = argv[optind];
    char pw[PW_CAP];
    int rc = new_password(pwfile, name, pw);
    if (rc != TN_CTL_OK) {
        tn_buf_fini(&grants);
        return rc;
    }
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"username\":\"", 13);
    tn_buf_json_escape(&b, name);
    tn_buf_append(&b, "\",\"password\":\"", 14);
    tn_buf_json_escape(&b, pw);
    tn_buf_append(&b, "\",\"grants\":", 11);
    tn_buf_append(&b, tn_buf_data(&grants), tn_buf_size(&grants));
    tn_buf_append(&b, "}", 1);
    memset(pw, 0, sizeof(pw));
    tn_buf_fini(&grants);
    tn_ctl_resp_t r;
    char what[200];
    snprintf(what, sizeof(what), "create user %s", name);
    int e = tn_ctl_call(c, "POST", "/v1/users", tn_buf_data(&b), tn_buf_size(&b), &r);
    memset(tn_buf_data(&b), 0, tn_buf_size(&b));
    tn_buf_fini(&b);
    if (e != 0)
        return TN_CTL_FAIL;
    if (r.status != 201)
        rc = tn_ctl_fail(&r, what);
    else if (tn_ctl_json(c))
        tn_ctl_print_json(r.body, r.len);
    else
        printf("created user %s\n", name);
    tn_ctl_resp_fini(&r);
    return rc;
}

static int delete_user(tn_ctl_t *c, int argc, char **argv)
{
    if (argc != 2)
        return tn_ctl_usage(CMD, "delete takes one user name");
    char esc[300], path[512], what[200];
    snprintf(path, sizeof(path), "/v1/users/%s", tn_ctl_esc(argv[1], esc, sizeof(esc)));
    snprintf(what, sizeof(what), "delete user %s", argv[1]);
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "DELETE", path, NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    int rc = TN_CTL_OK;
    if (r.status != 204)
        rc = tn_ctl_fail(&r, what);
    else if (tn_ctl_json(c))
        printf("{\"deleted\":true}\n");
    else
        printf("deleted user %s\n", argv[1]);
    tn_ctl_resp_fini(&r);
    return rc;
}

static bool has_pattern(yajl_val ps, const char *p, size_t pl)
{
    for (size_t k = 0; YAJL_IS_ARRAY(ps) && k < ps->u.array.len; k++) {
        const char *s = YAJL_GET_STRING(ps->u.array.values[k]);
        if (s != NULL && strlen(s) == pl && memcmp(s, p, pl) == 0)
            return true;
    }
    return false;
}

/* grant (add) or revoke (remove) spec "action[:patterns]" on a user. */
static int change_grants(tn_ctl_t *c, int argc, char **argv, bool add)
{
    const char *sub = add ? "grant" : "revoke";
    if (argc != 3)
        return tn_ctl_usage(CMD, "%s takes a user name and ACTION[:PATTERN,...]", sub);
    const char *name = argv[1], *spec = argv[2];
    char esc[300], path[512], what[300];
    snprintf(path, sizeof(path), "/v1/users/%s", tn_ctl_esc(name, esc, sizeof(esc)));
    snprintf(what, sizeof(what), "%s %s %s", sub, name, spec);
    tn_ctl_resp_t r;
    if (tn_ctl_call(c, "GET", path, NULL, 0, &r) != 0)
        return TN_CTL_FAIL;
    if (r.status != 200) {
        int rc = tn_ctl_fail(&r, what);
        tn_ctl_resp_fini(&r);
        return rc;
    }
    yajl_val u = tn_ctl_parse(&r, what);
    yajl_val grants = tn_ctl_get(u, "grants");
    const char *colon = strchr(spec, ':');
    size_t al = colon ? (size_t)(colon - spec) : strlen(spec);
    const char *pats = colon ? colon + 1 : "";
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"grants\":[", 11);
    size_t out = 0;
    bool found = false, changed = false;
    for (size_t i = 0; YAJL_IS_ARRAY(grants) && i < grants->u.array.len; i++) {
        yajl_val g = grants->u.array.values[i];
        const char *a = tn_ctl_get_str(g, "action");
        yajl_val ps = tn_ctl_get(g, "patterns");
        bool same = a != NULL && strlen(a) == al && memcmp(a, spec, al) == 0;
        if (!same) {
            if (out++ > 0)
                tn_buf_append(&b, ",", 1);
            tn_ctl_json_write(&b, g);
            continue;
        }
        found = true;
        /* The patterns this grant keeps: for revoke, all but the named
         * ones (none when no pattern is named); for grant, all plus the
         * new ones. */
        tn_buf_t pb;
        tn_buf_init(&pb);
        size_t np = 0;
        for (size_t k = 0; YAJL_IS_ARRAY(ps) && k < ps->u.array.len; k++) {
            const char *p = YAJL_GET_STRING(ps->u.array.values[k]);
            bool named = false;
            for (const char *q = pats; *q != '\0';) {
                size_t ql = strcspn(q, ",");
                if (ql == strlen(p) && memcmp(q, p, ql) == 0)
                    named = true;
                q += ql + (q[ql] == ',');
            }
            if (!add && (named || *pats == '\0')) {
                changed = true;
                continue;
            }
            if (np++ > 0)
                tn_buf_append(&pb, ",", 1);
            tn_buf_append(&pb, "\"", 1);
            tn_buf_json_escape(&pb, p);
            tn_buf_append(&pb, "\"", 1);
        }
        if (add) {
            for (const char *q = pats; *q != '\0';) {
                size_t ql = strcspn(q, ",");
                if (ql > 0 && !has_pattern(ps, q, ql)) {
                    if (np++ > 0)
                        tn_buf_append(&pb, ",", 1);
                    tn_buf_append(&pb, "\"", 1);
                    tn_buf_json_escape_n(&pb, q, ql);
                    tn_buf_append(&pb, "\"", 1);
                    changed = true;
                }
                q += ql + (q[ql] == ',');
            }
        }
        bool keep = add || (np > 0 && *pats != '\0');
        if (!add && *pats == '\0')
            changed = true;
        if (keep) {
            if (out++ > 0)
                tn_buf_append(&b, ",", 1);
            tn_buf_append(&b, "{\"action\":\"", 11);
            tn_buf_json_escape_n(&b, spec, al);
            tn_buf_append(&b, "\",\"patterns\":[", 14);
            tn_buf_append(&b, tn_buf_data(&pb) ? tn_buf_data(&pb) : "", tn_buf_size(&pb));
            tn_buf_append(&b, "]}", 2);
        }
        tn_buf_fini(&pb);
    }
    if (add && !found) {
        if (out++ > 0)
            tn_buf_append(&b, ",", 1);
        grant_json(spec, &b);
        changed = true;
    }
    tn_buf_append(&b, "]}", 2);
    if (u != NULL)
        yajl_tree_free(u);
    tn_ctl_resp_fini(&r);
    int rc = TN_CTL_OK;
    if (u == NULL) {
        rc = TN_CTL_FAIL;
    } else if (!changed) {
        if (add) {
            printf("user %s already has %s\n", name, spec);
        } else {
            fprintf(stderr, "ternctl: %s: user %s has no such grant\n", what, name);
            rc = TN_CTL_FAIL;
        }
    } else {
        char gpath[600];
        snprintf(gpath, sizeof(gpath), "%s/grants", path);
        if (tn_ctl_call(c, "PUT", gpath, tn_buf_data(&b), tn_buf_size(&b), &r) != 0) {
            rc = TN_CTL_FAIL;
        } else {
            if (r.status != 200)
                rc = tn_ctl_fail(&r, what);
            else if (tn_ctl_json(c))
                tn_ctl_print_json(r.body, r.len);
            else
                printf("%s %s: %s\n", add ? "granted" : "revoked", name, spec);
            tn_ctl_resp_fini(&r);
        }
    }
    tn_buf_fini(&b);
    return rc;
}

static int password(tn_ctl_t *c, int argc, char **argv)
{
    enum { O_PWFILE = 1000 };
    static const struct option longs[] = {{"new-password-file", required_argument, NULL, O_PWFILE},
                                          {NULL, 0, NULL, 0}};
    const char *pwfile = NULL;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        if (ch == O_PWFILE)
            pwfile = optarg;
        else
            return tn_ctl_usage(CMD, "password: unknown option %s", argv[optind - 1]);
    }
    if (argc - optind > 1)
        return tn_ctl_usage(CMD, "password takes at most one user name (default: yourself)");
    const char *name = argc - optind == 1 ? argv[optind] : tn_ctl_user(c);
    if (name[0] == '\0')
        return tn_ctl_usage(CMD, "password: whose? give a user name or --user");
    char pw[PW_CAP];
    int rc = new_password(pwfile, name, pw);
    if (rc != TN_CTL_OK)
        return rc;
    tn_buf_t b;
    tn_buf_init(&b);
    tn_buf_append(&b, "{\"new_password\":\"", 17);
    tn_buf_json_escape(&b, pw);
    tn_buf_append(&b, "\"", 1);
    memset(pw, 0, sizeof(pw));
    /* Changing your own: send the current password, which a user without
     * admin rights must give. */
    if (strcmp(name, tn_ctl_user(c)) == 0 && tn_ctl_password(c) != NULL) {
        tn_buf_append(&b, ",\"current_password\":\"", 21);
        tn_buf_json_escape(&b, tn_ctl_password(c));
        tn_buf_append(&b, "\"", 1);
    }
    tn_buf_append(&b, "}", 1);
    char esc[300], path[512], what[200];
    snprintf(path, sizeof(path), "/v1/users/%s/password", tn_ctl_esc(name, esc, sizeof(esc)));
    snprintf(what, sizeof(what), "change the password of %s", name);
    tn_ctl_resp_t r;
    int e = tn_ctl_call(c, "PUT", path, tn_buf_data(&b), tn_buf_size(&b), &r);
    memset(tn_buf_data(&b), 0, tn_buf_size(&b));
    tn_buf_fini(&b);
    if (e != 0)
        return TN_CTL_FAIL;
    if (r.status != 204)
        rc = tn_ctl_fail(&r, what);
    else if (tn_ctl_json(c))
        printf("{\"changed\":true}\n");
    else
        printf("changed the password of %s\n", name);
    tn_ctl_resp_fini(&r);
    return rc;
}

static int run(tn_ctl_t *c, int argc, char **argv)
{
    if (argc < 2)
        return tn_ctl_usage(CMD, "which one: list, create, delete, grant, revoke or password?");
    const char *sub = argv[1];
    if (strcmp(sub, "list") == 0)
        return list(c, argc - 1, argv + 1);
    if (strcmp(sub, "create") == 0)
        return create(c, argc - 1, argv + 1);
    if (strcmp(sub, "delete") == 0)
        return delete_user(c, argc - 1, argv + 1);
    if (strcmp(sub, "grant") == 0)
        return change_grants(c, argc - 1, argv + 1, true);
    if (strcmp(sub, "revoke") == 0)
        return change_grants(c, argc - 1, argv + 1, false);
    if (strcmp(sub, "password") == 0)
        return password(c, argc - 1, argv + 1);
    return tn_ctl_usage(CMD, "unknown subcommand \"%s\"", sub);
}

const tn_ctl_cmd_t tn_ctl_cmd_users = {
    .name = "users",
    .summary = "list, create and delete users; grant, revoke; change passwords",
    .help = "usage: ternctl users list [NAME]\n"
            "       ternctl users create NAME [--grant ACTION[:PATTERN,...]]...\n"
            "                                 [--new-password-file F]\n"
            "       ternctl users delete NAME\n"
            "       ternctl users grant NAME ACTION[:PATTERN,...]\n"
            "       ternctl users revoke NAME ACTION[:PATTERN,...]\n"
            "       ternctl users password [NAME] [--new-password-file F]\n"
            "\n"
            "ACTION is produce, consume, create or admin (admin takes no patterns); a\n"
            "PATTERN is a topic name or a prefix ending in * (`orders-*`, `*`).\n"
            "\n"
            "list      every user with its grants (one user with NAME)\n"
            "create    a user with the given grants (none: it may only change its password)\n"
            "delete    a user (not the root user, not yourself)\n"
            "grant     add patterns to the user's ACTION grant (or the grant itself)\n"
            "revoke    remove the named patterns from the ACTION grant, or with no patterns\n"
            "          the whole grant\n"
            "password  set NAME's password (default: your own; yours is sent as the current\n"
            "          password when you change your own)\n"
            "\n"
            "New passwords are read from the terminal with echo off (asked twice), or from\n"
            "stdin's first line when stdin is not a terminal, or from the first line of\n"
            "--new-password-file F; never from the command line. (--password-file is the\n"
            "global flag for your own credentials.)\n"
            "\n"
            "Examples:\n"
            "  ternctl users create billing --grant consume:orders-* --grant produce:billing\n"
            "  ternctl users grant billing produce:invoices\n"
            "  ternctl users revoke billing consume\n"
            "  ternctl users password billing --new-password-file /run/secrets/billing\n",
    .run = run,
};
