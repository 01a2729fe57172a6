/* The node RPC wire codec: frame headers, the framer that cuts a stream's
 * bytes into frames, request and reply fields, the opcode table, the
 * secret proof and the dial backoff. See wire.h for the layouts.
 *
 * DESIGN (the framer)
 * 1. While nothing is pending, whole frames are handed to the callback
 *    straight from the pushed bytes, without a copy.
 * 2. A frame cut by the end of a push is copied into `pending`; its header
 *    is checked as soon as its 20 bytes are there, so a frame over the cap
 *    is refused before any of its payload is held.
 * 3. The cap is read again for every header, after the previous frame's
 *    callback: a callback that accepts a proof raises it for the next
 *    frame.
 * Failure: the first refused header, allocation failure or callback error
 * is kept in f->err and returned by every later push; the stream is done.
 * Invariant: `pending` never holds more than one incomplete frame, and a
 * frame's payload never exceeds the cap in force when its header arrived. */
#include "core/platform.h"

#include "cluster/wire.h"

#include "cluster/fetch.h"
#include "cluster/rcheck.h"

#include "core/err.h"
#include "meta/cmd.h"

#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <limits.h>
#include <string.h>

_Static_assert(TN_WIRE_ADDR_MAX == TN_META_ADDR_MAX, "a JOIN address must fit a member record");

/* --- big-endian integers ---------------------------------------------------- */

static void be_put(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
}

static uint64_t be_get(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* --- frame header ----------------------------------------------------------- */

void tn_wire_hdr_encode(uint8_t out[TN_WIRE_HDR], uint8_t type, uint64_t id, uint32_t len)
{
    be_put(out, TN_WIRE_MAGIC, 4);
    out[4] = TN_WIRE_VERSION;
    out[5] = type;
    out[6] = out[7] = 0;
    be_put(out + 8, id, 8);
    be_put(out + 16, len, 4);
}

static bool frame_type_known(uint8_t type)
{
    switch (type) {
    case TN_WF_ERROR:
    case TN_WF_PING:
    case TN_WF_PONG:
    case TN_WF_CANCEL:
    case TN_WF_REQUEST:
    case TN_WF_REPLY:
    case TN_WF_AUTH:
        return true;
    default:
        return false;
    }
}

int tn_wire_hdr_decode(const uint8_t *buf, size_t len, uint32_t max, tn_wire_hdr_t *h)
{
    if (len < TN_WIRE_HDR)
        return TN_ESHORT;
    if (be_get(buf, 4) != TN_WIRE_MAGIC || buf[4] != TN_WIRE_VERSION || buf[6] != 0 ||
        buf[7] != 0 || !frame_type_known(buf[5]))
        return TN_EPROTO;
    uint32_t plen = (uint32_t)be_get(buf + 16, 4);
    if (plen > TN_MIN(max, TN_WIRE_MAX_PAYLOAD))
        return TN_ETOOBIG;
    h->type = buf[5];
    h->id = be_get(buf + 8, 8);
    h->len = plen;
    return 0;
}

int tn_wire_frame_append(tn_buf_t *out, uint8_t type, uint64_t id, const void *payload, size_t len)
{
    if (len > TN_WIRE_MAX_PAYLOAD)
        return UV_EINVAL;
    int rc = tn_buf_reserve(out, TN_WIRE_HDR + len);
    if (rc != 0)
        return rc;
    tn_wire_hdr_encode((uint8_t *)out->base + out->len, type, id, (uint32_t)len);
    out->len += TN_WIRE_HDR;
    if (len > 0)
        memcpy(out->base + out->len, payload, len);
    out->len += len;
    return 0;
}

/* --- the framer ---------------------------------------------------------------- */

/* A pending buffer grown past this for one big frame is released once the
 * frame is delivered, so an idle stream holds no more than this. */
#define FRAMER_KEEP (64 * 1024)

void tn_wire_framer_init(tn_wire_framer_t *f, uint32_t max)
{
    tn_buf_init(&f->pending);
    f->max = max;
    f->err = 0;
}

void tn_wire_framer_fini(tn_wire_framer_t *f)
{
    tn_buf_fini(&f->pending);
}

static int framer_fail(tn_wire_framer_t *f, int err)
{
    f->err = err;
    tn_buf_fini(&f->pending);
    tn_buf_init(&f->pending);
    return err;
}

/* Move up to `want` bytes from the input into pending. */
static int framer_take(tn_wire_framer_t *f, const uint8_t **p, size_t *len, size_t want)
{
    size_t n = TN_MIN(want, *len);
    int rc = tn_buf_append(&f->pending, *p, n);
    if (rc != 0)
        return rc;
    *p += n;
    *len -= n;
    return 0;
}

int tn_wire_framer_push(tn_wire_framer_t *f, const void *data, size_t len, tn_wire_frame_cb cb,
                        void *arg)
{
    if (f->err != 0)
        return f->err;
    const uint8_t *p = data;
    tn_wire_hdr_t h;
    int rc;

    /* Finish the frame a previous push left incomplete. */
    size_t have = tn_buf_size(&f->pending);
    if (have > 0) {
        if (have < TN_WIRE_HDR) {
            if ((rc = framer_take(f, &p, &len, TN_WIRE_HDR - have)) != 0)
                return framer_fail(f, rc);
            have = tn_buf_size(&f->pending);
            if (have < TN_WIRE_HDR)
                return 0;
        }
        rc = tn_wire_hdr_decode((const uint8_t *)tn_buf_data(&f->pending), have, f->max, &h);
        if (rc != 0)
            return framer_fail(f, rc);
        size_t need = TN_WIRE_HDR + (size_t)h.len;
        if (have < need) {
            if ((rc = tn_buf_reserve(&f->pending, need - have)) != 0 ||
                (rc = framer_take(f, &p, &len, need - have)) != 0)
                return framer_fail(f, rc);
            if (tn_buf_size(&f->pending) < need)
                return 0;
        }
        rc = cb(arg, &h, (const uint8_t *)tn_buf_data(&f->pending) + TN_WIRE_HDR);
        if (f->pending.cap > FRAMER_KEEP) {
            tn_buf_fini(&f->pending);
            tn_buf_init(&f->pending);
        } else {
            tn_buf_reset(&f->pending);
        }
        if (rc != 0)
            return framer_fail(f, rc);
    }

    /* Whole frames straight from the input; the tail goes to pending. */
    while (len > 0) {
        rc = tn_wire_hdr_decode(p, len, f->max, &h);
        if (rc == TN_ESHORT)
            break;
        if (rc != 0)
            return framer_fail(f, rc);
        size_t need = TN_WIRE_HDR + (size_t)h.len;
        if (len < need) {
            if ((rc = tn_buf_reserve(&f->pending, need)) != 0)
                return framer_fail(f, rc);
            break;
        }
        rc = cb(arg, &h, p + TN_WIRE_HDR);
        if (rc != 0)
            return framer_fail(f, rc);
        p += need;
        len -= need;
    }
    if (len > 0 && (rc = tn_buf_append(&f->pending, p, len)) != 0)
        return framer_fail(f, rc);
    return 0;
}

/* --- field writers ------------------------------------------------------------ */

static int put_be(tn_buf_t *b, uint64_t v, unsigned n)
{
    uint8_t tmp[8];
    be_put(tmp, v, n);
    return tn_buf_append(b, tmp, n);
}

int tn_wire_put_u8(tn_buf_t *b, uint8_t v)
{
    return tn_buf_append(b, &v, 1);
}

int tn_wire_put_bool(tn_buf_t *b, bool v)
{
    return tn_wire_put_u8(b, v ? 1 : 0);
}

int tn_wire_put_u16(tn_buf_t *b, uint16_t v)
{
    return put_be(b, v, 2);
}

int tn_wire_put_u32(tn_buf_t *b, uint32_t v)
{
    return put_be(b, v, 4);
}

int tn_wire_put_u64(tn_buf_t *b, uint64_t v)
{
    return put_be(b, v, 8);
}

int tn_wire_put_i32(tn_buf_t *b, int32_t v)
{
    return put_be(b, (uint32_t)v, 4);
}

int tn_wire_put_i64(tn_buf_t *b, int64_t v)
{
    return put_be(b, (uint64_t)v, 8);
}

int tn_wire_put_bytes(tn_buf_t *b, const void *p, size_t len)
{
    if (len > UINT32_MAX)
        return UV_EINVAL;
    int rc = tn_buf_reserve(b, 4 + len);
    if (rc != 0)
        return rc;
    be_put((uint8_t *)b->base + b->len, len, 4);
    b->len += 4;
    if (len > 0)
        memcpy(b->base + b->len, p, len);
    b->len += len;
    return 0;
}

int tn_wire_put_str(tn_buf_t *b, const char *s)
{
    return tn_wire_put_bytes(b, s, strlen(s));
}

/* --- field readers ------------------------------------------------------------ */

void tn_wire_in_init(tn_wire_in_t *in, const void *p, size_t len)
{
    in->p = p;
    in->len = len;
    in->off = 0;
    in->err = 0;
}

/* The next n bytes, or NULL (and the reader failed) when fewer are left. */
static const uint8_t *in_take(tn_wire_in_t *in, size_t n)
{
    if (in->err != 0)
        return NULL;
    if (in->len - in->off < n) {
        in->err = TN_EPROTO;
        return NULL;
    }
    const uint8_t *at = in->p + in->off;
    in->off += n;
    return at;
}

static int get_be(tn_wire_in_t *in, unsigned n, uint64_t *v)
{
    const uint8_t *at = in_take(in, n);
    if (at == NULL)
        return TN_EPROTO;
    *v = be_get(at, n);
    return 0;
}

int tn_wire_get_u8(tn_wire_in_t *in, uint8_t *v)
{
    uint64_t x;
    int rc = get_be(in, 1, &x);
    if (rc == 0)
        *v = (uint8_t)x;
    return rc;
}

int tn_wire_get_bool(tn_wire_in_t *in, bool *v)
{
    if (in->err != 0)
        return TN_EPROTO;
    if (in->off < in->len && in->p[in->off] > 1) {
        in->err = TN_EPROTO;
        return TN_EPROTO;
    }
    uint8_t x;
    int rc = tn_wire_get_u8(in, &x);
    if (rc == 0)
        *v = x == 1;
    return rc;
}

int tn_wire_get_u16(tn_wire_in_t *in, uint16_t *v)
{
    uint64_t x;
    int rc = get_be(in, 2, &x);
    if (rc == 0)
        *v = (uint16_t)x;
    return rc;
}

int tn_wire_get_u32(tn_wire_in_t *in, uint32_t *v)
{
    uint64_t x;
    int rc = get_be(in, 4, &x);
    if (rc == 0)
        *v = (uint32_t)x;
    return rc;
}

int tn_wire_get_u64(tn_wire_in_t *in, uint64_t *v)
{
    return get_be(in, 8, v);
}

int tn_wire_get_i32(tn_wire_in_t *in, int32_t *v)
{
    uint64_t x;
    int rc = get_be(in, 4, &x);
    if (rc == 0)
        *v = (int32_t)(uint32_t)x;
    return rc;
}

int tn_wire_get_i64(tn_wire_in_t *in, int64_t *v)
{
    uint64_t x;
    int rc = get_be(in, 8, &x);
    if (rc == 0)
        *v = (int64_t)x;
    return rc;
}

int tn_wire_get_bytes(tn_wire_in_t *in, size_t max, const uint8_t **out, size_t *len)
{
    uint64_t n;
    if (get_be(in, 4, &n) != 0)
        return TN_EPROTO;
    if (n > max) {
        in->err = TN_EPROTO;
        return TN_EPROTO;
    }
    const uint8_t *at = in_take(in, (size_t)n);
    if (at == NULL)
        return TN_EPROTO;
    *out = at;
    *len = (size_t)n;
    return 0;
}

int tn_wire_get_str(tn_wire_in_t *in, size_t max, char *out)
{
    const uint8_t *at;
    size_t n;
    if (tn_wire_get_bytes(in, max, &at, &n) != 0)
        return TN_EPROTO;
    if (memchr(at, 0, n) != NULL) {
        in->err = TN_EPROTO;
        return TN_EPROTO;
    }
    memcpy(out, at, n);
    out[n] = '\0';
    return 0;
}

int tn_wire_end(const tn_wire_in_t *in)
{
    return in->err == 0 && in->off == in->len ? 0 : TN_EPROTO;
}

/* --- reply ------------------------------------------------------------------------ */

#define REPLY_CTYPE_MAX 255

/* Whether a content type can go out as an HTTP header value: no control
 * characters (CR, LF, NUL would split or cut the header). */
static bool ctype_clean(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] == 0x7f)
            return false;
    return true;
}

int tn_wire_reply_encode(tn_buf_t *b, uint16_t status, const char *ctype, const void *body,
                         size_t len)
{
    if (ctype == NULL)
        ctype = "";
    size_t clen = strlen(ctype);
    if (status < 100 || status > 599 || clen > REPLY_CTYPE_MAX ||
        !ctype_clean((const uint8_t *)ctype, clen) || len > UINT32_MAX)
        return UV_EINVAL;
    size_t at = b->len;
    int rc;
    if ((rc = tn_buf_reserve(b, 2 + 4 + clen + 4 + len)) != 0 ||
        (rc = tn_wire_put_u16(b, status)) != 0 || (rc = tn_wire_put_bytes(b, ctype, clen)) != 0 ||
        (rc = tn_wire_put_bytes(b, body, len)) != 0) {
        b->len = at; /* nothing half-written stays behind */
        return rc;
    }
    return 0;
}

int tn_wire_reply_decode(const void *p, size_t len, tn_wire_reply_t *out)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    uint16_t status;
    const uint8_t *ctype, *body;
    size_t clen, blen;
    if (tn_wire_get_u16(&in, &status) != 0 || status < 100 || status > 599 ||
        tn_wire_get_bytes(&in, REPLY_CTYPE_MAX, &ctype, &clen) != 0 || !ctype_clean(ctype, clen) ||
        tn_wire_get_bytes(&in, TN_WIRE_MAX_PAYLOAD, &body, &blen) != 0 || tn_wire_end(&in) != 0)
        return TN_EPROTO;
    out->status = status;
    out->ctype = (const char *)ctype;
    out->ctype_len = clen;
    out->body = body;
    out->body_len = blen;
    return 0;
}

/* --- COMMIT ------------------------------------------------------------------------ */

#define COMMIT_TOPIC_MAX 255

size_t tn_commit_encoded_size(const char *topic, const tn_commit_rec_t *recs, uint32_t n)
{
    size_t size = tn_commit_head_size(strlen(topic));
    for (uint32_t i = 0; i < n; i++)
        size += tn_commit_rec_size(recs[i].key.len, recs[i].body.len);
    return size;
}

int tn_wire_commit_encode(tn_buf_t *b, const char *topic, uint32_t partition,
                          const tn_commit_rec_t *recs, uint32_t n)
{
    size_t tlen = strlen(topic);
    if (tlen == 0 || tlen > COMMIT_TOPIC_MAX || n == 0)
        return UV_EINVAL;
    for (uint32_t i = 0; i < n; i++)
        if (recs[i].key.len > TN_COMMIT_KEY_MAX || recs[i].body.len > UINT32_MAX ||
            recs[i].deliver_at_ms < 0 || recs[i].created_ms < 0)
            return UV_EINVAL;
    size_t at = b->len;
    int rc = tn_buf_reserve(b, tn_commit_encoded_size(topic, recs, n) - 1);
    if (rc == 0 && ((rc = tn_wire_put_bytes(b, topic, tlen)) != 0 ||
                    (rc = tn_wire_put_u32(b, partition)) != 0 || (rc = tn_wire_put_u32(b, n)) != 0))
        b->len = at;
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        const tn_commit_rec_t *r = &recs[i];
        if ((rc = tn_wire_put_bytes(b, r->key.base, r->key.len)) != 0 ||
            (rc = tn_wire_put_bytes(b, r->body.base, r->body.len)) != 0 ||
            (rc = tn_wire_put_i64(b, r->deliver_at_ms)) != 0 ||
            (rc = tn_wire_put_i64(b, r->created_ms)) != 0)
            b->len = at; /* nothing half-written stays behind */
    }
    return rc;
}

/* One record from in: shape only (the bounds of its two byte fields). */
static int commit_rec_get(tn_wire_in_t *in, uint32_t max_body, tn_commit_rec_t *rec)
{
    const uint8_t *key, *body;
    size_t klen, blen;
    if (tn_wire_get_bytes(in, TN_COMMIT_KEY_MAX, &key, &klen) != 0)
        return TN_EPROTO;
    /* The body's length first: over max_body is its own answer. */
    size_t at = in->off;
    uint32_t n;
    if (tn_wire_get_u32(in, &n) != 0)
        return TN_EPROTO;
    if (n > max_body)
        return TN_ETOOBIG;
    in->off = at;
    if (tn_wire_get_bytes(in, max_body, &body, &blen) != 0 ||
        tn_wire_get_i64(in, &rec->deliver_at_ms) != 0 || tn_wire_get_i64(in, &rec->created_ms) != 0)
        return TN_EPROTO;
    rec->key = tn_iov(key, klen);
    rec->body = tn_iov(body, blen);
    return 0;
}

int tn_wire_commit_decode(const void *p, size_t len, uint32_t max_body, tn_wire_commit_t *out,
                          char *err, size_t errlen)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    if (tn_wire_get_str(&in, COMMIT_TOPIC_MAX, out->topic) != 0 ||
        tn_wire_get_u32(&in, &out->partition) != 0 || tn_wire_get_u32(&in, &out->count) != 0) {
        tn_errbuf(err, errlen, "malformed commit request: the topic, partition or count");
        return TN_EPROTO;
    }
    out->topic_len = strlen(out->topic);
    if (out->count > (len - in.off) / TN_COMMIT_REC_FIXED) {
        tn_errbuf(err, errlen,
                  "malformed commit request: %" PRIu32 " records cannot fit in %zu bytes",
                  out->count, len - in.off);
        return TN_EPROTO;
    }
    out->in = in;
    out->next = 0;
    tn_commit_rec_t rec;
    for (uint32_t i = 0; i < out->count; i++) {
        int rc = commit_rec_get(&in, max_body, &rec);
        if (rc == TN_ETOOBIG) {
            tn_errbuf(err, errlen, "record %" PRIu32 " has a body over the %" PRIu32 " byte limit",
                      i, max_body);
            return rc;
        }
        if (rc != 0) {
            tn_errbuf(err, errlen, "malformed commit request: record %" PRIu32, i);
            return rc;
        }
    }
    if (tn_wire_end(&in) != 0) {
        tn_errbuf(err, errlen, "malformed commit request: %zu bytes after the last record",
                  len - in.off);
        return TN_EPROTO;
    }
    return 0;
}

bool tn_wire_commit_next(tn_wire_commit_t *c, tn_commit_rec_t *rec)
{
    /* Decoded once already: the same reads cannot fail now. */
    if (c->next >= c->count || commit_rec_get(&c->in, UINT32_MAX, rec) != 0)
        return false;
    c->next++;
    return true;
}

/* --- PRODUCE ----------------------------------------------------------------------- */

int tn_wire_produce_encode(tn_buf_t *b, const tn_wire_produce_hdr_t *h, const tn_commit_rec_t *recs,
                           uint32_t n)
{
    size_t tlen = strnlen(h->topic, sizeof h->topic);
    if (tlen == 0 || tlen > COMMIT_TOPIC_MAX || n == 0)
        return UV_EINVAL;
    size_t size = tn_produce_head_size(tlen) - 1;
    for (uint32_t i = 0; i < n; i++) {
        if (recs[i].key.len > TN_COMMIT_KEY_MAX || recs[i].body.len > UINT32_MAX ||
            recs[i].deliver_at_ms < 0 || recs[i].created_ms < 0)
            return UV_EINVAL;
        size += tn_commit_rec_size(recs[i].key.len, recs[i].body.len);
    }
    size_t at = b->len;
    int rc = tn_buf_reserve(b, size);
    if (rc == 0 && ((rc = tn_wire_put_bytes(b, h->topic, tlen)) != 0 ||
                    (rc = tn_wire_put_u32(b, h->partition)) != 0 ||
                    (rc = tn_wire_put_u32(b, h->leader_epoch)) != 0 ||
                    (rc = tn_wire_put_u64(b, h->node)) != 0 ||
                    (rc = tn_wire_put_u64(b, h->seq)) != 0 || (rc = tn_wire_put_u32(b, n)) != 0))
        b->len = at;
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        const tn_commit_rec_t *r = &recs[i];
        if ((rc = tn_wire_put_bytes(b, r->key.base, r->key.len)) != 0 ||
            (rc = tn_wire_put_bytes(b, r->body.base, r->body.len)) != 0 ||
            (rc = tn_wire_put_i64(b, r->deliver_at_ms)) != 0 ||
            (rc = tn_wire_put_i64(b, r->created_ms)) != 0)
            b->len = at;
    }
    return rc;
}

int tn_wire_produce_decode(const void *p, size_t len, uint32_t max_body, tn_wire_produce_t *out,
                           char *err, size_t errlen)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    if (tn_wire_get_str(&in, COMMIT_TOPIC_MAX, out->h.topic) != 0 ||
        tn_wire_get_u32(&in, &out->h.partition) != 0 ||
        tn_wire_get_u32(&in, &out->h.leader_epoch) != 0 ||
        tn_wire_get_u64(&in, &out->h.node) != 0 || tn_wire_get_u64(&in, &out->h.seq) != 0 ||
        tn_wire_get_u32(&in, &out->count) != 0) {
        tn_errbuf(err, errlen, "malformed produce request: a fixed field");
        return TN_EPROTO;
    }
    if (out->h.topic[0] == '\0' || out->count == 0) {
        tn_errbuf(err, errlen, "malformed produce request: an empty topic or no record");
        return TN_EPROTO;
    }
    if (out->count > (len - in.off) / TN_COMMIT_REC_FIXED) {
        tn_errbuf(err, errlen,
                  "malformed produce request: %" PRIu32 " records cannot fit in %zu bytes",
                  out->count, len - in.off);
        return TN_EPROTO;
    }
    out->in = in;
    out->next = 0;
    tn_commit_rec_t rec;
    for (uint32_t i = 0; i < out->count; i++) {
        int rc = commit_rec_get(&in, max_body, &rec);
        if (rc == TN_ETOOBIG) {
            tn_errbuf(err, errlen, "record %" PRIu32 " has a body over the %" PRIu32 " byte limit",
                      i, max_body);
            return rc;
        }
        if (rc != 0) {
            tn_errbuf(err, errlen, "malformed produce request: record %" PRIu32, i);
            return rc;
        }
    }
    if (tn_wire_end(&in) != 0) {
        tn_errbuf(err, errlen, "malformed produce request: %zu bytes after the last record",
                  len - in.off);
        return TN_EPROTO;
    }
    return 0;
}

bool tn_wire_produce_next(tn_wire_produce_t *w, tn_commit_rec_t *rec)
{
    if (w->next >= w->count || commit_rec_get(&w->in, UINT32_MAX, rec) != 0)
        return false;
    w->next++;
    return true;
}

/* --- SETTLE ------------------------------------------------------------------------ */

#define SETTLE_NAME_MAX    255
#define SETTLE_HANDLE_SIZE 16 /* u32 partition, u64 offset, u32 nonce */

static bool settle_how_valid(uint8_t how)
{
    return how >= TN_WIRE_SETTLE_ACK && how <= TN_WIRE_SETTLE_NACK;
}

int tn_wire_settle_encode(tn_buf_t *b, const char *topic, const char *channel, uint8_t how,
                          int64_t visibility_ms, const tn_wire_handle_t *h, uint32_t n)
{
    size_t tlen = strlen(topic), clen = strlen(channel);
    if (tlen == 0 || tlen > SETTLE_NAME_MAX || clen == 0 || clen > SETTLE_NAME_MAX ||
        !settle_how_valid(how) || visibility_ms < 0 || n == 0 || n > TN_SETTLE_MAX)
        return UV_EINVAL;
    size_t at = b->len;
    int rc = tn_buf_reserve(b, 4 + tlen + 4 + clen + 1 + 8 + 4 + (size_t)n * SETTLE_HANDLE_SIZE);
    if (rc == 0 &&
        ((rc = tn_wire_put_bytes(b, topic, tlen)) != 0 ||
         (rc = tn_wire_put_bytes(b, channel, clen)) != 0 || (rc = tn_wire_put_u8(b, how)) != 0 ||
         (rc = tn_wire_put_i64(b, visibility_ms)) != 0 || (rc = tn_wire_put_u32(b, n)) != 0))
        b->len = at;
    for (uint32_t i = 0; rc == 0 && i < n; i++)
        if ((rc = tn_wire_put_u32(b, h[i].partition)) != 0 ||
            (rc = tn_wire_put_u64(b, h[i].offset)) != 0 ||
            (rc = tn_wire_put_u32(b, h[i].nonce)) != 0)
            b->len = at;
    return rc;
}

int tn_wire_settle_decode(const void *p, size_t len, tn_wire_settle_t *out, char *err,
                          size_t errlen)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    if (tn_wire_get_str(&in, SETTLE_NAME_MAX, out->topic) != 0 ||
        tn_wire_get_str(&in, SETTLE_NAME_MAX, out->channel) != 0 ||
        tn_wire_get_u8(&in, &out->how) != 0 || tn_wire_get_i64(&in, &out->visibility_ms) != 0 ||
        tn_wire_get_u32(&in, &out->count) != 0) {
        tn_errbuf(err, errlen, "malformed settle request: the topic, channel, how or count");
        return TN_EPROTO;
    }
    if (out->topic[0] == '\0' || out->channel[0] == '\0') {
        tn_errbuf(err, errlen, "malformed settle request: an empty topic or channel");
        return TN_EPROTO;
    }
    if (!settle_how_valid(out->how)) {
        tn_errbuf(err, errlen, "malformed settle request: how %u is not 1, 2 or 3", out->how);
        return TN_EPROTO;
    }
    if (out->visibility_ms < 0) {
        tn_errbuf(err, errlen, "malformed settle request: a negative visibility_ms");
        return TN_EPROTO;
    }
    if (out->count == 0 || out->count > TN_SETTLE_MAX) {
        tn_errbuf(err, errlen, "malformed settle request: count %" PRIu32 " is not 1..%d",
                  out->count, TN_SETTLE_MAX);
        return TN_EPROTO;
    }
    for (uint32_t i = 0; i < out->count; i++) {
        tn_wire_handle_t *h = &out->h[i];
        if (tn_wire_get_u32(&in, &h->partition) != 0 || tn_wire_get_u64(&in, &h->offset) != 0 ||
            tn_wire_get_u32(&in, &h->nonce) != 0) {
            tn_errbuf(err, errlen, "malformed settle request: handle %" PRIu32, i);
            return TN_EPROTO;
        }
    }
    if (tn_wire_end(&in) != 0) {
        tn_errbuf(err, errlen, "malformed settle request: %zu bytes after the last handle",
                  len - in.off);
        return TN_EPROTO;
    }
    return 0;
}

int tn_wire_settle_reply_encode(tn_buf_t *b, const uint16_t *status, uint32_t n)
{
    size_t at = b->len;
    int rc = tn_wire_put_u32(b, n);
    for (uint32_t i = 0; rc == 0 && i < n; i++)
        rc = tn_wire_put_u16(b, status[i]);
    if (rc != 0)
        b->len = at;
    return rc;
}

int tn_wire_settle_reply_decode(const void *p, size_t len, uint32_t n, uint16_t *status)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    uint32_t count;
    if (tn_wire_get_u32(&in, &count) != 0 || count != n)
        return TN_EPROTO;
    for (uint32_t i = 0; i < n; i++) {
        if (tn_wire_get_u16(&in, &status[i]) != 0)
            return TN_EPROTO;
        uint16_t s = status[i];
        if (s != 204 && s != 410 && s != 421 && s != 500 && s != 503)
            return TN_EPROTO;
    }
    return tn_wire_end(&in);
}

/* --- CONSUME ----------------------------------------------------------------------- */

#define CONSUME_NAME_MAX 255

int tn_wire_consume_encode(tn_buf_t *b, const tn_wire_consume_t *c)
{
    size_t tlen = strnlen(c->topic, sizeof(c->topic));
    size_t clen = strnlen(c->channel, sizeof(c->channel));
    size_t ilen = strnlen(c->ident, sizeof(c->ident));
    if (tlen == 0 || tlen > CONSUME_NAME_MAX || clen == 0 || clen > CONSUME_NAME_MAX ||
        ilen > TN_WIRE_CONSUME_IDENT_MAX || c->wait_ms < 0)
        return UV_EINVAL;
    size_t at = b->len;
    int rc;
    if ((rc = tn_wire_put_bytes(b, c->topic, tlen)) != 0 ||
        (rc = tn_wire_put_bytes(b, c->channel, clen)) != 0 ||
        (rc = tn_wire_put_u32(b, c->partition)) != 0 ||
        (rc = tn_wire_put_bool(b, c->pinned)) != 0 || (rc = tn_wire_put_u64(b, c->offset)) != 0 ||
        (rc = tn_wire_put_bool(b, c->replay)) != 0 || (rc = tn_wire_put_i64(b, c->wait_ms)) != 0 ||
        (rc = tn_wire_put_u32(b, c->max)) != 0 || (rc = tn_wire_put_bool(b, c->local_only)) != 0 ||
        (rc = tn_wire_put_bytes(b, c->ident, ilen)) != 0)
        b->len = at;
    return rc;
}

int tn_wire_consume_decode(const void *p, size_t len, tn_wire_consume_t *out, char *err,
                           size_t errlen)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    if (tn_wire_get_str(&in, CONSUME_NAME_MAX, out->topic) != 0 ||
        tn_wire_get_str(&in, CONSUME_NAME_MAX, out->channel) != 0) {
        tn_errbuf(err, errlen, "malformed consume request: the topic or channel");
        return TN_EPROTO;
    }
    if (tn_wire_get_u32(&in, &out->partition) != 0 || tn_wire_get_bool(&in, &out->pinned) != 0 ||
        tn_wire_get_u64(&in, &out->offset) != 0 || tn_wire_get_bool(&in, &out->replay) != 0 ||
        tn_wire_get_i64(&in, &out->wait_ms) != 0 || tn_wire_get_u32(&in, &out->max) != 0 ||
        tn_wire_get_bool(&in, &out->local_only) != 0) {
        tn_errbuf(err, errlen, "malformed consume request: a field after the channel");
        return TN_EPROTO;
    }
    if (tn_wire_get_str(&in, TN_WIRE_CONSUME_IDENT_MAX, out->ident) != 0) {
        tn_errbuf(err, errlen, "malformed consume request: the user");
        return TN_EPROTO;
    }
    if (tn_wire_end(&in) != 0) {
        tn_errbuf(err, errlen, "malformed consume request: %zu bytes after the last field",
                  len - in.off);
        return TN_EPROTO;
    }
    return 0;
}

/* --- PSTATS ------------------------------------------------------------------------ */

#define PSTATS_NAME_MAX 255

static bool pstat_status_valid(uint16_t s)
{
    return s == 200 || s == 404 || s == 416 || s == 421 || s == 503;
}

int tn_wire_pstats_encode(tn_buf_t *b, const char *topic, const uint32_t *parts, uint32_t n)
{
    size_t tlen = strlen(topic);
    if (tlen == 0 || tlen > PSTATS_NAME_MAX || n == 0 || n > TN_PSTATS_MAX)
        return UV_EINVAL;
    size_t at = b->len;
    int rc = tn_buf_reserve(b, 4 + tlen + 4 + (size_t)n * 4);
    if (rc == 0 &&
        ((rc = tn_wire_put_bytes(b, topic, tlen)) != 0 || (rc = tn_wire_put_u32(b, n)) != 0))
        b->len = at;
    for (uint32_t i = 0; rc == 0 && i < n; i++)
        if ((rc = tn_wire_put_u32(b, parts[i])) != 0)
            b->len = at;
    return rc;
}

int tn_wire_pstats_decode(const void *p, size_t len, tn_wire_pstats_t *out, char *err,
                          size_t errlen)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    if (tn_wire_get_str(&in, PSTATS_NAME_MAX, out->topic) != 0 ||
        tn_wire_get_u32(&in, &out->count) != 0) {
        tn_errbuf(err, errlen, "malformed pstats request: the topic or count");
        return TN_EPROTO;
    }
    if (out->topic[0] == '\0') {
        tn_errbuf(err, errlen, "malformed pstats request: an empty topic");
        return TN_EPROTO;
    }
    if (out->count == 0 || out->count > TN_PSTATS_MAX) {
        tn_errbuf(err, errlen, "malformed pstats request: count %" PRIu32 " is not 1..%d",
                  out->count, TN_PSTATS_MAX);
        return TN_EPROTO;
    }
    size_t left = len - in.off;
    if (left != (size_t)out->count * 4) {
        tn_errbuf(err, errlen,
                  "malformed pstats request: %" PRIu32 " partition indexes need %zu bytes, not %zu",
                  out->count, (size_t)out->count * 4, left);
        return TN_EPROTO;
    }
    out->parts = in.p + in.off;
    return 0;
}

uint32_t tn_wire_pstats_index(const tn_wire_pstats_t *w, uint32_t i)
{
    return (uint32_t)be_get(w->parts + (size_t)i * 4, 4);
}

int tn_wire_pstats_reply_encode(tn_buf_t *b, const tn_wire_pstat_t *st, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (!pstat_status_valid(st[i].status))
            return UV_EINVAL;
    size_t at = b->len;
    int rc = tn_wire_put_u32(b, n);
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        const tn_wire_pstat_t *s = &st[i];
        if ((rc = tn_wire_put_u32(b, s->partition)) != 0 ||
            (rc = tn_wire_put_u16(b, s->status)) != 0 || s->status != 200)
            continue;
        if ((rc = tn_wire_put_u32(b, s->segments)) == 0 &&
            (rc = tn_wire_put_u64(b, s->oldest_offset)) == 0 &&
            (rc = tn_wire_put_u64(b, s->next_offset)) == 0 &&
            (rc = tn_wire_put_u64(b, s->high_watermark)) == 0 &&
            (rc = tn_wire_put_u64(b, s->size_bytes)) == 0 &&
            (rc = tn_wire_put_u64(b, s->controls)) == 0)
            rc = tn_wire_put_u64(b, s->stored_controls);
    }
    if (rc != 0)
        b->len = at; /* nothing half-written stays behind */
    return rc;
}

int tn_wire_pstats_reply_decode(const void *p, size_t len, const uint32_t *parts, uint32_t n,
                                tn_wire_pstat_t *out)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    uint32_t count;
    if (tn_wire_get_u32(&in, &count) != 0 || count != n)
        return TN_EPROTO;
    for (uint32_t i = 0; i < n; i++) {
        tn_wire_pstat_t *s = &out[i];
        memset(s, 0, sizeof(*s));
        if (tn_wire_get_u32(&in, &s->partition) != 0 || s->partition != parts[i] ||
            tn_wire_get_u16(&in, &s->status) != 0 || !pstat_status_valid(s->status))
            return TN_EPROTO;
        if (s->status == 200 &&
            (tn_wire_get_u32(&in, &s->segments) != 0 ||
             tn_wire_get_u64(&in, &s->oldest_offset) != 0 ||
             tn_wire_get_u64(&in, &s->next_offset) != 0 ||
             tn_wire_get_u64(&in, &s->high_watermark) != 0 ||
             tn_wire_get_u64(&in, &s->size_bytes) != 0 || tn_wire_get_u64(&in, &s->controls) != 0 ||
             tn_wire_get_u64(&in, &s->stored_controls) != 0 || s->controls > s->next_offset ||
             s->stored_controls > s->controls))
            return TN_EPROTO;
    }
    return tn_wire_end(&in);
}

/* --- PURGE ------------------------------------------------------------------------- */

#define PURGE_NAME_MAX 255

int tn_wire_purge_encode(tn_buf_t *b, const char *topic, int64_t created_at_ms)
{
    size_t tlen = strlen(topic);
    if (tlen == 0 || tlen > PURGE_NAME_MAX || created_at_ms < 0)
        return UV_EINVAL;
    size_t at = b->len;
    int rc;
    if ((rc = tn_wire_put_bytes(b, topic, tlen)) != 0 ||
        (rc = tn_wire_put_i64(b, created_at_ms)) != 0)
        b->len = at;
    return rc;
}

int tn_wire_purge_decode(const void *p, size_t len, tn_wire_purge_t *out, char *err, size_t errlen)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    if (tn_wire_get_str(&in, PURGE_NAME_MAX, out->topic) != 0 || out->topic[0] == '\0') {
        tn_errbuf(err, errlen, "malformed purge request: the topic");
        return TN_EPROTO;
    }
    if (tn_wire_get_i64(&in, &out->created_at_ms) != 0) {
        tn_errbuf(err, errlen, "malformed purge request: created_at_ms");
        return TN_EPROTO;
    }
    if (out->created_at_ms < 0) {
        tn_errbuf(err, errlen, "malformed purge request: created_at_ms %" PRId64 " is negative",
                  out->created_at_ms);
        return TN_EPROTO;
    }
    if (tn_wire_end(&in) != 0) {
        tn_errbuf(err, errlen, "malformed purge request: %zu bytes after created_at_ms",
                  len - in.off);
        return TN_EPROTO;
    }
    return 0;
}

/* --- MOVE_PROGRESS -------------------------------------------------------------------- */

int tn_wire_moveprog_encode(tn_buf_t *b, const char *topic, uint32_t partition)
{
    size_t tlen = strlen(topic);
    if (tlen == 0 || tlen > PURGE_NAME_MAX)
        return UV_EINVAL;
    size_t at = b->len;
    int rc;
    if ((rc = tn_wire_put_bytes(b, topic, tlen)) != 0 || (rc = tn_wire_put_u32(b, partition)) != 0)
        b->len = at;
    return rc;
}

int tn_wire_moveprog_decode(const void *p, size_t len, tn_wire_moveprog_t *out, char *err,
                            size_t errlen)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    if (tn_wire_get_str(&in, PURGE_NAME_MAX, out->topic) != 0 || out->topic[0] == '\0') {
        tn_errbuf(err, errlen, "malformed move progress request: the topic");
        return TN_EPROTO;
    }
    if (tn_wire_get_u32(&in, &out->partition) != 0) {
        tn_errbuf(err, errlen, "malformed move progress request: the partition");
        return TN_EPROTO;
    }
    if (tn_wire_end(&in) != 0) {
        tn_errbuf(err, errlen, "malformed move progress request: %zu bytes after the partition",
                  len - in.off);
        return TN_EPROTO;
    }
    return 0;
}

/* An error text REPLICA_ERROR may carry: printable ASCII. */
static bool replerr_text_ok(const char *t, size_t n)
{
    if (n > TN_WIRE_REPLERR_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0x20 || t[i] > 0x7e)
            return false;
    return true;
}

int tn_wire_replerr_encode(tn_buf_t *b, const tn_wire_replerr_t *r)
{
    size_t tlen = strnlen(r->topic, sizeof(r->topic));
    size_t elen = strnlen(r->error, sizeof(r->error));
    if (tlen == 0 || tlen > PURGE_NAME_MAX || r->leader_epoch == 0 ||
        !replerr_text_ok(r->error, elen))
        return UV_EINVAL;
    size_t at = b->len;
    int rc;
    if ((rc = tn_wire_put_u32(b, r->node)) != 0 || (rc = tn_wire_put_u64(b, r->incarnation)) != 0 ||
        (rc = tn_wire_put_bytes(b, r->topic, tlen)) != 0 ||
        (rc = tn_wire_put_u32(b, r->partition)) != 0 ||
        (rc = tn_wire_put_u32(b, r->leader_epoch)) != 0 ||
        (rc = tn_wire_put_bytes(b, r->error, elen)) != 0)
        b->len = at;
    return rc;
}

int tn_wire_replerr_decode(const void *p, size_t len, tn_wire_replerr_t *out, char *err,
                           size_t errlen)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    memset(out, 0, sizeof(*out));
    if (tn_wire_get_u32(&in, &out->node) != 0 || tn_wire_get_u64(&in, &out->incarnation) != 0) {
        tn_errbuf(err, errlen, "malformed replica error report: the follower");
        return TN_EPROTO;
    }
    if (tn_wire_get_str(&in, PURGE_NAME_MAX, out->topic) != 0 || out->topic[0] == '\0') {
        tn_errbuf(err, errlen, "malformed replica error report: the topic");
        return TN_EPROTO;
    }
    if (tn_wire_get_u32(&in, &out->partition) != 0 ||
        tn_wire_get_u32(&in, &out->leader_epoch) != 0 || out->leader_epoch == 0) {
        tn_errbuf(err, errlen, "malformed replica error report: the partition or its epoch");
        return TN_EPROTO;
    }
    if (tn_wire_get_str(&in, TN_WIRE_REPLERR_MAX, out->error) != 0 ||
        !replerr_text_ok(out->error, strlen(out->error))) {
        tn_errbuf(err, errlen, "malformed replica error report: the error text");
        return TN_EPROTO;
    }
    if (tn_wire_end(&in) != 0) {
        tn_errbuf(err, errlen, "malformed replica error report: %zu bytes after the error",
                  len - in.off);
        return TN_EPROTO;
    }
    return 0;
}

/* --- PERRS ------------------------------------------------------------------------ */

_Static_assert(TN_WIRE_PERRS_MAX == TN_PSTATE_MAX_REPLICAS, "an error per member at most");

int tn_wire_perrs_reply_start(tn_buf_t *b, uint32_t n)
{
    return tn_wire_put_u32(b, n);
}

int tn_wire_perrs_reply_part(tn_buf_t *b, uint32_t index, const tn_wire_perr_t *errs,
                             uint32_t nerrs)
{
    if (nerrs > TN_WIRE_PERRS_MAX)
        return UV_EINVAL;
    for (uint32_t i = 0; i < nerrs; i++) {
        size_t tl = strnlen(errs[i].text, sizeof(errs[i].text));
        if (errs[i].node == 0 || tl == 0 || !replerr_text_ok(errs[i].text, tl))
            return UV_EINVAL;
    }
    size_t at = b->len;
    int rc;
    if ((rc = tn_wire_put_u32(b, index)) != 0 || (rc = tn_wire_put_u8(b, (uint8_t)nerrs)) != 0) {
        b->len = at;
        return rc;
    }
    for (uint32_t i = 0; i < nerrs; i++)
        if ((rc = tn_wire_put_u32(b, errs[i].node)) != 0 ||
            (rc = tn_wire_put_bytes(b, errs[i].text, strlen(errs[i].text))) != 0) {
            b->len = at;
            return rc;
        }
    return 0;
}

int tn_wire_perrs_reply_decode(const void *p, size_t len, const uint32_t *parts, uint32_t n,
                               uint8_t *counts, tn_wire_perr_t *errs, size_t *total)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    *total = 0;
    uint32_t count;
    if (tn_wire_get_u32(&in, &count) != 0 || count != n)
        return TN_EPROTO;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t index;
        uint8_t k;
        if (tn_wire_get_u32(&in, &index) != 0 || index != parts[i] ||
            tn_wire_get_u8(&in, &k) != 0 || k > TN_WIRE_PERRS_MAX)
            return TN_EPROTO;
        counts[i] = k;
        for (uint8_t j = 0; j < k; j++) {
            tn_wire_perr_t e;
            if (tn_wire_get_u32(&in, &e.node) != 0 || e.node == 0 ||
                tn_wire_get_str(&in, TN_WIRE_REPLERR_MAX, e.text) != 0 || e.text[0] == '\0' ||
                !replerr_text_ok(e.text, strlen(e.text)))
                return TN_EPROTO;
            if (errs != NULL)
                errs[*total] = e;
            (*total)++;
        }
    }
    return tn_wire_end(&in);
}

/* --- META_PROPOSE_AT -------------------------------------------------------------- */

int tn_wire_propose_at_reply_encode(tn_buf_t *b, int32_t status, uint64_t index)
{
    size_t at = b->len;
    int rc;
    if ((rc = tn_wire_put_i32(b, status)) != 0 || (rc = tn_wire_put_u64(b, index)) != 0)
        b->len = at;
    return rc;
}

int tn_wire_propose_at_reply_decode(const void *p, size_t len, int32_t *status, uint64_t *index)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    *status = 0;
    *index = 0;
    if (tn_wire_get_i32(&in, status) != 0 || tn_wire_get_u64(&in, index) != 0 ||
        tn_wire_end(&in) != 0) {
        *status = 0;
        *index = 0;
        return TN_EPROTO;
    }
    return 0;
}

#define MOVEPROG_KNOWN (TN_WIRE_MOVEPROG_BYTES | TN_WIRE_MOVEPROG_LAG)

int tn_wire_moveprog_reply_encode(tn_buf_t *b, const tn_wire_moveprog_reply_t *r)
{
    if ((r->known & ~MOVEPROG_KNOWN) != 0)
        return UV_EINVAL;
    bool bytes = (r->known & TN_WIRE_MOVEPROG_BYTES) != 0;
    bool lag = (r->known & TN_WIRE_MOVEPROG_LAG) != 0;
    size_t at = b->len;
    int rc;
    if ((rc = tn_wire_put_u8(b, r->known)) != 0 ||
        (rc = tn_wire_put_u64(b, bytes ? r->bytes_copied : 0)) != 0 ||
        (rc = tn_wire_put_u64(b, bytes ? r->bytes_total : 0)) != 0 ||
        (rc = tn_wire_put_u64(b, lag ? r->lag_records : 0)) != 0)
        b->len = at;
    return rc;
}

int tn_wire_moveprog_reply_decode(const void *p, size_t len, tn_wire_moveprog_reply_t *out)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    memset(out, 0, sizeof(*out));
    if (tn_wire_get_u8(&in, &out->known) != 0 || tn_wire_get_u64(&in, &out->bytes_copied) != 0 ||
        tn_wire_get_u64(&in, &out->bytes_total) != 0 ||
        tn_wire_get_u64(&in, &out->lag_records) != 0 || tn_wire_end(&in) != 0)
        return TN_EPROTO;
    bool bytes = (out->known & TN_WIRE_MOVEPROG_BYTES) != 0;
    bool lag = (out->known & TN_WIRE_MOVEPROG_LAG) != 0;
    if ((out->known & ~MOVEPROG_KNOWN) != 0 ||
        (!bytes && (out->bytes_copied != 0 || out->bytes_total != 0)) ||
        (!lag && out->lag_records != 0))
        return TN_EPROTO;
    return 0;
}

/* --- SETTLE_REPL ----------------------------------------------------------------------- */

static bool walop_known(uint8_t op)
{
    return op >= TN_WAL_FIN && op <= TN_SETREPL_OP_MAX;
}

int tn_wire_setrepl_encode(tn_buf_t *b, const char *topic, uint32_t partition,
                           uint32_t leader_epoch, const char *channel, uint64_t stream,
                           uint64_t first_seq, uint64_t base_frontier, const tn_walrec_t *recs,
                           uint32_t n, uint64_t chan_stamp, uint64_t incarnation)
{
    size_t tl = strlen(topic), cl = strlen(channel);
    if (tl == 0 || tl > 255 || cl == 0 || cl > 255 || leader_epoch == 0 || first_seq == 0 ||
        n == 0 || n > TN_SETREPL_MAX || first_seq > UINT64_MAX - n)
        return UV_EINVAL;
    for (uint32_t i = 0; i < n; i++)
        if (!walop_known(recs[i].op))
            return UV_EINVAL;
    size_t mark = b->len;
    int rc = tn_buf_reserve(b, 4 + tl + 4 + 4 + 4 + cl + 8 + 8 + 8 + 4 +
                                   (size_t)n * TN_SETREPL_REC_SIZE + 16);
    rc = rc != 0 ? rc : tn_wire_put_str(b, topic);
    rc = rc != 0 ? rc : tn_wire_put_u32(b, partition);
    rc = rc != 0 ? rc : tn_wire_put_u32(b, leader_epoch);
    rc = rc != 0 ? rc : tn_wire_put_str(b, channel);
    rc = rc != 0 ? rc : tn_wire_put_u64(b, stream);
    rc = rc != 0 ? rc : tn_wire_put_u64(b, first_seq);
    rc = rc != 0 ? rc : tn_wire_put_u64(b, base_frontier);
    rc = rc != 0 ? rc : tn_wire_put_u32(b, n);
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        rc = tn_wire_put_u8(b, recs[i].op);
        rc = rc != 0 ? rc : tn_wire_put_u64(b, recs[i].offset);
        rc = rc != 0 ? rc : tn_wire_put_i64(b, recs[i].due_ms);
        rc = rc != 0 ? rc : tn_wire_put_u32(b, recs[i].attempts);
        rc = rc != 0 ? rc : tn_wire_put_u64(b, recs[i].value);
    }
    /* The incarnation came after the stamp: with it, the stamp is
     * written even when 0 (its place is fixed); without either, the
     * encoding of the builds before them. */
    if (rc == 0 && (chan_stamp != 0 || incarnation != 0))
        rc = tn_wire_put_u64(b, chan_stamp);
    if (rc == 0 && incarnation != 0)
        rc = tn_wire_put_u64(b, incarnation);
    if (rc != 0)
        b->len = mark;
    return rc;
}

int tn_wire_setrepl_decode(const void *p, size_t len, tn_wire_setrepl_t *out, char *err,
                           size_t errlen)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    (void)tn_wire_get_str(&in, 255, out->topic);
    (void)tn_wire_get_u32(&in, &out->partition);
    (void)tn_wire_get_u32(&in, &out->leader_epoch);
    (void)tn_wire_get_str(&in, 255, out->channel);
    (void)tn_wire_get_u64(&in, &out->stream);
    (void)tn_wire_get_u64(&in, &out->first_seq);
    (void)tn_wire_get_u64(&in, &out->base_frontier);
    if (tn_wire_get_u32(&in, &out->count) != 0) {
        tn_errbuf(err, errlen, "malformed settle_repl request: a field is short or invalid");
        return TN_EPROTO;
    }
    if (out->topic[0] == '\0' || out->channel[0] == '\0') {
        tn_errbuf(err, errlen, "malformed settle_repl request: empty topic or channel");
        return TN_EPROTO;
    }
    if (out->leader_epoch == 0 || out->first_seq == 0) {
        tn_errbuf(err, errlen,
                  "malformed settle_repl request: leader_epoch and first_seq start at 1");
        return TN_EPROTO;
    }
    if (out->count == 0 || out->count > TN_SETREPL_MAX ||
        out->first_seq > UINT64_MAX - out->count) {
        tn_errbuf(err, errlen, "malformed settle_repl request: count %" PRIu32 " out of range",
                  out->count);
        return TN_EPROTO;
    }
    size_t left = len - in.off, nb = (size_t)out->count * TN_SETREPL_REC_SIZE;
    /* The channel's stamp after the records came later, and the
     * follower's incarnation after it later still: absent (an older
     * build's request, a channel without a stamp, an incarnation not
     * known) they are 0. The stamp alone is not 0; before an
     * incarnation (never 0) it may be. */
    out->chan_stamp = 0;
    out->incarnation = 0;
    if (left == nb + 8 || left == nb + 16) {
        tn_wire_in_t st;
        tn_wire_in_init(&st, in.p + in.off + nb, left - nb);
        (void)tn_wire_get_u64(&st, &out->chan_stamp);
        if (left == nb + 16)
            (void)tn_wire_get_u64(&st, &out->incarnation);
        if (left == nb + 8 && out->chan_stamp == 0) {
            tn_errbuf(err, errlen, "malformed settle_repl request: a channel stamp of 0");
            return TN_EPROTO;
        }
        if (left == nb + 16 && out->incarnation == 0) {
            tn_errbuf(err, errlen, "malformed settle_repl request: an incarnation of 0");
            return TN_EPROTO;
        }
        left = nb;
    }
    if (left != nb) {
        tn_errbuf(err, errlen, "malformed settle_repl request: %zu bytes for %" PRIu32 " records",
                  left, out->count);
        return TN_EPROTO;
    }
    out->recs = in.p + in.off;
    for (uint32_t i = 0; i < out->count; i++) {
        uint8_t op = out->recs[(size_t)i * TN_SETREPL_REC_SIZE];
        if (!walop_known(op)) {
            tn_errbuf(err, errlen, "malformed settle_repl request: record %" PRIu32 " has op %u", i,
                      (unsigned)op);
            return TN_EPROTO;
        }
    }
    return 0;
}

void tn_wire_setrepl_rec(const tn_wire_setrepl_t *w, uint32_t i, tn_walrec_t *out)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, w->recs + (size_t)i * TN_SETREPL_REC_SIZE, TN_SETREPL_REC_SIZE);
    memset(out, 0, sizeof(*out));
    (void)tn_wire_get_u8(&in, &out->op);
    (void)tn_wire_get_u64(&in, &out->offset);
    (void)tn_wire_get_i64(&in, &out->due_ms);
    (void)tn_wire_get_u32(&in, &out->attempts);
    (void)tn_wire_get_u64(&in, &out->value);
}

/* --- CHAN_SNAP ------------------------------------------------------------------------ */

int tn_wire_chansnap_encode(tn_buf_t *b, const char *topic, uint32_t partition,
                            uint32_t leader_epoch, const char *channel, uint64_t stream,
                            uint64_t seq, uint64_t incarnation, const tn_cursor_t *state,
                            uint64_t chan_stamp)
{
    size_t tl = strlen(topic), cl = strlen(channel);
    if (tl == 0 || tl > 255 || cl == 0 || cl > 255 || leader_epoch == 0)
        return UV_EINVAL;
    tn_buf_t img;
    tn_buf_init(&img);
    int rc = tn_cursor_encode(state, &img);
    if (rc == 0 && tn_buf_size(&img) > TN_WIRE_MAX_PAYLOAD - 1024)
        rc = UV_EINVAL;
    size_t mark = b->len;
    rc = rc != 0 ? rc : tn_buf_reserve(b, 4 + tl + 4 + 4 + 4 + cl + 8 + 8 + 8 + 4 + img.len + 8);
    rc = rc != 0 ? rc : tn_wire_put_str(b, topic);
    rc = rc != 0 ? rc : tn_wire_put_u32(b, partition);
    rc = rc != 0 ? rc : tn_wire_put_u32(b, leader_epoch);
    rc = rc != 0 ? rc : tn_wire_put_str(b, channel);
    rc = rc != 0 ? rc : tn_wire_put_u64(b, stream);
    rc = rc != 0 ? rc : tn_wire_put_u64(b, seq);
    rc = rc != 0 ? rc : tn_wire_put_u64(b, incarnation);
    rc = rc != 0 ? rc : tn_wire_put_bytes(b, img.base, img.len);
    if (rc == 0 && chan_stamp != 0)
        rc = tn_wire_put_u64(b, chan_stamp);
    tn_buf_fini(&img);
    if (rc != 0)
        b->len = mark;
    return rc;
}

int tn_wire_chansnap_decode(const void *p, size_t len, tn_wire_chansnap_t *out, char *err,
                            size_t errlen)
{
    tn_cursor_init(&out->state, 0);
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    const uint8_t *img = NULL;
    size_t n = 0;
    (void)tn_wire_get_str(&in, 255, out->topic);
    (void)tn_wire_get_u32(&in, &out->partition);
    (void)tn_wire_get_u32(&in, &out->leader_epoch);
    (void)tn_wire_get_str(&in, 255, out->channel);
    (void)tn_wire_get_u64(&in, &out->stream);
    (void)tn_wire_get_u64(&in, &out->seq);
    (void)tn_wire_get_u64(&in, &out->incarnation);
    (void)tn_wire_get_bytes(&in, TN_WIRE_MAX_PAYLOAD, &img, &n);
    /* The channel's stamp came later: absent (an older build's request,
     * or a channel without one) it is 0. */
    out->chan_stamp = 0;
    if (in.err == 0 && in.len - in.off == 8 &&
        (tn_wire_get_u64(&in, &out->chan_stamp) != 0 || out->chan_stamp == 0)) {
        tn_errbuf(err, errlen, "malformed chan_snap request: a channel stamp of 0");
        return TN_EPROTO;
    }
    if (in.err != 0 || tn_wire_end(&in) != 0) {
        tn_errbuf(err, errlen,
                  "malformed chan_snap request: a field is short, invalid or trailing");
        return TN_EPROTO;
    }
    if (out->topic[0] == '\0' || out->channel[0] == '\0') {
        tn_errbuf(err, errlen, "malformed chan_snap request: empty topic or channel");
        return TN_EPROTO;
    }
    if (out->leader_epoch == 0) {
        tn_errbuf(err, errlen, "malformed chan_snap request: leader_epoch starts at 1");
        return TN_EPROTO;
    }
    int rc = tn_cursor_decode(img, n, &out->state);
    if (rc == UV_ENOMEM) {
        tn_errbuf(err, errlen, "chan_snap request: out of memory for a state of %zu bytes", n);
        return UV_ENOMEM;
    }
    if (rc != 0) {
        tn_cursor_init(&out->state, 0);
        tn_errbuf(err, errlen,
                  "malformed chan_snap request: the state (%zu bytes) is not a valid channel "
                  "checkpoint image",
                  n);
        return TN_EPROTO;
    }
    return 0;
}

/* --- opcodes ----------------------------------------------------------------------- */

static const struct {
    const char *name;
    tn_wire_lane_t lane;
} ops[TN_OP__COUNT] = {
    /* Produce, consume and ack ops take the bulk lanes; the metastore's
     * are control traffic. */
    [TN_OP_ECHO] = {"echo", TN_LANE_CONTROL},
    [TN_OP_META_PROPOSE] = {"meta_propose", TN_LANE_CONTROL},
    [TN_OP_JOIN] = {"join", TN_LANE_CONTROL},
    [TN_OP_LEADER_INDEX] = {"leader_index", TN_LANE_CONTROL},
    [TN_OP_NODE_STATUS] = {"node_status", TN_LANE_CONTROL},
    [TN_OP_COMMIT] = {"commit", TN_LANE_PRODUCE},
    [TN_OP_SETTLE] = {"settle", TN_LANE_ACK},
    [TN_OP_CONSUME] = {"consume", TN_LANE_CONSUME},
    [TN_OP_PSTATS] = {"pstats", TN_LANE_CONTROL},
    [TN_OP_PURGE] = {"purge", TN_LANE_CONTROL},
    [TN_OP_FETCH] = {"fetch", TN_LANE_REPLICA},
    [TN_OP_PRODUCE] = {"produce", TN_LANE_PRODUCE},
    [TN_OP_SETTLE_REPL] = {"settle_repl", TN_LANE_REPLICA},
    [TN_OP_REPAIR] = {"repair", TN_LANE_REPLICA},
    [TN_OP_CHAN_SNAP] = {"chan_snap", TN_LANE_REPLICA},
    [TN_OP_FLUSHED] = {"flushed", TN_LANE_REPLICA},
    [TN_OP_REMOTE_CHECK] = {"remote_check", TN_LANE_CONTROL},
    [TN_OP_MOVE_PROGRESS] = {"move_progress", TN_LANE_CONTROL},
    [TN_OP_REPLICA_ERROR] = {"replica_error", TN_LANE_REPLICA},
    [TN_OP_PERRS] = {"perrs", TN_LANE_CONTROL},
    [TN_OP_META_PROPOSE_AT] = {"meta_propose_at", TN_LANE_CONTROL},
};

const char *tn_wire_op_name(uint8_t op)
{
    return op < TN_OP__COUNT ? ops[op].name : NULL;
}

tn_wire_lane_t tn_wire_op_lane(uint8_t op)
{
    return op < TN_OP__COUNT && ops[op].name != NULL ? ops[op].lane : TN_LANE_CONTROL;
}

int tn_wire_request_check(const void *p, size_t len)
{
    tn_wire_in_t in;
    tn_wire_in_init(&in, p, len);
    uint8_t op;
    if (tn_wire_get_u8(&in, &op) != 0)
        return TN_EPROTO;
    if (tn_wire_op_name(op) == NULL)
        return UV_ENOTSUP;
    const uint8_t *bytes;
    size_t n;
    uint64_t id;
    char addr[TN_WIRE_ADDR_MAX + 1];
    switch ((tn_wire_op_t)op) {
    case TN_OP_ECHO:
    case TN_OP_META_PROPOSE:
    case TN_OP_META_PROPOSE_AT:
        (void)tn_wire_get_bytes(&in, TN_WIRE_MAX_PAYLOAD, &bytes, &n);
        break;
    case TN_OP_JOIN:
        (void)tn_wire_get_u64(&in, &id);
        (void)tn_wire_get_str(&in, TN_WIRE_ADDR_MAX, addr);
        (void)tn_wire_get_str(&in, TN_WIRE_ADDR_MAX, addr);
        break;
    case TN_OP_COMMIT: {
        /* The store's body limit is the handler's to apply. */
        tn_wire_commit_t c;
        return tn_wire_commit_decode(in.p + in.off, in.len - in.off, TN_WIRE_MAX_PAYLOAD, &c, NULL,
                                     0) == 0
                   ? 0
                   : TN_EPROTO;
    }
    case TN_OP_SETTLE: {
        tn_wire_settle_t st;
        return tn_wire_settle_decode(in.p + in.off, in.len - in.off, &st, NULL, 0);
    }
    case TN_OP_CONSUME: {
        tn_wire_consume_t c;
        return tn_wire_consume_decode(in.p + in.off, in.len - in.off, &c, NULL, 0) == 0 ? 0
                                                                                        : TN_EPROTO;
    }
    case TN_OP_PSTATS:
    case TN_OP_PERRS: {
        tn_wire_pstats_t ps;
        return tn_wire_pstats_decode(in.p + in.off, in.len - in.off, &ps, NULL, 0);
    }
    case TN_OP_PURGE: {
        tn_wire_purge_t pg;
        return tn_wire_purge_decode(in.p + in.off, in.len - in.off, &pg, NULL, 0);
    }
    case TN_OP_FETCH: {
        tn_fetch_req_t f;
        return tn_fetch_req_decode(in.p + in.off, in.len - in.off, &f);
    }
    case TN_OP_REPAIR: {
        tn_fetch_req_t f;
        int rc = tn_fetch_req_decode(in.p + in.off, in.len - in.off, &f);
        return rc != 0 ? rc : f.count == 1 ? 0 : TN_EPROTO;
    }
    case TN_OP_FLUSHED: {
        tn_flushed_req_t f;
        return tn_flushed_req_decode(in.p + in.off, in.len - in.off, &f);
    }
    case TN_OP_PRODUCE: {
        tn_wire_produce_t pr;
        return tn_wire_produce_decode(in.p + in.off, in.len - in.off, TN_WIRE_MAX_PAYLOAD, &pr,
                                      NULL, 0) == 0
                   ? 0
                   : TN_EPROTO;
    }
    case TN_OP_SETTLE_REPL: {
        tn_wire_setrepl_t sr;
        return tn_wire_setrepl_decode(in.p + in.off, in.len - in.off, &sr, NULL, 0);
    }
    case TN_OP_CHAN_SNAP: {
        tn_wire_chansnap_t cs;
        int rc = tn_wire_chansnap_decode(in.p + in.off, in.len - in.off, &cs, NULL, 0);
        tn_cursor_fini(&cs.state);
        return rc == UV_ENOMEM ? 0 : rc; /* the handler answers 503 for memory */
    }
    case TN_OP_REMOTE_CHECK: {
        tn_wire_rcheck_t rq;
        return tn_wire_rcheck_decode(in.p + in.off, in.len - in.off, &rq, NULL, 0);
    }
    case TN_OP_MOVE_PROGRESS: {
        tn_wire_moveprog_t mp;
        return tn_wire_moveprog_decode(in.p + in.off, in.len - in.off, &mp, NULL, 0);
    }
    case TN_OP_REPLICA_ERROR: {
        tn_wire_replerr_t re;
        return tn_wire_replerr_decode(in.p + in.off, in.len - in.off, &re, NULL, 0);
    }
    case TN_OP_LEADER_INDEX:
    case TN_OP_NODE_STATUS:
    case TN_OP__COUNT:
        break;
    }
    return tn_wire_end(&in);
}

/* --- the secret proof ----------------------------------------------------------------- */

int tn_wire_hmac_sha256(const uint8_t *key, size_t key_len, const void *data, size_t len,
                        uint8_t out[32])
{
    if (key_len > INT_MAX)
        return UV_EINVAL;
    unsigned int n = 0;
    /* OpenSSL wants a non-NULL key even when it is empty. */
    static const uint8_t none[1] = {0};
    if (HMAC(EVP_sha256(), key_len > 0 ? key : none, (int)key_len, data, len, out, &n) == NULL ||
        n != 32)
        return TN_EFAILED;
    return 0;
}

#define ROLE_LEN 6 /* "client", "server" */

int tn_wire_proof(const uint8_t *secret, size_t secret_len, bool client,
                  const uint8_t ekm[TN_WIRE_EKM_LEN], uint8_t out[TN_WIRE_PROOF_LEN])
{
    if (secret_len == 0)
        return UV_EINVAL;
    static const uint8_t role_client[ROLE_LEN] = {'c', 'l', 'i', 'e', 'n', 't'};
    static const uint8_t role_server[ROLE_LEN] = {'s', 'e', 'r', 'v', 'e', 'r'};
    uint8_t msg[ROLE_LEN + TN_WIRE_EKM_LEN];
    memcpy(msg, client ? role_client : role_server, ROLE_LEN);
    memcpy(msg + ROLE_LEN, ekm, TN_WIRE_EKM_LEN);
    return tn_wire_hmac_sha256(secret, secret_len, msg, sizeof(msg), out);
}

bool tn_wire_proof_check(const uint8_t *secret, size_t secret_len, bool client,
                         const uint8_t ekm[TN_WIRE_EKM_LEN], const uint8_t *proof, size_t len)
{
    uint8_t want[TN_WIRE_PROOF_LEN];
    if (len != TN_WIRE_PROOF_LEN || tn_wire_proof(secret, secret_len, client, ekm, want) != 0)
        return false;
    bool ok = CRYPTO_memcmp(want, proof, TN_WIRE_PROOF_LEN) == 0;
    OPENSSL_cleanse(want, sizeof(want));
    return ok;
}

int tn_wire_auth_check(const uint8_t *secret, size_t secret_len, bool client,
                       const uint8_t ekm[TN_WIRE_EKM_LEN], const tn_wire_hdr_t *h,
                       const uint8_t *payload)
{
    if (h->type != TN_WF_AUTH || h->len != TN_WIRE_PROOF_LEN)
        return TN_EPROTO;
    return tn_wire_proof_check(secret, secret_len, client, ekm, payload, h->len) ? 0 : UV_EACCES;
}

#define RESET_CONTEXT "tern-quic-stateless-reset-v1"

int tn_wire_reset_key(const uint8_t *secret, size_t secret_len, uint8_t out[32])
{
    if (secret_len == 0)
        return UV_EINVAL;
    return tn_wire_hmac_sha256(secret, secret_len, RESET_CONTEXT, strlen(RESET_CONTEXT), out);
}

/* --- dial backoff ------------------------------------------------------------------------- */

#define BACKOFF_FIRST_MS 250
#define BACKOFF_MAX_MS   2000

uint64_t tn_wire_backoff_ms(unsigned failures)
{
    if (failures == 0)
        return 0;
    uint64_t ms = BACKOFF_FIRST_MS;
    for (unsigned i = 1; i < failures && ms < BACKOFF_MAX_MS; i++)
        ms *= 2;
    return TN_MIN(ms, BACKOFF_MAX_MS);
}

bool tn_wire_parse_node_id(const char *s, uint64_t *out)
{
    size_t n = strlen(s);
    if (n == 0 || n > 20)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}
