/* test_ab_tokens.c — the token-paired speed statistics of `qwisp ab`
 * (ab.h; docs/ab.md, "Speed: token-paired"): the arms' order at each decode
 * position (a permutation, every arm in every slot equally often per block of
 * 2 x the arms), the signed-rank interval (its order statistic against the
 * published critical values, the exact count meeting the normal
 * approximation, the Hodges–Lehmann estimate, coverage on a heavy-tailed
 * symmetric sample, narrower than the sign-test interval on near-normal
 * data), the pairing of each arm's block with the baseline's same block (a
 * machine whose speed jumps ±30 % between blocks still gives the arm's 3 %
 * exactly, and the bracketed pairing of whole trials would not), prefill
 * metrics taken from the separate processes in this mode, and the run-queue
 * delay reader. */
#include "qwisp/ab.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static void test_token_order(void **state) {
    (void)state;
    for (int n = 1; n <= 6; n++) {
        int slot_count[6][6] = {{0}};
        for (int t = 0; t < 4 * n; t++) {
            int o[6], seen[6] = {0};
            qw_ab_token_order(n, t, o);
            for (int s = 0; s < n; s++) {
                assert_true(o[s] >= 0 && o[s] < n);
                seen[o[s]]++;
                if (t < 2 * n) slot_count[o[s]][s]++;
            }
            for (int a = 0; a < n; a++) assert_int_equal(seen[a], 1); /* a permutation */
        }
        /* one block of 2n positions: every arm in every slot exactly twice */
        for (int a = 0; a < n; a++)
            for (int s = 0; s < n; s++) assert_int_equal(slot_count[a][s], 2);
    }
    /* no arm always first: with 2 arms, position 0 is A B, position 1 B A */
    int o[2];
    qw_ab_token_order(2, 0, o);
    assert_true(o[0] == 0 && o[1] == 1);
    qw_ab_token_order(2, 1, o);
    assert_true(o[0] == 1 && o[1] == 0);
}

static void test_signrank_k(void **state) {
    (void)state;
    /* two-sided 5 % critical values T_crit of the signed-rank test; k = T_crit + 1 */
    assert_int_equal(qw_ab_signrank_k(5, 0.95), 0); /* P(T=0) = 1/32 > 0.025: none */
    assert_int_equal(qw_ab_signrank_k(6, 0.95), 1);
    assert_int_equal(qw_ab_signrank_k(7, 0.95), 3);
    assert_int_equal(qw_ab_signrank_k(8, 0.95), 4);
    assert_int_equal(qw_ab_signrank_k(10, 0.95), 9);
    assert_int_equal(qw_ab_signrank_k(20, 0.95), 53);
    assert_int_equal(qw_ab_signrank_k(30, 0.95), 138);
    /* exact (n <= 200) and normal (n > 200) meet */
    int k199 = qw_ab_signrank_k(199, 0.95), k200 = qw_ab_signrank_k(200, 0.95), k201 = qw_ab_signrank_k(201, 0.95);
    int step_exact = k200 - k199, step_join = k201 - k200; /* ~ (n/2 − z·d sd/dn) per pair added */
    assert_true(step_exact > 80 && step_exact < 95 && abs(step_join - step_exact) <= 3);
}

/* xorshift64*: a fixed stream, so the simulation is the same every run */
static uint64_t rng = 88172645463325252ull;
static double unif(void) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return ((rng * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}
static double laplace(void) {
    double u = unif() - 0.5;
    return u < 0 ? log(1 + 2 * u) : -log(1 - 2 * u);
}
static double normal(void) { return sqrt(-2 * log(unif() + 1e-300)) * cos(6.283185307179586 * unif()); }

static void test_signrank_interval(void **state) {
    (void)state;
    double x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    qw_ab_interval iv = qw_ab_signrank(x, 9, 0.95);
    assert_true(iv.valid && iv.n == 9 && iv.est == 5 && iv.lo < 5 && iv.hi > 5);
    double z[8] = {0};
    iv = qw_ab_signrank(z, 8, 0.95);
    assert_true(iv.lo == 0 && iv.hi == 0 && iv.est == 0);
    iv = qw_ab_signrank(x, 5, 0.95);
    assert_true(iv.valid && isinf(iv.lo) && isinf(iv.hi)); /* too few pairs: no interval */
    /* coverage on a heavy-tailed symmetric sample centred at 1 */
    int cover = 0, trials = 400;
    double d[40];
    for (int t = 0; t < trials; t++) {
        for (int i = 0; i < 40; i++) d[i] = 1 + laplace();
        qw_ab_interval s = qw_ab_signrank(d, 40, 0.95);
        cover += s.lo <= 1 && 1 <= s.hi;
    }
    assert_true(cover >= 0.92 * trials && cover <= 0.99 * trials);
    /* near-normal differences: narrower than the sign-test interval on average */
    double wr = 0, ws = 0;
    for (int t = 0; t < 100; t++) {
        for (int i = 0; i < 40; i++) d[i] = normal();
        qw_ab_interval s = qw_ab_signrank(d, 40, 0.95), b = qw_ab_bootstrap_median(d, 40, 200, 0.95, 1);
        wr += s.hi - s.lo, ws += b.hi - b.lo;
    }
    assert_true(wr < 0.9 * ws);
}

/* A token-paired experiment: arms base (0), x (1), aa (2); per block b the
 * machine runs at speed f(b) (±30 % from block to block), x is `gain` %
 * faster than the baseline in the same block, aa differs by up to ±aa %. */
static void fill_blocks(qw_ab_experiment *e, qw_ab_trial *tr, int blocks, double gain, double aa) {
    int n = 0;
    for (int b = -1; b < blocks; b++) {
        double f = 100 * (1 + 0.3 * sin(b * 1.7));
        for (int a = 0; a < 3; a++, n++) {
            memset(&tr[n], 0, sizeof tr[n]);
            for (int m = 0; m < QW_AB_N_METRICS; m++) tr[n].m[m] = NAN;
            tr[n].arm = a, tr[n].round = b, tr[n].ok = true;
            double v = a == 0 ? f : a == 1 ? f * (1 + gain / 100) : f * (1 + aa * sin(b * 2.3) / 100);
            tr[n].m[QW_AB_M_DECODE_TOK_S] = v;
        }
    }
    e->speed_trials = tr;
    e->n_speed_trials = n;
    e->speed_tokens = true;
    e->speed_rounds = blocks;
}

static void test_tokens_pairing(void **state) {
    (void)state;
    qw_ab_criteria c;
    qw_error err = {0};
    assert_int_equal(qw_ab_criteria_parse(&c, "decode_tok_s.delta_pct < -2 => close\nelse => keep\n", &err), 0);
    qw_ab_arm arms[3] = {{.name = "base"}, {.name = "x"}, {.name = "aa"}};
    qw_ab_trial tr[3 * 41];
    qw_ab_experiment e = {.arms = arms, .n_arms = 3, .crit = &c, .resamples = 500, .level = 0.95, .seed = 7, .aa_arm = 2,
                          .reps = 0};
    fill_blocks(&e, tr, 40, -3.0, 0.2);
    qw_ab_interval x = qw_ab_paired_raw(&e, 1, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT);
    assert_int_equal(x.n, 40); /* the warm-up block is not a pair */
    assert_true(fabs(x.est + 3) < 1e-9 && fabs(x.lo + 3) < 1e-9 && fabs(x.hi + 3) < 1e-9);
    double fl = qw_ab_noise_floor(&e, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT);
    assert_true(fl > 0.01 && fl < 0.2); /* inside the A/A pair's spread */
    qw_ab_analyze(&e);
    assert_string_equal(e.verdicts[1].verdict, "close"); /* -3 % with a 0.2 % floor */
    /* the same blocks read as bracketed whole trials (their neighbours in the
     * array are other arms): no clean -3 % */
    e.speed_tokens = false;
    e.reps = 40;
    e.speed_rounds = 40;
    qw_ab_interval br = qw_ab_paired_raw(&e, 1, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT);
    assert_true(br.n == 0 || !(fabs(br.lo + 3) < 1e-6 && fabs(br.hi + 3) < 1e-6));
    /* prefill comes from the processes in token mode, from the worker otherwise */
    assert_true(qw_ab_uses_speed_trials(&e, QW_AB_M_PREFILL_TOK_S));
    e.speed_tokens = true;
    assert_false(qw_ab_uses_speed_trials(&e, QW_AB_M_PREFILL_TOK_S));
    assert_true(qw_ab_uses_speed_trials(&e, QW_AB_M_DECODE_TOK_S));
    assert_false(qw_ab_uses_speed_trials(&e, QW_AB_M_FOOTPRINT_PEAK_MB));
    /* a noisy A/A pair (±5 %) keeps the same -3 % from being called */
    fill_blocks(&e, tr, 40, -3.0, 5.0);
    qw_ab_analyze(&e);
    assert_string_equal(e.verdicts[1].verdict, "inconclusive");
    free(e.verdicts);
    qw_ab_criteria_free(&c);
}

static void test_sched(void **state) {
    (void)state;
    double a[3] = {1e6, 5e6, 0}, b[3] = {3e6, 5.5e6, 9e6};
    assert_true(fabs(qw_ab_sched_max_ms(a, b, 3) - 9.0) < 1e-12);
    assert_true(fabs(qw_ab_sched_max_ms(a, b, 2) - 2.0) < 1e-12);
    qw_ab_sched s;
    qw_ab_sched_open(&s);
    assert_true(fabs(qw_ab_sched_self_ms(&s, a, b) - (s.n > 0 ? 2.0 : 0.0)) < 1e-12);
    if (s.n == 0) {
        qw_ab_sched_close(&s);
        skip(); /* no schedstat on this kernel */
    }
    double d0[QW_AB_MAX_THREADS], d1[QW_AB_MAX_THREADS];
    qw_ab_sched_read(&s, d0);
    volatile double sink = 0;
    for (int i = 0; i < 2000000; i++) sink += i;
    qw_ab_sched_read(&s, d1);
    for (int i = 0; i < s.n; i++) assert_true(d1[i] >= d0[i] && d0[i] >= 0);
    assert_true(qw_ab_sched_self_ms(&s, d0, d1) >= 0);
    qw_ab_sched_close(&s);
    assert_int_equal(s.n, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_order),     cmocka_unit_test(test_signrank_k),
        cmocka_unit_test(test_signrank_interval), cmocka_unit_test(test_tokens_pairing),
        cmocka_unit_test(test_sched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
