/* Fuzz target: a server stream's first frame as the client's proof. The
 * first TN_WIRE_EKM_LEN input bytes are the session's keying material, the
 * rest the stream, read under the pre-auth cap. Only an AUTH frame whose
 * payload is the client proof computed here is accepted; nothing over the
 * cap is ever delivered. */
#include "core/platform.h"

#include "cluster/wire.h"
#include "core/err.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t secret[] = "fuzz cluster secret";

typedef struct {
    const uint8_t *ekm;
    int verdict; /* of the first frame; 1 until one came */
} proof_t;

static int on_frame(void *arg, const tn_wire_hdr_t *h, const uint8_t *payload)
{
    proof_t *p = arg;
    if (h->len > TN_WIRE_PROOF_CAP - TN_WIRE_HDR)
        abort();
    int rc = tn_wire_auth_check(secret, sizeof(secret) - 1, true, p->ekm, h, payload);
    uint8_t want[TN_WIRE_PROOF_LEN];
    if (tn_wire_proof(secret, sizeof(secret) - 1, true, p->ekm, want) != 0)
        abort();
    bool shaped = h->type == TN_WF_AUTH && h->len == TN_WIRE_PROOF_LEN;
    int expect = !shaped ? TN_EPROTO : memcmp(want, payload, sizeof(want)) == 0 ? 0 : UV_EACCES;
    if (rc != expect)
        abort();
    /* A client proof never passes as a server's. */
    if (rc == 0 && tn_wire_auth_check(secret, sizeof(secret) - 1, false, p->ekm, h, payload) == 0)
        abort();
    p->verdict = rc;
    return rc == 0 ? UV_ECANCELED : rc; /* the first frame decides; stop */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < TN_WIRE_EKM_LEN || size > 64 * 1024)
        return 0;
    proof_t p = {.ekm = data, .verdict = 1};
    tn_wire_framer_t f;
    tn_wire_framer_init(&f, TN_WIRE_PROOF_CAP - TN_WIRE_HDR);
    int rc = tn_wire_framer_push(&f, data + TN_WIRE_EKM_LEN, size - TN_WIRE_EKM_LEN, on_frame, &p);
    if (p.verdict != 1 && rc != (p.verdict == 0 ? UV_ECANCELED : p.verdict))
        abort();
    if (tn_buf_size(&f.pending) > TN_WIRE_PROOF_CAP)
        abort(); /* an unauthenticated stream holds no more than the cap */
    tn_wire_framer_fini(&f);
    return 0;
}
