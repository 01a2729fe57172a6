/* Helpers shared by the unit tests: temporary directories, a store with
 * small test-sized limits, and running the loop until a request is done.
 * Every helper fails the current test (cmocka) instead of returning an
 * error. */
#ifndef TN_TESTS_TESTUTIL_H
#define TN_TESTS_TESTUTIL_H

#include "core/platform.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <uv.h>

#include "storage/plog.h"
#include "storage/store.h"

/* A fresh empty directory under $TMPDIR (or /tmp); free with tu_rmrf+free. */
char *tu_tempdir(void);
void tu_rmrf(const char *path);

/* Options for a test store in path: 64 KiB segments, 256 byte index
 * interval, durable mode, no disk minimum. */
void tu_store_opts(tn_store_opts_t *o, const char *path);
tn_store_t *tu_store_open(uv_loop_t *loop, const tn_store_opts_t *o);
/* Close the store and run the loop until it is gone. */
void tu_store_close(uv_loop_t *loop, tn_store_t *store);
/* Close a plog alone and run the loop until it is gone. */
void tu_plog_close(uv_loop_t *loop, tn_plog_t *plog);
/* uv_loop_close must succeed: every handle was closed. */
void tu_loop_fini(uv_loop_t *loop);

/* Append one record and wait for its completion; returns the status and
 * sets *offset. */
int tu_append(uv_loop_t *loop, tn_plog_t *plog, const void *body, size_t len, uint64_t *offset);
/* Append n records as one batch and wait; returns the status. */
int tu_append_batch(uv_loop_t *loop, tn_plog_t *plog, const tn_rec_in_t *recs, uint32_t n,
                    uint64_t *first);
/* Read offset and compare its body with (body, len). */
void tu_expect_body(tn_plog_t *plog, uint64_t offset, const void *body, size_t len);
/* Deterministic body for a numbered message: "msg-<n>-" then filler. */
size_t tu_body(uint64_t n, char *buf, size_t len);

/* A loop, a temporary data directory and a store open on it: the fixture
 * of the storage tests. */
typedef struct {
    uv_loop_t loop;
    char *dir;
    tn_store_opts_t opts;
    tn_store_t *store; /* NULL while a test has it closed */
} tu_fx_t;

/* A new fixture; tweak (may be NULL) adjusts the options before the store
 * opens. */
tu_fx_t *tu_fx_new(void (*tweak)(tn_store_opts_t *o));
/* Close what is open, check the loop closes, remove the directory. */
void tu_fx_free(tu_fx_t *fx);
/* Close the store and open it again with fx->opts (recovery runs). */
void tu_fx_reopen(tu_fx_t *fx);

/* A port on 127.0.0.1, below the ephemeral range (so no outgoing
 * connection takes it), free over TCP now (with udp_too, over UDP too:
 * node RPC's QUIC listens on the number of an HTTP port), for a server a
 * test starts later from an address string. Claimed for this process's
 * life among every test process on the machine, unit and cluster tests
 * alike, by a file named after the port in $TMPDIR/tern-test-ports
 * holding the owner's pid (tests/cluster/harness.py's protocol; a file
 * whose pid is gone is stale and removed), created under that
 * directory's lock: so tests run side by side (ctest -j) never get the
 * same port, even one a node comes back to after a stop. The file goes
 * when the process exits. Never the same port twice in one process
 * (unless released). Fails the test when no port is left. */
int tu_free_port(bool udp_too);
/* Claim port as tu_free_port does, whether or not it can be bound:
 * false when a live process (this one included) holds it. */
bool tu_port_claim(int port);
/* Give up this process's claim on port before it exits: its file goes,
 * and any process may claim it. Nothing when this process holds none. */
void tu_port_release(int port);

/* Bytes of a file, or -1. */
long tu_file_size(const char *path);
/* Write bytes at pos of an existing file (for corruption tests). */
void tu_patch_file(const char *path, long pos, const void *data, size_t len);
void tu_truncate_file(const char *path, long len);

#endif
