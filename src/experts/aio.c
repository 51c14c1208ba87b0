/* aio.c — io_uring reads for the streaming tier (aio.h).
 *
 * One ring, submissions from the caller's thread (serialised by the caller),
 * completions reaped by one thread of ours that hands each to the caller's
 * done() callback.  A NOP with a reserved tag tells the thread to stop; close
 * waits for it, so every read submitted before close has completed and been
 * reported when close returns.  The ring's SQ is touched only by submitters
 * and its CQ only by the completion thread, which liburing allows without a
 * lock between the two sides.
 */
#include "aio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef QW_NO_URING

qw_aio *qw_aio_open(unsigned depth, qw_aio_done_fn done, void *ctx, char *why, size_t why_sz) {
    (void)depth, (void)done, (void)ctx;
    snprintf(why, why_sz, "qwisp was built without liburing");
    return NULL;
}
int qw_aio_submit(qw_aio *a, int fd, void *buf, size_t len, uint64_t off, uint64_t tag) {
    (void)a, (void)fd, (void)buf, (void)len, (void)off, (void)tag;
    return -38; /* ENOSYS */
}
void qw_aio_close(qw_aio *a) { (void)a; }

#else

#include <errno.h>
#include <liburing.h>
#include <pthread.h>

#define STOP_TAG UINT64_MAX

struct qw_aio {
    struct io_uring ring;
    qw_aio_done_fn done;
    void *ctx;
    pthread_t thread;
    pthread_mutex_t sq_mu; /* close's NOP vs. the caller's submits */
};

static void *reap_main(void *arg) {
    qw_aio *a = arg;
    for (;;) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&a->ring, &cqe);
        if (rc == -EINTR) continue;
        if (rc < 0) {
            /* cannot happen with a live ring; report nothing more rather than spin */
            fprintf(stderr, "qwisp: io_uring_wait_cqe: %s\n", strerror(-rc));
            return NULL;
        }
        const uint64_t tag = io_uring_cqe_get_data64(cqe);
        const int64_t res = cqe->res;
        io_uring_cqe_seen(&a->ring, cqe);
        if (tag == STOP_TAG) return NULL;
        a->done(a->ctx, tag, res);
    }
}

qw_aio *qw_aio_open(unsigned depth, qw_aio_done_fn done, void *ctx, char *why, size_t why_sz) {
    qw_aio *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(why, why_sz, "out of memory");
        return NULL;
    }
    a->done = done;
    a->ctx = ctx;
    /* +1: room for the stop NOP beside a full window of reads */
    int rc = io_uring_queue_init(depth + 1, &a->ring, 0);
    if (rc < 0) {
        snprintf(why, why_sz, "io_uring_setup refused: %s", strerror(-rc));
        free(a);
        return NULL;
    }
    pthread_mutex_init(&a->sq_mu, NULL);
    rc = pthread_create(&a->thread, NULL, reap_main, a);
    if (rc) {
        snprintf(why, why_sz, "cannot start the io_uring completion thread: %s", strerror(rc));
        io_uring_queue_exit(&a->ring);
        pthread_mutex_destroy(&a->sq_mu);
        free(a);
        return NULL;
    }
    return a;
}

int qw_aio_submit(qw_aio *a, int fd, void *buf, size_t len, uint64_t off, uint64_t tag) {
    pthread_mutex_lock(&a->sq_mu);
    struct io_uring_sqe *sqe = io_uring_get_sqe(&a->ring);
    if (!sqe) {
        pthread_mutex_unlock(&a->sq_mu);
        return -EBUSY;
    }
    io_uring_prep_read(sqe, fd, buf, (unsigned)len, off);
    io_uring_sqe_set_data64(sqe, tag);
    int rc;
    do rc = io_uring_submit(&a->ring);
    while (rc == -EINTR);
    pthread_mutex_unlock(&a->sq_mu);
    return rc < 0 ? rc : 0;
}

void qw_aio_close(qw_aio *a) {
    if (!a) return;
    pthread_mutex_lock(&a->sq_mu);
    struct io_uring_sqe *sqe = io_uring_get_sqe(&a->ring);
    if (!sqe) { /* cannot happen: one entry is kept for this */
        io_uring_submit(&a->ring);
        sqe = io_uring_get_sqe(&a->ring);
    }
    io_uring_prep_nop(sqe);
    /* drain: the NOP completes after every read submitted before it */
    io_uring_sqe_set_flags(sqe, IOSQE_IO_DRAIN);
    io_uring_sqe_set_data64(sqe, STOP_TAG);
    io_uring_submit(&a->ring);
    pthread_mutex_unlock(&a->sq_mu);
    pthread_join(a->thread, NULL);
    io_uring_queue_exit(&a->ring);
    pthread_mutex_destroy(&a->sq_mu);
    free(a);
}

#endif
