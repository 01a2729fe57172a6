/* REMOTE_CHECK over node RPC: a member checks, from its own network, that
 * it reaches a remote (another tern cluster, docs/remotes.md) with the
 * remote's credential and, with a topic, that the topic is there and
 * takes the remote user's produces; the request and answer codecs, the
 * member's handler and the caller's call. The router (cluster/router.h,
 * tn_router_rcheck) asks every live member at once.
 *
 * DESIGN: a check on every member (docs/remotes.md, "Checks").
 *   1. A door (POST /v1/remotes/{name}/check, or an attach of a remote
 *      child) asks the router for a check of remote (name, id) with a
 *      topic or none.
 *   2. The router runs the check here through the local hook (the /v1
 *      remotes module, which ternd installs) and calls tn_rcheck_call on
 *      every other member whose record says alive, in parallel, each
 *      within TN_RCHECK_CALL_MS.
 *   3. A member's handler decodes the request exactly and runs the same
 *      local hook: 200 with the result (a class of the outbound client,
 *      the remote's HTTP status, the time taken, a detail in the client's
 *      own words), 404 when its metastore replica has no such remote with
 *      that id, 503 when it cannot run one (no hook yet, shutting down).
 * Blind: nothing the remote sent crosses this RPC but its HTTP status.
 *
 * Threads: the loop thread of the RPC endpoint. */
#ifndef TN_CLUSTER_RCHECK_H
#define TN_CLUSTER_RCHECK_H

#include "core/platform.h"

#include "cluster/rpc.h"
#include "cluster/srv.h"
#include "cluster/wire.h"
#include "core/buf.h"

#include <stdint.h>

/* A member's budget: the check's own timeouts (connect, TLS handshake,
 * answer: api/v1/rcheck.c) fit well inside. */
#define TN_RCHECK_CALL_MS 30000
/* The classes (proto/http/rclient.h's tn_rc_class_t: 0 ok .. 7
 * server_error). */
#define TN_RCHECK_NCLASSES   8
#define TN_RCHECK_REMOTE_MAX 64
#define TN_RCHECK_TOPIC_MAX  255
#define TN_RCHECK_DETAIL_MAX 191

typedef struct {
    char remote[TN_RCHECK_REMOTE_MAX + 1];
    uint64_t remote_id;
    char topic[TN_RCHECK_TOPIC_MAX + 1]; /* "": none */
} tn_wire_rcheck_t;

/* One member's result. */
typedef struct {
    uint8_t cls;     /* 0 ok, else the class of the failure (< TN_RCHECK_NCLASSES) */
    uint16_t status; /* the remote's HTTP status; 0: none came */
    uint32_t ms;     /* how long the check took there */
    char detail[TN_RCHECK_DETAIL_MAX + 1]; /* the outbound client's words; "" for ok */
} tn_rcheck_result_t;

/* Append a request's fields. 0; UV_EINVAL (remote not 1..64 bytes, topic
 * over 255); UV_ENOMEM. On failure b is as it was. */
int tn_wire_rcheck_encode(tn_buf_t *b, const char *remote, uint64_t remote_id, const char *topic);
/* Exact decode. 0 or TN_EPROTO with a sentence in err (may be NULL). */
int tn_wire_rcheck_decode(const void *p, size_t len, tn_wire_rcheck_t *out, char *err,
                          size_t errlen);
/* A 200 answer's body. 0; UV_EINVAL (a class out of range, a status
 * outside 0 and 100..599, a detail over 191 bytes); UV_ENOMEM. */
int tn_rcheck_result_encode(tn_buf_t *b, const tn_rcheck_result_t *res);
/* Exact decode of a 200 answer's body. 0 or TN_EPROTO. */
int tn_rcheck_result_decode(const void *p, size_t len, tn_rcheck_result_t *out);

/* The end of a local check: res borrowed for the call. */
typedef void (*tn_rcheck_done_cb)(void *arg, const tn_rcheck_result_t *res);
/* The local side: check remote (name and id, borrowed) with topic ("":
 * none) from this node. 0: done runs exactly once, now or later. Else done never
 * runs: TN_ENOTFOUND (no such remote with that id here), TN_ECLOSED
 * (shutting down), UV_ENOMEM. */
typedef int (*tn_rcheck_local_fn)(void *arg, const char *remote, uint64_t remote_id,
                                  const char *topic, tn_rcheck_done_cb done, void *done_arg);

/* --- the member side ------------------------------------------------------------ */

/* A REMOTE_CHECK server (cluster/srv.h; TN_OP_REMOTE_CHECK, exempt from
 * the bounds: it waits on the remote) with no hook yet: it answers 503
 * until one is set. 0 or UV_ENOMEM. */
int tn_rcheck_srv_new(tn_srv_t **out);
/* Set s's local hook (NULL: none; requests answer 503). */
void tn_rcheck_srv_set_hook(tn_srv_t *s, tn_rcheck_local_fn fn, void *arg);

/* --- the caller side ------------------------------------------------------------- */

typedef struct tn_rcheck_call_s tn_rcheck_call_t;
/* The end of a call: 0 with c->result; TN_ENOTFOUND (404: the member has
 * no such remote), UV_EAGAIN (503), UV_EINVAL (400), TN_EPROTO (another
 * answer), or the call's error (rpc.h: UV_ETIMEDOUT, TN_ECLOSED,
 * UV_ECONNREFUSED, ...). c->error says it in a sentence. */
typedef void (*tn_rcheck_cb)(tn_rcheck_call_t *c, int status);

/* Caller-owned, in use from tn_rcheck_call until cb. */
struct tn_rcheck_call_s {
    void *data; /* for the caller */
    tn_rcheck_result_t result;
    uint16_t http_status; /* the member's answer; 0 when none came */
    char error[256];      /* the member's or the transport's sentence; "" on success */
    /* Private. */
    tn_rpc_call_t *call;
    tn_rcheck_cb cb;
};

/* Ask peer_addr ("host:port", borrowed) for a check within timeout_ms. 0:
 * cb runs exactly once, later. Else cb never runs: the encoder's
 * UV_EINVAL, the call's errors (rpc.h), UV_ENOMEM. */
int tn_rcheck_call(tn_rpc_t *rpc, const char *peer_addr, const char *remote, uint64_t remote_id,
                   const char *topic, uint64_t timeout_ms, tn_rcheck_call_t *c, tn_rcheck_cb cb);

/* Decode a member's answer (status and body, borrowed) into c; the status
 * as tn_rcheck_cb gets it. For the call, the tests and the fuzz target. */
int tn_rcheck_reply_decode(uint16_t status, const uint8_t *body, size_t len, tn_rcheck_call_t *c);

#endif
