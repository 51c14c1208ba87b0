/* aio.h — private: asynchronous file reads through io_uring (aio.c), the
 * engine streaming.c uses when QWISP_STREAM_IO allows it.
 *
 * A ring and one thread of ours that owns it: the thread alone submits and
 * reaps, so no other thread ever pays for issuing a read (an O_DIRECT read is
 * issued inside io_uring_enter: the destination pages are pinned, and faulted
 * in and zeroed on first use, on the submitting thread).  Other threads only
 * kick() it (an eventfd the ring polls).  On the ring's thread:
 *   wake(ctx)              after each kick: the caller queues reads with submit()
 *   done(ctx, tag, res)    for each finished read (res = bytes, or -errno); it
 *                          may queue more with submit()
 * and after each callback the queued reads are submitted in one system call.
 * submit() is for those callbacks only.  The caller keeps at most `depth`
 * reads outstanding.
 *
 * Built without liburing (QW_NO_URING), open() fails with a message and the
 * caller falls back to preads. */
#ifndef QWISP_EXPERTS_AIO_H
#define QWISP_EXPERTS_AIO_H

#include <stddef.h>
#include <stdint.h>

typedef struct qw_aio qw_aio;
typedef void (*qw_aio_done_fn)(void *ctx, uint64_t tag, int64_t res);
typedef void (*qw_aio_wake_fn)(void *ctx);

/* NULL with why[] filled when io_uring is unavailable (not built in, or the
 * kernel / a seccomp filter refuses io_uring_setup or a poll on an eventfd). */
qw_aio *qw_aio_open(unsigned depth, qw_aio_done_fn done, qw_aio_wake_fn wake, void *ctx, char *why,
                    size_t why_sz);
/* Any thread: have the ring's thread call wake() soon. */
void qw_aio_kick(qw_aio *a);
/* The ring's thread only (inside wake/done): queues a read of len bytes at
 * off into buf.  0, or -EBUSY when the ring is full. */
int qw_aio_submit(qw_aio *a, int fd, void *buf, size_t len, uint64_t off, uint64_t tag);
/* Stops the ring's thread.  The caller first waits for its reads to finish. */
void qw_aio_close(qw_aio *a);

#endif
