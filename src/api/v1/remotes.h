/* The /v1/remotes routes (remotes.c): other tern clusters that remote
 * children send to (docs/remotes.md), and this node's cache of their
 * opened credentials. Admin only, with security on.
 *
 * Threads: the loop thread. */
#ifndef TN_API_V1_REMOTES_H
#define TN_API_V1_REMOTES_H

#include "core/platform.h"

#include "api/v1.h"
#include "proto/http/guard.h"

/* The routes on srv (called once per listener; the shared state is made
 * at the first call). 0 or UV_ENOMEM. */
int tn__v1_remotes_register(tn_http_server_t *srv, tn_v1_t *v);
/* Wipe the cluster secret's copy and every opened credential; requests in
 * flight answer 503 as their proposals come back. */
void tn__v1_remotes_close(tn_v1_t *v);

/* The ready Authorization header value ("Basic ...") of remote name as of
 * its current credential version, opened once per version (the send path
 * does no cryptography): 0 with *auth borrowed (valid until the next
 * metastore change or tn__v1_remotes_close), TN_ENOTFOUND (no such
 * remote), or TN_ECORRUPT with *why (borrowed likewise) when the sealed
 * credential does not open here: tampered, or sealed under another
 * cluster secret. For part 2's remote children. */
int tn__v1_remote_credential(tn_v1_t *v, const char *name, const char **auth, const char **why);

/* The hook DELETE asks before removing a remote: the name of a remote
 * child that uses it (borrowed until the next metastore apply), or NULL. */
const char *tn__v1_remote_user(tn_v1_t *v, const char *remote);

/* This node's address guard (the remotes options; borrowed for v's
 * life), or NULL before the remotes routes are registered. */
const tn_guard_t *tn__v1_remote_guard(tn_v1_t *v);

#endif
