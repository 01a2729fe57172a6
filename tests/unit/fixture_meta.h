/* What the unit tests over a real metastore share (tests/unit/api:
 * test_catalog.c, test_forward.c; tests/unit/cluster: test_router.c,
 * and for the engine helpers alone test_pstats.c and test_dataplane.c;
 * for the state machine's commands alone tests/unit/meta: test_state.c,
 * test_state_repl.c, test_restore.c; for a partition state alone
 * tests/unit/cluster/test_setrepl.c):
 * running the loop until a condition holds, the engine options of a test
 * broker and the engine steps they wait for (a topic, a publish, the
 * close), a lone metastore replica (libraft on loopback) opened and
 * ready, committing commands through it, and closing it. Built once into the
 * tern_unit_fixtures library that every unit test links (see
 * CMakeLists.txt). Every helper fails the current test (cmocka) instead
 * of returning an error. */
#ifndef TN_TESTS_FIXTURE_META_H
#define TN_TESTS_FIXTURE_META_H

#include "core/platform.h"

#include "testutil.h"

#include "meta/meta.h"
#include "queue/queue.h"

/* Run loop (a 5 ms tick keeps turns short) until cond(arg), at most about
 * 20 s; returns cond. */
bool tu_run_loop(uv_loop_t *loop, bool (*cond)(void *), void *arg);
/* cond for tu_run_loop: *(bool *)arg. */
bool tu_is_true(void *arg);

/* A test broker's options: one partition a topic by default, a 1 MiB tail
 * cache, budgets no test reaches, no GC during a test. */
void tu_broker_opts(tn_broker_opts_t *o);

/* b's topic name (borrowed), created with nparts partitions (0: the
 * default) when missing, running loop while its creation is under way. */
tn_topic_t *tu_broker_topic(uv_loop_t *loop, tn_broker_t *b, const char *name, uint32_t nparts);

/* Publish n copies of (body, len), both borrowed, to partition p of topic
 * on b, durably, running loop until they are acknowledged. */
void tu_broker_publish(uv_loop_t *loop, tn_broker_t *b, const char *topic, uint32_t p,
                       const void *body, size_t len, uint32_t n);

/* Close b and run loop until it is closed. */
void tu_broker_close(uv_loop_t *loop, tn_broker_t *b);

/* Open a lone metastore replica, node 1, in dir (borrowed for the call),
 * naming api_addr (NULL: none) as its API address, and run loop until it
 * is ready with its own member record in. */
tn_meta_t *tu_meta_lone(uv_loop_t *loop, const char *dir, const char *api_addr);

/* Close m and run loop until it is closed. */
void tu_meta_close(uv_loop_t *loop, tn_meta_t *m);

/* Commit c (borrowed) through m, as another node's proposal forwarded to
 * it would be; the test fails unless it commits. */
void tu_meta_commit(uv_loop_t *loop, tn_meta_t *m, const tn_meta_cmd_t *c);
/* A TOPIC_READY of name's record made at at (meta/cmd.h). */
tn_meta_cmd_t tu_meta_ready_cmd(const char *name, int64_t at);
/* Propose c through m and run loop until it is answered: its answer (the
 * apply's status once committed). */
int tu_meta_propose_wait(uv_loop_t *loop, tn_meta_t *m, const tn_meta_cmd_t *c);

/* A TOPIC_PUT of name with partitions and the tests' settings (30 s
 * visibility, 1024 in flight and acked ahead, created now). */
tn_meta_cmd_t tu_meta_topic_cmd(const char *name, uint32_t partitions);

/* A MEMBER_REG of node id with api_addr (borrowed for the call) as its
 * API address, 127.0.0.1:1 as its metastore address and now as its
 * heartbeat. */
tn_meta_cmd_t tu_meta_member_cmd(uint64_t id, const char *api_addr);

/* The commands of the tests that apply them to the state machine directly
 * (tests/unit/meta: test_state.c, test_state_repl.c, test_restore.c), with
 * fixed values throughout so that their encodings repeat. */

/* A TOPIC_PUT of name, if absent, with partitions, 1 h retention, 30 s
 * visibility, 1024 in flight and acked ahead, created at 1700000000000 ms;
 * not native, no replication fields. */
tn_meta_cmd_t tu_meta_state_topic_cmd(const char *name, uint32_t partitions);

/* tu_meta_state_topic_cmd's topic made native, with replication factor and
 * min_insync as given. */
tn_meta_cmd_t tu_meta_native_topic_cmd(const char *name, uint32_t partitions, uint8_t factor,
                                       uint8_t min_insync);

/* r initialised and restored from a snapshot of s (what a replica that
 * installs s's snapshot holds); the test fails unless both succeed. r is
 * the caller's to tn_meta_state_fini. */
void tu_meta_state_reload(const tn_meta_state_t *s, tn_meta_state_t *r);

/* A MEMBER_REC of node id: 10.0.0.<id>:4153 its metastore address,
 * 10.0.0.<id>:4151 its API address, heartbeat 1000, incarnation and boot
 * as given, no NSQ door. */
tn_meta_cmd_t tu_meta_rec_cmd(uint64_t id, uint64_t incarnation, uint64_t boot);

/* A partition state of three replicas, r0 r1 r2 in that order (r0
 * preferred), led by leader in leader_epoch, min_insync 2; everything else
 * zero (no ISR, partition epoch 0). */
tn_pstate_t tu_pstate3(uint32_t r0, uint32_t r1, uint32_t r2, uint32_t leader,
                       uint32_t leader_epoch);

#endif
