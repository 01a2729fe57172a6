/* Fuzz target: the CONSUME request decoder (cluster/wire.h). A payload
 * that decodes re-encodes to exactly its bytes when its names are
 * non-empty and its wait is not negative (what the encoder accepts), and
 * a refused one leaves a sentence. */
#include "core/platform.h"

#include "cluster/wire.h"
#include "core/err.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tn_wire_consume_t c;
    char err[200];
    err[0] = '\0';
    int rc = tn_wire_consume_decode(data, size, &c, err, sizeof(err));
    if (rc != 0) {
        if (rc != TN_EPROTO || err[0] == '\0')
            abort();
        return 0;
    }
    if (strlen(c.topic) > 255 || strlen(c.channel) > 255 ||
        strlen(c.ident) > TN_WIRE_CONSUME_IDENT_MAX)
        abort();
    tn_buf_t b;
    tn_buf_init(&b);
    rc = tn_wire_consume_encode(&b, &c);
    bool encodable = c.topic[0] != '\0' && c.channel[0] != '\0' && c.wait_ms >= 0;
    if (encodable != (rc == 0) && rc != UV_ENOMEM)
        abort();
    if (rc == 0 && (tn_buf_size(&b) != size || memcmp(tn_buf_data(&b), data, size) != 0))
        abort();
    tn_buf_fini(&b);
    return 0;
}
