/* Sealed remote credentials (docs/remotes.md): a remote's password kept
 * in the metastore only as AES-256-GCM ciphertext, under a key derived
 * with HKDF-SHA256 from the cluster secret and the cluster's random salt
 * (kept in the metastore beside the remotes), and bound to the remote it
 * belongs to by associated data.
 *
 * Sealed bytes: [12] random nonce, ciphertext (as long as the password),
 * [16] GCM tag. Associated data: the remote's name, id, URL, username and
 * CA, each as [4] length (little-endian) + bytes, in that order, after the
 * label "tern remote credential v1", so that no field can be moved into
 * another and a record copied onto another remote (or edited: a new URL or
 * CA) no longer opens.
 *
 * What it protects: the password is not in clear in the metastore, its
 * snapshots, backups or logs; a record cannot be re-pointed at another URL
 * or CA without the password. What it does not: anyone holding both the
 * cluster secret and the metastore (a node, or a backup plus the secret
 * file) opens it.
 *
 * Threads: any (pure, no shared state). */
#ifndef TN_META_SEAL_H
#define TN_META_SEAL_H

#include "core/platform.h"

#include "core/buf.h"

#define TN_SEAL_SALT     32
#define TN_SEAL_NONCE    12
#define TN_SEAL_TAG      16
#define TN_SEAL_OVERHEAD (TN_SEAL_NONCE + TN_SEAL_TAG)
#define TN_SEAL_KEY      32

/* What a sealed credential is bound to (every pointer borrowed). */
typedef struct {
    const char *name;
    uint64_t id;
    const char *url;
    const char *username;
    const char *ca_pem; /* "" for none */
} tn_seal_ad_t;

/* The key for secret[0..slen) and salt (HKDF-SHA256, info "tern remote
 * credentials"). 0 or TN_EFAILED (OpenSSL refused). */
int tn_seal_key(const uint8_t *secret, size_t slen, const uint8_t salt[TN_SEAL_SALT],
                uint8_t key[TN_SEAL_KEY]);

/* Seal pw[0..plen) under key for ad, appending the sealed bytes to out
 * (plen + TN_SEAL_OVERHEAD of them). 0, TN_EFAILED or UV_ENOMEM. */
int tn_seal(const uint8_t key[TN_SEAL_KEY], const tn_seal_ad_t *ad, const char *pw, size_t plen,
            tn_buf_t *out);

/* Open sealed[0..len) under key for ad into pw (cap bytes; *plen set).
 * 0; TN_ECORRUPT (too short, or the tag does not check: tampered, bound to
 * another record, or sealed under another key), with err naming the
 * remote ("sealed credential of remote eu does not open: tampered or
 * sealed under another cluster secret"); UV_ENOBUFS (cap too small);
 * TN_EFAILED. pw is wiped on failure. */
int tn_seal_open(const uint8_t key[TN_SEAL_KEY], const tn_seal_ad_t *ad, const uint8_t *sealed,
                 size_t len, char *pw, size_t cap, size_t *plen, char *err, size_t errlen);

#endif
