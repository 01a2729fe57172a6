/* Decoding a backup manifest (see manifest.h): yajl's tree parser, then
 * a walk that takes exactly the fields it knows, each with its type and
 * range checked, and refuses a document where anything is missing, of the
 * wrong type, out of range, or a path that could leave the data
 * directory. Unknown fields are ignored (a later server may add some);
 * unknown format strings are refused. */
#include "core/platform.h"

#include "cmd/ternctl/manifest.h"

#include "core/alloc.h"
#include "core/err.h"
#include "proto/http/json.h"
#include "storage/io.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_tree.h>

/* A string value, after YAJL_IS_STRING said it is one. */
#define SV(v) ((const char *)(v)->u.string)

bool tn_manifest_path_ok(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > TN_MANIFEST_PATH_MAX)
        return false;
    /* "incarnation": meta.h TN_META_INCARNATION_FILE (spelled here, so the
     * manifest's fuzz target links nothing of the metastore). */
    if (strcmp(p, "FORMAT") == 0 || strcmp(p, "incarnation") == 0)
        return true;
    if (strncmp(p, "topics/", 7) != 0 && strncmp(p, "ingress/", 8) != 0)
        return false;
    const char *s = p;
    while (*s != '\0') {
        const char *e = strchr(s, '/');
        size_t len = e != NULL ? (size_t)(e - s) : strlen(s);
        if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
            return false;
        for (size_t i = 0; i < len; i++) {
            char c = s[i];
            bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-';
            if (!ok)
                return false;
        }
        if (e == NULL)
            break;
        s = e + 1;
        if (*s == '\0')
            return false; /* a trailing slash */
    }
    return true;
}

static yajl_val field(yajl_val obj, const char *name)
{
    if (!YAJL_IS_OBJECT(obj))
        return NULL;
    for (size_t i = 0; i < obj->u.object.len; i++)
        if (strcmp(obj->u.object.keys[i], name) == 0)
            return obj->u.object.values[i];
    return NULL;
}

/* A non-negative integer field at most max, into *out; false when absent,
 * not an integer, negative or larger. */
static bool uint_field(yajl_val obj, const char *name, uint64_t max, uint64_t *out)
{
    yajl_val v = field(obj, name);
    if (v == NULL || !YAJL_IS_INTEGER(v) || YAJL_GET_INTEGER(v) < 0 ||
        (uint64_t)YAJL_GET_INTEGER(v) > max)
        return false;
    *out = (uint64_t)YAJL_GET_INTEGER(v);
    return true;
}

static int cmp_path(const void *a, const void *b)
{
    const tn_manifest_file_t *x = a, *y = b;
    return strcmp(x->path, y->path);
}

static int fail(char *err, size_t errlen, const char *what)
{
    tn_errbuf(err, errlen, "manifest: %s", what);
    return UV_EINVAL;
}

/* buf (len bytes, no NUL) as yajl's tree into *out: 0, UV_EINVAL when it
 * is not one JSON value or is nested deeper than TN_JSON_MAX_DEPTH, or
 * UV_ENOMEM. yajl's tree is freed by a recursion per level of nesting: a
 * document nested a million deep overflowed the stack (SIGSEGV), so one
 * pass that allocates nothing (tn_json_valid) refuses it first. */
static int tree_of(const char *buf, size_t len, yajl_val *out)
{
    *out = NULL;
    if (!tn_json_valid(buf, len))
        return UV_EINVAL;
    char *text = tn_malloc(len + 1);
    if (text == NULL)
        return UV_ENOMEM;
    memcpy(text, buf, len);
    text[len] = '\0';
    *out = yajl_tree_parse(text, NULL, 0);
    tn_free(text);
    return *out != NULL ? 0 : UV_ENOMEM; /* valid: only memory fails it */
}

int tn_manifest_parse(const char *buf, size_t len, tn_manifest_t *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof(*m));
    if (len > TN_MANIFEST_MAX_BYTES)
        return fail(err, errlen, "larger than 256 MiB");
    if (memchr(buf, '\0', len) != NULL)
        return fail(err, errlen, "holds a NUL byte");
    yajl_val root = NULL;
    int trc = tree_of(buf, len, &root);
    if (trc == UV_EINVAL) {
        char what[80];
        snprintf(what, sizeof(what), "not JSON, or nested deeper than %d levels",
                 TN_JSON_MAX_DEPTH);
        return fail(err, errlen, what);
    }
    if (trc != 0)
        return trc;
    int rc = UV_EINVAL;
    uint64_t u;
    if (!YAJL_IS_OBJECT(root)) {
        fail(err, errlen, "not a JSON object");
        goto out;
    }
    yajl_val f = field(root, "format");
    if (f == NULL || !YAJL_IS_STRING(f) || strcmp(SV(f), TN_MANIFEST_FORMAT) != 0) {
        fail(err, errlen, "format is not \"" TN_MANIFEST_FORMAT "\" (a newer or other file)");
        goto out;
    }
    if (!uint_field(root, "storage_format", UINT32_MAX, &u) || u != 1) {
        fail(err, errlen, "storage_format is not 1 (this build writes format 1 data)");
        goto out;
    }
    f = field(root, "session");
    if (f == NULL || !YAJL_IS_STRING(f) || strlen(SV(f)) == 0 ||
        strlen(SV(f)) >= sizeof(m->session)) {
        fail(err, errlen, "session is missing or not a string of 1..64 bytes");
        goto out;
    }
    snprintf(m->session, sizeof(m->session), "%s", SV(f));
    if (!uint_field(root, "node_id", INT64_MAX, &m->node_id) || m->node_id == 0) {
        fail(err, errlen, "node_id is missing or not a positive integer");
        goto out;
    }
    if (!uint_field(root, "created_ms", INT64_MAX, &u)) {
        fail(err, errlen, "created_ms is missing or not a non-negative integer");
        goto out;
    }
    m->created_ms = (int64_t)u;
    if (field(root, "ttl_ms") != NULL && !uint_field(root, "ttl_ms", INT64_MAX, &m->ttl_ms)) {
        fail(err, errlen, "ttl_ms is not a non-negative integer");
        goto out;
    }
    yajl_val meta = field(root, "metastore");
    f = field(meta, "path");
    if (meta == NULL || f == NULL || !YAJL_IS_STRING(f) ||
        strcmp(SV(f), "metastore.snapshot") != 0) {
        fail(err, errlen, "metastore.path is not \"metastore.snapshot\"");
        goto out;
    }
    if (!uint_field(meta, "length", TN_MANIFEST_MAX_BYTES, &m->meta_len) || m->meta_len == 0 ||
        !uint_field(meta, "crc32c", UINT32_MAX, &u) ||
        !uint_field(meta, "applied_index", INT64_MAX, &m->applied_index)) {
        fail(err, errlen, "metastore.length, crc32c or applied_index is missing or out of range");
        goto out;
    }
    m->meta_crc = (uint32_t)u;
    yajl_val vs = field(meta, "voters");
    if (vs == NULL || !YAJL_IS_ARRAY(vs) || vs->u.array.len == 0 || vs->u.array.len > 1024) {
        fail(err, errlen, "metastore.voters is not an array of 1..1024 voters");
        goto out;
    }
    m->voters = tn_calloc(vs->u.array.len, sizeof(*m->voters));
    if (m->voters == NULL) {
        rc = UV_ENOMEM;
        goto out;
    }
    bool self = false;
    for (size_t i = 0; i < vs->u.array.len; i++) {
        yajl_val v = vs->u.array.values[i];
        yajl_val a = field(v, "raft_address");
        if (!uint_field(v, "id", INT64_MAX - 1, &m->voters[i].id) || m->voters[i].id == 0 ||
            a == NULL || !YAJL_IS_STRING(a) || strlen(SV(a)) == 0 ||
            strlen(SV(a)) > TN_META_ADDR_MAX) {
            fail(err, errlen, "a voter without a positive id or a raft_address");
            goto out;
        }
        for (size_t j = 0; j < i; j++)
            if (m->voters[j].id == m->voters[i].id) {
                fail(err, errlen, "a voter id given twice");
                goto out;
            }
        snprintf(m->voters[i].raft_addr, sizeof(m->voters[i].raft_addr), "%s", SV(a));
        self = self || m->voters[i].id == m->node_id;
        m->nvoters++;
    }
    if (!self) {
        fail(err, errlen, "node_id is not one of metastore.voters");
        goto out;
    }
    yajl_val fs = field(root, "files");
    if (fs == NULL || !YAJL_IS_ARRAY(fs)) {
        fail(err, errlen, "files is not an array");
        goto out;
    }
    size_t n = fs->u.array.len;
    m->files = tn_calloc(n ? n : 1, sizeof(*m->files));
    if (m->files == NULL) {
        rc = UV_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        yajl_val e = fs->u.array.values[i];
        yajl_val p = field(e, "path");
        tn_manifest_file_t *mf = &m->files[i];
        if (p == NULL || !YAJL_IS_STRING(p) || !tn_manifest_path_ok(SV(p))) {
            char what[200];
            snprintf(what, sizeof(what), "file %zu: path %.100s is not a data directory file", i,
                     YAJL_IS_STRING(p) ? SV(p) : "(missing)");
            fail(err, errlen, what);
            goto out;
        }
        if (!uint_field(e, "length", (uint64_t)1 << 40, &mf->len) ||
            !uint_field(e, "crc32c", UINT32_MAX, &u)) {
            char what[200];
            snprintf(what, sizeof(what), "file %.100s: length or crc32c missing or out of range",
                     SV(p));
            fail(err, errlen, what);
            goto out;
        }
        mf->crc = (uint32_t)u;
        if ((mf->path = tn_strdup(SV(p))) == NULL) {
            rc = UV_ENOMEM;
            goto out;
        }
        m->nfiles++;
    }
    /* A path given twice would be written twice, the second over the
     * first: refused. Sorted, parents come before their children. */
    qsort(m->files, m->nfiles, sizeof(*m->files), cmp_path);
    for (size_t i = 1; i < m->nfiles; i++) {
        if (strcmp(m->files[i - 1].path, m->files[i].path) == 0) {
            char what[200];
            snprintf(what, sizeof(what), "file %.100s given twice", m->files[i].path);
            fail(err, errlen, what);
            goto out;
        }
        /* A file may not also be a directory of another. */
        size_t l = strlen(m->files[i - 1].path);
        if (strncmp(m->files[i - 1].path, m->files[i].path, l) == 0 && m->files[i].path[l] == '/') {
            char what[200];
            snprintf(what, sizeof(what), "file %.100s is also a directory", m->files[i - 1].path);
            fail(err, errlen, what);
            goto out;
        }
    }
    /* The partitions isolated for damage (optional: a server before this
     * field wrote none). */
    yajl_val is = field(root, "isolated");
    if (is != NULL) {
        if (!YAJL_IS_ARRAY(is) || is->u.array.len > m->nfiles) {
            fail(err, errlen, "isolated is not an array of at most one entry per file");
            goto out;
        }
        m->isolated = tn_calloc(is->u.array.len ? is->u.array.len : 1, sizeof(*m->isolated));
        if (m->isolated == NULL) {
            rc = UV_ENOMEM;
            goto out;
        }
        for (size_t i = 0; i < is->u.array.len; i++) {
            yajl_val e = is->u.array.values[i];
            yajl_val t = field(e, "topic"), w = field(e, "error");
            if (t == NULL || !YAJL_IS_STRING(t) || strlen(SV(t)) == 0 || strlen(SV(t)) > 255 ||
                !uint_field(e, "partition", UINT32_MAX, &u) || w == NULL || !YAJL_IS_STRING(w) ||
                strlen(SV(w)) > 1024) {
                char what[100];
                snprintf(what, sizeof(what),
                         "isolated entry %zu: topic, partition or error missing or out of range",
                         i);
                fail(err, errlen, what);
                goto out;
            }
            tn_manifest_isolated_t *x = &m->isolated[i];
            x->partition = (uint32_t)u;
            if ((x->topic = tn_strdup(SV(t))) == NULL || (x->error = tn_strdup(SV(w))) == NULL) {
                tn_free(x->topic);
                rc = UV_ENOMEM;
                goto out;
            }
            m->nisolated++;
        }
    }
    rc = 0;
out:
    yajl_tree_free(root);
    return rc;
}

int tn_manifest_set_parse(const char *buf, size_t len, tn_manifest_set_t *set, char *err,
                          size_t errlen)
{
    memset(set, 0, sizeof(*set));
    yajl_val v = NULL;
    int trc = len > TN_MANIFEST_SET_MAX_BYTES || memchr(buf, '\0', len) != NULL
                  ? UV_EINVAL
                  : tree_of(buf, len, &v);
    if (trc == UV_EINVAL)
        tn_errbuf(err, errlen,
                  "not a backup set this build reads (not JSON, or nested deeper than %d levels)",
                  TN_JSON_MAX_DEPTH);
    if (trc != 0)
        return trc;
    yajl_val f = field(v, "format"), nodes = field(v, "nodes"), bid = field(v, "id");
    uint64_t from = 0;
    int rc = UV_EINVAL;
    if (f == NULL || !YAJL_IS_STRING(f) || strcmp(SV(f), TN_MANIFEST_SET_FORMAT) != 0 ||
        !uint_field(v, "metastore_from", INT64_MAX, &from) || from == 0 || nodes == NULL ||
        !YAJL_IS_ARRAY(nodes) || nodes->u.array.len == 0) {
        tn_errbuf(err, errlen, "not a backup set this build reads");
        goto out;
    }
    set->meta_from = from;
    if (nodes->u.array.len > TN_MANIFEST_SET_MAX_NODES) {
        tn_errbuf(err, errlen, "it names more than %d nodes", TN_MANIFEST_SET_MAX_NODES);
        goto out;
    }
    if (bid != NULL) {
        size_t bl = YAJL_IS_STRING(bid) ? strlen(SV(bid)) : 0;
        bool hex = bl >= 16 && bl < sizeof(set->id);
        for (size_t i = 0; hex && i < bl; i++)
            hex = strchr("0123456789abcdef", SV(bid)[i]) != NULL;
        if (!hex) {
            tn_errbuf(err, errlen, "its id is not 16 to 64 lowercase hex digits");
            goto out;
        }
        memcpy(set->id, SV(bid), bl + 1);
    }
    bool from_in = false;
    for (size_t i = 0; i < nodes->u.array.len; i++) {
        yajl_val x = nodes->u.array.values[i];
        if (!YAJL_IS_INTEGER(x) || YAJL_GET_INTEGER(x) <= 0) {
            tn_errbuf(err, errlen, "it names a node id that is not a positive integer");
            goto out;
        }
        uint64_t nid = (uint64_t)YAJL_GET_INTEGER(x);
        if (nid > UINT32_MAX) {
            /* As the restore's rewrite refuses them (meta/restore.h):
             * said here, before any file is read. */
            tn_errbuf(err, errlen,
                      "it names node id %" PRIu64 ", above %" PRIu32 " (member ids are 32-bit)",
                      nid, UINT32_MAX);
            goto out;
        }
        for (size_t k = 0; k < set->n; k++)
            if (set->ids[k] == nid) {
                tn_errbuf(err, errlen, "it names node %" PRIu64 " twice", nid);
                goto out;
            }
        set->ids[set->n++] = nid;
        from_in = from_in || nid == from;
    }
    if (!from_in) {
        tn_errbuf(err, errlen, "its metastore_from is not one of its nodes");
        goto out;
    }
    rc = 0;
out:
    if (rc != 0)
        memset(set, 0, sizeof(*set));
    yajl_tree_free(v);
    return rc;
}

const tn_manifest_file_t *tn_manifest_find(const tn_manifest_t *m, const char *path)
{
    size_t lo = 0, hi = m->nfiles;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->files[mid].path, path);
        if (c == 0)
            return &m->files[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

void tn_manifest_fini(tn_manifest_t *m)
{
    for (size_t i = 0; i < m->nfiles; i++)
        tn_free(m->files[i].path);
    tn_free(m->files);
    for (size_t i = 0; i < m->nisolated; i++) {
        tn_free(m->isolated[i].topic);
        tn_free(m->isolated[i].error);
    }
    tn_free(m->isolated);
    tn_free(m->voters);
    memset(m, 0, sizeof(*m));
}

/* A channel file of the manifest: topics/<topic>/<p>/<channel>.wal|.ckpt
 * (both files of one partition's channel: one entry). */
typedef struct {
    const char *path; /* borrowed from the manifest: its first file */
    size_t topic_len; /* the topic is path + 7 */
    uint32_t partition;
    const char *name; /* the channel's, in path; name_len bytes */
    size_t name_len;
    bool ckpt, wal;
    bool elsewhere; /* another partition of the topic has the channel's checkpoint */
    size_t first;   /* the index of its first file in the manifest */
    /* On a channel's first entry (sorted): where its entries end, and
     * whether any has a checkpoint. */
    size_t group_end;
    bool group_ckpt;
} chfile_t;

/* Splits a manifest path into topic, partition and file name; false when
 * it is not a file of a partition directory. */
static bool partition_file(const char *path, size_t *topic_len, uint32_t *p, const char **file)
{
    if (strncmp(path, "topics/", 7) != 0)
        return false;
    const char *t = path + 7, *slash = strchr(t, '/');
    if (slash == NULL || slash == t || !isdigit((unsigned char)slash[1]))
        return false;
    char *end = NULL;
    unsigned long x = strtoul(slash + 1, &end, 10);
    if (*end != '/' || x > UINT32_MAX || strchr(end + 1, '/') != NULL)
        return false;
    *topic_len = (size_t)(slash - t);
    *p = (uint32_t)x;
    *file = end + 1;
    return true;
}

static int cmp_span(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, TN_MIN(al, bl));
    return c != 0 ? c : (al > bl) - (al < bl);
}

static int cmp_topic(const chfile_t *a, const char *topic, size_t topic_len)
{
    return cmp_span(a->path + 7, a->topic_len, topic, topic_len);
}

/* The channel's key: topic, then name. */
static int cmp_channel(const chfile_t *a, const chfile_t *b)
{
    int c = cmp_span(a->path + 7, a->topic_len, b->path + 7, b->topic_len);
    return c != 0 ? c : cmp_span(a->name, a->name_len, b->name, b->name_len);
}

/* Sorted by channel, then partition, then the manifest's order. */
static int cmp_chfile(const void *x, const void *y)
{
    const chfile_t *a = x, *b = y;
    int c = cmp_channel(a, b);
    if (c == 0)
        c = (a->partition > b->partition) - (a->partition < b->partition);
    return c != 0 ? c : (a->first > b->first) - (a->first < b->first);
}

static int cmp_first(const void *x, const void *y)
{
    const chfile_t *a = *(const chfile_t *const *)x, *b = *(const chfile_t *const *)y;
    return (a->first > b->first) - (a->first < b->first);
}

/* Whether cf[from..to) (one channel's entries, by partition) has p. */
static bool has_partition(const chfile_t *cf, size_t from, size_t to, uint32_t p)
{
    while (from < to) {
        size_t mid = from + (to - from) / 2;
        if (cf[mid].partition == p)
            return true;
        if (cf[mid].partition < p)
            from = mid + 1;
        else
            to = mid;
    }
    return false;
}

/* Channel files that do not go together in one node's manifest, each
 * said on out with what ternd makes of it (docs/storage-format.md,
 * "A channel" under "Recovery"): a WAL without its checkpoint, a
 * checkpoint without its WAL, and a partition of the backup without a
 * channel other partitions of its topic have. A backup taken while a
 * channel was made or deleted can hold the first two; a copy that lost
 * files holds any. The restore goes on (ternd delivers again rather
 * than lose), but not silently. The files are sorted by channel once,
 * so a backup of many partitions and channels is checked in n log n
 * (the pairwise search this replaced took minutes for 17,600 files).
 * Returns how many were said, or -1 out of memory. */
long tn_manifest_check_channels(const tn_manifest_t *m, FILE *out)
{
    chfile_t *cf = tn_calloc(m->nfiles + 1, sizeof(*cf));
    chfile_t **order = tn_calloc(m->nfiles + 1, sizeof(*order));
    if (cf == NULL || order == NULL) {
        tn_free(cf);
        tn_free(order);
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < m->nfiles; i++) {
        chfile_t f = {.path = m->files[i].path, .first = i};
        const char *file;
        if (!partition_file(f.path, &f.topic_len, &f.partition, &file))
            continue;
        size_t len = strlen(file);
        if (len > 4 && strcmp(file + len - 4, ".wal") == 0)
            f.wal = true, f.name_len = len - 4;
        else if (len > 5 && strcmp(file + len - 5, ".ckpt") == 0)
            f.ckpt = true, f.name_len = len - 5;
        else
            continue;
        f.name = file;
        cf[n++] = f;
    }
    /* One entry per partition and channel (its first file's), sorted. */
    qsort(cf, n, sizeof(*cf), cmp_chfile);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k > 0 && cmp_channel(&cf[k - 1], &cf[i]) == 0 &&
            cf[k - 1].partition == cf[i].partition) {
            cf[k - 1].ckpt |= cf[i].ckpt;
            cf[k - 1].wal |= cf[i].wal;
        } else {
            cf[k++] = cf[i];
        }
    }
    n = k;
    /* Per channel: its checkpoints on other partitions. */
    for (size_t g = 0, end; g < n; g = end) {
        size_t ckpts = 0;
        for (end = g; end < n && cmp_channel(&cf[g], &cf[end]) == 0; end++)
            ckpts += cf[end].ckpt;
        for (size_t i = g; i < end; i++)
            cf[i].elsewhere = ckpts > (cf[i].ckpt ? 1u : 0u);
        cf[g].group_end = end;
        cf[g].group_ckpt = ckpts > 0;
    }
    /* Said in the manifest's order. */
    for (size_t i = 0; i < n; i++)
        order[i] = &cf[i];
    qsort(order, n, sizeof(*order), cmp_first);
    long said = 0;
    for (size_t i = 0; i < n; i++) {
        const chfile_t *a = order[i];
        int tl = (int)a->topic_len, nl = (int)a->name_len;
        const char *t = a->path + 7;
        if (a->wal && !a->ckpt && a->elsewhere) {
            fprintf(out,
                    "ternctl restore: warning: partition %.*s/%" PRIu32 ": channel %.*s has a WAL "
                    "but no checkpoint in the backup: ternd makes the channel anew there and "
                    "delivers that partition's retained messages to it again\n",
                    tl, t, a->partition, nl, a->name);
            said++;
        } else if (a->wal && !a->ckpt) {
            fprintf(out,
                    "ternctl restore: warning: partition %.*s/%" PRIu32 ": channel %.*s has a WAL "
                    "but no checkpoint in the backup, nor on any other partition (deleted as the "
                    "backup ran, or its checkpoints lost): ternd ignores the WAL\n",
                    tl, t, a->partition, nl, a->name);
            said++;
        } else if (a->ckpt && !a->wal) {
            fprintf(out,
                    "ternctl restore: warning: partition %.*s/%" PRIu32 ": channel %.*s has a "
                    "checkpoint but no WAL in the backup (made as the backup ran, or its WAL "
                    "lost): its acks after the checkpoint are not restored, those messages are "
                    "delivered again\n",
                    tl, t, a->partition, nl, a->name);
            said++;
        }
    }
    /* Partitions of the backup (a segment) without a channel of their
     * topic that has a checkpoint somewhere: said once per partition and
     * channel, the channels by name. The manifest is sorted by path, so a
     * directory's files are together. */
    const char *done = NULL; /* the last partition directory checked */
    size_t done_len = 0;
    for (size_t i = 0; i < m->nfiles; i++) {
        size_t topic_len;
        uint32_t p;
        const char *file, *path = m->files[i].path;
        if (!partition_file(path, &topic_len, &p, &file) || strlen(file) != 24 ||
            strcmp(file + 20, ".log") != 0)
            continue;
        size_t dir_len = (size_t)(file - path);
        if (done != NULL && done_len == dir_len && memcmp(done, path, dir_len) == 0)
            continue;
        done = path;
        done_len = dir_len;
        /* A replicated partition's copy (it has an epochs file) gets a
         * channel's state from its leader: a follower's copy has no file
         * of a channel until the leader's first settle of it reaches it.
         * The directory's files are together, from this one on. */
        bool replica = false;
        for (size_t f = i; f < m->nfiles && !replica; f++) {
            const char *q = m->files[f].path;
            if (strncmp(q, path, dir_len) != 0)
                break;
            replica = strcmp(q + dir_len, "epochs") == 0;
        }
        if (replica)
            continue;
        /* The topic's channels: the first entry not below it, on. */
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (cmp_topic(&cf[mid], path + 7, topic_len) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t g = lo; g < n && cmp_topic(&cf[g], path + 7, topic_len) == 0;
             g = cf[g].group_end) {
            if (!cf[g].group_ckpt || has_partition(cf, g, cf[g].group_end, p))
                continue;
            fprintf(out,
                    "ternctl restore: warning: partition %.*s/%" PRIu32 ": no file of channel "
                    "%.*s, which other partitions of the topic have, in the backup: ternd makes "
                    "the channel anew there and delivers that partition's retained messages to "
                    "it again\n",
                    (int)topic_len, path + 7, p, (int)cf[g].name_len, cf[g].name);
            said++;
        }
    }
    tn_free(order);
    tn_free(cf);
    return said;
}

int tn_manifest_remove_dir(const char *dir)
{
    /* Not opendir and unlinkat: a link in dir's place (the target is the
     * operator's, and may change under the restore) was followed, and the
     * files of whatever it pointed at unlinked. */
    return tn_io_remove_tree(dir);
}
