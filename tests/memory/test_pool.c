/* test_pool.c — the free-buffer pool: size classes, reuse, the exact (MLX)
 * rule, cache limit after every free, least-recently-freed release order,
 * clear_cache, realloc/calloc contracts, and exact stats under a concurrent
 * stress test.  The pool is process-global: each test starts from an empty
 * cache, no limit, and the classes rule, and checks deltas. */
#include "qwisp/pool.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <unistd.h>

static const size_t MB = 1 << 20;

static int setup(void **state) {
    (void)state;
    qw_pool_set_fit(QW_POOL_FIT_CLASSES);
    qw_pool_set_cache_limit(0);
    qw_pool_set_decay_ms(0);
    qw_pool_clear_cache();
    return 0;
}

static void test_class_sizes(void **state) {
    (void)state;
    assert_int_equal(qw_pool_class_size(0), 64);
    assert_int_equal(qw_pool_class_size(1), 64);
    assert_int_equal(qw_pool_class_size(65), 128);
    assert_int_equal(qw_pool_class_size(513), 576);
    assert_int_equal(qw_pool_class_size(1024), 1024);
    assert_int_equal(qw_pool_class_size(1025), 1152);
    size_t prev = 0;
    for (size_t n = 1; n < ((size_t)1 << 34); n = n * 17 / 16 + 1) {
        size_t c = qw_pool_class_size(n);
        assert_true(c >= n);
        assert_true(c % 64 == 0);
        assert_true(c >= prev);
        if (n > 512) assert_true((double)(c - n) <= 0.125 * (double)n);
        prev = c;
    }
}

static void test_alignment_and_size_of(void **state) {
    (void)state;
    for (size_t n = 0; n < 3 * MB; n = n * 3 + 7) {
        char *p = qw_pool_alloc(n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % QW_POOL_ALIGN, 0);
        assert_int_equal(qw_pool_size_of(p), n);
        memset(p, 0xAB, n);
        qw_pool_free(p);
    }
}

static void test_reuse_classes_vs_exact(void **state) {
    (void)state;
    /* 1,000,000 and 1,040,000 bytes share a class (1 MiB): drift reuses. */
    void *a = qw_pool_alloc(1000000);
    qw_pool_free(a);
    qw_pool_stats s0 = qw_pool_get_stats();
    void *b = qw_pool_alloc(1040000);
    qw_pool_stats s1 = qw_pool_get_stats();
    assert_ptr_equal(a, b);
    assert_int_equal(s1.hits - s0.hits, 1);
    assert_int_equal(s1.misses - s0.misses, 0);
    assert_int_equal(s1.cache_bytes, 0);
    qw_pool_free(b);
    qw_pool_clear_cache();

    /* exact (MLX): the same drift misses, and the outgrown buffer stays cached */
    qw_pool_set_fit(QW_POOL_FIT_EXACT);
    a = qw_pool_alloc(1000000);
    qw_pool_free(a);
    s0 = qw_pool_get_stats();
    b = qw_pool_alloc(1040000);
    s1 = qw_pool_get_stats();
    assert_int_equal(s1.misses - s0.misses, 1);
    assert_true(s1.cache_bytes >= 1000000);
    qw_pool_free(b);
    /* … but a request within two pages of a cached buffer reuses it */
    s0 = qw_pool_get_stats();
    void *c = qw_pool_alloc(1040000 - 5000);
    s1 = qw_pool_get_stats();
    assert_ptr_equal(c, b);
    assert_int_equal(s1.hits - s0.hits, 1);
    /* and a request half the size does not take a buffer twice its size */
    void *d = qw_pool_alloc(500000);
    assert_ptr_not_equal(d, a);
    qw_pool_free(c);
    qw_pool_free(d);
    qw_pool_set_fit(QW_POOL_FIT_CLASSES);
    qw_pool_clear_cache();
}

static void test_small_reuse(void **state) {
    (void)state;
    void *a = qw_pool_alloc(100);
    qw_pool_free(a);
    qw_pool_stats s0 = qw_pool_get_stats();
    void *b = qw_pool_alloc(120); /* class 128 */
    assert_ptr_equal(a, b);
    assert_int_equal(qw_pool_get_stats().hits - s0.hits, 1);
    qw_pool_free(b);
}

static void test_limit_after_every_free(void **state) {
    (void)state;
    const uint64_t limit = 3 * MB;
    qw_pool_set_cache_limit(limit);
    void *live[16] = {0};
    uint32_t x = 12345;
    for (int i = 0; i < 2000; i++) {
        x = x * 1103515245u + 12345u;
        int k = (int)((x >> 8) % 16);
        if (live[k]) {
            qw_pool_free(live[k]);
            live[k] = NULL;
            qw_pool_stats s = qw_pool_get_stats();
            assert_true(s.cache_bytes <= limit);
        } else {
            live[k] = qw_pool_alloc((x >> 12) % (2 * MB) + 1);
            assert_non_null(live[k]);
        }
    }
    for (int k = 0; k < 16; k++) qw_pool_free(live[k]);
    qw_pool_stats s = qw_pool_get_stats();
    assert_true(s.cache_bytes <= limit);
    assert_true(s.evicted_buffers > 0); /* the limit really bound */
    qw_pool_set_cache_limit(0);
}

static void test_set_limit_trims(void **state) {
    (void)state;
    void *p[4];
    for (int i = 0; i < 4; i++) p[i] = qw_pool_alloc(MB * (size_t)(i + 1));
    for (int i = 0; i < 4; i++) qw_pool_free(p[i]);
    assert_true(qw_pool_get_stats().cache_bytes >= 10 * MB);
    qw_pool_set_cache_limit(5 * MB);
    assert_true(qw_pool_get_stats().cache_bytes <= 5 * MB);
    assert_int_equal(qw_pool_get_cache_limit(), 5 * MB);
    qw_pool_set_cache_limit(0);
}

static void test_lru_release_order(void **state) {
    (void)state;
    /* three buffers of distinct classes freed A, B, C: a limit that holds
     * two must release A (least recently freed) and keep B and C. */
    size_t sz[3] = {1 * MB, 2 * MB, 3 * MB};
    void *p[3];
    for (int i = 0; i < 3; i++) p[i] = qw_pool_alloc(sz[i]);
    for (int i = 0; i < 3; i++) qw_pool_free(p[i]);
    qw_pool_stats s = qw_pool_get_stats();
    assert_int_equal(s.cache_buffers, 3);
    qw_pool_set_cache_limit(s.cache_bytes - 1); /* forces exactly one release */
    s = qw_pool_get_stats();
    assert_int_equal(s.cache_buffers, 2);
    qw_pool_set_cache_limit(0);
    qw_pool_stats s0 = qw_pool_get_stats();
    void *b = qw_pool_alloc(sz[1]), *c = qw_pool_alloc(sz[2]);
    qw_pool_stats s1 = qw_pool_get_stats();
    assert_int_equal(s1.hits - s0.hits, 2);
    void *a = qw_pool_alloc(sz[0]);
    qw_pool_stats s2 = qw_pool_get_stats();
    assert_int_equal(s2.misses - s1.misses, 1); /* A went back to the OS */
    qw_pool_free(a);
    qw_pool_free(b);
    qw_pool_free(c);
    /* Now free order is A, B, C again; each later free evicts the oldest. */
    qw_pool_clear_cache();
}

static void test_clear_cache(void **state) {
    (void)state;
    void *p = qw_pool_alloc(4 * MB), *q = qw_pool_alloc(1000);
    qw_pool_free(p);
    qw_pool_free(q);
    qw_pool_stats s0 = qw_pool_get_stats();
    assert_true(s0.cache_bytes >= 4 * MB);
    qw_pool_clear_cache();
    qw_pool_stats s1 = qw_pool_get_stats();
    assert_int_equal(s1.cache_bytes, 0);
    assert_int_equal(s1.cache_buffers, 0);
    assert_true(s1.os_free_bytes - s0.os_free_bytes >= 4 * MB);
}

/* Decay: a buffer cached longer than the age limit goes back to the OS at the
 * next pool call; a recently freed one stays (the limit is 100x the sleep). */
static void test_decay_releases_idle_buffers(void **state) {
    (void)state;
    qw_pool_set_decay_ms(50);
    void *old = qw_pool_alloc(3 * MB);
    qw_pool_free(old);
    assert_true(qw_pool_get_stats().cache_bytes >= 3 * MB);
    usleep(200 * 1000); /* four times the age limit */
    void *fresh = qw_pool_alloc(1000); /* any call ages the cache */
    qw_pool_stats s = qw_pool_get_stats();
    assert_true(s.cache_bytes < 3 * MB);
    qw_pool_free(fresh);
    qw_pool_set_decay_ms(20000);
    void *young = qw_pool_alloc(2 * MB);
    qw_pool_free(young);
    usleep(1000);
    qw_pool_free(qw_pool_alloc(100));
    assert_true(qw_pool_get_stats().cache_bytes >= 2 * MB); /* 1 ms idle < 20 s limit */
    qw_pool_set_decay_ms(0);
    qw_pool_clear_cache();
}

static void test_realloc_preserves(void **state) {
    (void)state;
    size_t steps[] = {10, 700, 5000, 300000, 1 * MB, 5 * MB, 5 * MB + 17, 64, 2 * MB};
    unsigned char *p = NULL;
    size_t have = 0;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        size_t n = steps[i];
        unsigned char *q = qw_pool_realloc(p, n);
        assert_non_null(q);
        size_t keep = have < n ? have : n;
        for (size_t j = 0; j < keep; j++) assert_int_equal(q[j], (unsigned char)(j * 7 + 3));
        for (size_t j = 0; j < n; j++) q[j] = (unsigned char)(j * 7 + 3);
        assert_int_equal(qw_pool_size_of(q), n);
        p = q;
        have = n;
    }
    qw_pool_stats s = qw_pool_get_stats();
    assert_true(s.realloc_remap > 0 || s.realloc_in_place > 0);
    qw_pool_free(p);
    assert_int_equal(qw_pool_get_stats().active_bytes, 0);
}

static void test_growth_leaves_no_cache_with_classes(void **state) {
    (void)state;
    /* KV-style doubling: classes grow with mremap and cache nothing;
     * exact (MLX) leaves every outgrown buffer in the cache. */
    void *p = NULL;
    for (size_t n = 512 * 1024; n <= 16 * MB; n *= 2) p = qw_pool_realloc(p, n);
    assert_int_equal(qw_pool_get_stats().cache_bytes, 0);
    qw_pool_free(p);
    qw_pool_clear_cache();
    qw_pool_set_fit(QW_POOL_FIT_EXACT);
    p = NULL;
    for (size_t n = 512 * 1024; n <= 16 * MB; n *= 2) p = qw_pool_realloc(p, n);
    assert_true(qw_pool_get_stats().cache_bytes >= 15 * MB / 2);
    qw_pool_free(p);
    qw_pool_set_fit(QW_POOL_FIT_CLASSES);
    qw_pool_clear_cache();
}

static void test_calloc_zeroes_reused(void **state) {
    (void)state;
    for (size_t n = 100; n < 4 * MB; n *= 5) {
        unsigned char *p = qw_pool_alloc(n);
        memset(p, 0xFF, n);
        qw_pool_free(p);
        unsigned char *q = qw_pool_calloc(n);
        for (size_t j = 0; j < n; j++) assert_int_equal(q[j], 0);
        qw_pool_free(q);
    }
}

static void test_peak_and_reset(void **state) {
    (void)state;
    qw_pool_reset_peak();
    qw_pool_stats s0 = qw_pool_get_stats();
    void *p = qw_pool_alloc(3 * MB);
    qw_pool_free(p);
    qw_pool_stats s1 = qw_pool_get_stats();
    assert_true(s1.peak_bytes >= s0.active_bytes + 3 * MB);
    qw_pool_reset_peak();
    assert_int_equal(qw_pool_get_stats().peak_bytes, qw_pool_get_stats().active_bytes);
    qw_pool_reset_counters();
    assert_int_equal(qw_pool_get_stats().hits, 0);
}

/* ---- concurrent stress ---- */

typedef struct { uint32_t seed; int ok; } stress_arg;

static void *stress_main(void *arg) {
    stress_arg *a = arg;
    enum { SLOTS = 32 };
    unsigned char *live[SLOTS] = {0};
    size_t len[SLOTS] = {0};
    uint32_t x = a->seed;
    a->ok = 1;
    for (int i = 0; i < 6000; i++) {
        x = x * 1664525u + 1013904223u;
        int k = (int)((x >> 10) % SLOTS);
        if (live[k]) {
            /* the bytes we wrote must still be ours */
            if (live[k][0] != (unsigned char)k || live[k][len[k] - 1] != (unsigned char)k) a->ok = 0;
            if ((x >> 3) & 1) {
                size_t n = (x >> 5) % (1 * MB) + 1;
                unsigned char *q = qw_pool_realloc(live[k], n);
                if (!q) { a->ok = 0; continue; }
                live[k] = q;
                len[k] = n;
                q[0] = q[n - 1] = (unsigned char)k;
            } else {
                qw_pool_free(live[k]);
                live[k] = NULL;
            }
        } else {
            size_t n = (x >> 7) % ((x & 1) ? 4096 : MB) + 1;
            live[k] = (x >> 4) & 1 ? qw_pool_alloc(n) : qw_pool_calloc(n);
            if (!live[k]) { a->ok = 0; continue; }
            len[k] = n;
            live[k][0] = live[k][n - 1] = (unsigned char)k;
        }
    }
    for (int k = 0; k < SLOTS; k++) qw_pool_free(live[k]);
    return NULL;
}

static void stress(uint64_t limit, qw_pool_fit fit) {
    qw_pool_set_fit(fit);
    qw_pool_set_cache_limit(limit);
    qw_pool_stats s0 = qw_pool_get_stats();
    enum { T = 4 };
    pthread_t th[T];
    stress_arg args[T];
    for (int t = 0; t < T; t++) {
        args[t] = (stress_arg){.seed = 1000u + (uint32_t)t * 77u};
        assert_int_equal(pthread_create(&th[t], NULL, stress_main, &args[t]), 0);
    }
    for (int t = 0; t < T; t++) {
        pthread_join(th[t], NULL);
        assert_true(args[t].ok);
    }
    qw_pool_stats s = qw_pool_get_stats();
    assert_int_equal(s.active_bytes, s0.active_bytes);
    assert_int_equal(s.requested_bytes, s0.requested_bytes);
    assert_int_equal(s.n_alloc - s0.n_alloc, s.n_free - s0.n_free);
    assert_int_equal(s.hits + s.misses - s0.hits - s0.misses, s.n_alloc - s0.n_alloc);
    if (limit) assert_true(s.cache_bytes <= limit);
    qw_pool_clear_cache();
    s = qw_pool_get_stats();
    assert_int_equal(s.cache_bytes, 0);
    qw_pool_set_cache_limit(0);
    qw_pool_set_fit(QW_POOL_FIT_CLASSES);
}

static void test_stress_unbounded(void **state) { (void)state; stress(0, QW_POOL_FIT_CLASSES); }
static void test_stress_limited(void **state) { (void)state; stress(2 * MB, QW_POOL_FIT_CLASSES); }
static void test_stress_exact(void **state) { (void)state; stress(8 * MB, QW_POOL_FIT_EXACT); }

static void test_os_accounting_balances(void **state) {
    (void)state;
    /* After clearing, every byte taken from the OS by buffers that are gone has been returned. */
    qw_pool_clear_cache();
    qw_pool_stats s0 = qw_pool_get_stats();
    void *p[8];
    for (int i = 0; i < 8; i++) p[i] = qw_pool_alloc((size_t)(i + 1) * 300000);
    for (int i = 0; i < 8; i++) p[i] = qw_pool_realloc(p[i], (size_t)(i + 2) * 400000);
    for (int i = 0; i < 8; i++) qw_pool_free(p[i]);
    qw_pool_clear_cache();
    qw_pool_stats s1 = qw_pool_get_stats();
    assert_int_equal(s1.os_alloc_bytes - s0.os_alloc_bytes, s1.os_free_bytes - s0.os_free_bytes);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_class_sizes, setup),
        cmocka_unit_test_setup(test_alignment_and_size_of, setup),
        cmocka_unit_test_setup(test_reuse_classes_vs_exact, setup),
        cmocka_unit_test_setup(test_small_reuse, setup),
        cmocka_unit_test_setup(test_limit_after_every_free, setup),
        cmocka_unit_test_setup(test_set_limit_trims, setup),
        cmocka_unit_test_setup(test_lru_release_order, setup),
        cmocka_unit_test_setup(test_clear_cache, setup),
        cmocka_unit_test_setup(test_decay_releases_idle_buffers, setup),
        cmocka_unit_test_setup(test_realloc_preserves, setup),
        cmocka_unit_test_setup(test_growth_leaves_no_cache_with_classes, setup),
        cmocka_unit_test_setup(test_calloc_zeroes_reused, setup),
        cmocka_unit_test_setup(test_peak_and_reset, setup),
        cmocka_unit_test_setup(test_stress_unbounded, setup),
        cmocka_unit_test_setup(test_stress_limited, setup),
        cmocka_unit_test_setup(test_stress_exact, setup),
        cmocka_unit_test_setup(test_os_accounting_balances, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
