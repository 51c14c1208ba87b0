/* aio.c — io_uring reads for the streaming tier (aio.h).
 *
 * The ring belongs to one thread (reap_main): it arms a multishot poll on an
 * eventfd, then loops — submit what the callbacks queued, wait for a
 * completion, dispatch it: the poll's (a kick: read the eventfd, call wake;
 * re-arm if the kernel ended the multishot) or a read's (call done).  close()
 * sets `stop` and kicks; the thread leaves on that kick.  The caller waits for
 * its reads before close (streaming.c counts them), so no read is in flight
 * when the ring goes away.
 */
#include "aio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef QW_NO_URING

qw_aio *qw_aio_open(unsigned depth, qw_aio_done_fn done, qw_aio_wake_fn wake, void *ctx, char *why,
                    size_t why_sz) {
    (void)depth, (void)done, (void)wake, (void)ctx;
    snprintf(why, why_sz, "qwisp was built without liburing");
    return NULL;
}
void qw_aio_kick(qw_aio *a) { (void)a; }
int qw_aio_submit(qw_aio *a, int fd, void *buf, size_t len, uint64_t off, uint64_t tag) {
    (void)a, (void)fd, (void)buf, (void)len, (void)off, (void)tag;
    return -38; /* ENOSYS */
}
void qw_aio_close(qw_aio *a) { (void)a; }

#else

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define KICK_TAG UINT64_MAX

struct qw_aio {
    struct io_uring ring;
    int efd;
    qw_aio_done_fn done;
    qw_aio_wake_fn wake;
    void *ctx;
    pthread_t thread;
    _Atomic int stop;
};

/* Arms the multishot poll on the eventfd.  0 or -errno. */
static int arm_kick(qw_aio *a) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&a->ring);
    if (!sqe) {
        io_uring_submit(&a->ring);
        sqe = io_uring_get_sqe(&a->ring);
        if (!sqe) return -EBUSY;
    }
    io_uring_prep_poll_multishot(sqe, a->efd, POLLIN);
    io_uring_sqe_set_data64(sqe, KICK_TAG);
    return 0;
}

static void *reap_main(void *arg) {
    qw_aio *a = arg;
    for (;;) {
        io_uring_submit(&a->ring);
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&a->ring, &cqe);
        if (rc == -EINTR) continue;
        if (rc < 0) {
            fprintf(stderr, "qwisp: io_uring_wait_cqe: %s\n", strerror(-rc));
            return NULL;
        }
        const uint64_t tag = io_uring_cqe_get_data64(cqe);
        const int64_t res = cqe->res;
        const unsigned flags = cqe->flags;
        io_uring_cqe_seen(&a->ring, cqe);
        if (tag != KICK_TAG) {
            a->done(a->ctx, tag, res);
            continue;
        }
        uint64_t v;
        const ssize_t got = read(a->efd, &v, sizeof v); /* clears it; EAGAIN if another kick took it */
        (void)got;
        if (!(flags & IORING_CQE_F_MORE)) arm_kick(a);
        if (atomic_load(&a->stop)) return NULL;
        a->wake(a->ctx);
    }
}

qw_aio *qw_aio_open(unsigned depth, qw_aio_done_fn done, qw_aio_wake_fn wake, void *ctx, char *why,
                    size_t why_sz) {
    qw_aio *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(why, why_sz, "out of memory");
        return NULL;
    }
    a->done = done;
    a->wake = wake;
    a->ctx = ctx;
    a->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (a->efd < 0) {
        snprintf(why, why_sz, "eventfd: %s", strerror(errno));
        free(a);
        return NULL;
    }
    /* +2: the poll and slack beside a full window of reads */
    int rc = io_uring_queue_init(depth + 2, &a->ring, 0);
    if (rc < 0) {
        snprintf(why, why_sz, "io_uring_setup refused: %s", strerror(-rc));
        close(a->efd);
        free(a);
        return NULL;
    }
    rc = arm_kick(a);
    if (rc == 0) rc = io_uring_submit(&a->ring) < 0 ? -EIO : 0;
    if (rc == 0) rc = -pthread_create(&a->thread, NULL, reap_main, a);
    if (rc) {
        snprintf(why, why_sz, "cannot start the io_uring thread: %s", strerror(-rc));
        io_uring_queue_exit(&a->ring);
        close(a->efd);
        free(a);
        return NULL;
    }
    return a;
}

void qw_aio_kick(qw_aio *a) {
    const uint64_t one = 1;
    while (write(a->efd, &one, sizeof one) < 0 && errno == EINTR) {
    }
}

int qw_aio_submit(qw_aio *a, int fd, void *buf, size_t len, uint64_t off, uint64_t tag) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&a->ring);
    if (!sqe) return -EBUSY;
    io_uring_prep_read(sqe, fd, buf, (unsigned)len, off);
    io_uring_sqe_set_data64(sqe, tag);
    return 0;
}

void qw_aio_close(qw_aio *a) {
    if (!a) return;
    atomic_store(&a->stop, 1);
    qw_aio_kick(a);
    pthread_join(a->thread, NULL);
    io_uring_queue_exit(&a->ring);
    close(a->efd);
    free(a);
}

#endif
