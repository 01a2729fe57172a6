/* Fuzz target: node RPC request and reply payloads. A request passes
 * tn_wire_request_check exactly when the op's fields, read one by one,
 * consume it whole, and what passes encodes back to the same bytes; the
 * same bytes as a reply decode or are refused, and a decoded reply encodes
 * back the same. */
#include "core/platform.h"

#include "cluster/fetch.h"
#include "cluster/wire.h"
#include "core/err.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Read the request field by field and write it again into out; 0, or
 * TN_EPROTO / UV_ENOTSUP as the check should say. */
static int reencode(const uint8_t *data, size_t size, tn_buf_t *out)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, data, size);
    uint8_t op;
    if (tn_wire_get_u8(&in, &op) != 0)
        return TN_EPROTO;
    if (tn_wire_op_name(op) == NULL)
        return UV_ENOTSUP;
    if (tn_wire_put_u8(out, op) != 0)
        abort();
    const uint8_t *bytes;
    size_t n;
    uint64_t id;
    char raft[TN_WIRE_ADDR_MAX + 1], api[TN_WIRE_ADDR_MAX + 1];
    switch ((tn_wire_op_t)op) {
    case TN_OP_ECHO:
    case TN_OP_META_PROPOSE:
    case TN_OP_META_PROPOSE_AT:
        if (tn_wire_get_bytes(&in, TN_WIRE_MAX_PAYLOAD, &bytes, &n) == 0 &&
            tn_wire_put_bytes(out, bytes, n) != 0)
            abort();
        break;
    case TN_OP_JOIN:
        if (tn_wire_get_u64(&in, &id) == 0 && tn_wire_get_str(&in, TN_WIRE_ADDR_MAX, raft) == 0 &&
            tn_wire_get_str(&in, TN_WIRE_ADDR_MAX, api) == 0 &&
            (tn_wire_put_u64(out, id) != 0 || tn_wire_put_str(out, raft) != 0 ||
             tn_wire_put_str(out, api) != 0))
            abort();
        break;
    case TN_OP_COMMIT: {
        /* topic, partition, count, then count records of key, body and
         * two times. */
        char topic[256];
        uint32_t part, count;
        if (tn_wire_get_str(&in, 255, topic) != 0 || tn_wire_get_u32(&in, &part) != 0 ||
            tn_wire_get_u32(&in, &count) != 0)
            break;
        if (tn_wire_put_str(out, topic) != 0 || tn_wire_put_u32(out, part) != 0 ||
            tn_wire_put_u32(out, count) != 0)
            abort();
        for (uint32_t i = 0; i < count && in.err == 0; i++) {
            const uint8_t *key;
            size_t klen;
            int64_t at, created;
            if (tn_wire_get_bytes(&in, TN_COMMIT_KEY_MAX, &key, &klen) == 0 &&
                tn_wire_get_bytes(&in, TN_WIRE_MAX_PAYLOAD, &bytes, &n) == 0 &&
                tn_wire_get_i64(&in, &at) == 0 && tn_wire_get_i64(&in, &created) == 0 &&
                (tn_wire_put_bytes(out, key, klen) != 0 || tn_wire_put_bytes(out, bytes, n) != 0 ||
                 tn_wire_put_i64(out, at) != 0 || tn_wire_put_i64(out, created) != 0))
                abort();
        }
        break;
    }
    case TN_OP_SETTLE: {
        /* topic, channel (both 1..255), how 1..3, visibility >= 0, count
         * 1..100, then count handles: the check judges these values too. */
        char topic[256], channel[256];
        uint8_t how;
        int64_t vis;
        uint32_t count;
        if (tn_wire_get_str(&in, 255, topic) != 0 || tn_wire_get_str(&in, 255, channel) != 0 ||
            tn_wire_get_u8(&in, &how) != 0 || tn_wire_get_i64(&in, &vis) != 0 ||
            tn_wire_get_u32(&in, &count) != 0)
            break;
        if (topic[0] == '\0' || channel[0] == '\0' || how < 1 || how > 3 || vis < 0 || count == 0 ||
            count > TN_SETTLE_MAX)
            return TN_EPROTO;
        if (tn_wire_put_str(out, topic) != 0 || tn_wire_put_str(out, channel) != 0 ||
            tn_wire_put_u8(out, how) != 0 || tn_wire_put_i64(out, vis) != 0 ||
            tn_wire_put_u32(out, count) != 0)
            abort();
        for (uint32_t i = 0; i < count && in.err == 0; i++) {
            uint32_t part, nonce;
            uint64_t off;
            if (tn_wire_get_u32(&in, &part) == 0 && tn_wire_get_u64(&in, &off) == 0 &&
                tn_wire_get_u32(&in, &nonce) == 0 &&
                (tn_wire_put_u32(out, part) != 0 || tn_wire_put_u64(out, off) != 0 ||
                 tn_wire_put_u32(out, nonce) != 0))
                abort();
        }
        break;
    }
    case TN_OP_CONSUME: {
        /* topic, channel, partition, pinned, offset, replay, wait, max,
         * local_only, ident. */
        char topic[256], channel[256], ident[TN_WIRE_CONSUME_IDENT_MAX + 1];
        uint32_t part, max;
        bool pinned, replay, local;
        uint64_t off;
        int64_t wait;
        if (tn_wire_get_str(&in, 255, topic) == 0 && tn_wire_get_str(&in, 255, channel) == 0 &&
            tn_wire_get_u32(&in, &part) == 0 && tn_wire_get_bool(&in, &pinned) == 0 &&
            tn_wire_get_u64(&in, &off) == 0 && tn_wire_get_bool(&in, &replay) == 0 &&
            tn_wire_get_i64(&in, &wait) == 0 && tn_wire_get_u32(&in, &max) == 0 &&
            tn_wire_get_bool(&in, &local) == 0 &&
            tn_wire_get_str(&in, TN_WIRE_CONSUME_IDENT_MAX, ident) == 0 &&
            (tn_wire_put_str(out, topic) != 0 || tn_wire_put_str(out, channel) != 0 ||
             tn_wire_put_u32(out, part) != 0 || tn_wire_put_bool(out, pinned) != 0 ||
             tn_wire_put_u64(out, off) != 0 || tn_wire_put_bool(out, replay) != 0 ||
             tn_wire_put_i64(out, wait) != 0 || tn_wire_put_u32(out, max) != 0 ||
             tn_wire_put_bool(out, local) != 0 || tn_wire_put_str(out, ident) != 0))
            abort();
        break;
    }
    case TN_OP_PSTATS:
    case TN_OP_PERRS: /* PSTATS' fields */ {
        /* topic (1..255), count 1..TN_PSTATS_MAX, then count u32 indexes:
         * the check judges these values too. */
        char topic[256];
        uint32_t count;
        if (tn_wire_get_str(&in, 255, topic) != 0 || tn_wire_get_u32(&in, &count) != 0)
            break;
        if (topic[0] == '\0' || count == 0 || count > TN_PSTATS_MAX)
            return TN_EPROTO;
        if (tn_wire_put_str(out, topic) != 0 || tn_wire_put_u32(out, count) != 0)
            abort();
        for (uint32_t i = 0; i < count && in.err == 0; i++) {
            uint32_t part;
            if (tn_wire_get_u32(&in, &part) == 0 && tn_wire_put_u32(out, part) != 0)
                abort();
        }
        break;
    }
    case TN_OP_PURGE: {
        /* topic (1..255), created_at_ms >= 0: the check judges both. */
        char topic[256];
        int64_t created;
        if (tn_wire_get_str(&in, 255, topic) != 0 || tn_wire_get_i64(&in, &created) != 0)
            break;
        if (topic[0] == '\0' || created < 0)
            return TN_EPROTO;
        if (tn_wire_put_str(out, topic) != 0 || tn_wire_put_i64(out, created) != 0)
            abort();
        break;
    }
    case TN_OP_REMOTE_CHECK: {
        /* remote (1..64), remote id, topic (0..255): the check judges the
         * remote's length too. */
        char remote[65], topic[256];
        uint64_t rid;
        if (tn_wire_get_str(&in, 64, remote) != 0 || tn_wire_get_u64(&in, &rid) != 0 ||
            tn_wire_get_str(&in, 255, topic) != 0)
            break;
        if (remote[0] == '\0')
            return TN_EPROTO;
        if (tn_wire_put_str(out, remote) != 0 || tn_wire_put_u64(out, rid) != 0 ||
            tn_wire_put_str(out, topic) != 0)
            abort();
        break;
    }
    case TN_OP_FETCH:
    case TN_OP_REPAIR: {
        /* The header, then count (1..TN_FETCH_MAX_PARTS; REPAIR: 1)
         * partitions with a non-empty topic: the check judges these values
         * too. */
        uint32_t node, wait, max, count;
        uint64_t inc;
        if (tn_wire_get_u32(&in, &node) != 0 || tn_wire_get_u64(&in, &inc) != 0 ||
            tn_wire_get_u32(&in, &wait) != 0 || tn_wire_get_u32(&in, &max) != 0 ||
            tn_wire_get_u32(&in, &count) != 0)
            break;
        if (count == 0 || count > TN_FETCH_MAX_PARTS || (op == TN_OP_REPAIR && count != 1))
            return TN_EPROTO;
        if (tn_fetch_req_put_head(out, node, inc, wait, max, count) != 0)
            abort();
        for (uint32_t i = 0; i < count && in.err == 0; i++) {
            tn_fetch_part_t fp;
            if (tn_wire_get_str(&in, 255, fp.topic) != 0 ||
                tn_wire_get_u32(&in, &fp.partition) != 0 ||
                tn_wire_get_u32(&in, &fp.leader_epoch) != 0 ||
                tn_wire_get_u64(&in, &fp.fetch_offset) != 0 ||
                tn_wire_get_u32(&in, &fp.last_fetched_epoch) != 0 ||
                tn_wire_get_u64(&in, &fp.flushed_offset) != 0 ||
                tn_wire_get_u32(&in, &fp.partition_epoch) != 0)
                break;
            if (fp.topic[0] == '\0')
                return TN_EPROTO;
            if (tn_fetch_req_put_part(out, &fp) != 0)
                abort();
        }
        break;
    }
    case TN_OP_PRODUCE: {
        /* topic (1..255), partition, epoch, node, seq, count (>= 1: the
         * check judges it and the topic), then count records as COMMIT's. */
        char topic[256];
        uint32_t part, epoch, count;
        uint64_t node, seq;
        if (tn_wire_get_str(&in, 255, topic) != 0 || tn_wire_get_u32(&in, &part) != 0 ||
            tn_wire_get_u32(&in, &epoch) != 0 || tn_wire_get_u64(&in, &node) != 0 ||
            tn_wire_get_u64(&in, &seq) != 0 || tn_wire_get_u32(&in, &count) != 0)
            break;
        if (topic[0] == '\0' || count == 0)
            return TN_EPROTO;
        if (tn_wire_put_str(out, topic) != 0 || tn_wire_put_u32(out, part) != 0 ||
            tn_wire_put_u32(out, epoch) != 0 || tn_wire_put_u64(out, node) != 0 ||
            tn_wire_put_u64(out, seq) != 0 || tn_wire_put_u32(out, count) != 0)
            abort();
        for (uint32_t i = 0; i < count && in.err == 0; i++) {
            const uint8_t *key;
            size_t klen;
            int64_t at, created;
            if (tn_wire_get_bytes(&in, TN_COMMIT_KEY_MAX, &key, &klen) == 0 &&
                tn_wire_get_bytes(&in, TN_WIRE_MAX_PAYLOAD, &bytes, &n) == 0 &&
                tn_wire_get_i64(&in, &at) == 0 && tn_wire_get_i64(&in, &created) == 0 &&
                (tn_wire_put_bytes(out, key, klen) != 0 || tn_wire_put_bytes(out, bytes, n) != 0 ||
                 tn_wire_put_i64(out, at) != 0 || tn_wire_put_i64(out, created) != 0))
                abort();
        }
        break;
    }
    case TN_OP_SETTLE_REPL: {
        /* topic, partition, leader_epoch, channel, stream, first_seq,
         * count, then count records of op (1..TN_SETREPL_OP_MAX), offset,
         * due, attempts, value, then an optional chan_stamp and
         * incarnation: the check judges the values too. */
        char topic[256], channel[256];
        uint32_t part, epoch, count;
        uint64_t stream, first, base;
        if (tn_wire_get_str(&in, 255, topic) != 0 || tn_wire_get_u32(&in, &part) != 0 ||
            tn_wire_get_u32(&in, &epoch) != 0 || tn_wire_get_str(&in, 255, channel) != 0 ||
            tn_wire_get_u64(&in, &stream) != 0 || tn_wire_get_u64(&in, &first) != 0 ||
            tn_wire_get_u64(&in, &base) != 0 || tn_wire_get_u32(&in, &count) != 0)
            break;
        if (topic[0] == '\0' || channel[0] == '\0' || epoch == 0 || first == 0 || count == 0 ||
            count > TN_SETREPL_MAX || first > UINT64_MAX - count)
            return TN_EPROTO;
        if (tn_wire_put_str(out, topic) != 0 || tn_wire_put_u32(out, part) != 0 ||
            tn_wire_put_u32(out, epoch) != 0 || tn_wire_put_str(out, channel) != 0 ||
            tn_wire_put_u64(out, stream) != 0 || tn_wire_put_u64(out, first) != 0 ||
            tn_wire_put_u64(out, base) != 0 || tn_wire_put_u32(out, count) != 0)
            abort();
        for (uint32_t i = 0; i < count && in.err == 0; i++) {
            uint8_t wop;
            uint64_t off, value;
            int64_t due;
            uint32_t attempts;
            if (tn_wire_get_u8(&in, &wop) == 0 && tn_wire_get_u64(&in, &off) == 0 &&
                tn_wire_get_i64(&in, &due) == 0 && tn_wire_get_u32(&in, &attempts) == 0 &&
                tn_wire_get_u64(&in, &value) == 0) {
                if (wop < 1 || wop > TN_SETREPL_OP_MAX)
                    return TN_EPROTO;
                if (tn_wire_put_u8(out, wop) != 0 || tn_wire_put_u64(out, off) != 0 ||
                    tn_wire_put_i64(out, due) != 0 || tn_wire_put_u32(out, attempts) != 0 ||
                    tn_wire_put_u64(out, value) != 0)
                    abort();
            }
        }
        /* Then the channel's stamp (not 0 when alone), then the
         * follower's incarnation (not 0), each only when written. */
        size_t tail = in.err == 0 ? in.len - in.off : 0;
        if (tail == 8 || tail == 16) {
            uint64_t stamp, inc = 0;
            if (tn_wire_get_u64(&in, &stamp) != 0 ||
                (tail == 16 && tn_wire_get_u64(&in, &inc) != 0))
                abort();
            if ((tail == 8 && stamp == 0) || (tail == 16 && inc == 0))
                return TN_EPROTO;
            if (tn_wire_put_u64(out, stamp) != 0 || (tail == 16 && tn_wire_put_u64(out, inc) != 0))
                abort();
        }
        break;
    }
    case TN_OP_FLUSHED: {
        /* The header, then count (1..TN_FETCH_MAX_PARTS) partitions in the
         * FETCH layout with a non-empty topic. */
        uint32_t node, count;
        uint64_t inc;
        if (tn_wire_get_u32(&in, &node) != 0 || tn_wire_get_u64(&in, &inc) != 0 ||
            tn_wire_get_u32(&in, &count) != 0)
            break;
        if (count == 0 || count > TN_FETCH_MAX_PARTS)
            return TN_EPROTO;
        if (tn_flushed_req_put_head(out, node, inc, count) != 0)
            abort();
        for (uint32_t i = 0; i < count && in.err == 0; i++) {
            tn_fetch_part_t fp;
            if (tn_wire_get_str(&in, 255, fp.topic) != 0 ||
                tn_wire_get_u32(&in, &fp.partition) != 0 ||
                tn_wire_get_u32(&in, &fp.leader_epoch) != 0 ||
                tn_wire_get_u64(&in, &fp.fetch_offset) != 0 ||
                tn_wire_get_u32(&in, &fp.last_fetched_epoch) != 0 ||
                tn_wire_get_u64(&in, &fp.flushed_offset) != 0 ||
                tn_wire_get_u32(&in, &fp.partition_epoch) != 0)
                break;
            if (fp.topic[0] == '\0')
                return TN_EPROTO;
            if (tn_fetch_req_put_part(out, &fp) != 0)
                abort();
        }
        break;
    }
    case TN_OP_CHAN_SNAP: {
        /* topic, partition, leader_epoch, channel, stream, seq,
         * incarnation, then the state's bytes, which must be a valid
         * channel checkpoint image (the check judges them too), then an
         * optional chan_stamp. */
        char topic[256], channel[256];
        uint32_t part, epoch;
        uint64_t stream, seq, inc;
        if (tn_wire_get_str(&in, 255, topic) != 0 || tn_wire_get_u32(&in, &part) != 0 ||
            tn_wire_get_u32(&in, &epoch) != 0 || tn_wire_get_str(&in, 255, channel) != 0 ||
            tn_wire_get_u64(&in, &stream) != 0 || tn_wire_get_u64(&in, &seq) != 0 ||
            tn_wire_get_u64(&in, &inc) != 0 ||
            tn_wire_get_bytes(&in, TN_WIRE_MAX_PAYLOAD, &bytes, &n) != 0)
            break;
        if (topic[0] == '\0' || channel[0] == '\0' || epoch == 0)
            return TN_EPROTO;
        /* Then the channel's stamp (not 0), only when written. */
        uint64_t stamp = 0;
        bool stamped = in.len - in.off == 8;
        if (stamped && (tn_wire_get_u64(&in, &stamp) != 0 || stamp == 0))
            return TN_EPROTO;
        tn_cursor_t c;
        int crc = tn_cursor_decode(bytes, n, &c);
        tn_cursor_fini(&c);
        if (crc == TN_ECORRUPT)
            return TN_EPROTO;
        if (tn_wire_put_str(out, topic) != 0 || tn_wire_put_u32(out, part) != 0 ||
            tn_wire_put_u32(out, epoch) != 0 || tn_wire_put_str(out, channel) != 0 ||
            tn_wire_put_u64(out, stream) != 0 || tn_wire_put_u64(out, seq) != 0 ||
            tn_wire_put_u64(out, inc) != 0 || tn_wire_put_bytes(out, bytes, n) != 0 ||
            (stamped && tn_wire_put_u64(out, stamp) != 0))
            abort();
        break;
    }
    case TN_OP_MOVE_PROGRESS: {
        /* topic (1..255), partition: the check judges the topic. */
        char topic[256];
        uint32_t part;
        if (tn_wire_get_str(&in, 255, topic) != 0 || tn_wire_get_u32(&in, &part) != 0)
            break;
        if (topic[0] == '\0')
            return TN_EPROTO;
        if (tn_wire_put_str(out, topic) != 0 || tn_wire_put_u32(out, part) != 0)
            abort();
        break;
    }
    case TN_OP_REPLICA_ERROR: {
        /* node, incarnation, topic (1..255), partition, leader_epoch (>= 1),
         * error (0..TN_WIRE_REPLERR_MAX printable ASCII): the check judges
         * the topic, the epoch and the text. */
        char topic[256], text[TN_WIRE_REPLERR_MAX + 1];
        uint32_t node, part, epoch;
        uint64_t inc;
        if (tn_wire_get_u32(&in, &node) != 0 || tn_wire_get_u64(&in, &inc) != 0 ||
            tn_wire_get_str(&in, 255, topic) != 0 || tn_wire_get_u32(&in, &part) != 0 ||
            tn_wire_get_u32(&in, &epoch) != 0 ||
            tn_wire_get_str(&in, TN_WIRE_REPLERR_MAX, text) != 0)
            break;
        if (topic[0] == '\0' || epoch == 0)
            return TN_EPROTO;
        for (const char *c = text; *c != '\0'; c++)
            if (*c < 0x20 || *c > 0x7e)
                return TN_EPROTO;
        if (tn_wire_put_u32(out, node) != 0 || tn_wire_put_u64(out, inc) != 0 ||
            tn_wire_put_str(out, topic) != 0 || tn_wire_put_u32(out, part) != 0 ||
            tn_wire_put_u32(out, epoch) != 0 || tn_wire_put_str(out, text) != 0)
            abort();
        break;
    }
    case TN_OP_LEADER_INDEX:
    case TN_OP_NODE_STATUS:
    case TN_OP__COUNT:
        break;
    }
    return tn_wire_end(&in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024 * 1024)
        return 0;
    tn_buf_t b;
    tn_buf_init(&b);
    int rc = tn_wire_request_check(data, size);
    if (rc != 0 && rc != TN_EPROTO && rc != UV_ENOTSUP)
        abort();
    if (reencode(data, size, &b) != rc)
        abort(); /* the check and the field readers disagree */
    if (rc == 0 && (tn_buf_size(&b) != size || memcmp(tn_buf_data(&b), data, size) != 0))
        abort(); /* what passes must encode back the same */
    if (rc == 0 && tn_wire_op_lane(data[0]) >= TN_LANE_COUNT)
        abort();

    tn_wire_reply_t r;
    if (tn_wire_reply_decode(data, size, &r) == 0) {
        if (r.status < 100 || r.status > 599 || r.ctype_len > 255)
            abort();
        char ctype[256];
        memcpy(ctype, r.ctype, r.ctype_len);
        ctype[r.ctype_len] = '\0';
        tn_buf_reset(&b);
        if (memchr(r.ctype, 0, r.ctype_len) != NULL ||
            tn_wire_reply_encode(&b, r.status, ctype, r.body, r.body_len) != 0 ||
            tn_buf_size(&b) != size || memcmp(tn_buf_data(&b), data, size) != 0)
            abort(); /* what decodes encodes back the same */
    }
    tn_buf_fini(&b);
    return 0;
}
