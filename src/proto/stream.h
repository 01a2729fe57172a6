/* Sending a connection's output: what the socket takes at once is written
 * directly, and only the rest is queued. Every door's server flushes this
 * way (a queued uv_write costs libuv an epoll_ctl when it completes; most
 * answers fit the socket buffer and never need one).
 *
 * Thread safety: the loop thread of the stream. */
#ifndef TN_PROTO_STREAM_H
#define TN_PROTO_STREAM_H

#include "core/platform.h"

#include "core/buf.h"

#include <uv.h>

/* Send what out holds on s. What the socket does not take at once moves
 * to held (empty on entry, as the caller reset it when its last write
 * completed), which stays in use by the queued req until cb; out is empty
 * on return either way. Returns 0 when everything went out at once, 1
 * when req is queued (req->data as the caller set it), or a libuv error
 * (the caller closes the connection). */
int tn_stream_send(uv_stream_t *s, tn_buf_t *out, tn_buf_t *held, uv_write_t *req, uv_write_cb cb);

/* Bytes written to s that its peer has not acknowledged yet: what libuv
 * still queues plus, on Linux, the kernel's send queue (SIOCOUTQ; libuv's
 * queue alone elsewhere). It falls as a client reads, even while one long
 * write stays queued, so an idle timeout can tell a slow reader from one
 * that reads nothing. s is borrowed. */
size_t tn_stream_unacked(const uv_stream_t *s);

#endif
