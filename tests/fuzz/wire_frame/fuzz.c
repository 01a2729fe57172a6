/* Fuzz target: the node RPC framer over arbitrary stream bytes. The first
 * input byte sets the chunk size the rest is pushed in (0: one push). Two
 * framers run: one as a server's stream starts, under the pre-auth cap and
 * raised to the general cap after a proof-sized AUTH frame, and one under
 * the general cap throughout. Each delivered frame must be exactly the
 * bytes at its place in the input, and the chunked run must deliver the
 * same frames and end in the same error as a single push. */
#include "core/platform.h"

#include "cluster/wire.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    const uint8_t *in; /* the stream */
    size_t len;
    size_t off;    /* where the next frame must start */
    size_t frames; /* delivered so far */
    bool raise;    /* raise the cap after a proof */
    tn_wire_framer_t *f;
} run_t;

static int on_frame(void *arg, const tn_wire_hdr_t *h, const uint8_t *payload)
{
    run_t *r = arg;
    uint8_t hdr[TN_WIRE_HDR];
    tn_wire_hdr_encode(hdr, h->type, h->id, h->len);
    if (r->off + TN_WIRE_HDR + h->len > r->len || memcmp(hdr, r->in + r->off, TN_WIRE_HDR) != 0 ||
        memcmp(payload, r->in + r->off + TN_WIRE_HDR, h->len) != 0)
        abort(); /* a frame not exactly as it came */
    if (h->len > r->f->max)
        abort(); /* over the cap in force */
    r->off += TN_WIRE_HDR + h->len;
    r->frames++;
    if (r->raise && r->frames == 1 && h->type == TN_WF_AUTH && h->len == TN_WIRE_PROOF_LEN)
        r->f->max = TN_WIRE_MAX_PAYLOAD;
    return 0;
}

/* Push in, chunk bytes at a time (0: at once); the first error or 0. */
static int run(run_t *r, uint32_t cap, size_t chunk)
{
    tn_wire_framer_t f;
    tn_wire_framer_init(&f, cap);
    r->f = &f;
    r->off = r->frames = 0;
    int rc = 0;
    if (chunk == 0)
        chunk = r->len > 0 ? r->len : 1;
    for (size_t at = 0; at < r->len && rc == 0; at += chunk)
        rc = tn_wire_framer_push(&f, r->in + at, TN_MIN(chunk, r->len - at), on_frame, r);
    if (rc != 0 && tn_wire_framer_push(&f, "x", 1, on_frame, r) != rc)
        abort(); /* errors stick */
    if (rc == 0 && tn_buf_size(&f.pending) != r->len - r->off)
        abort(); /* holds exactly the incomplete tail */
    tn_wire_framer_fini(&f);
    r->f = NULL;
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1024 * 1024)
        return 0;
    size_t chunk = data[0];
    static const struct {
        uint32_t cap;
        bool raise;
    } modes[] = {{TN_WIRE_PROOF_CAP - TN_WIRE_HDR, true}, {TN_WIRE_MAX_PAYLOAD, false}};
    for (size_t m = 0; m < TN_ARRAY_SIZE(modes); m++) {
        run_t whole = {.in = data + 1, .len = size - 1, .raise = modes[m].raise};
        run_t cut = whole;
        int rc_whole = run(&whole, modes[m].cap, 0);
        int rc_cut = run(&cut, modes[m].cap, chunk);
        if (rc_whole != rc_cut || whole.frames != cut.frames || whole.off != cut.off)
            abort(); /* how the bytes were cut changed what came out */
    }
    return 0;
}
