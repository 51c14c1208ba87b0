/* threadpool.c — persistent workers + dynamic chunking for qw_parallel_for.
 *
 * Design: one job at a time.  The caller publishes a job (fn, ctx, n, grain)
 * and bumps `generation`; workers waiting on the generation wake, and every
 * thread (caller included) claims chunks from `cursor` until the range is
 * exhausted.  The caller returns when `done` (items finished) reaches n.
 *
 * Late joiners are never waited for.  On a machine shared with other work a
 * worker may not even be scheduled during a short decode matmul; the caller
 * then does all the chunks itself and returns without a barrier on that
 * worker.  To make that safe the cursor carries the job's tag (low 24 bits of
 * the generation) above a 40-bit index, and a chunk is claimed only by a CAS
 * that still sees the claimer's tag: a worker that read a stale job's fields
 * fails the CAS and never runs them.  This is a seqlock: the caller closes
 * the cursor (new tag, index = CLOSED) before rewriting the fields and opens
 * it (index 0) after; a worker reads the fields, then an acquire fence, then
 * CASes, so mixed fields imply a tag mismatch.
 *
 * Waiting: a worker spins (with pause) for a short while after each job since
 * the next one usually follows within microseconds during decode; then it
 * yields, and after SPIN_LIMIT polls sleeps on a condition variable.  The
 * caller signals the condvar only if some worker is asleep (counted under the
 * mutex), so the hot path is lock-free.  qw_threadpool_nap() lets the caller
 * say the next job is far off (it is about to block on a disk read): idle
 * workers then sleep at once instead of spinning and yielding through the
 * wait, which on a small machine takes the CPU the reads and page faults need.
 */
#include "qwisp/threadpool.h"

#include "qwisp/base.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Polls before yielding the CPU, and before sleeping.  Yielding matters when
 * the machine is oversubscribed: a spinning thread would otherwise burn the
 * time slice the thread it waits for needs. */
enum { SPIN_BEFORE_YIELD = 2000, SPIN_LIMIT = 200000 };

static inline void relax(int spins) {
    if (spins < SPIN_BEFORE_YIELD) _mm_pause();
    else sched_yield();
}

enum { TAG_SHIFT = 40 };
#define INDEX_MASK ((UINT64_C(1) << TAG_SHIFT) - 1)
#define INDEX_CLOSED INDEX_MASK
#define TAG_MASK ((UINT64_C(1) << 24) - 1)

struct qw_threadpool {
    int n_threads;
    pthread_t *threads;

    /* current job (written by the caller between closing and opening cursor) */
    _Atomic(qw_range_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t n, grain;
    _Atomic uint64_t cursor; /* tag << TAG_SHIFT | next index */
    _Atomic int64_t done;    /* items finished in the current job */

    _Atomic uint64_t generation;
    _Atomic int stop;
    _Atomic int nap; /* set by qw_threadpool_nap, cleared by the next job */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic int n_sleeping; /* changed under mu; peeked by the caller (Dekker with generation, seq_cst) */
};

typedef struct {
    qw_threadpool *tp;
    int ith;
} worker_arg;

/* Claims and runs chunks of the job tagged `tag` (whose fields the caller
 * read as fn/ctx/n/grain) until it is exhausted or replaced. */
static void run_chunks(qw_threadpool *tp, uint64_t tag, qw_range_fn fn, void *ctx, int64_t n,
                       int64_t grain, int ith) {
    atomic_thread_fence(memory_order_acquire);
    uint64_t c = atomic_load_explicit(&tp->cursor, memory_order_acquire);
    for (;;) {
        if ((c >> TAG_SHIFT) != tag) return;
        const int64_t i0 = (int64_t)(c & INDEX_MASK);
        if (i0 >= n) return;
        const int64_t i1 = i0 + grain < n ? i0 + grain : n;
        if (!atomic_compare_exchange_weak_explicit(&tp->cursor, &c, (tag << TAG_SHIFT) | (uint64_t)i1,
                                                   memory_order_acq_rel, memory_order_acquire))
            continue; /* c was reloaded */
        fn(ctx, i0, i1, ith);
        atomic_fetch_add_explicit(&tp->done, i1 - i0, memory_order_release);
        c = atomic_load_explicit(&tp->cursor, memory_order_acquire);
    }
}

static void *worker_main(void *p) {
    worker_arg *wa = p;
    qw_threadpool *tp = wa->tp;
    int ith = wa->ith;
    free(wa);
    uint64_t seen = 0;
    for (;;) {
        int spins = 0;
        uint64_t g;
        while ((g = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&tp->stop, memory_order_relaxed)) return NULL;
            if (++spins < SPIN_LIMIT && !atomic_load_explicit(&tp->nap, memory_order_relaxed)) {
                relax(spins);
                continue;
            }
            pthread_mutex_lock(&tp->mu);
            tp->n_sleeping++;
            while (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv, &tp->mu);
            tp->n_sleeping--;
            pthread_mutex_unlock(&tp->mu);
            spins = 0;
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = g;
        run_chunks(tp, g & TAG_MASK, atomic_load_explicit(&tp->fn, memory_order_relaxed),
                   atomic_load_explicit(&tp->ctx, memory_order_relaxed),
                   atomic_load_explicit(&tp->n, memory_order_relaxed),
                   atomic_load_explicit(&tp->grain, memory_order_relaxed), ith);
    }
}

qw_threadpool *qw_threadpool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    qw_threadpool *tp = qw_xcalloc(1, sizeof *tp);
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    tp->threads = qw_xcalloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = qw_xmalloc(sizeof *wa);
        wa->tp = tp;
        wa->ith = i;
        if (qw_thread_start(&tp->threads[i], worker_main, wa) != 0) {
            free(wa);
            tp->n_threads = i; /* run with what we have */
            break;
        }
    }
    return tp;
}

void qw_threadpool_free(qw_threadpool *tp) {
    if (!tp) return;
    atomic_store(&tp->stop, 1);
    pthread_mutex_lock(&tp->mu);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->threads[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    free(tp->threads);
    free(tp);
}

int qw_threadpool_size(const qw_threadpool *tp) { return tp ? tp->n_threads : 1; }

void qw_threadpool_nap(qw_threadpool *tp) {
    if (tp) atomic_store_explicit(&tp->nap, 1, memory_order_relaxed);
}

void qw_parallel_for(qw_threadpool *tp, int64_t n, int64_t grain, qw_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!tp || tp->n_threads == 1 || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    atomic_store_explicit(&tp->nap, 0, memory_order_relaxed);
    /* Only the caller publishes, so it may read-modify-write the generation. */
    const uint64_t g = atomic_load_explicit(&tp->generation, memory_order_relaxed) + 1;
    const uint64_t tag = g & TAG_MASK;
    atomic_store_explicit(&tp->cursor, (tag << TAG_SHIFT) | INDEX_CLOSED, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&tp->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&tp->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&tp->n, n, memory_order_relaxed);
    atomic_store_explicit(&tp->grain, grain, memory_order_relaxed);
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->cursor, tag << TAG_SHIFT, memory_order_release);
    atomic_store(&tp->generation, g); /* seq_cst: pairs with the sleeper's increment + load */
    if (atomic_load(&tp->n_sleeping) > 0) {
        pthread_mutex_lock(&tp->mu);
        if (tp->n_sleeping > 0) pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
    }
    run_chunks(tp, tag, fn, ctx, n, grain, 0);
    for (int spins = 0; atomic_load_explicit(&tp->done, memory_order_acquire) < n; spins++) relax(spins);
}

int qw_thread_start(pthread_t *t, void *(*fn)(void *), void *arg) {
    pthread_attr_t a;
    if (pthread_attr_init(&a)) return pthread_create(t, NULL, fn, arg);
    size_t have = 0;
    if (pthread_attr_getstacksize(&a, &have) || have < QW_KERNEL_STACK) pthread_attr_setstacksize(&a, QW_KERNEL_STACK);
    const int rc = pthread_create(t, &a, fn, arg);
    pthread_attr_destroy(&a);
    return rc;
}

int qw_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    return 1;
}
