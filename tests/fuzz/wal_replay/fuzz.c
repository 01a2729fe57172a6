/* Fuzz target: channel checkpoint decode plus WAL replay. The first two
 * bytes give the checkpoint's length; the checkpoint (or an empty cursor
 * when it does not decode) is replayed with the rest as WAL. Checks: the
 * valid prefix lies inside the input, the result encodes and decodes to
 * the same state, and its invariants hold (sorted sets above the
 * frontier). */
#include "core/platform.h"

#include "core/buf.h"
#include "storage/cursor.h"
#include "storage/wal.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const tn_cursor_t *c)
{
    for (uint32_t i = 0; i < c->nsettled; i++) {
        if (c->settled[i] <= c->frontier || (i > 0 && c->settled[i] <= c->settled[i - 1]))
            abort();
    }
    for (uint32_t i = 0; i < c->nrequeued; i++) {
        if (c->requeued[i].offset < c->frontier ||
            (i > 0 && c->requeued[i].offset <= c->requeued[i - 1].offset))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t clen = (size_t)data[0] | ((size_t)data[1] << 8);
    data += 2;
    size -= 2;
    if (clen > size)
        clen = size;
    tn_cursor_t c;
    if (tn_cursor_decode(data, clen, &c) != 0)
        tn_cursor_init(&c, 0);
    check(&c);
    tn_wal_replay_t r;
    int rc = tn_wal_replay(data + clen, size - clen, &c, &r);
    if (rc == 0 && r.valid_len > size - clen)
        abort();
    check(&c);
    tn_buf_t b;
    tn_buf_init(&b);
    if (tn_cursor_encode(&c, &b) == 0) {
        tn_cursor_t d;
        if (tn_cursor_decode(b.base, b.len, &d) != 0)
            abort();
        if (d.frontier != c.frontier || d.seq != c.seq || d.nsettled != c.nsettled ||
            d.nrequeued != c.nrequeued || d.finish_count != c.finish_count)
            abort();
        tn_cursor_fini(&d);
    }
    tn_buf_fini(&b);
    tn_cursor_fini(&c);
    return 0;
}
