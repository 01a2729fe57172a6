/* The free-port claims of tu_free_port (tests/unit/testutil.c), the
 * protocol tests/cluster/harness.py shares: claimers running at once never
 * get the same port, and a claim's file goes when its process exits (or
 * at the next process's sweep when it died without exiting).
 *
 * Run as `test_ports claim N`, the binary claims N ports, prints them one
 * a line, and holds them until its standard input closes:
 * tests/cluster/test_ports.py runs it beside the harness's claimers. */
#include "core/platform.h"

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILDREN  4
#define PER_CHILD 20

/* The pid in port's claim file, 0 when it has none, -1 when there is no
 * file. */
static long claim_pid(int port)
{
    const char *tmp = getenv("TMPDIR");
    char path[4200], buf[32] = "";
    snprintf(path, sizeof(path), "%s/tern-test-ports/%d", tmp && *tmp ? tmp : "/tmp", port);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        assert_int_equal(errno, ENOENT);
        return -1;
    }
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return atol(buf);
}

static void read_all(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        assert_true(n > 0);
        got += (size_t)n;
    }
}

/* Claim n ports in a child; the child writes them to out, then, when
 * hold is a pipe, waits for its write end to close in every other
 * process before it leaves by exit (quick: by _exit, skipping what exit
 * runs). */
static pid_t claimer(int n, int out, const int *hold, bool quick)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid > 0)
        return pid;
    if (hold != NULL)
        close(hold[1]);
    int ports[PER_CHILD];
    for (int i = 0; i < n; i++)
        ports[i] = tu_free_port(i % 2 == 0);
    if (write(out, ports, sizeof(int) * (size_t)n) != (ssize_t)(sizeof(int) * (size_t)n))
        _exit(2);
    char c;
    while (hold != NULL && read(hold[0], &c, 1) != 0)
        ;
    if (quick)
        _exit(0);
    exit(0);
}

static void reap(pid_t pid)
{
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* A claimer of PER_CHILD ports, into ports, that has left (quick: by
 * _exit); its pid. */
static pid_t claimed_and_gone(int *ports, bool quick)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = claimer(PER_CHILD, p[1], NULL, quick);
    read_all(p[0], ports, sizeof(int) * PER_CHILD);
    reap(pid);
    close(p[0]);
    close(p[1]);
    return pid;
}

/* A claim's file names its claimer, and goes when the claimer exits: no
 * file of it is left, though another process may have claimed the port
 * since. */
static void test_exit_removes_the_claims(void **state)
{
    (void)state;
    int ports[PER_CHILD];
    pid_t pid = claimed_and_gone(ports, false);
    for (int i = 0; i < PER_CHILD; i++)
        if (claim_pid(ports[i]) == (long)pid)
            fail_msg("port %d: its file still names claimer %ld, which exited", ports[i],
                     (long)pid);
}

/* Claimers running at once never share a port, whatever order their
 * claims interleave in; every one holds its ports until all have
 * claimed. */
static void test_claimers_at_once_never_share(void **state)
{
    (void)state;
    int out[2], hold[2];
    assert_int_equal(pipe(out), 0);
    assert_int_equal(pipe(hold), 0);
    pid_t pids[CHILDREN];
    for (int c = 0; c < CHILDREN; c++)
        pids[c] = claimer(PER_CHILD, out[1], hold, false);
    close(hold[0]);
    int ports[CHILDREN * PER_CHILD];
    for (int c = 0; c < CHILDREN; c++)
        read_all(out[0], ports + c * PER_CHILD, sizeof(int) * PER_CHILD);
    /* Judged before the claimers go (the files name them), failed after
     * (a failure here must not leave them waiting). */
    char why[128] = "";
    for (int i = 0; i < CHILDREN * PER_CHILD && why[0] == '\0'; i++) {
        long owner = claim_pid(ports[i]);
        bool ours = false;
        for (int c = 0; c < CHILDREN; c++)
            ours = ours || owner == (long)pids[c];
        if (!ours)
            snprintf(why, sizeof(why), "port %d: its file names %ld, none of the claimers",
                     ports[i], owner);
        for (int j = 0; j < i; j++)
            if (ports[j] == ports[i])
                snprintf(why, sizeof(why), "port %d handed to two live claimers", ports[i]);
    }
    close(hold[1]); /* they exit */
    for (int c = 0; c < CHILDREN; c++)
        reap(pids[c]);
    if (why[0] != '\0')
        fail_msg("%s", why);
    for (int i = 0; i < CHILDREN * PER_CHILD; i++)
        for (int c = 0; c < CHILDREN; c++)
            if (claim_pid(ports[i]) == (long)pids[c])
                fail_msg("port %d: its file still names claimer %ld, which exited", ports[i],
                         (long)pids[c]);
    close(out[0]);
    close(out[1]);
}

/* A claimer that dies without exiting leaves its files; the next process
 * to claim removes them (their pid is gone). */
static void test_dead_claimers_files_are_swept(void **state)
{
    (void)state;
    int ports[PER_CHILD], next[PER_CHILD];
    pid_t pid = claimed_and_gone(ports, true);
    assert_int_equal(claim_pid(ports[0]), (long)pid); /* left behind */
    claimed_and_gone(next, false);
    for (int i = 0; i < PER_CHILD; i++)
        if (claim_pid(ports[i]) == (long)pid)
            fail_msg("port %d: the dead claimer's file is left after the next claim", ports[i]);
}

/* A port released is free again, its file gone; one held is never handed
 * out twice. */
static void test_release(void **state)
{
    (void)state;
    int port = tu_free_port(false);
    assert_int_equal(claim_pid(port), (long)getpid());
    assert_false(tu_port_claim(port)); /* held: by this process */
    tu_port_release(port);
    assert_int_equal(claim_pid(port), -1);
    tu_port_release(port);     /* twice: nothing */
    if (tu_port_claim(port)) { /* unless another process took it meanwhile */
        assert_int_equal(claim_pid(port), (long)getpid());
        tu_port_release(port);
    }
}

/* `claim N`: claim N ports, print them, hold them until stdin closes. */
static int claim_main(int n)
{
    for (int i = 0; i < n; i++)
        printf("%d\n", tu_free_port(true));
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof(buf)) > 0)
        ;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "claim") == 0)
        return claim_main(atoi(argv[2]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_removes_the_claims),
        cmocka_unit_test(test_claimers_at_once_never_share),
        cmocka_unit_test(test_dead_claimers_files_are_swept),
        cmocka_unit_test(test_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
