/* test_decode_trial.c — the decode-loop trial (src/kernels/decode_trial.c):
 * it alternates the two loops, keeps the one whose steps were faster, leaves
 * a loop pinned by QWISP_DECODE_GEMV or QWISP_TUNE=off alone, and a real CPU
 * decode runs it with the logits of either loop pinned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/model.h"
#include "qwisp/ops.h"
#include "qwisp/options.h"
#include "qwisp/place.h"
#include "qwisp/tune.h"

#include <string.h>

#include "model_testlib.h"

/* Runs the trial's steps with synthetic times: `rows` seconds a step with
 * the row dots, `loop` with the GEMV loop (warm-up steps: 1 s).  Checks that
 * the timed steps alternate 0, 1, 0, 1, ... */
static int run_trial(double rows, double loop) {
    int steps = 0, timed = 0;
    for (int st; (st = qw_decode_trial_begin()) >= 0; steps++) {
        const int64_t v = qw_tune_get(QW_TUNE_DECODE_GEMV);
        if (st >= 2) assert_int_equal(v, timed++ & 1);
        qw_decode_trial_end(st, st < 2 ? 1.0 : v ? loop : rows);
        assert_true(steps < 100);
    }
    return steps;
}

/* A fresh trial from decode_gemv = gemv (of source src), with QWISP_TUNE not
 * "off" (tests/run.sh runs every program with off, where no trial runs). */
static void fresh(int64_t gemv, qw_tune_src src) {
    qw_error err = {0};
    assert_int_equal(qw_opt_set(QW_OPT_TUNE, "cached", "test", &err), 0);
    qw_tune_reset();
    qw_decode_trial_reset();
    qw_tune_set(QW_TUNE_DECODE_GEMV, gemv, src);
}

static void test_keeps_the_faster(void **state) {
    (void)state;
    char line[200];
    fresh(1, QW_TUNE_SRC_CALIBRATED);
    assert_true(run_trial(0.010, 0.012) > 2);
    assert_int_equal(qw_tune_get(QW_TUNE_DECODE_GEMV), 0);
    assert_int_equal(qw_tune_source(QW_TUNE_DECODE_GEMV), QW_TUNE_SRC_MEASURED);
    qw_decode_trial_report(line, sizeof line);
    assert_non_null(strstr(line, "decode_gemv 0"));
    assert_int_equal(qw_decode_trial_begin(), -1); /* once a process */
    fresh(0, QW_TUNE_SRC_DEFAULT);
    run_trial(0.012, 0.010);
    assert_int_equal(qw_tune_get(QW_TUNE_DECODE_GEMV), 1);
}

static void test_pinned(void **state) {
    (void)state;
    char line[200];
    fresh(1, QW_TUNE_SRC_KNOB);
    assert_int_equal(qw_decode_trial_begin(), -1);
    assert_int_equal(qw_tune_get(QW_TUNE_DECODE_GEMV), 1);
    qw_decode_trial_report(line, sizeof line);
    assert_string_equal(line, "");
    qw_error err = {0};
    fresh(1, QW_TUNE_SRC_CALIBRATED);
    assert_int_equal(qw_opt_set(QW_OPT_TUNE, "off", "test", &err), 0);
    assert_int_equal(qw_decode_trial_begin(), -1);
    assert_int_equal(qw_tune_get(QW_TUNE_DECODE_GEMV), 1);
}

/* The last step's logits of a 24-token greedy decode on the shipped Q8_0 model. */
static float *decode_logits(qw_model *m, int *n_vocab) {
    qw_error err = {0};
    qw_ctx *c = qw_ctx_new_placed(m, 64, 2, &err);
    if (!c) fail_msg("ctx: %s", err.msg);
    int32_t t = 17;
    if (qw_ctx_eval(c, &t, 1, QW_LOGITS_LAST, &err)) fail_msg("eval: %s", err.msg);
    const int V = m->hp.n_vocab;
    for (int i = 0; i < 24; i++) {
        const float *l = qw_ctx_logits(c);
        int best = 0;
        for (int j = 1; j < V; j++) best = l[j] > l[best] ? j : best;
        t = best;
        if (qw_ctx_eval(c, &t, 1, QW_LOGITS_LAST, &err)) fail_msg("eval: %s", err.msg);
    }
    float *out = malloc((size_t)V * sizeof(float));
    memcpy(out, qw_ctx_logits(c), (size_t)V * sizeof(float));
    qw_ctx_free(c);
    *n_vocab = V;
    return out;
}

static void test_real_decode(void **state) {
    (void)state;
    qw_error err = {0};
    qw_model *m = qw_model_load("models/default.gguf", &err);
    if (!m) fail_msg("%s", err.msg);
    int V = 0;
    float *pinned[2];
    for (int v = 0; v < 2; v++) {
        fresh(v, QW_TUNE_SRC_KNOB);
        pinned[v] = decode_logits(m, &V);
    }
    fresh(1, QW_TUNE_SRC_CALIBRATED);
    float *tried = decode_logits(m, &V);
    char line[200];
    qw_decode_trial_report(line, sizeof line);
    printf("INFO: %s\n", line);
    assert_non_null(strstr(line, "measured in decode"));
    assert_int_equal(qw_tune_source(QW_TUNE_DECODE_GEMV), QW_TUNE_SRC_MEASURED);
    assert_memory_equal(pinned[0], pinned[1], (size_t)V * sizeof(float));
    assert_memory_equal(tried, pinned[0], (size_t)V * sizeof(float));
    free(pinned[0]), free(pinned[1]), free(tried);
    qw_model_free(m);
    qw_tune_reset();
    qw_decode_trial_reset();
}

int main(void) {
    simd_from_knob("test_decode_trial");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keeps_the_faster),
        cmocka_unit_test(test_pinned),
        cmocka_unit_test(test_real_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
