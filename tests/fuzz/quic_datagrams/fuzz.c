/* Fuzz target: datagrams arriving at a serving QUIC endpoint (quic.c and
 * ngtcp2 behind it), the bytes anyone on the network can send to the
 * node RPC port. The input is a sequence of datagrams, each a 2-byte
 * big-endian length and its bytes, all from one address; after each the
 * loop runs once (flushing whatever the endpoint answers). Nothing may
 * crash, and the endpoint must close cleanly after every input. */
#include "core/platform.h"

#include "cluster/quic.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void on_closed(void *arg)
{
    *(bool *)arg = true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct sockaddr_in bind, from;
    uv_ip4_addr("127.0.0.1", 0, &bind);
    /* Port 9 (discard): what the endpoint answers goes nowhere. */
    uv_ip4_addr("127.0.0.1", 9, &from);
    tn_quic_ep_opts_t o;
    memset(&o, 0, sizeof o);
    o.bind = (const struct sockaddr *)&bind;
    memset(o.reset_key, 0x5a, sizeof o.reset_key);
    o.accept = true;
    tn_quic_ep_t *ep = NULL;
    char err[128];
    if (tn_quic_ep_open(&loop, &o, &ep, err, sizeof err) != 0)
        abort();
    size_t off = 0;
    while (off + 2 <= size) {
        size_t n = ((size_t)data[off] << 8) | data[off + 1];
        off += 2;
        if (n > size - off)
            n = size - off;
        tn_quic_ep_test_input(ep, (const struct sockaddr *)&from, data + off, n);
        uv_run(&loop, UV_RUN_NOWAIT);
        off += n;
    }
    bool done = false;
    tn_quic_ep_close(ep, on_closed, &done);
    while (!done)
        uv_run(&loop, UV_RUN_ONCE);
    if (uv_loop_close(&loop) != 0)
        abort();
    return 0;
}
