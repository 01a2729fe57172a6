/* Consumes of the native API (long polls, batches, replay reads) and
 * settling by receipt handle.
 *
 * DESIGN: a queue consume.
 *   1. The /v1 guard (api/v1/routes.c) authenticates the request;
 *      api/v1/consume.c authorizes and validates it, and hands it here
 *      with its topic's settings.
 *   2. The channel (`default` unless named) is found in the queue engine,
 *      or created as an NSQ SUB would create it: the first channel of a
 *      topic gets the retained backlog, later ones the bootstrap window.
 *   3. The request joins a lane: one pulling consumer of the engine per
 *      (topic, channel, pinned partition or any). The lane owns the leases
 *      of the messages it hands out, so a lease outlives the request that
 *      took it and a receipt handle works from any connection. A lane asks
 *      the engine for as many messages as its parked requests want; each
 *      message goes to the oldest of them.
 *   4. A single consume is answered with its message. A batch is answered
 *      once the messages that were ready went out (on the next loop turn),
 *      or when full. A request that nothing reached within its wait is
 *      answered 204 (one still waiting for a disk read the engine started
 *      for it gets up to a second more).
 * Who waits is a parked consumer (below): an HTTP request, or a consume
 * another node forwarded over node RPC (api/v1/forward.c); both get the
 * same status and body. A parked consumer cancelled after its batch took
 * messages gives them back at once (a nack); an HTTP client that leaves
 * keeps today's behaviour (its leases run out).
 * A lane with no parked request and no lease is detached by a sweep every
 * second. Deleting the channel or topic answers its parked requests 404.
 *
 * Receipt handles are `partition:offset:nonce`; settling one looks for the
 * lease in the lanes of the (topic, channel): a lease that expired, was
 * settled or went out again under a new nonce is stale (410).
 *
 * Threads: the loop thread. */
#ifndef TN_API_CONSUME_H
#define TN_API_CONSUME_H

#include "core/platform.h"

#include "core/name.h"
#include "proto/http/server.h"
#include "queue/queue.h"

typedef struct tn_consume_s tn_consume_t;

typedef struct {
    uint32_t max_per_ident; /* concurrent consumes per user (a batch of N counts N); 0: none */
} tn_consume_opts_t;

#define TN_CONSUME_BATCH_MAX 100

typedef struct {
    char topic[TN_NAME_MAX + 1];
    char channel[TN_NAME_MAX + 1];
    uint32_t partitions; /* the topic record's (a missing engine topic is made so) */
    int64_t visibility_ms;
    int64_t wait_ms; /* 0: answer with what is there now */
    bool pinned;     /* only from partition */
    uint32_t partition;
    bool replay; /* read offset of partition: no lease, no handle */
    uint64_t offset;
    uint32_t max;      /* 0: a single consume; else a batch of up to max */
    const char *ident; /* who asks, for the per-identity cap ("" none); borrowed */
} tn_consume_args_t;

int tn_consume_new(uv_loop_t *loop, tn_broker_t *b, const tn_consume_opts_t *o, tn_consume_t **out);
/* Serve a consume: r is answered now or parked until it can be. */
void tn_consume_start(tn_consume_t *cs, tn_http_request_t *r, const tn_consume_args_t *a);

/* A parked consumer: whoever waits for a consume's answer. The lanes know
 * two: an HTTP request (tn_consume_start) and a consume another node
 * forwarded over node RPC (api/v1/forward.c); a forwarding node's own
 * race between its lanes and an owner is a third user. Caller-owned, in
 * use from tn_consume_start_parked until answer ran or
 * tn_consume_parked_cancel returned. */
typedef struct tn_consume_parked_s tn_consume_parked_t;
struct tn_consume_parked_s {
    /* The answer, exactly once: status and body (borrowed for the call)
     * as the /v1 route sends them: 200 the message or {"messages":[...]}
     * (newline-terminated JSON), 204 no body, else {"error":"..."}\n (a
     * 503 or 429 also wants Retry-After: 1 over HTTP). */
    void (*answer)(tn_consume_parked_t *pk, int status, const char *body, size_t len);
    /* Optional (NULL: none): told of each message a lease was taken for,
     * as it goes into the answer (before answer runs). */
    void (*delivered)(tn_consume_parked_t *pk, uint32_t partition, uint64_t offset, uint32_t nonce);
    void *data; /* for the caller */
    void *priv; /* the lanes' */
};
/* Serve a consume for pk: answered now (inside this call) or later. */
void tn_consume_start_parked(tn_consume_t *cs, tn_consume_parked_t *pk, const tn_consume_args_t *a);
/* pk's asker went before its answer: answer never runs, and the messages
 * a batch had taken for it go back to the channel at once (a nack; one
 * refused for want of memory has its lease end at the engine's next wake
 * instead: tn_consumer_put_back), so a consume cancelled mid-batch loses
 * nothing and delays nothing. */
void tn_consume_parked_cancel(tn_consume_parked_t *pk);

/* Count n concurrent consumes for ident against the per-identity cap
 * (tn_consume_opts_t.max_per_ident), as a consume started here is: for a
 * consume the /v1 door serves from other nodes as well (api/v1/forward.c),
 * counted once for its whole life on the node its client talks to. false:
 * over the cap (nothing taken). *taken is what to give back with
 * tn_consume_uncharge (0 when nothing is counted: no cap, or ident ""). */
bool tn_consume_charge(tn_consume_t *cs, const char *ident, uint32_t n, uint32_t *taken);
void tn_consume_uncharge(tn_consume_t *cs, const char *ident, uint32_t taken);

typedef enum { TN_SETTLE_ACK = 1, TN_SETTLE_EXTEND, TN_SETTLE_NACK } tn_settle_t;

/* Settle the lease of a receipt handle on (topic, channel): ack, extend by
 * visibility_ms, or nack (deliverable again at once). 0: settled in
 * memory; when sync is not NULL, cb(sync, status) then runs exactly once
 * (possibly before this returns) when the channel log record of the ack
 * or nack is durable (0) or failed (its error); an extend writes nothing
 * and ends at once. Else cb never runs: TN_ENOTFOUND (no such live lease:
 * stale), UV_ENOBUFS (ack refused: the acked-ahead cap is reached and
 * this is not the head of the partition), or the channel log's sticky
 * error or UV_ENOMEM (nothing changed: the lease stays as it was). */
int tn_consume_settle(tn_consume_t *cs, const char *topic, const char *channel, uint32_t partition,
                      uint64_t offset, uint32_t nonce, tn_settle_t how, int64_t visibility_ms,
                      tn_chan_sync_t *sync, tn_chan_sync_cb cb);

/* tn_consume_settle as the router's and the SETTLE handler's local-settle
 * hook (cluster/settle.h): arg the registry, how a tn_wire_settle_how_t
 * (the same values as tn_settle_t); an unknown how is TN_ENOTFOUND. */
int tn_consume_settle_hook(void *arg, const char *topic, const char *channel, uint32_t partition,
                           uint64_t offset, uint32_t nonce, uint8_t how, int64_t visibility_ms,
                           tn_chan_sync_t *sync, tn_chan_sync_cb cb);

/* Parse a receipt handle `partition:offset:nonce` (decimal, no signs,
 * nonce >= 1). 0 or UV_EINVAL. */
int tn_receipt_parse(const char *s, size_t len, uint32_t *partition, uint64_t *offset,
                     uint32_t *nonce);

/* One message as a consume answers it: {"topic", "partition", "offset",
 * "key" (when there is one), "payload", "payload_encoding" (base64 only),
 * "timestamp" (Unix seconds), and for a lease "attempts" and
 * "receipt_handle"}. The payload goes in as it is when it is JSON (up to
 * 4 MiB), else as a string when it is UTF-8, else in base64; the key as a
 * string when it is UTF-8, else in base64 with "key_encoding". */
typedef struct {
    uint32_t partition;
    uint64_t offset;
    uint32_t nonce; /* 0: a replay read (no handle) */
    uint32_t attempts;
    int64_t publish_ns;
    const tn_msg_t *body;
    const tn_msg_t *key; /* NULL: none */
} tn_consume_item_t;
void tn_consume_render(tn_buf_t *b, const char *topic, const tn_consume_item_t *m);

/* A drain (api/drain.h): every parked consume is answered now as its wait
 * running out would answer it (204, or 200 with what a batch holds), and
 * every later one at once with 204 (a consume the /v1 route lets through
 * while draining: one forwarded by another node). Leases already out stay
 * settleable. For good. */
void tn_consume_drain(tn_consume_t *cs);
/* Consumes under way: parked on a lane or waiting for a topic. */
uint32_t tn_consume_pending(const tn_consume_t *cs);

/* Answer every parked request 503 and detach every lane (before the
 * engine closes); the registry frees itself afterwards. */
void tn_consume_close(tn_consume_t *cs);

#endif
