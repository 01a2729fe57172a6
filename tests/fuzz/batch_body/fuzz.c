/* Fuzz target: batch request bodies (produce and ack). Each decodes or is
 * refused with a reason; what decodes keeps the limits (count, payload
 * and key sizes) and every payload and key lies inside the decoded data. */
#include "core/platform.h"

#include "api/batch.h"

#include <stdlib.h>
#include <string.h>
#include <uv.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    const char *s = (const char *)data;
    tn_batch_t b;
    char err[160] = "";
    int rc = tn_batch_decode(s, size, 8, 64, 16, &b, err, sizeof(err));
    if (rc == 0) {
        if (b.n == 0 || b.n > 8)
            abort();
        for (uint32_t i = 0; i < b.n; i++) {
            const tn_batch_msg_t *m = &b.msgs[i];
            if (m->payload_len == 0 || m->payload_len > 64 || m->key_len > 16 ||
                m->payload_off + m->payload_len > b.data.len ||
                m->key_off + m->key_len > b.data.len || m->partition < -1)
                abort();
        }
        tn_batch_fini(&b);
    } else if (rc != UV_EINVAL || err[0] == '\0') {
        abort();
    }
    char h[4][TN_HANDLE_MAX];
    uint32_t n = 0;
    err[0] = '\0';
    rc = tn_batch_handles(s, size, 4, h, &n, err, sizeof(err));
    if (rc == 0) {
        if (n == 0 || n > 4)
            abort();
        for (uint32_t i = 0; i < n; i++)
            if (memchr(h[i], '\0', TN_HANDLE_MAX) == NULL)
                abort();
    } else if (rc != UV_EINVAL || err[0] == '\0') {
        abort();
    }
    return 0;
}
