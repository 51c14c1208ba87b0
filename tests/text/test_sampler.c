/* test_sampler.c — the sampler chain: greedy, reproducibility, top-k, top-p
 * (both the head-only and the widened path), min-p, temperature (empirical
 * frequencies against softmax), and the three penalties with their window. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t lcg = 12345;
static float frand(void) { /* deterministic test data */
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((lcg >> 40) & 0xFFFFFF) / (float)0x1000000;
}

static qw_sampler_params P(float temp) {
    qw_sampler_params p = qw_sampler_default_params();
    p.temp = temp;
    return p;
}

static void test_greedy(void **state) {
    (void)state;
    enum { N = 1000 };
    float *l = malloc(N * sizeof *l);
    qw_sampler_params p = qw_sampler_default_params();
    assert_true(p.temp <= 0);
    qw_sampler *s = qw_sampler_new(&p, N);
    assert_non_null(s);
    for (int r = 0; r < 20; r++) {
        for (int i = 0; i < N; i++) l[i] = frand() * 10 - 5;
        int best = 0;
        for (int i = 1; i < N; i++) if (l[i] > l[best]) best = i;
        assert_int_equal(qw_sampler_sample(s, l), best);
        assert_int_equal(qw_argmax(l, N), best);
    }
    const float ties[] = {1, 3, 3, 2};
    assert_int_equal(qw_argmax(ties, 4), 1);
    qw_sampler_free(s);
    free(l);
}

static void test_same_seed_same_sequence(void **state) {
    (void)state;
    enum { N = 500 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = frand() * 2;
    qw_sampler_params p = P(1.0f);
    p.seed = 42;
    qw_sampler *a = qw_sampler_new(&p, N), *b = qw_sampler_new(&p, N);
    p.seed = 43;
    qw_sampler *c = qw_sampler_new(&p, N);
    int diff = 0;
    for (int i = 0; i < 100; i++) {
        int x = qw_sampler_sample(a, l), y = qw_sampler_sample(b, l), z = qw_sampler_sample(c, l);
        assert_int_equal(x, y);
        assert_true(x >= 0 && x < N);
        diff += x != z;
    }
    assert_true(diff > 50); /* another seed gives another sequence */
    qw_sampler_free(a); qw_sampler_free(b); qw_sampler_free(c);
}

static void test_top_k1_and_small_top_p_are_greedy(void **state) {
    (void)state;
    enum { N = 3000 };
    float *l = malloc(N * sizeof *l);
    qw_sampler_params pk = P(1.5f), pp = P(1.5f);
    pk.top_k = 1;
    pp.top_p = 0.01f;
    pk.seed = pp.seed = 7;
    qw_sampler *sk = qw_sampler_new(&pk, N), *sp = qw_sampler_new(&pp, N);
    for (int r = 0; r < 30; r++) {
        for (int i = 0; i < N; i++) l[i] = frand() * 3;
        l[(r * 37) % N] = 8.0f; /* a clear winner: e^8 / (e^8 + 3000 * 6.4) ~ 13% > 1% */
        int g = qw_argmax(l, N);
        assert_int_equal(qw_sampler_sample(sk, l), g);
        assert_int_equal(qw_sampler_sample(sp, l), g);
    }
    qw_sampler_free(sk); qw_sampler_free(sp);
    free(l);
}

/* Empirical frequencies over `draws` samples vs softmax(l / temp). */
static void check_freq(const qw_sampler_params *p, const float *l, int n, int draws, double tol) {
    qw_sampler *s = qw_sampler_new(p, n);
    int *cnt = calloc((size_t)n, sizeof *cnt);
    for (int i = 0; i < draws; i++) cnt[qw_sampler_sample(s, l)]++;
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < n; i++) mx = fmax(mx, l[i] / p->temp);
    for (int i = 0; i < n; i++) z += exp(l[i] / p->temp - mx);
    for (int i = 0; i < n; i++) {
        double want = exp(l[i] / p->temp - mx) / z, got = (double)cnt[i] / draws;
        if (fabs(want - got) > tol) fprintf(stderr, "token %d: want %.4f got %.4f\n", i, want, got);
        assert_true(fabs(want - got) <= tol);
    }
    free(cnt);
    qw_sampler_free(s);
}

static void test_temperature_distribution(void **state) {
    (void)state;
    const float l[] = {0.0f, 1.0f, 2.0f, 3.0f, -1.0f};
    qw_sampler_params p = P(1.0f);
    p.seed = 1234;
    check_freq(&p, l, 5, 20000, 0.015);
    p.temp = 0.5f; /* sharper */
    check_freq(&p, l, 5, 20000, 0.015);
    p.temp = 3.0f; /* flatter */
    check_freq(&p, l, 5, 20000, 0.015);
}

static void test_top_k_min_p_restrict(void **state) {
    (void)state;
    enum { N = 64 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = (float)i * 0.01f; /* nearly flat */
    l[10] = 3.0f;
    l[20] = 2.9f;
    /* top-k 2: only ids 10 and 20 ever come out, both do */
    qw_sampler_params p = P(1.0f);
    p.top_k = 2;
    qw_sampler *s = qw_sampler_new(&p, N);
    int seen10 = 0, seen20 = 0;
    for (int i = 0; i < 2000; i++) {
        int x = qw_sampler_sample(s, l);
        assert_true(x == 10 || x == 20);
        seen10 += x == 10;
        seen20 += x == 20;
    }
    assert_true(seen10 > 500 && seen20 > 500);
    qw_sampler_free(s);
    /* min-p 0.5: keeps logits >= 3 + ln 0.5 = 2.31 -> again only 10 and 20 */
    p = P(1.0f);
    p.min_p = 0.5f;
    s = qw_sampler_new(&p, N);
    seen10 = seen20 = 0;
    for (int i = 0; i < 2000; i++) {
        int x = qw_sampler_sample(s, l);
        assert_true(x == 10 || x == 20);
        seen10 += x == 10;
        seen20 += x == 20;
    }
    assert_true(seen10 > 500 && seen20 > 500);
    qw_sampler_free(s);
    /* min-p 0.95 drops 20 (p20/p10 = e^-0.1 = 0.905) */
    p.min_p = 0.95f;
    s = qw_sampler_new(&p, N);
    for (int i = 0; i < 200; i++) assert_int_equal(qw_sampler_sample(s, l), 10);
    qw_sampler_free(s);
}

static void test_top_p_wide(void **state) {
    (void)state;
    /* flat over 5000 tokens: top-p 0.9 keeps ~4500, more than the 256-token head */
    enum { N = 5000 };
    float *l = calloc(N, sizeof *l);
    qw_sampler_params p = P(1.0f);
    p.top_p = 0.9f;
    p.seed = 99;
    qw_sampler *s = qw_sampler_new(&p, N);
    char *seen = calloc(N, 1);
    int distinct = 0, maxid = 0;
    for (int i = 0; i < 4000; i++) {
        int x = qw_sampler_sample(s, l);
        if (!seen[x]) { seen[x] = 1; distinct++; }
        if (x > maxid) maxid = x;
    }
    assert_true(distinct > 1000);
    /* ties break by id, so the kept 90% are the lowest ids */
    assert_true(maxid < 4500 + 1);
    qw_sampler_free(s);
    /* peaked: the top token alone holds > 0.5 -> top-p 0.5 is greedy */
    for (int i = 0; i < N; i++) l[i] = 0;
    l[1234] = 12.0f; /* e^12 / (e^12 + 4999) ~ 0.97 */
    p.top_p = 0.5f;
    s = qw_sampler_new(&p, N);
    for (int i = 0; i < 100; i++) assert_int_equal(qw_sampler_sample(s, l), 1234);
    qw_sampler_free(s);
    free(seen);
    free(l);
}

static void test_penalties(void **state) {
    (void)state;
    qw_sampler_params p = qw_sampler_default_params(); /* greedy shows the penalised order */
    p.penalty_last_n = 4;
    p.repeat_penalty = 2.0f;
    /* positive logit is divided: 2.0 -> 1.0 < 1.5 */
    const float a[] = {2.0f, 1.5f, 0.0f};
    qw_sampler *s = qw_sampler_new(&p, 3);
    assert_int_equal(qw_sampler_sample(s, a), 0);
    qw_sampler_accept(s, 0);
    assert_int_equal(qw_sampler_sample(s, a), 1);
    qw_sampler_free(s);
    /* negative logit is multiplied: -1 -> -2 < -1.5 (dividing would keep it on top) */
    const float b[] = {-1.0f, -1.5f, -3.0f};
    s = qw_sampler_new(&p, 3);
    qw_sampler_accept(s, 0);
    assert_int_equal(qw_sampler_sample(s, b), 1);
    qw_sampler_free(s);
    /* presence: once, regardless of count */
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.5f;
    const float c[] = {1.0f, 0.8f};
    s = qw_sampler_new(&p, 2);
    qw_sampler_accept(s, 0);
    assert_int_equal(qw_sampler_sample(s, c), 1); /* 0.5 < 0.8 */
    qw_sampler_free(s);
    p.presence_penalty = 0.1f;
    s = qw_sampler_new(&p, 2);
    for (int i = 0; i < 4; i++) qw_sampler_accept(s, 0);
    assert_int_equal(qw_sampler_sample(s, c), 0); /* 0.9 > 0.8: not per count */
    qw_sampler_free(s);
    /* frequency: per count in the window */
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.3f;
    const float d[] = {1.0f, 0.0f};
    s = qw_sampler_new(&p, 2);
    for (int i = 0; i < 3; i++) qw_sampler_accept(s, 0);
    assert_int_equal(qw_sampler_sample(s, d), 0); /* 1 - 0.9 = 0.1 > 0 */
    qw_sampler_accept(s, 0);
    assert_int_equal(qw_sampler_sample(s, d), 1); /* 1 - 1.2 < 0 */
    /* the window: after 4 other tokens, token 0 is no longer penalised */
    for (int i = 0; i < 4; i++) qw_sampler_accept(s, 1);
    assert_int_equal(qw_sampler_sample(s, d), 0);
    qw_sampler_free(s);
    /* penalty_last_n = 0 turns penalties off */
    p.penalty_last_n = 0;
    p.repeat_penalty = 10.0f;
    s = qw_sampler_new(&p, 3);
    qw_sampler_accept(s, 0);
    assert_int_equal(qw_sampler_sample(s, a), 0);
    qw_sampler_free(s);
    /* out-of-range accepts are ignored, not written */
    p.penalty_last_n = 2;
    s = qw_sampler_new(&p, 3);
    qw_sampler_accept(s, -1);
    qw_sampler_accept(s, 3);
    assert_int_equal(qw_sampler_sample(s, a), 0);
    qw_sampler_free(s);
}

static void test_penalties_with_temperature(void **state) {
    (void)state;
    /* a presence penalty of 100 on a token makes it (practically) never drawn */
    qw_sampler_params p = P(1.0f);
    p.penalty_last_n = 8;
    p.presence_penalty = 100.0f;
    const float l[] = {5.0f, 0.0f, 0.0f};
    qw_sampler *s = qw_sampler_new(&p, 3);
    qw_sampler_accept(s, 0);
    for (int i = 0; i < 500; i++) assert_int_not_equal(qw_sampler_sample(s, l), 0);
    qw_sampler_free(s);
    assert_null(qw_sampler_new(&p, 0));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_same_seed_same_sequence),
        cmocka_unit_test(test_top_k1_and_small_top_p_are_greedy),
        cmocka_unit_test(test_temperature_distribution),
        cmocka_unit_test(test_top_k_min_p_restrict),
        cmocka_unit_test(test_top_p_wide),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_penalties_with_temperature),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
