/* Fuzz target: the recovery scan of a segment over arbitrary bytes, then
 * reads through the index it built. The first byte picks the index
 * interval; the rest is the segment file (held in a memfd). Checks: the
 * valid prefix lies inside the file, every record in it reads back at its
 * offset, and a read past the prefix never succeeds. */
#include "core/platform.h"

#include "core/buf.h"
#include "storage/io.h"
#include "storage/segment.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint32_t interval = 64u << (data[0] % 6);
    data++;
    size--;
    int fd = memfd_create("segment", 0);
    if (fd < 0)
        return 0;
    if (size > 0 && tn_io_pwrite(fd, data, size, 0) != 0) {
        close(fd);
        return 0;
    }
    tn_seg_t *seg;
    if (tn_seg_new("fuzz/00000000000000000000.log", 0, &seg) != 0) {
        close(fd);
        return 0;
    }
    seg->fd = fd;
    tn_seg_scan_t scan;
    if (tn_seg_scan(fd, size, 0, interval, seg, &scan) == 0) {
        if (scan.valid_len > size || (scan.tail == 0 && scan.valid_len != size))
            abort();
        seg->count = scan.count;
        seg->size = scan.valid_len;
        tn_buf_t scratch;
        tn_buf_init(&scratch);
        for (uint64_t off = 0; off < scan.count && off < 4096; off++) {
            tn_rec_t rec;
            uint64_t start = tn_seg_index_find(seg, off);
            int rc = tn_seg_read_at(seg, start, seg->size, off, &scratch, &rec);
            if (rc != 0 || rec.h.offset != off)
                abort();
        }
        tn_rec_t rec;
        if (tn_seg_read_at(seg, 0, seg->size, scan.count, &scratch, &rec) == 0)
            abort();
        tn_buf_fini(&scratch);
    }
    tn_seg_unref(seg); /* closes fd */
    return 0;
}
