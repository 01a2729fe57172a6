/* The JSON answer of COMMIT and PRODUCE, and the error sentence of PURGE's
 * and REMOTE_CHECK's. See reply.h. */
#include "core/platform.h"

#include "cluster/reply.h"

#include "cluster/wire.h"
#include "core/err.h"

#include <stdio.h>
#include <string.h>
#include <yajl/yajl_tree.h>

int tn_store_reply_decode(uint16_t status, const uint8_t *body, size_t len, const char *what,
                          const char *node_key, tn_store_reply_t *out)
{
    memset(out, 0, sizeof(*out));
    if (len > TN_STORE_REPLY_MAX || memchr(body, 0, len) != NULL) {
        snprintf(out->error, sizeof(out->error), "a %u %s reply that is not a JSON object", status,
                 what);
        return TN_EPROTO;
    }
    char text[TN_STORE_REPLY_MAX + 1];
    memcpy(text, body, len);
    text[len] = '\0';
    yajl_val root = yajl_tree_parse(text, NULL, 0);
    if (root == NULL || !YAJL_IS_OBJECT(root)) {
        yajl_tree_free(root);
        snprintf(out->error, sizeof(out->error), "a %u %s reply that is not a JSON object", status,
                 what);
        return TN_EPROTO;
    }
    int rc = TN_EPROTO;
    if (status == 200) {
        static const char *path[] = {"first_offset", NULL};
        yajl_val v = yajl_tree_get(root, path, yajl_t_number);
        if (YAJL_IS_INTEGER(v) && YAJL_GET_INTEGER(v) >= 0) {
            out->first_offset = (uint64_t)YAJL_GET_INTEGER(v);
            rc = 0;
        } else {
            snprintf(out->error, sizeof(out->error), "a %s reply without a first_offset", what);
        }
        yajl_tree_free(root);
        return rc;
    }
    static const char *epath[] = {"error", NULL};
    yajl_val e = yajl_tree_get(root, epath, yajl_t_string);
    if (e == NULL) {
        yajl_tree_free(root);
        snprintf(out->error, sizeof(out->error), "a %u %s reply without an error", status, what);
        return TN_EPROTO;
    }
    snprintf(out->error, sizeof(out->error), "%s", YAJL_GET_STRING(e));
    static const char *rpath[] = {"reason", NULL};
    yajl_val why = yajl_tree_get(root, rpath, yajl_t_string);
    if (why != NULL)
        snprintf(out->reason, sizeof(out->reason), "%s", YAJL_GET_STRING(why));
    rc = TN_STORE_REPLY_ERROR;
    if (status == 421) {
        const char *npath[] = {node_key, NULL};
        yajl_val o = yajl_tree_get(root, npath, yajl_t_any);
        /* Absent or null: not placed yet, or not known to the callee. */
        if (o == NULL || YAJL_IS_NULL(o) ||
            (YAJL_IS_STRING(o) && tn_wire_parse_node_id(YAJL_GET_STRING(o), &out->node))) {
            rc = TN_EREMOTE;
        } else {
            out->node = 0;
            snprintf(out->error, sizeof(out->error), "a 421 %s reply with a malformed %s", what,
                     node_key);
            rc = TN_EPROTO;
        }
    }
    yajl_tree_free(root);
    return rc;
}

int tn_reply_error_decode(uint16_t status, const uint8_t *body, size_t len, const char *what,
                          char *error, size_t errlen)
{
    char text[TN_STORE_REPLY_MAX + 1];
    yajl_val root = NULL;
    if (len <= TN_STORE_REPLY_MAX && (len == 0 || memchr(body, 0, len) == NULL)) {
        if (len > 0)
            memcpy(text, body, len);
        text[len] = '\0';
        root = yajl_tree_parse(text, NULL, 0);
    }
    static const char *epath[] = {"error", NULL};
    yajl_val e = root != NULL ? yajl_tree_get(root, epath, yajl_t_string) : NULL;
    if (e == NULL) {
        yajl_tree_free(root);
        snprintf(error, errlen, "a %u %s without an error", status, what);
        return TN_EPROTO;
    }
    const char *why = YAJL_GET_STRING(e);
    if (why[0] != '\0')
        snprintf(error, errlen, "%s", why);
    else
        snprintf(error, errlen, "a %u %s with an empty error", status, what);
    yajl_tree_free(root);
    return 0;
}

int tn_reply_status_err(uint16_t status)
{
    return status == 503 ? UV_EAGAIN : status == 400 ? UV_EINVAL : TN_EPROTO;
}
