/* Fuzz target: a JSON request body decoded into the fields of a topic
 * create body. It decodes or is refused with a message; what decodes fits
 * its fields. */
#include "core/platform.h"

#include "proto/http/json.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

typedef struct {
    char name[256];
    int64_t partitions;
    int64_t retention_ms;
    char delivery_mode[16];
    bool flag;
} body_t;

static const tn_jfield_t fields[] = {
    {"name", TN_JF_STR, offsetof(body_t, name), 255},
    {"partitions", TN_JF_INT, offsetof(body_t, partitions), 0},
    {"retention_ms", TN_JF_INT, offsetof(body_t, retention_ms), 0},
    {"delivery_mode", TN_JF_STR, offsetof(body_t, delivery_mode), 15},
    {"flag", TN_JF_BOOL, offsetof(body_t, flag), 0},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    body_t b;
    memset(&b, 0, sizeof(b));
    bool present[5];
    char err[160] = "";
    int rc = tn_json_object((const char *)data, size, fields, 5, &b, present, err, sizeof(err));
    if (rc == UV_EINVAL && err[0] == '\0')
        abort(); /* every refusal says why */
    if (rc == 0 && (strlen(b.name) > 255 || strlen(b.delivery_mode) > 15))
        abort();
    return 0;
}
