/* Room under the descriptor limit: the marks of each tier, and the probe
 * that finds the lowest free descriptor. */
#include "core/platform.h"

#include "testutil.h"

#include "core/fdroom.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

static struct rlimit saved;

static int set_limit(rlim_t soft)
{
    struct rlimit rl = saved;
    rl.rlim_cur = soft;
    return setrlimit(RLIMIT_NOFILE, &rl);
}

static void test_marks(void **state)
{
    (void)state;
    if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 1024)
        skip(); /* a hard limit this low cannot take the first case */
    /* 1024: a quarter (256), three sixteenths (192) and an eighth (128)
     * kept back. */
    assert_int_equal(set_limit(1024), 0);
    assert_true(tn_fd_room_at(767, TN_FD_CONNS));
    assert_false(tn_fd_room_at(768, TN_FD_CONNS));
    assert_true(tn_fd_room_at(831, TN_FD_PEERS));
    assert_false(tn_fd_room_at(832, TN_FD_PEERS));
    assert_true(tn_fd_room_at(895, TN_FD_CREATE));
    assert_false(tn_fd_room_at(896, TN_FD_CREATE));
    /* 64: at least 16, 12 and 8. */
    assert_int_equal(set_limit(64), 0);
    assert_true(tn_fd_room_at(47, TN_FD_CONNS));
    assert_false(tn_fd_room_at(48, TN_FD_CONNS));
    assert_true(tn_fd_room_at(51, TN_FD_PEERS));
    assert_false(tn_fd_room_at(52, TN_FD_PEERS));
    assert_true(tn_fd_room_at(55, TN_FD_CREATE));
    assert_false(tn_fd_room_at(56, TN_FD_CREATE));
    assert_true(tn_fd_room_at(-1, TN_FD_CREATE)); /* no descriptor: nothing to say */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

static void test_probe(void **state)
{
    (void)state;
    assert_int_equal(set_limit(64), 0);
    assert_true(tn_fd_room(TN_FD_CREATE));
    /* Take every descriptor below the mark: the probe lands on it. */
    int fds[64];
    int n = 0;
    for (;;) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        fds[n++] = fd;
        if (fd >= 55)
            break;
    }
    assert_false(tn_fd_room(TN_FD_CREATE));
    close(fds[--n]);
    assert_true(tn_fd_room(TN_FD_CREATE));
    while (n > 0)
        close(fds[--n]);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

static void test_probe_without_stderr(void **state)
{
    (void)state;
    /* A daemon started with stderr closed (2>&-) still finds its room:
     * the probe does not need descriptor 2 to copy. */
    int saved_err = dup(STDERR_FILENO);
    assert_true(saved_err >= 0);
    close(STDERR_FILENO);
    bool room = tn_fd_room(TN_FD_CREATE);
    assert_int_equal(dup2(saved_err, STDERR_FILENO), STDERR_FILENO);
    close(saved_err);
    assert_true(room);
}

static int setup(void **state)
{
    (void)state;
    return getrlimit(RLIMIT_NOFILE, &saved);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_marks),
        cmocka_unit_test(test_probe),
        cmocka_unit_test(test_probe_without_stderr),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
