/* test_threadpool.c — qw_parallel_for runs every item exactly once, passes a
 * thread index below the pool size, and survives many back-to-back jobs of
 * every size (the decode pattern), including pools larger than the machine
 * (workers that join late or never must not be waited for nor run stale
 * jobs); a kernel thread gets its 8 MiB stack whatever the default. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>
#include <pthread.h>

#include "qwisp/threadpool.h"

typedef struct {
    _Atomic int *hits;
    int n_threads;
    _Atomic int bad_ith;
    int job; /* which job this context belongs to: items record it */
    _Atomic int *owner;
} count_ctx;

static void count_fn(void *p, int64_t i0, int64_t i1, int ith) {
    count_ctx *c = p;
    if (ith < 0 || ith >= c->n_threads) atomic_fetch_add(&c->bad_ith, 1);
    for (int64_t i = i0; i < i1; i++) {
        atomic_fetch_add(&c->hits[i], 1);
        atomic_store(&c->owner[i], c->job);
    }
}

static void run_pool(int n_threads) {
    enum { N_MAX = 4096, JOBS = 3000 };
    qw_threadpool *tp = qw_threadpool_new(n_threads);
    assert_int_equal(qw_threadpool_size(tp), n_threads);
    _Atomic int *hits = calloc(N_MAX, sizeof *hits);
    _Atomic int *owner = calloc(N_MAX, sizeof *owner);
    uint32_t rng = 12345;
    for (int job = 1; job <= JOBS; job++) {
        rng = rng * 1664525u + 1013904223u;
        const int64_t n = 1 + (rng >> 8) % (job % 10 == 0 ? N_MAX : 64);
        const int64_t grain = 1 + (rng >> 20) % 8;
        for (int64_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
        count_ctx c = {.hits = hits, .n_threads = n_threads, .job = job, .owner = owner};
        qw_parallel_for(tp, n, grain, count_fn, &c);
        for (int64_t i = 0; i < n; i++) {
            assert_int_equal(atomic_load(&hits[i]), 1);
            assert_int_equal(atomic_load(&owner[i]), job);
        }
        assert_int_equal(atomic_load(&c.bad_ith), 0);
    }
    free(hits);
    free(owner);
    qw_threadpool_free(tp);
}

static void test_one_thread(void **s) { (void)s; run_pool(1); }
static void test_two_threads(void **s) { (void)s; run_pool(2); }
static void test_oversubscribed(void **s) { (void)s; run_pool(6); }

static void test_serial_null_pool(void **s) {
    (void)s;
    _Atomic int hits[10] = {0}, owner[10] = {0};
    count_ctx c = {.hits = hits, .n_threads = 1, .job = 7, .owner = owner};
    qw_parallel_for(NULL, 10, 3, count_fn, &c);
    for (int i = 0; i < 10; i++) assert_int_equal(atomic_load(&hits[i]), 1);
    qw_parallel_for(NULL, 0, 3, count_fn, &c); /* empty range: no call */
}

/* A kernel thread's stack: at least QW_KERNEL_STACK though the process
 * default is 256 KiB, and 2 MiB of it usable (the AMX tiles' layouts). */
static void *stack_probe(void *p) {
    size_t sz = 0;
    pthread_attr_t a;
    if (!pthread_getattr_np(pthread_self(), &a)) {
        pthread_attr_getstacksize(&a, &sz);
        pthread_attr_destroy(&a);
    }
    volatile char big[2 << 20];
    big[0] = 1, big[sizeof big - 1] = 1;
    *(size_t *)p = sz + (size_t)(big[0] - 1);
    return NULL;
}

static void test_kernel_stack(void **state) {
    (void)state;
    pthread_attr_t old, small;
    assert_int_equal(pthread_getattr_default_np(&old), 0);
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 256 << 10);
    assert_int_equal(pthread_setattr_default_np(&small), 0);
    pthread_t t;
    size_t sz = 0;
    assert_int_equal(qw_thread_start(&t, stack_probe, &sz), 0);
    pthread_join(t, NULL);
    assert_int_equal(pthread_setattr_default_np(&old), 0);
    pthread_attr_destroy(&small), pthread_attr_destroy(&old);
    assert_true(sz >= QW_KERNEL_STACK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serial_null_pool),
        cmocka_unit_test(test_one_thread),
        cmocka_unit_test(test_two_threads),
        cmocka_unit_test(test_oversubscribed),
        cmocka_unit_test(test_kernel_stack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
