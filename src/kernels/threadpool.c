/* threadpool.c — persistent workers + dynamic chunking for qw_parallel_for.
 *
 * Design: one job at a time.  The caller publishes a job (fn, ctx, n, grain)
 * and bumps `generation`; workers waiting on the generation wake, and every
 * thread (caller included) grabs chunks from an atomic cursor until the range
 * is exhausted, then decrements `active`.  The caller returns when active == 0.
 *
 * Waiting: a worker spins (with pause) for a short while after each job since
 * the next one usually follows within microseconds during decode; after
 * SPIN_LIMIT polls it sleeps on a condition variable.  The caller signals the
 * condvar only if some worker is asleep (counted under the mutex), so the hot
 * path is lock-free.
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

struct qw_threadpool {
    int n_threads;
    pthread_t *threads;

    /* current job */
    qw_range_fn fn;
    void *ctx;
    int64_t n, grain;
    _Atomic int64_t cursor;
    _Atomic int active; /* threads still working on the current job */

    _Atomic uint64_t generation;
    _Atomic int stop;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_sleeping; /* guarded by mu */
};

typedef struct {
    qw_threadpool *tp;
    int ith;
} worker_arg;

static void run_chunks(qw_threadpool *tp, int ith) {
    for (;;) {
        int64_t i0 = atomic_fetch_add_explicit(&tp->cursor, tp->grain, memory_order_relaxed);
        if (i0 >= tp->n) break;
        int64_t i1 = i0 + tp->grain < tp->n ? i0 + tp->grain : tp->n;
        tp->fn(tp->ctx, i0, i1, ith);
    }
    atomic_fetch_sub_explicit(&tp->active, 1, memory_order_release);
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
            if (++spins < SPIN_LIMIT) {
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
        run_chunks(tp, ith);
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
        if (pthread_create(&tp->threads[i], NULL, worker_main, wa) != 0) {
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

void qw_parallel_for(qw_threadpool *tp, int64_t n, int64_t grain, qw_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!tp || tp->n_threads == 1 || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n = n;
    tp->grain = grain;
    atomic_store_explicit(&tp->cursor, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->active, tp->n_threads, memory_order_relaxed);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
    pthread_mutex_lock(&tp->mu);
    if (tp->n_sleeping > 0) pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    run_chunks(tp, 0);
    for (int spins = 0; atomic_load_explicit(&tp->active, memory_order_acquire) > 0; spins++) relax(spins);
}

int qw_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    return 1;
}
