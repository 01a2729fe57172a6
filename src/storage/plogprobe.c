/* A read-only look at a partition log directory (tn_plog_probe, plog.h):
 * the log start, log end and epoch history that tn_plog_open's recovery
 * (plog.c, "recovery") would find there, without the writes recovery
 * makes on the way (a torn tail cut, a sidecar rebuilt, an empty leftover
 * segment or a `.tmp` file removed, the epochs file repaired). `ternctl
 * restore` probes every member's copy of a replicated partition inside a
 * backup, which must stay as it is: each member's restore reads it again.
 *
 * The decisions follow recover(), recover_segment() and apply_damage()
 * one for one; the readers are theirs (tn__seg_bases, tn__seg_list's
 * listing without its removal of `.tmp` files; tn_seg_index_open,
 * tn_seg_scan, tn__plog_floor_load, tn__plog_damage_load,
 * tn_epochs_load and the history's own truncations). What recovery would
 * isolate (a damaged sealed segment, a torn record below durable data,
 * overlapping segments, a damaged floor or epochs file, a damage record
 * that still names a segment or is damaged itself) is TN_ECORRUPT.
 *
 * Threads: any; blocks on disk. */
#include "core/platform.h"

#include "storage/plog.h"

#include "core/alloc.h"
#include "core/err.h"
#include "storage/io.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One segment as recover_segment sees it (recorded: the last one, which
 * the damage record names as the active segment, so no tail of it is
 * cut): *count its records, *skip when recovery would remove it (an
 * empty leftover). */
static int probe_segment(tn_plog_probe_t *out, const char *dir, uint64_t base, bool last,
                         bool recorded, uint64_t *count, bool *skip)
{
    *count = 0;
    *skip = false;
    char name[64], path[4096];
    tn_seg_name(base, "log", name, sizeof(name));
    int rc = tn_io_path(path, sizeof(path), "%s/%s", dir, name);
    if (rc != 0)
        return rc;
    tn_seg_t *seg;
    if ((rc = tn_seg_new(path, base, &seg)) != 0)
        return rc;
    uint64_t fsize = 0;
    rc = tn_io_open(path, O_RDONLY, 0, &seg->fd);
    if (rc == 0)
        rc = tn_io_fsize(seg->fd, &fsize);
    if (rc != 0) {
        tn_errbuf(out->errmsg, sizeof(out->errmsg), "%s: %s", path, tn_strerror(rc));
        goto done;
    }
    if (!last) {
        rc = tn_seg_index_open(seg, fsize);
        if (rc == 0) {
            *count = seg->count; /* a good sidecar: recovery reads no further */
            goto done;
        }
        if (rc != UV_ENOENT && rc != TN_ECORRUPT) {
            tn_errbuf(out->errmsg, sizeof(out->errmsg), "%s: index: %s", path, tn_strerror(rc));
            goto done;
        }
        if (rc == UV_ENOENT && fsize == 0) {
            *skip = true; /* tn_plog_advance's leftover: recovery removes it */
            rc = 0;
            goto done;
        }
    }
    tn_seg_scan_t scan;
    if ((rc = tn_seg_scan(seg->fd, fsize, base, 4096, NULL, &scan)) != 0) {
        tn_errbuf(out->errmsg, sizeof(out->errmsg), "%s: %s", path, tn_strerror(rc));
        goto done;
    }
    if (scan.tail != 0 && recorded) {
        tn_errbuf(out->errmsg, sizeof(out->errmsg),
                  "%s: the active segment %" PRIu64 " (offsets from %" PRIu64
                  ") was found damaged before the restart and is not repaired yet (%s at byte "
                  "%" PRIu64 ", not cut: the partition's damage record names the segment)",
                  dir, base, base, scan.tail == TN_ESHORT ? "truncated record" : "bad record",
                  scan.tail_pos);
        rc = TN_ECORRUPT;
    } else if (scan.tail != 0 && !(last && scan.zero_tail) && (!last || scan.durable_damage)) {
        tn_errbuf(out->errmsg, sizeof(out->errmsg), "segment %s: %s at byte %" PRIu64 "%s", path,
                  scan.tail == TN_ESHORT ? "truncated record" : "bad record", scan.tail_pos,
                  last ? " below data that had been made durable" : " in a sealed segment");
        rc = TN_ECORRUPT;
    } else if (!last && scan.count == 0) {
        tn_errbuf(out->errmsg, sizeof(out->errmsg), "segment %s is empty but not the last", path);
        rc = TN_ECORRUPT;
    } else {
        *count = scan.count; /* a torn tail of the last segment is not counted */
    }
done:
    tn_seg_unref(seg);
    return rc;
}

/* The highest epoch dir's history names, into out->max_epoch, for a copy
 * recovery would isolate: it still counts for whoever leads next (its
 * history may be sound where its segments are not). */
static void note_max_epoch(const char *dir, tn_plog_probe_t *out)
{
    tn_epochs_t h;
    tn_epochs_init(&h);
    if (tn_epochs_load(&h, dir) == 0 && h.n > 0)
        out->max_epoch = tn_epochs_latest(&h);
    tn_epochs_fini(&h);
}

int tn_plog_probe(const char *dir, tn_plog_probe_t *out)
{
    memset(out, 0, sizeof(*out));
    tn_epochs_init(&out->epochs);
    uint64_t *bases = NULL;
    size_t n = 0;
    int rc = tn__seg_bases(dir, &bases, &n);
    if (rc != 0) {
        tn_errbuf(out->errmsg, sizeof(out->errmsg), "%s: %s", dir, tn_strerror(rc));
        return rc;
    }
    tn__plog_dmgfile_t dmg;
    if ((rc = tn__plog_damage_load(dir, &dmg)) != 0) {
        tn_free(bases);
        tn_errbuf(out->errmsg, sizeof(out->errmsg), "%s/damage: %s", dir, tn_strerror(rc));
        return rc;
    }
    bool named = dmg.found && !dmg.damaged; /* a record to match to the segments */
    bool any = false, dmg_seg = false;
    uint64_t first = 0, end = 0;
    uint64_t dmg_next = 0; /* what follows the segment the record names (damage_end_locked) */
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint64_t count;
        bool skip;
        bool last = i + 1 == n;
        bool recorded = last && named && dmg.base == bases[i] && dmg.end == TN_PLOG_DAMAGE_ACTIVE;
        rc = probe_segment(out, dir, bases[i], last, recorded, &count, &skip);
        if (rc != 0 || skip)
            continue;
        if (any && bases[i] < end) {
            tn_errbuf(out->errmsg, sizeof(out->errmsg),
                      "%s: segment %" PRIu64 " overlaps the previous segment ending at %" PRIu64,
                      dir, bases[i], end);
            rc = TN_ECORRUPT;
            break;
        }
        if (dmg_seg && dmg_next == 0)
            dmg_next = bases[i];
        dmg_seg |= named && bases[i] == dmg.base;
        if (!any)
            first = bases[i];
        any = true;
        end = bases[i] + count;
    }
    tn_free(bases);
    if (rc != 0) {
        note_max_epoch(dir, out);
        return rc;
    }
    uint64_t floor = 0;
    if ((rc = tn__plog_floor_load(dir, &floor)) != 0) {
        tn_errbuf(out->errmsg, sizeof(out->errmsg), "%s: floor file: %s", dir,
                  rc == TN_ECORRUPT ? "damaged" : tn_strerror(rc));
        return rc;
    }
    /* apply_damage: a record found beside segments isolates the log when
     * it is damaged or still names one of them (one naming none is
     * dropped by the open: nothing here). */
    if (dmg_seg && dmg_next == 0)
        dmg_next = TN_PLOG_DAMAGE_ACTIVE; /* the last segment */
    if (n > 0 && dmg.damaged) {
        tn_errbuf(out->errmsg, sizeof(out->errmsg), "damage file %s/damage is damaged", dir);
        rc = TN_ECORRUPT;
    } else if (n > 0 && named && tn__plog_damage_names(&dmg, dmg_next)) {
        if (dmg_next == TN_PLOG_DAMAGE_ACTIVE)
            tn_errbuf(out->errmsg, sizeof(out->errmsg),
                      "%s: the active segment %" PRIu64 " (offsets from %" PRIu64
                      ") was found damaged before the restart and is not repaired yet",
                      dir, dmg.base, dmg.base);
        else
            tn_errbuf(out->errmsg, sizeof(out->errmsg),
                      "%s: segment %" PRIu64 " (offsets %" PRIu64 "..%" PRIu64
                      ") was found damaged before the restart and is not repaired yet",
                      dir, dmg.base, dmg.base, dmg_next - 1);
        rc = TN_ECORRUPT;
    }
    if (rc != 0) {
        note_max_epoch(dir, out);
        return rc;
    }
    out->log_start = TN_MAX(first, floor);
    out->log_end = end;
    rc = tn_epochs_load(&out->epochs, dir);
    if (rc != 0) {
        tn_errbuf(out->errmsg, sizeof(out->errmsg), "%s", out->epochs.errmsg);
        return rc;
    }
    uint32_t latest = tn_epochs_latest(&out->epochs);
    out->max_epoch = latest == TN_EPOCHS_UNDEFINED ? 0 : latest;
    /* recover_epochs' repair, in memory. */
    tn_epochs_truncate_from_end(&out->epochs, out->log_end);
    tn_epochs_truncate_from_start(&out->epochs, out->log_start);
    return 0;
}

void tn_plog_probe_fini(tn_plog_probe_t *out)
{
    tn_epochs_fini(&out->epochs);
}
