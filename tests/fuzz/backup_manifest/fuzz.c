/* Fuzz target: a backup manifest as `ternctl restore` reads it from disk
 * (src/cmd/ternctl/manifest.c), and the same bytes as the backup set's
 * backup.json (tn_manifest_set_parse). Each decodes or is refused with a
 * message. A manifest
 * what decodes holds only paths the path rule accepts, no path twice, and
 * its node among the voters, each found by its path. What decodes then
 * goes through restore's channel check (tn_manifest_check_channels), which must not crash.
 * A set that decodes names 1..64 distinct positive node ids, its
 * metastore source among them, and an id of lowercase hex or none. */
#include "core/platform.h"

#include "cmd/ternctl/manifest.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 20)
        return 0;
    tn_manifest_t m;
    char err[300] = "";
    int rc = tn_manifest_parse((const char *)data, size, &m, err, sizeof(err));
    if (rc == UV_EINVAL && err[0] == '\0')
        abort();
    if (rc == 0) {
        bool self = false;
        for (size_t i = 0; i < m.nvoters; i++)
            self = self || m.voters[i].id == m.node_id;
        if (!self)
            abort();
        for (size_t i = 0; i < m.nfiles; i++) {
            if (!tn_manifest_path_ok(m.files[i].path))
                abort();
            if (i > 0 && strcmp(m.files[i - 1].path, m.files[i].path) >= 0)
                abort();
            /* restore finds a carried stamp by its path (tn_manifest_find) */
            if (tn_manifest_find(&m, m.files[i].path) != &m.files[i])
                abort();
        }
        if (tn_manifest_find(&m, "topics/\x7f") != NULL) /* no path holds it */
            abort();
    }
    /* restore's channel check, over what decoded: any manifest, however
     * its channel files pair up, gets its warnings (in time: libFuzzer's
     * -timeout). */
    if (rc == 0) {
        static FILE *sink;
        if (sink == NULL && (sink = fopen("/dev/null", "w")) == NULL)
            abort();
        (void)tn_manifest_check_channels(&m, sink);
    }
    tn_manifest_fini(&m);
    tn_manifest_set_t set;
    err[0] = '\0';
    rc = tn_manifest_set_parse((const char *)data, size, &set, err, sizeof(err));
    if (rc == UV_EINVAL && err[0] == '\0')
        abort();
    if (rc == 0) {
        bool from = false;
        if (set.n == 0 || set.n > TN_MANIFEST_SET_MAX_NODES || set.meta_from == 0)
            abort();
        for (size_t i = 0; i < set.n; i++) {
            if (set.ids[i] == 0 || set.ids[i] > INT64_MAX)
                abort();
            for (size_t k = 0; k < i; k++)
                if (set.ids[k] == set.ids[i])
                    abort();
            from = from || set.ids[i] == set.meta_from;
        }
        size_t idl = strlen(set.id);
        if (!from || (idl != 0 && (idl < 16 || strspn(set.id, "0123456789abcdef") != idl)))
            abort();
    }
    return 0;
}
