/* ternctl's command interface: what every command file (status.c,
 * topics.c, drain.c, backup.c, ...) codes against. A command is a
 * tn_ctl_cmd_t in the table of main.c; it reaches the node through
 * tn_ctl_call, which carries the connection the global flags, the
 * environment and the config file chose (see ctl.c), and exits with
 * TN_CTL_OK, TN_CTL_FAIL (the request failed: the server's error printed)
 * or TN_CTL_USAGE (bad arguments).
 *
 * main.c takes the global flags (--url, --user, --password-file,
 * --ca-file, --json, --timeout, --config) out of argv wherever they stand
 * before a `--`, and answers `<command> --help` itself with the command's
 * help text, so a command's run() sees only its own arguments. A command
 * may have a flag of the same name as a global one (drain's --timeout):
 * when the first paragraph of its help (the usage lines) names it, that
 * flag after the command's name is left in argv for the command, and only
 * before the name is it the global one.
 *
 * Thread safety: one thread (ternctl is single-threaded). */
#ifndef TN_CMD_TERNCTL_CTL_H
#define TN_CMD_TERNCTL_CTL_H

#include "core/platform.h"

#include "core/buf.h"

#include <stdio.h>
#include <yajl/yajl_tree.h>

enum { TN_CTL_OK = 0, TN_CTL_FAIL = 1, TN_CTL_USAGE = 2 }; /* exit codes */
typedef struct tn_ctl_s tn_ctl_t; /* connection (url, user, password, CA) + --json */
typedef struct {
    int status; /* HTTP status */
    char *body; /* NUL-terminated, owned by the response */
    size_t len;
    char retry_after[32]; /* Retry-After header, "" if none */
} tn_ctl_resp_t;
typedef struct {
    const char *name;    /* "backup" */
    const char *summary; /* one line for `ternctl --help` */
    const char *help;    /* full text for `ternctl <name> --help`: usage, options, examples */
    int (*run)(tn_ctl_t *c, int argc, char **argv); /* argv[0] is the command name (getopt from
                                                     * optind=1); returns TN_CTL_OK/FAIL/USAGE */
} tn_ctl_cmd_t;

/* One request to the node the flags/env/config name. 0 when any HTTP answer came (look at
 * out->status); <0 when none did, and the reason is printed to stderr ("ternctl: cannot reach
 * http://127.0.0.1:4151: connection refused"). body may be NULL (len 0). */
int tn_ctl_call(tn_ctl_t *c, const char *method, const char *path, const char *body, size_t len,
                tn_ctl_resp_t *out);
/* The same to another node's base URL ("http://127.0.0.1:4251"), same credentials and CA. */
int tn_ctl_call_url(tn_ctl_t *c, const char *base_url, const char *method, const char *path,
                    const char *body, size_t len, tn_ctl_resp_t *out);
/* The same on a client of its own, made and freed here, whose bound on each wait is
 * timeout_ms (<= 0: --timeout's): for a request on a thread other than the command's (c's
 * cached clients are the command thread's alone; c is only read, and the command thread
 * must have made a request through c first, which settles its credentials). */
int tn_ctl_call_own(tn_ctl_t *c, const char *base_url, const char *method, const char *path,
                    int timeout_ms, tn_ctl_resp_t *out);
/* Like tn_ctl_call_url but a 2xx body is streamed into fd (not kept; out->body holds only an
 * error body); *written is the byte count. For big downloads (backup). */
int tn_ctl_get_to_fd(tn_ctl_t *c, const char *base_url, const char *path, int fd, uint64_t *written,
                     tn_ctl_resp_t *out);
void tn_ctl_resp_fini(tn_ctl_resp_t *r);
/* Prints "ternctl: <what>: <status> <the server's error message from its JSON body>" to stderr
 * and returns TN_CTL_FAIL. */
int tn_ctl_fail(const tn_ctl_resp_t *r, const char *what);
bool tn_ctl_json(const tn_ctl_t *c); /* --json given: print the server's JSON / a JSON result */
const char *tn_ctl_base_url(const tn_ctl_t *c);

/* The commands (one file each, beside this one). */
extern const tn_ctl_cmd_t tn_ctl_cmd_status;
extern const tn_ctl_cmd_t tn_ctl_cmd_topics;
extern const tn_ctl_cmd_t tn_ctl_cmd_channels;
extern const tn_ctl_cmd_t tn_ctl_cmd_produce;
extern const tn_ctl_cmd_t tn_ctl_cmd_consume;
extern const tn_ctl_cmd_t tn_ctl_cmd_tail;
extern const tn_ctl_cmd_t tn_ctl_cmd_users;
extern const tn_ctl_cmd_t tn_ctl_cmd_cluster;
extern const tn_ctl_cmd_t tn_ctl_cmd_stats;
extern const tn_ctl_cmd_t tn_ctl_cmd_scrub;
extern const tn_ctl_cmd_t tn_ctl_cmd_backup;
extern const tn_ctl_cmd_t tn_ctl_cmd_restore;
extern const tn_ctl_cmd_t tn_ctl_cmd_drain;
extern const tn_ctl_cmd_t tn_ctl_cmd_partitions;

/* --- helpers for command files ------------------------------------------------ */

/* Prints "ternctl <cmd>: <message>" and a pointer to --help to stderr, and
 * returns TN_CTL_USAGE. */
int tn_ctl_usage(const char *cmd, const char *fmt, ...) TN_PRINTF(2, 3);

/* The request bound (--timeout) in milliseconds. */
int tn_ctl_timeout_ms(const tn_ctl_t *c);

/* Parse text (NUL-terminated) as JSON: a tree the caller frees with
 * yajl_tree_free, or NULL when it is not one JSON value or is nested
 * deeper than TN_JSON_MAX_DEPTH (yajl_tree_free recurses once per level:
 * a file or answer nested a million deep overflowed the stack). Every
 * yajl tree ternctl builds goes through it. */
yajl_val tn_ctl_tree(const char *text);

/* Parse a response body as JSON: a tree the caller frees with
 * yajl_tree_free, or NULL (and "ternctl: <what>: the server's answer is not
 * JSON" printed). */
yajl_val tn_ctl_parse(const tn_ctl_resp_t *r, const char *what);

/* Members of a parsed object: the value at key, or NULL when absent or of
 * another type. Strings come back borrowed from the tree. */
yajl_val tn_ctl_get(yajl_val obj, const char *key);
const char *tn_ctl_get_str(yajl_val obj, const char *key); /* NULL: absent or not a string */
bool tn_ctl_get_int(yajl_val obj, const char *key, int64_t *out);
bool tn_ctl_get_bool(yajl_val obj, const char *key, bool *out);

/* Percent-encode s for a path segment or a query value into out[cap]
 * (unreserved characters stay). Returns out; a value that does not fit is
 * cut at a character boundary that fits (callers size out for the name
 * limits they checked). */
char *tn_ctl_esc(const char *s, char *out, size_t cap);

/* s as it may go to a terminal, into out[cap]: a control character (C0,
 * DEL, and C1 as UTF-8 encodes it) is shown as \xNN (\u0080..\u009f for
 * C1), so a server's text cannot move the cursor, retitle the window or
 * hide what came before. Returns out; cut at a character that fits. */
char *tn_ctl_shown(const char *s, char *out, size_t cap);

/* A duration ("5s", "250ms", "1m30s") in milliseconds. 0 or UV_EINVAL. */
int tn_ctl_parse_ms(const char *s, int64_t *out);

/* Append v as compact JSON to b (numbers as the server wrote them). 0 or
 * UV_ENOMEM. */
int tn_ctl_json_write(tn_buf_t *b, yajl_val v);

/* The connection's user ("" when none) and password (NULL when none),
 * borrowed; not const, as the first use may find the local node's password
 * file (ctl.c). */
const char *tn_ctl_user(tn_ctl_t *c);
const char *tn_ctl_password(tn_ctl_t *c);

/* Read a secret: from the terminal with echo off when stdin is a tty
 * (prompt, and with confirm the same twice), else stdin's first line.
 * 0 with out (NUL-terminated, at most cap-1 bytes), or TN_CTL_FAIL with the
 * reason printed (empty, too long, the two did not match). */
int tn_ctl_read_secret(const char *prompt, bool confirm, char *out, size_t cap);

/* Option values for command cmd's flag: an integer in [min, max], or a
 * duration in milliseconds (a Go duration, or 0) in [min, max]. TN_CTL_OK
 * with *out, else the usage error printed and TN_CTL_USAGE. */
int tn_ctl_opt_int(const char *cmd, const char *flag, const char *v, int64_t min, int64_t max,
                   int64_t *out);
int tn_ctl_opt_ms(const char *cmd, const char *flag, const char *v, int64_t min, int64_t max,
                  int64_t *out);

/* A millisecond duration in its largest exact unit ("7d" is "168h", "90s",
 * "250ms", "0"). */
const char *tn_ctl_fmt_dur(int64_t ms, char *buf, size_t cap);

/* Print s followed by a newline to stdout, as the --json output. */
void tn_ctl_print_json(const char *s, size_t len);

/* A table printed with its columns aligned: add the header row and then
 * every row (cells copied), then print. Rows hold at most TN_CTL_MAX_COLS
 * cells. */
#define TN_CTL_MAX_COLS 16
typedef struct {
    int ncols;
    size_t nrows;
    size_t cap;
    char **cells; /* nrows * ncols, owned */
} tn_ctl_table_t;
void tn_ctl_table_init(tn_ctl_table_t *t, int ncols);
/* Add a row of ncols cells (NULL cells print as "-"). 0 or UV_ENOMEM. */
int tn_ctl_table_row(tn_ctl_table_t *t, const char *const *cells);
void tn_ctl_table_print(const tn_ctl_table_t *t, FILE *out);
void tn_ctl_table_fini(tn_ctl_table_t *t);

/* Format a byte count ("1.5 MiB") or a millisecond age ("3m12s") into buf. */
const char *tn_ctl_fmt_bytes(uint64_t n, char *buf, size_t cap);
const char *tn_ctl_fmt_ms(int64_t ms, char *buf, size_t cap);
/* Sleep ms milliseconds (a --wait's poll), and the monotonic clock in ms
 * (its deadline). */
/* The --wait and --wait-timeout D options of a command that follows what it
 * started (getopt_long codes 'w' and 't'; the timeout 1 ms and up): true
 * when ch is one of them, applied to *wait or *wait_ms, with *rc
 * TN_CTL_USAGE for a bad value (printed) and TN_CTL_OK otherwise. */
bool tn_ctl_wait_opt(const char *cmd, int ch, bool *wait, int64_t *wait_ms, int *rc);
void tn_ctl_sleep_ms(int64_t ms);
int64_t tn_ctl_mono_ms(void);
/* A --wait's loop. look(c, arg, &more) takes one look at what is followed
 * (printing progress as it sees fit) and returns an exit code; with *more
 * set (it starts false) the wait goes on. The first look is at once, the
 * next poll_ms after the last; when a look wants more once wait_ms have
 * passed, expired(arg) prints why (from what the looks left in arg) and
 * the wait ends TN_CTL_FAIL. Otherwise it ends with the code of the look
 * that wanted no more. arg is borrowed for the call. */
typedef int (*tn_ctl_look_cb)(tn_ctl_t *c, void *arg, bool *more);
typedef void (*tn_ctl_expired_cb)(void *arg);
int tn_ctl_wait_for(tn_ctl_t *c, int64_t wait_ms, int64_t poll_ms, tn_ctl_look_cb look,
                    tn_ctl_expired_cb expired, void *arg);

/* The members table of GET /v1/cluster/members' array (cluster.c; status
 * shows it too). */
void tn__ctl_print_members(yajl_val members);
/* The moves of GET /v1/cluster/moves (an array) as a table. */
void tn__ctl_print_moves(yajl_val moves);
/* The graceful drain of the node at base_url (drain.c): argv holds drain's
 * options ([--wait] [--drain-timeout D]) from argv[1]; cmd names the command
 * in usage errors. `ternctl drain` and `ternctl cluster drain ID` share it. */
int tn__ctl_drain(tn_ctl_t *c, const char *base_url, const char *cmd, int argc, char **argv);

/* --- for main.c ---------------------------------------------------------------- */

typedef struct {
    const char *url;           /* --url or NULL */
    const char *user;          /* --user */
    const char *password_file; /* --password-file */
    const char *ca_file;       /* --ca-file */
    const char *timeout;       /* --timeout (a duration) */
    const char *config;        /* --config */
    bool json;                 /* --json */
} tn_ctl_flags_t;

/* Settle the connection from flags > environment > config file > defaults
 * (http://127.0.0.1:4151, no credentials, 30 s). 0 with *out, or
 * TN_CTL_USAGE / TN_CTL_FAIL with the reason printed (an unreadable
 * password file, a bad config line, a bad URL). envp is the environment. */
int tn_ctl_new(const tn_ctl_flags_t *f, char **envp, tn_ctl_t **out);
void tn_ctl_free(tn_ctl_t *c);

#endif
