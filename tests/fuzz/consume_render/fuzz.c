/* Fuzz target: what a consume answers. The input is a receipt handle, a
 * key and a payload (separated by the first two NUL bytes). The handle
 * parses or is refused, and what parses renders back to the same values;
 * the rendered message is always one well-formed JSON object, whatever
 * bytes the key and payload hold. */
#include "core/platform.h"

#include "api/consume.h"
#include "proto/http/json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    const char *s = (const char *)data;
    const char *z1 = memchr(s, '\0', size);
    size_t hl = z1 != NULL ? (size_t)(z1 - s) : size;
    uint32_t p = 0, n = 0;
    uint64_t o = 0;
    if (tn_receipt_parse(s, hl, &p, &o, &n) == 0) {
        char again[64];
        int len = snprintf(again, sizeof(again), "%" PRIu32 ":%" PRIu64 ":%" PRIu32, p, o, n);
        uint32_t p2 = 0, n2 = 0;
        uint64_t o2 = 0;
        if (n == 0 || o > INT64_MAX || tn_receipt_parse(again, (size_t)len, &p2, &o2, &n2) != 0 ||
            p2 != p || o2 != o || n2 != n)
            abort();
    }
    if (z1 == NULL)
        return 0;
    const char *k = z1 + 1;
    size_t rest = size - hl - 1;
    const char *z2 = memchr(k, '\0', rest);
    size_t kl = z2 != NULL ? (size_t)(z2 - k) : rest;
    const char *body = z2 != NULL ? z2 + 1 : k + kl;
    size_t bl = z2 != NULL ? rest - kl - 1 : 0;
    tn_msg_t *key = kl > 0 ? tn_msg_new(k, (uint32_t)kl) : NULL;
    tn_msg_t *msg = tn_msg_new(body, (uint32_t)bl);
    if (msg == NULL || (kl > 0 && key == NULL))
        abort();
    tn_consume_item_t m = {p, o, n, 1, 1796000000000000000LL, msg, key};
    tn_buf_t b;
    tn_buf_init(&b);
    tn_consume_render(&b, "topic.with-\"odd\"\\name", &m);
    /* Valid for yajl and for a strict RFC 8259 reader alike. */
    bool ok = false;
    if (tn_json_events(tn_buf_data(&b), tn_buf_size(&b), NULL, NULL, true, &ok) != 0 || !ok ||
        !tn_json_valid(tn_buf_data(&b), tn_buf_size(&b)) || tn_buf_data(&b)[0] != '{') {
        fprintf(stderr, "rendered: %.*s\n", (int)tn_buf_size(&b), tn_buf_data(&b));
        abort();
    }
    tn_buf_fini(&b);
    tn_msg_unref(msg);
    if (key != NULL)
        tn_msg_unref(key);
    return 0;
}
