/* ternctl: the command-line tool for a tern node or cluster. This file is
 * the entry point: the command table, the global flags, help and version.
 *
 *   ternctl [global flags] <command> [arguments]
 *
 * The global flags may stand anywhere before a `--` (main takes them out of
 * argv before the command runs); after `--` every word is the command's,
 * and so is, after the command's name, a global flag the command's usage
 * names itself (drain's --timeout). */
#include "core/platform.h"

#include "cmd/ternctl/ctl.h"
#include "cmd/version.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static const tn_ctl_cmd_t *const commands[] = {
    &tn_ctl_cmd_status,  &tn_ctl_cmd_drain,      &tn_ctl_cmd_topics, &tn_ctl_cmd_channels,
    &tn_ctl_cmd_produce, &tn_ctl_cmd_consume,    &tn_ctl_cmd_tail,   &tn_ctl_cmd_users,
    &tn_ctl_cmd_cluster, &tn_ctl_cmd_stats,      &tn_ctl_cmd_scrub,  &tn_ctl_cmd_backup,
    &tn_ctl_cmd_restore, &tn_ctl_cmd_partitions,
};

static const char global_help[] =
    "Global flags (anywhere before `--`; flags > environment > config file > default):\n"
    "  --url URL             the node's API address (TERN_URL; default http://127.0.0.1:4151;\n"
    "                        https:// verifies the server's certificate and name)\n"
    "  --user NAME           user for HTTP Basic authentication (TERN_USER; default admin\n"
    "                        when a password is given; without one, asked on a terminal)\n"
    "  --password-file FILE  read the password from FILE's first line (TERN_PASSWORD_FILE, or\n"
    "                        TERN_PASSWORD itself); never on the command line; with no\n"
    "                        credentials at all and a local URL, the node's own file, the\n"
    "                        first readable of $TERN_DATA_PATH/admin-password,\n"
    "                        ./data/admin-password, /var/lib/tern/admin-password\n"
    "  --ca-file FILE        PEM CA certificates for https (TERN_CA_FILE; default the\n"
    "                        system store)\n"
    "  --timeout D           bound on each wait for the server (default 30s)\n"
    "  --config FILE         config file (default $XDG_CONFIG_HOME/tern/ternctl.conf or\n"
    "                        ~/.config/tern/ternctl.conf): key = value lines with keys url,\n"
    "                        user, password, password-file, ca-file, timeout\n"
    "  --json                print JSON instead of tables\n"
    "  --help, -h            help (`ternctl <command> --help` for a command's)\n"
    "  --version             print the version\n"
    "\n"
    "Exit codes: 0 success, 1 the request failed (the server's error is printed), 2 usage.\n";

static void print_help(FILE *out)
{
    fprintf(out, "usage: ternctl [global flags] <command> [arguments]\n\nCommands:\n");
    for (size_t i = 0; i < TN_ARRAY_SIZE(commands); i++)
        fprintf(out, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(out, "\n%s", global_help);
}

static const tn_ctl_cmd_t *find(const char *name)
{
    for (size_t i = 0; i < TN_ARRAY_SIZE(commands); i++)
        if (strcmp(commands[i]->name, name) == 0)
            return commands[i];
    return NULL;
}

/* Whether a is the flag name (as --name or --name=value); *val gets the
 * value of the =value form or NULL. */
static bool is_flag(const char *a, const char *name, const char **val)
{
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return false;
    if (a[n] == '\0') {
        *val = NULL;
        return true;
    }
    if (a[n] == '=') {
        *val = a + n + 1;
        return true;
    }
    return false;
}

/* Whether cmd's usage (its help text's first paragraph) names flag: then
 * the flag, after the command's name, is the command's own (drain's
 * --timeout is how long the drain may take, not the request bound). */
static bool owned(const tn_ctl_cmd_t *cmd, const char *flag)
{
    if (cmd == NULL)
        return false;
    const char *end = strstr(cmd->help, "\n\n");
    size_t fl = strlen(flag);
    for (const char *p = cmd->help; (p = strstr(p, flag)) != NULL; p += fl) {
        if (end != NULL && p > end)
            return false;
        char next = p[fl];
        if (!(next >= 'a' && next <= 'z') && next != '-')
            return true;
    }
    return false;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        size_t off;
    } valued[] = {
        {"--url", offsetof(tn_ctl_flags_t, url)},
        {"--user", offsetof(tn_ctl_flags_t, user)},
        {"--password-file", offsetof(tn_ctl_flags_t, password_file)},
        {"--ca-file", offsetof(tn_ctl_flags_t, ca_file)},
        {"--timeout", offsetof(tn_ctl_flags_t, timeout)},
        {"--config", offsetof(tn_ctl_flags_t, config)},
    };
    tn_ctl_flags_t f = {0};
    bool help = false, version = false;
    /* Take the global flags out; what stays is the command and its words. */
    char **rest = calloc((size_t)argc + 1, sizeof(char *));
    if (rest == NULL) {
        fprintf(stderr, "ternctl: out of memory\n");
        return TN_CTL_FAIL;
    }
    int nrest = 0;
    bool dashdash = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        if (dashdash) {
            rest[nrest++] = argv[i];
            continue;
        }
        if (strcmp(a, "--") == 0) {
            dashdash = true;
            rest[nrest++] = argv[i];
            continue;
        }
        if (is_flag(a, "--password", &val)) {
            fprintf(stderr, "ternctl: --password is not accepted: a password on the command "
                            "line shows in `ps` and shell history; use --password-file FILE, "
                            "TERN_PASSWORD_FILE or TERN_PASSWORD\n");
            free(rest);
            return TN_CTL_USAGE;
        }
        bool taken = false;
        const tn_ctl_cmd_t *cmd = nrest > 0 ? find(rest[0]) : NULL;
        for (size_t k = 0; k < TN_ARRAY_SIZE(valued); k++) {
            if (!is_flag(a, valued[k].name, &val))
                continue;
            if (owned(cmd, valued[k].name))
                break; /* the command's own flag: left with its value */
            if (val == NULL) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "ternctl: %s needs a value\n", valued[k].name);
                    free(rest);
                    return TN_CTL_USAGE;
                }
                val = argv[++i];
            }
            *(const char **)((char *)&f + valued[k].off) = val;
            taken = true;
            break;
        }
        if (taken)
            continue;
        if (strcmp(a, "--json") == 0) {
            f.json = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help = true;
        } else if (strcmp(a, "--version") == 0 && nrest == 0) {
            version = true;
        } else {
            rest[nrest++] = argv[i];
        }
    }
    rest[nrest] = NULL;
    int rc;
    if (version) {
        printf("ternctl %s\n", TN_VERSION);
        rc = TN_CTL_OK;
    } else if (nrest == 0) {
        print_help(help ? stdout : stderr);
        rc = help ? TN_CTL_OK : TN_CTL_USAGE;
    } else if (strcmp(rest[0], "help") == 0) {
        const tn_ctl_cmd_t *cmd = nrest > 1 ? find(rest[1]) : NULL;
        if (nrest > 1 && cmd == NULL) {
            fprintf(stderr, "ternctl: unknown command \"%s\" (see `ternctl --help`)\n", rest[1]);
            rc = TN_CTL_USAGE;
        } else {
            if (cmd != NULL)
                printf("%s\n%s", cmd->help, global_help);
            else
                print_help(stdout);
            rc = TN_CTL_OK;
        }
    } else {
        const tn_ctl_cmd_t *cmd = find(rest[0]);
        if (cmd == NULL) {
            fprintf(stderr, "ternctl: unknown command \"%s\" (see `ternctl --help`)\n", rest[0]);
            rc = TN_CTL_USAGE;
        } else if (help) {
            printf("%s\n%s", cmd->help, global_help);
            rc = TN_CTL_OK;
        } else {
            tn_ctl_t *c = NULL;
            rc = tn_ctl_new(&f, environ, &c);
            if (rc == TN_CTL_OK) {
                rc = cmd->run(c, nrest, rest);
                tn_ctl_free(c);
            }
        }
    }
    free(rest);
    return rc;
}
