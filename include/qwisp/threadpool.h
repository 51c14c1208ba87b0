/* threadpool.h — a persistent pool of worker threads for data-parallel loops.
 *
 * Workers are created once and wait between jobs (spinning briefly, then
 * sleeping), so a decode step that runs hundreds of small parallel loops pays
 * no thread creation.  The calling thread takes part in every job.
 *
 *     qw_threadpool *tp = qw_threadpool_new(2);
 *     qw_parallel_for(tp, n_rows, 16, row_fn, &ctx);   // row_fn(ctx, i0, i1, ith)
 *     qw_threadpool_free(tp);
 */
#ifndef QWISP_THREADPOOL_H
#define QWISP_THREADPOOL_H

#include <pthread.h>
#include <stdint.h>

typedef struct qw_threadpool qw_threadpool;

/* fn processes items [i0, i1); ith is the executing thread's index (0 = caller). */
typedef void (*qw_range_fn)(void *ctx, int64_t i0, int64_t i1, int ith);

/* n_threads >= 1 (1 = run everything on the caller). */
qw_threadpool *qw_threadpool_new(int n_threads);
void qw_threadpool_free(qw_threadpool *tp);
int qw_threadpool_size(const qw_threadpool *tp);
/* Hint: the caller will not publish a job for a while (it blocks on I/O);
 * idle workers sleep now rather than spin.  The next job wakes them. */
void qw_threadpool_nap(qw_threadpool *tp);

/* Runs fn over [0, n) in chunks of `grain` items handed out dynamically;
 * returns when all items are done.  tp may be NULL (serial). */
void qw_parallel_for(qw_threadpool *tp, int64_t n, int64_t grain, qw_range_fn fn, void *ctx);

/* Number of CPUs this process may run on (sched_getaffinity). */
int qw_cpu_count(void);

/* A thread that runs kernels (pool workers, the serve workers that drive a
 * forward pass): pthread_create with a stack of at least QW_KERNEL_STACK
 * bytes, whatever RLIMIT_STACK makes the default — the AMX K-quant tiles
 * keep ~1 MiB of weight and token layouts on the stack at k = 8192, and a
 * small `ulimit -s` (or an unlimited one, where glibc picks 2 MiB) must not
 * overflow it.  Untouched stack pages cost no memory.  0, or pthread_create's error. */
enum { QW_KERNEL_STACK = 8 << 20 };
int qw_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

#endif
