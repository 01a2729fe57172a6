/* Sending a connection's output (proto/stream.h): at once when the socket
 * takes it, the rest queued from the held buffer, errors handed back; what
 * the peer has not taken yet. */
#include "core/platform.h"

#include "testutil.h"

#include "proto/stream.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    uv_loop_t loop;
    uv_pipe_t w; /* the sending end */
    uv_pipe_t r; /* the peer, reading everything into got */
    tn_buf_t got;
    tn_buf_t out, held; /* the sender's buffers */
    uv_write_t req;
    int written; /* write callbacks seen */
    int status;
} sfx_t;

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)h;
    static char chunk[65536];
    (void)hint;
    *b = uv_buf_init(chunk, sizeof(chunk));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    sfx_t *f = s->data;
    if (n > 0)
        assert_int_equal(tn_buf_append(&f->got, b->base, (size_t)n), 0);
}

static void on_written(uv_write_t *req, int status)
{
    sfx_t *f = req->data;
    f->written++;
    f->status = status;
}

static void sfx_init(sfx_t *f)
{
    memset(f, 0, sizeof(*f));
    int fds[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(uv_pipe_init(&f->loop, &f->w, 0), 0);
    assert_int_equal(uv_pipe_open(&f->w, fds[0]), 0);
    assert_int_equal(uv_pipe_init(&f->loop, &f->r, 0), 0);
    assert_int_equal(uv_pipe_open(&f->r, fds[1]), 0);
    f->r.data = f;
    tn_buf_init(&f->got);
    tn_buf_init(&f->out);
    tn_buf_init(&f->held);
    f->req.data = f;
}

static int send_out(sfx_t *f)
{
    return tn_stream_send((uv_stream_t *)&f->w, &f->out, &f->held, &f->req, on_written);
}

static void sfx_fini(sfx_t *f)
{
    if (!uv_is_closing((uv_handle_t *)&f->w))
        uv_close((uv_handle_t *)&f->w, NULL);
    if (!uv_is_closing((uv_handle_t *)&f->r))
        uv_close((uv_handle_t *)&f->r, NULL);
    tu_loop_fini(&f->loop);
    tn_buf_fini(&f->got);
    tn_buf_fini(&f->out);
    tn_buf_fini(&f->held);
}

static void test_small_output_goes_at_once(void **state)
{
    (void)state;
    sfx_t f;
    sfx_init(&f);
    assert_int_equal(tn_buf_append(&f.out, "OK frame", 8), 0);
    assert_int_equal(send_out(&f), 0);
    assert_int_equal(tn_buf_size(&f.out), 0);
    assert_int_equal(tn_buf_size(&f.held), 0);
    /* Nothing to send: nothing done. */
    assert_int_equal(send_out(&f), 0);
    assert_int_equal(uv_read_start((uv_stream_t *)&f.r, on_alloc, on_read), 0);
    while (tn_buf_size(&f.got) < 8)
        uv_run(&f.loop, UV_RUN_ONCE);
    assert_memory_equal(tn_buf_data(&f.got), "OK frame", 8);
    assert_int_equal(f.written, 0);
    sfx_fini(&f);
}

/* More than the socket buffers hold: the rest is queued from held, out is
 * free for new output at once, and every byte arrives in order. */
static void test_large_output_is_queued_in_order(void **state)
{
    (void)state;
    sfx_t f;
    sfx_init(&f);
    enum { SIZE = 8 * 1024 * 1024 };
    char *data = malloc(SIZE);
    assert_non_null(data);
    for (size_t i = 0; i < SIZE; i++)
        data[i] = (char)('a' + (i * 7) % 26);
    assert_int_equal(tn_buf_append(&f.out, data, SIZE), 0);
    assert_int_equal(send_out(&f), 1);
    assert_int_equal(tn_buf_size(&f.out), 0);
    assert_true(tn_buf_size(&f.held) > 0 && tn_buf_size(&f.held) < SIZE);
    assert_int_equal(tn_buf_append(&f.out, "next", 4), 0); /* out takes new output meanwhile */
    assert_int_equal(uv_read_start((uv_stream_t *)&f.r, on_alloc, on_read), 0);
    while (f.written == 0)
        uv_run(&f.loop, UV_RUN_ONCE);
    assert_int_equal(f.status, 0);
    tn_buf_reset(&f.held); /* as a caller's write callback does */
    assert_int_equal(send_out(&f), 0);
    while (tn_buf_size(&f.got) < SIZE + 4)
        uv_run(&f.loop, UV_RUN_ONCE);
    assert_memory_equal(tn_buf_data(&f.got), data, SIZE);
    assert_memory_equal((char *)tn_buf_data(&f.got) + SIZE, "next", 4);
    free(data);
    sfx_fini(&f);
}

/* What the peer has not taken yet (tn_stream_unacked): libuv's queue and
 * the kernel's; it falls as the peer reads, while the one write is still
 * queued (an idle timeout tells a slow reader by it), and ends at 0. */
static void test_unacked_falls_as_the_peer_reads(void **state)
{
    (void)state;
    sfx_t f;
    sfx_init(&f);
    enum { SIZE = 8 * 1024 * 1024 };
    char *data = calloc(1, SIZE);
    assert_non_null(data);
    assert_int_equal(tn_buf_append(&f.out, data, SIZE), 0);
    assert_int_equal(send_out(&f), 1);
    size_t before = tn_stream_unacked((uv_stream_t *)&f.w);
    assert_true(before > tn_buf_size(&f.held)); /* the kernel holds some too */
    uv_os_fd_t fd;
    assert_int_equal(uv_fileno((uv_handle_t *)&f.r, &fd), 0);
    ssize_t n = read(fd, data, 65536);
    assert_true(n > 0);
    assert_true(tn_stream_unacked((uv_stream_t *)&f.w) < before);
    assert_int_equal(f.written, 0); /* the write is still queued */
    assert_int_equal(uv_read_start((uv_stream_t *)&f.r, on_alloc, on_read), 0);
    while (tn_buf_size(&f.got) < SIZE - (size_t)n)
        uv_run(&f.loop, UV_RUN_ONCE);
    assert_int_equal(f.written, 1);
    assert_int_equal(tn_stream_unacked((uv_stream_t *)&f.w), 0);
    free(data);
    sfx_fini(&f);
}

static void test_peer_gone_is_an_error(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    sfx_t f;
    sfx_init(&f);
    uv_close((uv_handle_t *)&f.r, NULL);
    uv_run(&f.loop, UV_RUN_NOWAIT);
    assert_int_equal(tn_buf_append(&f.out, "lost", 4), 0);
    assert_int_equal(send_out(&f), UV_EPIPE);
    sfx_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_output_goes_at_once),
        cmocka_unit_test(test_large_output_is_queued_in_order),
        cmocka_unit_test(test_unacked_falls_as_the_peer_reads),
        cmocka_unit_test(test_peer_gone_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
