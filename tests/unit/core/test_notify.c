/* The sd_notify protocol against real sockets: a datagram socket bound in
 * a temporary directory and one in the abstract namespace stand in for the
 * service manager, and each message must arrive as one datagram with the
 * sender's credentials, as systemd receives it. */
#include "core/platform.h"

#include "testutil.h"

#include "core/err.h"
#include "core/notify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* A manager's socket at name (a path, or "@..." for an abstract name),
 * with SO_PASSCRED on as systemd sets it. */
static int manager_socket(const char *name)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    size_t len = strlen(name);
    assert_true(len < sizeof(sun.sun_path));
    memcpy(sun.sun_path, name, len);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    if (name[0] == '@')
        sun.sun_path[0] = '\0';
    else
        alen++;
    assert_int_equal(bind(fd, (struct sockaddr *)&sun, alen), 0);
    int one = 1;
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)), 0);
    return fd;
}

/* One datagram from fd, NUL-terminated into buf; the sender's pid must be
 * ours (what systemd checks against MAINPID and NotifyAccess=). */
static void receive(int fd, char *buf, size_t len)
{
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(struct ucred))];
    } ctl;
    struct iovec iov = {buf, len - 1};
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = &ctl;
    mh.msg_controllen = sizeof(ctl);
    ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT);
    assert_true(n >= 0);
    buf[n] = '\0';
    assert_int_equal(mh.msg_flags & MSG_TRUNC, 0);
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    assert_non_null(c);
    assert_int_equal(c->cmsg_type, SCM_CREDENTIALS);
    struct ucred cred;
    memcpy(&cred, CMSG_DATA(c), sizeof(cred));
    assert_int_equal(cred.pid, getpid());
}

static void nothing_waiting(int fd)
{
    char b[16];
    assert_true(recv(fd, b, sizeof(b), MSG_DONTWAIT) < 0);
}

static void test_path_socket(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char path[512];
    snprintf(path, sizeof(path), "%s/notify", dir);
    int m = manager_socket(path);
    tn_notify_t n;
    char err[256] = "";
    assert_int_equal(tn_notify_open(&n, path, err, sizeof(err)), 0);
    assert_true(tn_notify_on(&n));
    assert_int_equal(tn_notify_sendf(&n, "READY=1\nMAINPID=%ld\nSTATUS=ready", (long)getpid()), 0);
    char buf[4096];
    receive(m, buf, sizeof(buf));
    char want[128];
    snprintf(want, sizeof(want), "READY=1\nMAINPID=%ld\nSTATUS=ready", (long)getpid());
    assert_string_equal(buf, want);
    assert_int_equal(tn_notify_send(&n, "STOPPING=1"), 0);
    receive(m, buf, sizeof(buf));
    assert_string_equal(buf, "STOPPING=1");
    nothing_waiting(m);
    tn_notify_close(&n);
    assert_false(tn_notify_on(&n));
    assert_int_equal(tn_notify_send(&n, "READY=1"), 0); /* off: a no-op */
    nothing_waiting(m);
    close(m);
    tu_rmrf(dir);
    free(dir);
}

static void test_abstract_socket(void **state)
{
    (void)state;
    char name[64];
    snprintf(name, sizeof(name), "@tern-test-notify-%ld", (long)getpid());
    int m = manager_socket(name);
    tn_notify_t n;
    char err[256] = "";
    assert_int_equal(tn_notify_open(&n, name, err, sizeof(err)), 0);
    assert_int_equal(tn_notify_send(&n, "STATUS=recovering the data directory"), 0);
    char buf[4096];
    receive(m, buf, sizeof(buf));
    assert_string_equal(buf, "STATUS=recovering the data directory");
    tn_notify_close(&n);
    close(m);
}

/* Nobody listening: the send fails with the reason, and nothing breaks. */
static void test_no_listener(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char path[512];
    snprintf(path, sizeof(path), "%s/gone", dir);
    tn_notify_t n;
    char err[256] = "";
    assert_int_equal(tn_notify_open(&n, path, err, sizeof(err)), 0);
    int rc = tn_notify_send(&n, "READY=1");
    assert_true(rc == UV_ENOENT || rc == UV_ECONNREFUSED);
    tn_notify_close(&n);
    tu_rmrf(dir);
    free(dir);
}

static void test_off_and_bad_addresses(void **state)
{
    (void)state;
    tn_notify_t n;
    char err[256] = "";
    assert_int_equal(tn_notify_open(&n, NULL, err, sizeof(err)), 0);
    assert_false(tn_notify_on(&n));
    assert_int_equal(tn_notify_send(&n, "READY=1"), 0);
    assert_int_equal(tn_notify_open(&n, "", err, sizeof(err)), 0);
    assert_false(tn_notify_on(&n));

    assert_int_equal(tn_notify_open(&n, "run/notify", err, sizeof(err)), TN_ECONFIG);
    assert_non_null(strstr(err, "NOTIFY_SOCKET=run/notify: not a socket path"));
    assert_false(tn_notify_on(&n));
    assert_int_equal(tn_notify_open(&n, "vsock:2:1234", err, sizeof(err)), TN_ECONFIG);

    char longest[sizeof(((struct sockaddr_un *)0)->sun_path) + 2];
    memset(longest, 'a', sizeof(longest) - 1);
    longest[sizeof(longest) - 1] = '\0';
    longest[0] = '/';
    assert_int_equal(tn_notify_open(&n, longest, err, sizeof(err)), TN_ECONFIG);
    assert_non_null(strstr(err, "more than a socket address holds"));
    /* An abstract name may use every byte: its '@' is the leading NUL. */
    longest[0] = '@';
    longest[sizeof(longest) - 2] = '\0'; /* 108 bytes with the '@' */
    assert_int_equal(tn_notify_open(&n, longest, err, sizeof(err)), 0);
    tn_notify_close(&n);
    longest[0] = '/';
    assert_int_equal(tn_notify_open(&n, longest, err, sizeof(err)), TN_ECONFIG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_socket),
        cmocka_unit_test(test_abstract_socket),
        cmocka_unit_test(test_no_listener),
        cmocka_unit_test(test_off_and_bad_addresses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
