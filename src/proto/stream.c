/* Sending a connection's output. See stream.h. */
#include "core/platform.h"

#include "proto/stream.h"

#ifdef __linux__
#include <linux/sockios.h>
#include <sys/ioctl.h>
#endif

int tn_stream_send(uv_stream_t *s, tn_buf_t *out, tn_buf_t *held, uv_write_t *req, uv_write_cb cb)
{
    if (tn_buf_size(out) == 0)
        return 0;
    uv_buf_t b = uv_buf_init(tn_buf_data(out), (unsigned)tn_buf_size(out));
    int n = uv_try_write(s, &b, 1);
    if (n > 0)
        tn_buf_consume(out, (size_t)n);
    else if (n != UV_EAGAIN)
        return n;
    if (tn_buf_size(out) == 0)
        return 0;
    /* The rest goes from held, so that out can take new output meanwhile. */
    tn_buf_t t = *held;
    *held = *out;
    *out = t;
    tn_buf_reset(out);
    b = uv_buf_init(tn_buf_data(held), (unsigned)tn_buf_size(held));
    int rc = uv_write(req, s, &b, 1, cb);
    return rc != 0 ? rc : 1;
}

size_t tn_stream_unacked(const uv_stream_t *s)
{
    size_t n = uv_stream_get_write_queue_size(s);
#ifdef __linux__
    uv_os_fd_t fd;
    int outq = 0;
    if (uv_fileno((const uv_handle_t *)s, &fd) == 0 && ioctl(fd, SIOCOUTQ, &outq) == 0 && outq > 0)
        n += (size_t)outq;
#endif
    return n;
}
