/* Segment files: scanning (recovery), the sparse index and its sidecar,
 * and reads by offset. See segment.h for the sidecar layout.
 *
 * DESIGN: recovering the active segment.
 *   1. Records are read front to back. Each must have the magic, known
 *      flags, sane lengths, the next offset in sequence, and a CRC that
 *      verifies.
 *   2. The scan stops at the first record that fails, or at a partial
 *      record at end of file. Records flagged TN_REC_F_MORE belong to one
 *      atomic batch with the records after them, so the valid prefix ends
 *      at the last complete batch.
 *   3. Everything after that prefix is a torn tail and is truncated, unless
 *      a later record that does verify carries a sync_mark beyond the
 *      prefix: then bytes past the cut had been fdatasync'ed, the failure is
 *      damage to durable data, and the partition is refused instead.
 * A power cut can leave any mix of zeros, old bytes and new sectors after
 * the last fdatasync, but never damage below it; a bit flip below it is
 * caught by step 3 whenever a later record survived. */
#include "core/platform.h"

#include "storage/segment.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "core/crc32c.h"
#include "core/err.h"
#include "storage/io.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SCAN_WINDOW (1024 * 1024)
#define READ_WINDOW (64 * 1024)

void tn_seg_name(uint64_t base, const char *ext, char *buf, size_t len)
{
    snprintf(buf, len, "%020" PRIu64 ".%s", base, ext);
}

bool tn_seg_parse_name(const char *name, uint64_t *base)
{
    if (strlen(name) != 24 || strcmp(name + 20, ".log") != 0)
        return false;
    uint64_t v = 0;
    for (int i = 0; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9')
            return false;
        uint64_t d = (uint64_t)(name[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *base = v;
    return true;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* tn__seg_list and tn__seg_bases: the segment bases in dir, ascending;
 * with remove_tmp, every "*.tmp" file there removed on the way. */
static int list_bases(const char *dir, bool remove_tmp, uint64_t **bases, size_t *n)
{
    *bases = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        return tn_err_from_errno(errno);
    size_t cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (remove_tmp && len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0) {
            char path[4096];
            if (tn_io_path(path, sizeof(path), "%s/%s", dir, e->d_name) == 0)
                tn_io_unlink(path);
            continue;
        }
        uint64_t base;
        if (!tn_seg_parse_name(e->d_name, &base))
            continue;
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            uint64_t *p = tn_realloc(*bases, nc * sizeof(*p));
            if (p == NULL) {
                rc = UV_ENOMEM;
                break;
            }
            *bases = p;
            cap = nc;
        }
        (*bases)[(*n)++] = base;
    }
    closedir(d);
    if (rc != 0) {
        tn_free(*bases);
        *bases = NULL;
        *n = 0;
        return rc;
    }
    if (*n > 1)
        qsort(*bases, *n, sizeof(**bases), cmp_u64);
    return 0;
}

int tn__seg_list(const char *dir, uint64_t **bases, size_t *n)
{
    return list_bases(dir, true, bases, n);
}

int tn__seg_bases(const char *dir, uint64_t **bases, size_t *n)
{
    return list_bases(dir, false, bases, n);
}

int tn_seg_new(const char *path, uint64_t base, tn_seg_t **out)
{
    tn_seg_t *seg = tn_calloc(1, sizeof(*seg));
    if (seg == NULL)
        return UV_ENOMEM;
    seg->path = tn_strdup(path);
    if (seg->path == NULL) {
        tn_free(seg);
        return UV_ENOMEM;
    }
    seg->base = base;
    seg->fd = -1;
    seg->ctl_known = true; /* a new segment holds none yet */
    seg->ctl_listed = true;
    atomic_init(&seg->refs, 1);
    *out = seg;
    return 0;
}

void tn_seg_unref(tn_seg_t *seg)
{
    if (seg == NULL || atomic_fetch_sub(&seg->refs, 1) != 1)
        return;
    if (seg->fd >= 0)
        tn_io_close(seg->fd);
    tn_free(seg->idx);
    tn_free(seg->ctl_offs);
    tn_free(seg->path);
    tn_free(seg);
}

int tn_seg_ctl_note(tn_seg_t *seg, uint64_t offset)
{
    seg->nctl++;
    if (!seg->ctl_listed)
        return 0;
    if (seg->nctl_offs == seg->ctl_offs_cap) {
        uint32_t cap = seg->ctl_offs_cap ? seg->ctl_offs_cap * 2 : 16;
        uint64_t *p = tn_realloc(seg->ctl_offs, (size_t)cap * sizeof(*p));
        if (p == NULL) {
            tn_seg_ctl_unlist(seg);
            return UV_ENOMEM;
        }
        seg->ctl_offs = p;
        seg->ctl_offs_cap = cap;
    }
    /* Offsets only grow within a segment. */
    TN_DASSERT(seg->nctl_offs == 0 || seg->ctl_offs[seg->nctl_offs - 1] < offset);
    seg->ctl_offs[seg->nctl_offs++] = offset;
    return 0;
}

void tn_seg_ctl_unlist(tn_seg_t *seg)
{
    tn_free(seg->ctl_offs);
    seg->ctl_offs = NULL;
    seg->nctl_offs = seg->ctl_offs_cap = 0;
    seg->ctl_listed = false;
}

uint64_t tn_seg_ctl_below(const tn_seg_t *seg, uint64_t offset)
{
    uint32_t lo = 0, hi = seg->nctl_offs;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (seg->ctl_offs[mid] < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int tn_seg_index_note(tn_seg_t *seg, uint64_t offset, uint64_t pos, uint32_t interval)
{
    if (seg->nidx > 0 && pos < seg->idx_next_pos)
        return 0;
    if (seg->nidx == seg->idx_cap) {
        uint32_t cap = seg->idx_cap ? seg->idx_cap * 2 : 64;
        tn_ient_t *p = tn_realloc(seg->idx, (size_t)cap * sizeof(*p));
        if (p == NULL)
            return UV_ENOMEM;
        seg->idx = p;
        seg->idx_cap = cap;
    }
    seg->idx[seg->nidx].rel = (uint32_t)(offset - seg->base);
    seg->idx[seg->nidx].pos = (uint32_t)pos;
    seg->nidx++;
    seg->idx_next_pos = pos + interval;
    return 0;
}

/* A read window over a file, for scanning. */
typedef struct {
    int fd;
    uint64_t file_size;
    uint64_t wpos;
    tn_buf_t b;
} win_t;

static int win_get(win_t *w, uint64_t pos, size_t n, const unsigned char **out)
{
    if (pos >= w->wpos && pos + n <= w->wpos + w->b.len) {
        *out = (const unsigned char *)w->b.base + (pos - w->wpos);
        return 0;
    }
    if (pos + n > w->file_size)
        return TN_ESHORT;
    size_t want = TN_MAX(n, (size_t)SCAN_WINDOW);
    if (want > w->file_size - pos)
        want = (size_t)(w->file_size - pos);
    tn_buf_reset(&w->b);
    int rc = tn_buf_reserve(&w->b, want);
    if (rc != 0)
        return rc;
    size_t got;
    rc = tn_io_pread(w->fd, w->b.base, want, pos, &got);
    if (rc != 0)
        return rc;
    w->b.len = got;
    w->wpos = pos;
    if (got < n)
        return TN_ESHORT;
    *out = (const unsigned char *)w->b.base;
    return 0;
}

/* Look past a failed record for one that verifies and whose sync_mark
 * reaches beyond cut: proof that bytes past cut had been durable. */
static int find_durable_evidence(win_t *w, uint64_t from, uint64_t cut, bool *found)
{
    *found = false;
    for (uint64_t p = from; p + TN_REC_HDR <= w->file_size; p++) {
        const unsigned char *h;
        int rc = win_get(w, p, 4, &h);
        if (rc != 0)
            return rc == TN_ESHORT ? 0 : rc;
        if (tn_get_u32(h) != TN_REC_MAGIC)
            continue;
        rc = win_get(w, p, TN_REC_HDR, &h);
        if (rc != 0)
            return rc == TN_ESHORT ? 0 : rc;
        tn_rec_hdr_t hdr;
        if (tn_rec_decode_hdr(h, TN_REC_HDR, &hdr) != 0 || hdr.sync_mark <= cut)
            continue;
        uint64_t size = tn_rec_size(&hdr);
        if (p + size > w->file_size)
            continue;
        const unsigned char *r;
        rc = win_get(w, p, (size_t)size, &r);
        if (rc != 0)
            return rc == TN_ESHORT ? 0 : rc;
        if (tn_rec_verify(r, r + TN_REC_HDR, r + TN_REC_HDR + hdr.key_len) == 0) {
            *found = true;
            return 0;
        }
    }
    return 0;
}

/* Whether every byte from `from` to the end of the file is zero. */
static int all_zero(win_t *w, uint64_t from, bool *zero)
{
    *zero = true;
    for (uint64_t p = from; p < w->file_size;) {
        size_t n = (size_t)TN_MIN(w->file_size - p, (uint64_t)SCAN_WINDOW);
        const unsigned char *b;
        int rc = win_get(w, p, n, &b);
        if (rc != 0)
            return rc;
        for (size_t i = 0; i < n; i++) {
            if (b[i] != 0) {
                *zero = false;
                return 0;
            }
        }
        p += n;
    }
    return 0;
}

int tn_seg_scan(int fd, uint64_t file_size, uint64_t base, uint32_t interval, tn_seg_t *seg,
                tn_seg_scan_t *out)
{
    memset(out, 0, sizeof(*out));
    win_t w = {fd, file_size, 0, {0}};
    tn_buf_init(&w.b);
    uint64_t pos = 0, expected = base, count = 0, nctl = 0;
    int64_t first_ns = 0, last_ns = 0;
    int rc = 0;
    if (seg != NULL) {
        /* The list is rebuilt from the records found. */
        seg->nctl_offs = 0;
        seg->nctl = 0;
        seg->ctl_listed = true;
        seg->ctl_known = true;
    }

    while (pos < file_size) {
        const unsigned char *p;
        tn_rec_hdr_t h;
        rc = win_get(&w, pos, TN_REC_HDR, &p);
        if (rc == TN_ESHORT) {
            out->tail = TN_ESHORT;
            break;
        }
        if (rc != 0)
            goto out;
        if (tn_rec_decode_hdr(p, TN_REC_HDR, &h) != 0 || h.offset != expected) {
            out->tail = TN_ECORRUPT;
            break;
        }
        uint64_t size = tn_rec_size(&h);
        if (pos + size > file_size) {
            out->tail = TN_ESHORT;
            break;
        }
        rc = win_get(&w, pos, (size_t)size, &p);
        if (rc != 0)
            goto out;
        if (tn_rec_verify(p, p + TN_REC_HDR, p + TN_REC_HDR + h.key_len) != 0) {
            out->tail = TN_ECORRUPT;
            break;
        }
        if (seg != NULL && (rc = tn_seg_index_note(seg, h.offset, pos, interval)) != 0)
            goto out;
        if ((h.flags & TN_REC_F_CONTROL) != 0) {
            nctl++;
            if (seg != NULL)
                (void)tn_seg_ctl_note(seg, h.offset); /* no memory: unlisted, counted */
        }
        if (count == 0)
            first_ns = h.publish_ns;
        last_ns = TN_MAX(last_ns, h.publish_ns);
        out->max_sync_mark = TN_MAX(out->max_sync_mark, h.sync_mark);
        count++;
        expected++;
        pos += size;
        if ((h.flags & TN_REC_F_MORE) == 0) {
            out->count = count;
            out->ncontrol = nctl;
            out->valid_len = pos;
            out->first_ns = first_ns;
            out->last_ns = last_ns;
        }
    }
    rc = 0;
    if (out->tail == 0 && out->valid_len < pos)
        out->tail = TN_ESHORT; /* the file ends inside a batch */
    if (out->tail != 0) {
        out->tail_pos = out->valid_len;
        rc = all_zero(&w, out->valid_len, &out->zero_tail);
        if (rc == 0 && !out->zero_tail)
            rc =
                find_durable_evidence(&w, out->valid_len + 1, out->valid_len, &out->durable_damage);
        if (rc != 0)
            goto out;
    }
    if (seg != NULL) {
        /* Forget index entries past the valid prefix. */
        while (seg->nidx > 0 && seg->idx[seg->nidx - 1].pos >= out->valid_len)
            seg->nidx--;
        seg->idx_next_pos = seg->nidx ? seg->idx[seg->nidx - 1].pos + interval : 0;
        /* And control records past it. */
        while (seg->nctl_offs > 0 && seg->ctl_offs[seg->nctl_offs - 1] >= base + out->count)
            seg->nctl_offs--;
        seg->nctl = out->ncontrol;
    }
out:
    tn_buf_fini(&w.b);
    return rc;
}

static void idx_path(const tn_seg_t *seg, char *buf, size_t len)
{
    size_t n = strlen(seg->path);
    snprintf(buf, len, "%.*s.idx", (int)(n - 4), seg->path);
}

int tn_seg_index_write(const tn_seg_t *seg, const char *dir)
{
    size_t body = (size_t)seg->nidx * 8;
    unsigned char *buf = tn_malloc(TN_SEG_IDX_HDR + body);
    if (buf == NULL)
        return UV_ENOMEM;
    memset(buf, 0, TN_SEG_IDX_HDR);
    for (uint32_t i = 0; i < seg->nidx; i++) {
        tn_put_u32(buf + TN_SEG_IDX_HDR + i * 8, seg->idx[i].rel);
        tn_put_u32(buf + TN_SEG_IDX_HDR + i * 8 + 4, seg->idx[i].pos);
    }
    tn_put_u32(buf, TN_SEG_IDX_MAGIC);
    tn_put_u64(buf + 8, seg->base);
    tn_put_u64(buf + 16, seg->count);
    tn_put_u64(buf + 24, seg->size);
    tn_put_u64(buf + 32, (uint64_t)seg->first_ns);
    tn_put_u64(buf + 40, (uint64_t)seg->last_ns);
    tn_put_u32(buf + 48, seg->nidx);
    tn_put_u64(buf + 64, seg->ctl_base);
    tn_put_u64(buf + 72, seg->nctl);
    tn_put_u32(buf + 52, tn_crc32c(0, buf + TN_SEG_IDX_HDR, body));
    tn_put_u32(buf + 4, tn_crc32c(0, buf + 8, TN_SEG_IDX_HDR - 8));
    char name[64];
    tn_seg_name(seg->base, "idx", name, sizeof(name));
    int rc = tn_io_write_file_atomic(dir, name, buf, TN_SEG_IDX_HDR + body);
    tn_free(buf);
    return rc;
}

/* Read and check a sidecar's header (TNI2 or TNI1) into hdr (at least
 * TN_SEG_IDX_HDR bytes); *hsize: its size. */
static int read_idx_header(const tn_seg_t *seg, int fd, unsigned char *hdr, uint64_t *fsize,
                           size_t *hsize)
{
    int rc = tn_io_fsize(fd, fsize);
    if (rc != 0)
        return rc;
    size_t n;
    rc = tn_io_pread(fd, hdr, TN_SEG_IDX_HDR, 0, &n);
    if (rc != 0)
        return rc;
    size_t h = n >= 4 ? tn_seg_idx_hdr_size(tn_get_u32(hdr)) : 0;
    if (h == 0 || n < h || tn_get_u32(hdr + 4) != tn_crc32c(0, hdr + 8, h - 8) ||
        tn_get_u64(hdr + 8) != seg->base || *fsize != h + (uint64_t)tn_get_u32(hdr + 48) * 8)
        return TN_ECORRUPT;
    *hsize = h;
    return 0;
}

/* Open seg's sidecar and read and check its header; on success *fd is
 * open (the caller closes it). */
static int open_idx(const tn_seg_t *seg, int *fd, unsigned char *hdr, uint64_t *fsize,
                    size_t *hsize)
{
    char path[4096];
    idx_path(seg, path, sizeof(path));
    int rc = tn_io_open(path, O_RDONLY, 0, fd);
    if (rc != 0)
        return rc;
    rc = read_idx_header(seg, *fd, hdr, fsize, hsize);
    if (rc != 0)
        tn_io_close(*fd);
    return rc;
}

int tn_seg_index_open(tn_seg_t *seg, uint64_t file_size)
{
    int fd;
    unsigned char hdr[TN_SEG_IDX_HDR];
    uint64_t fsize;
    size_t hsize;
    int rc = open_idx(seg, &fd, hdr, &fsize, &hsize);
    if (rc != 0)
        return rc;
    tn_io_close(fd);
    uint64_t count = tn_get_u64(hdr + 16);
    uint64_t size = tn_get_u64(hdr + 24);
    if (size != file_size || count == 0 || count > size / TN_REC_HDR)
        return TN_ECORRUPT;
    tn_seg_ctl_unlist(seg);
    if (hsize == TN_SEG_IDX_HDR) {
        uint64_t nctl = tn_get_u64(hdr + 72);
        if (nctl > count)
            return TN_ECORRUPT;
        seg->ctl_base = tn_get_u64(hdr + 64);
        seg->nctl = nctl;
        seg->ctl_known = true;
    } else {
        seg->ctl_base = seg->nctl = 0;
        seg->ctl_known = false;
    }
    seg->count = count;
    seg->size = size;
    seg->synced = size;
    seg->first_ns = (int64_t)tn_get_u64(hdr + 32);
    seg->last_ns = (int64_t)tn_get_u64(hdr + 40);
    return 0;
}

int tn_seg_index_load(tn_seg_t *seg)
{
    int fd;
    unsigned char hdr[TN_SEG_IDX_HDR];
    uint64_t fsize;
    size_t hsize;
    int rc = open_idx(seg, &fd, hdr, &fsize, &hsize);
    if (rc != 0)
        return rc;
    tn_ient_t *idx = NULL;
    unsigned char *raw = NULL;
    uint32_t n = tn_get_u32(hdr + 48);
    size_t body = (size_t)n * 8;
    raw = tn_malloc(body);
    idx = tn_malloc((size_t)n * sizeof(*idx));
    if (raw == NULL || idx == NULL) {
        rc = UV_ENOMEM;
        goto out;
    }
    size_t got;
    rc = tn_io_pread(fd, raw, body, hsize, &got);
    if (rc != 0)
        goto out;
    if (got != body || tn_crc32c(0, raw, body) != tn_get_u32(hdr + 52)) {
        rc = TN_ECORRUPT;
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        idx[i].rel = tn_get_u32(raw + i * 8);
        idx[i].pos = tn_get_u32(raw + i * 8 + 4);
        if (idx[i].pos >= seg->size || idx[i].rel >= seg->count ||
            (i > 0 && (idx[i].rel <= idx[i - 1].rel || idx[i].pos <= idx[i - 1].pos))) {
            rc = TN_ECORRUPT;
            goto out;
        }
    }
    tn_free(seg->idx);
    seg->idx = idx;
    seg->nidx = n;
    seg->idx_cap = n;
    seg->idx_loaded = true;
    idx = NULL;
out:
    tn_free(idx);
    tn_free(raw);
    tn_io_close(fd);
    return rc;
}

uint64_t tn_seg_index_find(const tn_seg_t *seg, uint64_t offset)
{
    uint64_t rel = offset - seg->base;
    uint32_t lo = 0, hi = seg->nidx;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (seg->idx[mid].rel <= rel)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? 0 : seg->idx[lo - 1].pos;
}

int tn_seg_read_at(tn_seg_t *seg, uint64_t start, uint64_t limit, uint64_t offset,
                   tn_buf_t *scratch, tn_rec_t *rec)
{
    uint64_t pos = start;
    while (pos < limit) {
        if (limit - pos < TN_REC_HDR)
            return TN_ECORRUPT;
        size_t want = (size_t)TN_MIN(limit - pos, (uint64_t)READ_WINDOW);
        tn_buf_reset(scratch);
        int rc = tn_buf_reserve(scratch, want);
        if (rc != 0)
            return rc;
        size_t got;
        rc = tn_io_pread(seg->fd, scratch->base, want, pos, &got);
        if (rc != 0)
            return rc;
        if (got < TN_REC_HDR)
            return TN_ECORRUPT;
        scratch->len = got;
        size_t p = 0;
        while (p + TN_REC_HDR <= got) {
            const unsigned char *b = (const unsigned char *)scratch->base + p;
            tn_rec_hdr_t h;
            if (tn_rec_decode_hdr(b, TN_REC_HDR, &h) != 0)
                return TN_ECORRUPT;
            uint64_t size = tn_rec_size(&h);
            if (pos + p + size > limit)
                return TN_ECORRUPT;
            if (h.offset == offset) {
                if (p + size > got) {
                    /* Re-read the whole record from its start. */
                    uint64_t at = pos + p;
                    tn_buf_reset(scratch);
                    rc = tn_buf_reserve(scratch, (size_t)size);
                    if (rc != 0)
                        return rc;
                    rc = tn_io_pread(seg->fd, scratch->base, (size_t)size, at, &got);
                    if (rc != 0)
                        return rc;
                    if (got < size)
                        return TN_ECORRUPT;
                    scratch->len = got;
                    b = (const unsigned char *)scratch->base;
                }
                return tn_rec_decode(b, (size_t)size, rec);
            }
            if (h.offset > offset)
                return TN_ECORRUPT;
            p += (size_t)size;
        }
        pos += p;
    }
    return TN_ECORRUPT;
}
