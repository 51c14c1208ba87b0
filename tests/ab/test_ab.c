/* test_ab.c — the library of `qwisp ab` (ab.h): the criteria parser's
 * errors (line, column, what was expected), three-valued evaluation on
 * intervals, rule order and "inconclusive", the balanced order, the bootstrap
 * (deterministic, contains the truth, degenerate on constant data), the reps
 * suggestion, and SHA-256 against the standard's test vectors. */
#include "qwisp/ab.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_ok),        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_cond_three_valued), cmocka_unit_test(test_verdicts),
        cmocka_unit_test(test_order_balanced),  cmocka_unit_test(test_bootstrap),
        cmocka_unit_test(test_suggest_reps),    cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_sign_test),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
