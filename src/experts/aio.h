/* aio.h — private: asynchronous file reads through io_uring (aio.c), the
 * engine streaming.c uses when QWISP_STREAM_IO allows it.
 *
 * A ring of `depth` entries and one completion thread.  submit() queues a
 * read and returns at once; the completion thread calls done(ctx, tag, res)
 * for each finished read (res = bytes read, or -errno), outside any lock of
 * aio's.  submit() may be called from several threads only when the caller
 * serialises them (streaming.c holds its mutex), including from inside
 * done().  The caller keeps at most `depth` reads outstanding.
 *
 * Built without liburing (QW_NO_URING), open() fails with a message and the
 * caller falls back to preads. */
#ifndef QWISP_EXPERTS_AIO_H
#define QWISP_EXPERTS_AIO_H

#include <stddef.h>
#include <stdint.h>

typedef struct qw_aio qw_aio;
typedef void (*qw_aio_done_fn)(void *ctx, uint64_t tag, int64_t res);

/* NULL with why[] filled when io_uring is unavailable (not built in, or the
 * kernel / a seccomp filter refuses io_uring_setup). */
qw_aio *qw_aio_open(unsigned depth, qw_aio_done_fn done, void *ctx, char *why, size_t why_sz);
/* Queues a read of len bytes at off into buf.  0, or -errno (ring full). */
int qw_aio_submit(qw_aio *a, int fd, void *buf, size_t len, uint64_t off, uint64_t tag);
/* Stops the completion thread after every submitted read has completed. */
void qw_aio_close(qw_aio *a);

#endif
