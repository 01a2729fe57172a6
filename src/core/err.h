/* Error codes. Errors are negative ints and 0 is success. libuv's codes
 * (UV_ENOMEM, UV_EIO, ...) pass through unchanged; tern's own codes live in
 * the TN_ERR_MAP table below, which also generates tn_strerror() and
 * tn_err_name(). They sit far below libuv's range so the two never meet. */
#ifndef TN_CORE_ERR_H
#define TN_CORE_ERR_H

#include "core/platform.h"

#include <uv.h>

/* X(name, text) */
#define TN_ERR_MAP(X)                                                                              \
    X(CORRUPT, "data failed its checksum or structure check")                                      \
    X(FORMAT, "data directory has an unsupported format version")                                  \
    X(LOCKED, "data directory is locked by another process")                                       \
    X(DISKHIGH, "disk usage is above the high watermark; writes refused")                          \
    X(FAILED, "storage failed earlier and refuses writes until restart")                           \
    X(TOOBIG, "value exceeds its size limit")                                                      \
    X(CONFIG, "invalid configuration")                                                             \
    X(NOTFOUND, "not found")                                                                       \
    X(GAP, "offset is absent from the log")                                                        \
    X(CLOSED, "object is closed")                                                                  \
    X(RANGE, "value out of range")                                                                 \
    X(SHORT, "incomplete data: more bytes needed")                                                 \
    X(PROTO, "protocol error")                                                                     \
    X(CHANGED, "the record changed since it was read")                                             \
    X(FULL, "an ephemeral topic holds as many messages as it may; consume them first")             \
    X(NOTLEADER, "this node is not the metastore leader")                                          \
    X(NOLEADER, "no metastore leader is known (no quorum)")                                        \
    X(IDTAKEN, "a member with this id is in the cluster at another address")                       \
    X(REMOTE, "the partition lives on another node")                                               \
    X(FENCED, "the request carries a stale leader epoch (fenced)")                                 \
    X(UNKNOWNEPOCH, "the request carries a leader epoch newer than this node knows")               \
    X(FEWREPLICAS, "fewer in-sync replicas than min_insync_replicas: write refused")               \
    X(NOTSERVING, "the partition's new leader is not serving yet; retry")                          \
    X(CREATING, "the topic is being created; retry")                                               \
    X(PLACING, "this node is still catching up with the cluster's placement; retry")

enum {
    TN__ERR_BASE = -100000,
#define TN_ERR_ENUM(name, text) TN_E##name,
    TN_ERR_MAP(TN_ERR_ENUM)
#undef TN_ERR_ENUM
        TN__ERR_END
};

/* A static, human-readable description of err (tern or libuv code). */
const char *tn_strerror(int err);

/* The symbolic name of err, e.g. "TN_ECORRUPT" or "EIO". */
const char *tn_err_name(int err);

/* Format a one-line error description into err (errlen bytes); does
 * nothing when err is NULL. For functions that explain their failures to
 * their caller through an err buffer. */
void tn_errbuf(char *err, size_t errlen, const char *fmt, ...) TN_PRINTF(3, 4);

/* Convert an errno value (positive) into the matching negative code. */
static inline int tn_err_from_errno(int e)
{
    return e > 0 ? -e : UV_EIO;
}

#endif
