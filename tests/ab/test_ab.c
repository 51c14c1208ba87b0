/* test_ab.c — the library of `qwisp ab` (ab.h): the criteria parser's
 * errors (line, column, what was expected), three-valued evaluation on
 * intervals, rule order and "inconclusive", the balanced order, the bootstrap
 * (deterministic, contains the truth, degenerate on constant data), the reps
 * suggestion, and SHA-256 against the standard's test vectors; the
 * per-token statistics (trimmed mean, summary) on synthetic samples, the
 * in-process schedule (one warm-up, then every other arm bracketed by the
 * baseline) and its drift cancellation, the A/A noise floor refusing to
 * call a difference smaller than it, and the perf-event
 * fallback (an event the kernel refuses gives a reason and NaN, not 0). */
#include "qwisp/ab.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static void expect_parse_error(const char *text, const char *needle) {
    qw_ab_criteria c;
    qw_error err = {0};
    assert_int_equal(qw_ab_criteria_parse(&c, text, &err), -1);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' lacks '%s'", err.msg, needle);
}

static void test_parse_ok(void **state) {
    (void)state;
    qw_ab_criteria c;
    qw_error err = {0};
    const char *t = "# comment\n\ndecode_tok_s.delta_pct < -2 => close   # why\n"
                    "footprint_peak_mb.delta_mb < -4096 and abs(decode_tok_s.delta_pct) <= 2 => ship\n"
                    "else => keep\n";
    assert_int_equal(qw_ab_criteria_parse(&c, t, &err), 0);
    assert_int_equal(c.n_rules, 2);
    assert_string_equal(c.rules[0].verdict, "close");
    assert_int_equal(c.rules[0].line, 3);
    assert_string_equal(c.rules[0].text, "decode_tok_s.delta_pct < -2 => close");
    assert_int_equal(c.rules[1].n_conds, 2);
    assert_int_equal(c.rules[1].conds[0].metric, QW_AB_M_FOOTPRINT_PEAK_MB);
    assert_int_equal(c.rules[1].conds[0].kind, QW_AB_DELTA);
    assert_true(c.rules[1].conds[1].absval);
    assert_int_equal(c.rules[1].conds[1].op, QW_AB_LE);
    assert_true(c.rules[1].conds[0].threshold == -4096);
    assert_string_equal(c.otherwise, "keep");
}

static void test_parse_errors(void **state) {
    (void)state;
    expect_parse_error("decode_tok_s.delta_pct < -2 => close\ndecod_tok_s.delta < 1 => x\n",
                       "line 2, column 1: unknown metric 'decod_tok_s'");
    expect_parse_error("decode_tok_s.delta_pct <-> 2 => close\n", "line 1, column 25: expected a number");
    expect_parse_error("decode_tok_s.delta_pct = 2 => close\n", "column 24: expected a comparison");
    expect_parse_error("decode_tok_s.ratio < 2 => close\n", "expected delta, delta_pct or delta_mb, saw 'ratio");
    expect_parse_error("decode_tok_s.delta_mb < 2 => close\n", "not MiB");
    expect_parse_error("decode_tok_s.delta < 2 close\n", "expected 'and' or '=>'");
    expect_parse_error("decode_tok_s.delta < 2 =>\n", "column 26: expected a verdict word ([a-z][a-z0-9_-]*), saw end of line");
    expect_parse_error("decode_tok_s.delta < 2 => inconclusive\n", "harness's own verdict");
    expect_parse_error("abs(decode_tok_s.delta < 2 => x\n", "expected ')' closing abs(");
    expect_parse_error("decode_tok_s.delta < 2 => close now\n", "expected end of line after the verdict");
    expect_parse_error("else => a\ndecode_tok_s.delta < 2 => b\n", "could never fire");
    expect_parse_error("# only comments\n", "no rules");
}

static void test_cond_three_valued(void **state) {
    (void)state;
    qw_ab_cond c = {.metric = 0, .kind = QW_AB_DELTA_PCT, .op = QW_AB_LT, .threshold = -2};
    qw_ab_interval iv = {.valid = true, .n = 5};
    iv.lo = -5, iv.hi = -3;
    assert_int_equal(qw_ab_cond_eval(&c, iv), QW_AB_TRUE);
    iv.lo = -1, iv.hi = 1;
    assert_int_equal(qw_ab_cond_eval(&c, iv), QW_AB_FALSE);
    iv.lo = -3, iv.hi = 1;
    assert_int_equal(qw_ab_cond_eval(&c, iv), QW_AB_UNKNOWN);
    c.absval = true, c.op = QW_AB_LE, c.threshold = 2;
    iv.lo = -1.5, iv.hi = 1; /* |x| in [0, 1.5] */
    assert_int_equal(qw_ab_cond_eval(&c, iv), QW_AB_TRUE);
    iv.lo = -2.5, iv.hi = 1; /* |x| in [0, 2.5] */
    assert_int_equal(qw_ab_cond_eval(&c, iv), QW_AB_UNKNOWN);
    iv.lo = -4, iv.hi = -3; /* |x| in [3, 4] */
    assert_int_equal(qw_ab_cond_eval(&c, iv), QW_AB_FALSE);
    iv.valid = false;
    assert_int_equal(qw_ab_cond_eval(&c, iv), QW_AB_UNKNOWN);
}

/* A fake experiment: fixed intervals per metric. */
static qw_ab_interval g_iv[QW_AB_N_METRICS];
static qw_ab_interval fake(void *user, int metric, qw_ab_kind kind) {
    (void)user, (void)kind;
    return g_iv[metric];
}
static void set_iv(int m, double lo, double hi) {
    g_iv[m] = (qw_ab_interval){.valid = true, .est = (lo + hi) / 2, .lo = lo, .hi = hi, .n = 4};
}

static void test_verdicts(void **state) {
    (void)state;
    qw_ab_criteria c;
    qw_error err = {0};
    assert_int_equal(qw_ab_criteria_parse(&c,
                                          "decode_tok_s.delta_pct < -2 => close\n"
                                          "footprint_peak_mb.delta < -100 and abs(decode_tok_s.delta_pct) <= 2 => ship\n"
                                          "else => keep\n",
                                          &err),
                     0);
    qw_ab_verdict v;
    set_iv(QW_AB_M_DECODE_TOK_S, -5, -3);
    set_iv(QW_AB_M_FOOTPRINT_PEAK_MB, -500, -300);
    qw_ab_criteria_eval(&c, fake, NULL, &v);
    assert_string_equal(v.verdict, "close");
    assert_int_equal(v.rule, 0);
    set_iv(QW_AB_M_DECODE_TOK_S, -1, 1);
    qw_ab_criteria_eval(&c, fake, NULL, &v);
    assert_string_equal(v.verdict, "ship");
    set_iv(QW_AB_M_FOOTPRINT_PEAK_MB, -10, 10);
    qw_ab_criteria_eval(&c, fake, NULL, &v);
    assert_string_equal(v.verdict, "keep");
    /* decode straddles -2: the close rule is unknown -> inconclusive, with reps */
    set_iv(QW_AB_M_DECODE_TOK_S, -3, 1);
    qw_ab_criteria_eval(&c, fake, NULL, &v);
    assert_string_equal(v.verdict, "inconclusive");
    assert_int_equal(v.unknown_rule, 0);
    assert_true(v.suggest_reps > 4);
    assert_non_null(strstr(v.why, "straddles"));
}

static void test_order_balanced(void **state) {
    (void)state;
    int o[12];
    qw_ab_order(3, 4, o);
    int want[12] = {0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0};
    assert_memory_equal(o, want, sizeof want);
    /* over an even number of rounds every arm has the same mean position */
    for (int a = 0; a < 3; a++) {
        int sum = 0;
        for (int i = 0; i < 12; i++)
            if (o[i] == a) sum += i % 3;
        assert_int_equal(sum, 4);
    }
}

static void test_bootstrap(void **state) {
    (void)state;
    double z[6] = {0, 0, 0, 0, 0, 0};
    qw_ab_interval iv = qw_ab_bootstrap_median(z, 6, 2000, 0.95, 1);
    assert_true(iv.valid && iv.lo == 0 && iv.hi == 0 && iv.est == 0);
    double x[9] = {1.2, -0.4, 0.3, 0.9, -1.1, 0.1, 0.5, -0.2, 0.7};
    qw_ab_interval a = qw_ab_bootstrap_median(x, 9, 2000, 0.95, 42), b = qw_ab_bootstrap_median(x, 9, 2000, 0.95, 42);
    assert_true(a.lo == b.lo && a.hi == b.hi); /* fixed seed: reproducible */
    assert_true(a.est == 0.3);
    assert_true(a.lo <= a.est && a.est <= a.hi && a.lo >= -1.1 && a.hi <= 1.2);
    assert_true(a.lo < 0 && a.hi > 0);
    /* widened to the sign-test interval [x_(2), x_(8)] = [-0.4, 0.9] at n=9 */
    assert_true(a.lo <= -0.4 && a.hi >= 0.9);
    /* three pairs all on one side: no 95% interval exists, so never a verdict */
    double three[3] = {-5, -4, -6};
    qw_ab_interval t3 = qw_ab_bootstrap_median(three, 3, 2000, 0.95, 1);
    assert_true(t3.valid && isinf(t3.lo) && isinf(t3.hi));
    assert_true(qw_ab_median(x, 9) == 0.3);
    assert_true(fabs(qw_ab_quantile(x, 9, 0.25) - (-0.2)) < 1e-12);
}

static void test_sign_test(void **state) {
    (void)state;
    /* 2·P(Bin(n,1/2) < k) <= 0.05 */
    assert_int_equal(qw_ab_sign_k(5, 0.95), 0); /* 2/32 = 0.0625 */
    assert_int_equal(qw_ab_sign_k(6, 0.95), 1); /* 2/64 = 0.031 */
    assert_int_equal(qw_ab_sign_k(9, 0.95), 2); /* 2·10/512 = 0.039 */
    assert_int_equal(qw_ab_sign_k(10, 0.95), 2); /* 2·56/1024 = 0.109 > 0.05 for k=3 */
    assert_int_equal(qw_ab_min_pairs(0.95), 6);
}

static void test_suggest_reps(void **state) {
    (void)state;
    assert_int_equal(qw_ab_suggest_reps(3, -1, INFINITY, -2), 6);
    /* half-width 2 at n=4, estimate 1 away from the threshold: 4*(2/1)^2 = 16 */
    assert_int_equal(qw_ab_suggest_reps(4, -1, 2, -2), 16);
    assert_int_equal(qw_ab_suggest_reps(4, -2, 2, -2), 0);
}

static void test_sha256(void **state) {
    (void)state;
    char h[65];
    qw_ab_sha256("abc", 3, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    qw_ab_sha256("", 0, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    qw_ab_sha256(m, strlen(m), h);
    assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_trimmed_mean(void **state) {
    (void)state;
    /* 20 samples of 10 ms, two stalls of 200 ms: 10 % each side drops them */
    double x[20];
    for (int i = 0; i < 20; i++) x[i] = 10.0 + (i % 2 ? 0.1 : -0.1);
    x[3] = 200, x[11] = 250;
    assert_true(fabs(qw_ab_trimmed_mean(x, 20, 0.1) - 10.0) < 0.06);
    assert_true(qw_ab_trimmed_mean(x, 20, 0) > 30);          /* the mean is dragged */
    assert_true(qw_ab_trimmed_mean(x, 20, 0.5) == qw_ab_median(x, 20));
    assert_true(isnan(qw_ab_trimmed_mean(x, 0, 0.1)));
    double y[5] = {5, 1, 3, 2, 4};
    qw_ab_tokstats t = qw_ab_token_stats(y, 5);
    assert_int_equal(t.n, 5);
    assert_true(t.median == 3 && t.min == 1 && t.max == 5 && t.q1 == 2 && t.q3 == 4);
    assert_true(t.trimmed_mean == 3); /* floor(0.1*5) = 0 trimmed: the mean */
}

static void test_schedule(void **state) {
    (void)state;
    int s[32], r[32];
    int n = qw_ab_schedule(3, 3, s);
    assert_int_equal(n, 14);
    assert_int_equal(qw_ab_schedule(3, 3, NULL), 14);
    int want[14] = {0, 0, 1, 0, 2, 0, 2, 0, 1, 0, 1, 0, 2, 0};
    assert_memory_equal(s, want, sizeof want);
    /* every non-baseline trial sits between two baseline trials */
    for (int i = 1; i < n; i++)
        if (s[i] != 0) assert_true(s[i - 1] == 0 && i + 1 < n && s[i + 1] == 0);
    qw_ab_schedule_rounds(s, n, r);
    int want_r[14] = {-1, 0, 0, 1, 0, 2, 1, 3, 1, 4, 2, 5, 2, 6};
    assert_memory_equal(r, want_r, sizeof want_r);
}

/* An in-process experiment: arms base (0), x (1), aa (2).  Every trial's
 * decode tok/s = drift(i) × (1 + gain % for x, ± aa % alternating for the
 * A/A arm); drift(i) = 100 + slope·i over the run order. */
static int fill_speed(qw_ab_experiment *e, qw_ab_trial *tr, int reps, double gain, double aa, double slope) {
    int sched[128], rounds[128];
    int n = qw_ab_schedule(3, reps, sched);
    qw_ab_schedule_rounds(sched, n, rounds);
    for (int i = 0; i < n; i++) {
        memset(&tr[i], 0, sizeof tr[i]);
        for (int m = 0; m < QW_AB_N_METRICS; m++) tr[i].m[m] = NAN;
        tr[i].arm = sched[i];
        tr[i].round = rounds[i];
        tr[i].ok = true;
        double base = 100.0 + slope * i;
        int r = tr[i].round < 0 ? 0 : tr[i].round;
        double v = tr[i].arm == 0 ? base : tr[i].arm == 1 ? base * (1 + gain / 100) : base * (1 + (r % 2 ? aa : -aa) / 100);
        tr[i].m[QW_AB_M_DECODE_TOK_S] = v;
    }
    e->speed_trials = tr;
    e->n_speed_trials = n;
    e->reps = reps;
    return n;
}

static void test_noise_floor_refuses(void **state) {
    (void)state;
    qw_ab_criteria c;
    qw_error err = {0};
    assert_int_equal(qw_ab_criteria_parse(&c, "decode_tok_s.delta_pct > 1 => faster\nelse => same\n", &err), 0);
    qw_ab_arm arms[3] = {{.name = "base"}, {.name = "x"}, {.name = "aa"}};
    qw_ab_trial tr[64];
    qw_ab_experiment e = {.arms = arms, .n_arms = 3, .crit = &c, .resamples = 500, .level = 0.95, .seed = 7, .aa_arm = 2};
    /* arm x is 3 % faster in every round; the A/A pair differs by +-5 %: refused */
    fill_speed(&e, tr, 8, 3.0, 5.0, 0);
    double fl = qw_ab_noise_floor(&e, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT);
    assert_true(fabs(fl - 5.0) < 1e-9);
    qw_ab_interval raw = qw_ab_paired_raw(&e, 1, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT);
    qw_ab_interval iv = qw_ab_paired(&e, 1, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT);
    assert_true(fabs(raw.lo - 3) < 1e-9 && fabs(raw.hi - 3) < 1e-9); /* alone it would be called */
    assert_true(iv.lo < 0 && iv.hi > 6 && iv.floor == fl);
    qw_ab_analyze(&e);
    assert_string_equal(e.verdicts[1].verdict, "inconclusive");
    assert_string_equal(e.verdicts[2].verdict, "noise-floor");
    /* a quiet A/A pair (+-0.5 %): the same 3 % is called */
    fill_speed(&e, tr, 8, 3.0, 0.5, 0);
    qw_ab_analyze(&e);
    assert_string_equal(e.verdicts[1].verdict, "faster");
    /* an A/A pair with too few rounds has no interval: nothing is called */
    fill_speed(&e, tr, 3, 3.0, 0.1, 0);
    assert_true(isinf(qw_ab_noise_floor(&e, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT)));
    qw_ab_analyze(&e);
    assert_string_equal(e.verdicts[1].verdict, "inconclusive");
    /* no A/A arm: no floor */
    /* a machine slowing down by 1 tok/s every trial: bracketing cancels it —
     * the A/A pair differs by nothing, and x's 3 % comes out as 3 % */
    fill_speed(&e, tr, 8, 3.0, 0, -1.0);
    qw_ab_interval aa0 = qw_ab_paired_raw(&e, 2, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT);
    assert_true(fabs(aa0.lo) < 1e-9 && fabs(aa0.hi) < 1e-9);
    qw_ab_interval x3 = qw_ab_paired(&e, 1, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT);
    assert_true(fabs(x3.est - 3.0) < 1e-9 && fabs(x3.lo - 3.0) < 1e-9);
    qw_ab_analyze(&e);
    assert_string_equal(e.verdicts[1].verdict, "faster");
    fill_speed(&e, tr, 8, 3.0, 5.0, 0);
    e.aa_arm = -1;
    assert_true(qw_ab_noise_floor(&e, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT) == 0);
    free(e.verdicts);
}

static void test_perf_fallback(void **state) {
    (void)state;
    qw_ab_perf p;
    qw_ab_perf_open_events(&p, 0x7fffffffu, 0); /* no such event type: the kernel refuses */
    assert_false(p.available);
    assert_int_equal(p.n, 0);
    assert_non_null(strstr(p.reason, "perf events unavailable: perf_event_open: "));
    assert_non_null(strstr(p.reason, "perf_event_paranoid="));
    double cyc = 0, task = 0;
    qw_ab_perf_read(&p, &cyc, &task);
    assert_true(isnan(cyc) && isnan(task));
    qw_ab_perf_close(&p);
    /* the real counters: either they count, or they say why not */
    qw_ab_perf_open(&p);
    if (p.available) {
        assert_true(p.n >= 1);
        qw_ab_perf_read(&p, &cyc, &task);
        assert_true(cyc >= 0 && task >= 0);
    } else {
        assert_non_null(strstr(p.reason, "unavailable"));
    }
    qw_ab_perf_close(&p);
    double f = qw_ab_pagecache_fraction("/proc/self/exe");
    assert_true(isnan(f) || (f >= 0 && f <= 1));
    assert_true(isnan(qw_ab_pagecache_fraction("/nonexistent/file")));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_ok),        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_cond_three_valued), cmocka_unit_test(test_verdicts),
        cmocka_unit_test(test_order_balanced),  cmocka_unit_test(test_bootstrap),
        cmocka_unit_test(test_suggest_reps),    cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_sign_test),       cmocka_unit_test(test_trimmed_mean),
        cmocka_unit_test(test_schedule),        cmocka_unit_test(test_noise_floor_refuses),
        cmocka_unit_test(test_perf_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
