/* The power-loss hook of ternd-powerloss, the ternd the replication suite
 * powers off (tests/cluster/test_replication.py, case 7b). It is ternd
 * built against the TN_TEST libraries plus this file, whose constructor
 * runs before ternd's main:
 *
 *   - it finds --data-path=DIR on the command line and, when DIR/topics
 *     exists, starts the storage shim's power-loss simulator on it
 *     (src/storage/io.h: what is there now counts as durable, and every
 *     later write, truncate and namespace change under it is remembered
 *     until an fdatasync/fsync covers it);
 *   - it blocks SIGUSR2 in the main thread (so in every thread ternd makes
 *     later) and starts a thread that waits for it with sigwait. On SIGUSR2
 *     that thread cuts the power (every later storage operation fails with
 *     EIO, so nothing after the cut reaches the files), rewrites DIR/topics
 *     into a state a machine could be in after the cut (writes no sync
 *     covered dropped, kept or torn), and ends the process at once with
 *     _exit(137), as SIGKILL would.
 *
 * Only DIR/topics is simulated: the metastore (libraft, DIR/meta) does its
 * own I/O outside the shim, and the simulator rewrites its whole root. The
 * test makes DIR/topics (and FORMAT) before the first start, so a node is
 * simulated from its first write on.
 *
 * DESIGN: a constructor and a sigwait thread keep ternd's own code
 * unchanged; the cut happens on that thread while ternd's threads go on,
 * which the simulator allows (it serialises on its own mutex, and every
 * operation after the cut fails without touching a file). */
#include "core/platform.h"

#include "storage/io.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char tn_pl_root[4096];

static void *tn_pl_wait(void *arg)
{
    sigset_t *set = arg;
    int sig = 0;
    while (sigwait(set, &sig) != 0 || sig != SIGUSR2) {
    }
    tn_io_sim_cut();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
    int rc = tn_io_sim_powerloss(seed);
    fprintf(stderr, "powerloss hook: power cut, %s rewritten (seed %llu, status %d)\n", tn_pl_root,
            (unsigned long long)seed, rc);
    _exit(137);
    return NULL;
}

__attribute__((constructor)) static void tn_pl_init(void)
{
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (f == NULL)
        return;
    static char cmd[65536];
    size_t n = fread(cmd, 1, sizeof(cmd) - 1, f);
    fclose(f);
    cmd[n] = '\0';
    const char *data = NULL;
    for (size_t i = 0; i < n; i += strlen(cmd + i) + 1) {
        if (strncmp(cmd + i, "--data-path=", 12) == 0)
            data = cmd + i + 12;
    }
    if (data == NULL)
        return;
    snprintf(tn_pl_root, sizeof(tn_pl_root), "%s/topics", data);
    struct stat st;
    if (stat(tn_pl_root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "powerloss hook: no %s, not simulating\n", tn_pl_root);
        return;
    }
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    tn_io_sim_start(tn_pl_root);
    pthread_t t;
    if (pthread_create(&t, NULL, tn_pl_wait, &set) != 0)
        abort();
    pthread_detach(t);
    fprintf(stderr, "powerloss hook: simulating power loss under %s (SIGUSR2 cuts)\n", tn_pl_root);
}
