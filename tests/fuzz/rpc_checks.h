/* Checks shared by the fuzz targets of node RPC requests and replies
 * (pstats_request, purge_request, remote_check, move_progress,
 * settle_request, settle_repl_frame, chan_snap_frame; fetch_frame and
 * flushed_frame through fetch_parts.h; commit_request and produce_frame
 * for the shape check alone): a request decoder answers 0 or
 * TN_EPROTO, says why it refused, and agrees with the RPC server's shape
 * check; a reply decoder answers each status with that status's code (or
 * TN_EPROTO) and a sentence for every refusal. Each target keeps what is
 * its own: the fields it checks and the encoder it writes them back with.
 * Static inline functions: included by each target's fuzz.c, nothing to
 * link, no warning for the ones a target does not use. */
#ifndef TN_FUZZ_RPC_CHECKS_H
#define TN_FUZZ_RPC_CHECKS_H

#include "core/platform.h"

#include "cluster/wire.h"
#include "core/err.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The RPC server's shape check of data (an op's fields) behind opcode
 * op: tn_wire_request_check's answer. */
static inline int fuzz_request_check(uint8_t op, const uint8_t *data, size_t size)
{
    uint8_t *req = malloc(size + 1);
    if (req == NULL)
        abort();
    req[0] = op;
    if (size > 0)
        memcpy(req + 1, data, size);
    int check = tn_wire_request_check(req, size + 1);
    free(req);
    return check;
}

/* The decoder's answer rc for data was 0 or TN_EPROTO, and the RPC
 * server's shape check of the same bytes behind opcode op agrees: it
 * refuses (with TN_EPROTO) exactly what the decoder refuses. */
static inline void fuzz_check_shape(uint8_t op, const uint8_t *data, size_t size, int rc)
{
    if (rc != 0 && rc != TN_EPROTO)
        abort();
    int check = fuzz_request_check(op, data, size);
    if ((rc == 0) != (check == 0) || (check != 0 && check != TN_EPROTO))
        abort();
}

/* As fuzz_check_shape, for a decoder that writes a sentence into err (of
 * errlen bytes): every refusal says why, NUL ended. */
static inline void fuzz_check_request(uint8_t op, const uint8_t *data, size_t size, int rc,
                                      const char *err, size_t errlen)
{
    if (rc != 0 && (err[0] == '\0' || memchr(err, 0, errlen) == NULL))
        abort(); /* every refusal says why */
    fuzz_check_shape(op, data, size, rc);
}

/* What a reply decoder answers under one status: want (0, or the code the
 * call reports for that status), or TN_EPROTO for a body that is not that
 * answer unless exact. A status no member gives: want TN_EPROTO, exact. */
typedef struct {
    uint16_t status;
    int want;
    bool exact;
} fuzz_reply_rule_t;

/* A reply decoder answered rc under rule r's status, leaving http_status
 * and its sentence error (errlen bytes): the status as given, rc as the
 * rule says, error NUL ended, a sentence exactly when rc refuses. */
static inline void fuzz_check_reply(const fuzz_reply_rule_t *r, int rc, uint16_t http_status,
                                    const char *error, size_t errlen)
{
    if (memchr(error, 0, errlen) == NULL || http_status != r->status)
        abort();
    if (rc != r->want && (r->exact || rc != TN_EPROTO))
        abort();
    if ((rc != 0) != (error[0] != '\0'))
        abort(); /* a sentence for every refusal, none for success */
}

#endif
