/* test_forward.c — behaviour of the qwen3moe forward pass that the peer
 * parity tests do not pin down: one code path for prefill and decode (the
 * logits of a token must not depend on how the sequence was chunked), KV
 * truncation, and clear errors for bad inputs and bad model files.  Run once
 * per SIMD level by tests/run.sh (QWISP_SIMD, model_testlib.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/place.h"
#include "qwisp/gen_model.h"
#include "qwisp/gguf.h"
#include "qwisp/model.h"
#include "qwisp/options.h"
#include "qwisp/quant.h"
#include "model_testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[256];
static char g_f32[300], g_q8[300], g_q4[300], g_q8w[300];

/* `wide`: rows of 256 and 128 elements, so prefill runs the tiles (they need
 * n % QW_GEMM_K == 0; the tiny preset's 64 wide rows only use the dots). */
static int write_model(const char *path, uint32_t type, bool tied, bool wide) {
    qw_gen_model_params p;
    qw_error err = {0};
    if (qw_gen_model_preset("tiny", &p)) return -1;
    p.type = type;
    p.embd_type = type;
    p.tied = tied;
    if (wide) p.n_embd = 256, p.head_dim = 32, p.n_ff_exp = 128;
    if (qw_gen_model_write(&p, path, &err)) {
        fprintf(stderr, "gen: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/qwisp-test-forward.XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_f32, sizeof g_f32, "%s/f32.gguf", g_dir);
    snprintf(g_q8, sizeof g_q8, "%s/q8.gguf", g_dir);
    snprintf(g_q4, sizeof g_q4, "%s/q4.gguf", g_dir);
    snprintf(g_q8w, sizeof g_q8w, "%s/q8w.gguf", g_dir);
    return write_model(g_f32, QW_TYPE_F32, false, false) || write_model(g_q8, QW_TYPE_Q8_0, true, false) ||
           write_model(g_q4, QW_TYPE_Q4_0, false, true) || write_model(g_q8w, QW_TYPE_Q8_0, false, true);
}

static int teardown(void **state) {
    (void)state;
    unlink(g_f32);
    unlink(g_q8);
    unlink(g_q4);
    unlink(g_q8w);
    rmdir(g_dir);
    return 0;
}

/* Prefill of the whole sequence with all logits == token-by-token decode. */
static void check_chunking(const char *path) {
    qw_error err = {0};
    qw_model *m = qw_model_load(path, &err);
    assert_non_null(m);
    const int n = 40, V = m->hp.n_vocab;
    int32_t ids[40];
    for (int i = 0; i < n; i++) ids[i] = (i * 37 + 11) % V;

    qw_ctx *a = qw_ctx_new_placed(m, 64, 2, &err);
    assert_non_null(a);
    assert_int_equal(qw_ctx_eval(a, ids, n, QW_LOGITS_ALL, &err), 0);
    float *all = malloc((size_t)n * V * sizeof(float));
    memcpy(all, qw_ctx_logits(a), (size_t)n * V * sizeof(float));

    qw_ctx *b = qw_ctx_new_placed(m, 64, 1, &err);
    assert_non_null(b);
    /* first 13 tokens as one chunk, then one at a time */
    assert_int_equal(qw_ctx_eval(b, ids, 13, QW_LOGITS_LAST, &err), 0);
    assert_true(max_abs_diff(qw_ctx_logits(b), all + 12 * V, V) < 1e-3f);
    for (int i = 13; i < n; i++) {
        assert_int_equal(qw_ctx_eval(b, &ids[i], 1, QW_LOGITS_LAST, &err), 0);
        float d = max_abs_diff(qw_ctx_logits(b), all + (size_t)i * V, V);
        if (d >= 1e-3f) fail_msg("position %d: decode vs prefill logits differ by %g", i, d);
    }
    assert_int_equal(qw_ctx_n_past(b), n);

    /* truncate and replay gives the same logits again */
    qw_ctx_truncate(b, 20);
    assert_int_equal(qw_ctx_n_past(b), 20);
    assert_int_equal(qw_ctx_eval(b, &ids[20], 5, QW_LOGITS_LAST, &err), 0);
    assert_true(max_abs_diff(qw_ctx_logits(b), all + 24 * V, V) < 1e-3f);

    /* logits are finite and not constant */
    float lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < V; i++) {
        assert_true(isfinite(all[i]));
        lo = fminf(lo, all[i]);
        hi = fmaxf(hi, all[i]);
    }
    assert_true(hi - lo > 1.0f);
    free(all);
    qw_ctx_free(a);
    qw_ctx_free(b);
    qw_model_free(m);
}

static void test_chunking_f32(void **state) { (void)state; check_chunking(g_f32); }
static void test_chunking_q8(void **state) { (void)state; check_chunking(g_q8); }
/* The level under test against the scalar reference on the same tokens:
 * kernels of different levels sum in other orders, so not bit-identical, but
 * a wrong kernel (a bad patch, a mis-gathered Q4_0 block) is far off this. */
static void check_against_scalar(const char *path) {
    qw_error err = {0};
    char level[32];
    snprintf(level, sizeof level, "%s", qw_simd_level());
    qw_model *m = qw_model_load(path, &err);
    assert_non_null(m);
    const int n = 24, V = m->hp.n_vocab;
    int32_t ids[24];
    for (int i = 0; i < n; i++) ids[i] = (i * 53 + 7) % V;
    float *got = malloc((size_t)n * V * sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) assert_int_equal(qw_simd_force("scalar"), 0);
        qw_ctx *c = qw_ctx_new_placed(m, 64, 2, &err);
        assert_non_null(c);
        assert_int_equal(qw_ctx_eval(c, ids, n, QW_LOGITS_ALL, &err), 0);
        const float *l = qw_ctx_logits(c);
        if (pass == 0) memcpy(got, l, (size_t)n * V * sizeof(float));
        else {
            float scale = 0;
            for (size_t i = 0; i < (size_t)n * V; i++) scale = fmaxf(scale, fabsf(l[i]));
            const float d = max_abs_diff(got, l, n * V);
            if (d > 1e-3f * scale + 1e-4f)
                fail_msg("%s: level %s vs scalar: logits differ by %g (max |logit| %g)", path, level, d, scale);
        }
        qw_ctx_free(c);
    }
    assert_int_equal(qw_simd_force(level), 0);
    free(got);
    qw_model_free(m);
}
static void test_levels_q4(void **state) { (void)state; check_against_scalar(g_q4); }
static void test_levels_q8(void **state) { (void)state; check_against_scalar(g_q8w); }

/* Q4_0 has its own tiles per level (VBMI gathers on AVX-512, patched to the
 * AVX2 ones without VBMI): chunked prefill must give decode's bits on each. */
static void test_chunking_q4(void **state) { (void)state; check_chunking(g_q4); }

/* QWISP_KV_TYPE=f32: the same one-path consistency, twice the KV bytes, and
 * logits within rounding of the f16 cache's. */
static void test_kv_f32(void **state) {
    (void)state;
    qw_error err = {0};
    qw_model *m = qw_model_load(g_f32, &err);
    assert_non_null(m);
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = (i * 29 + 7) % m->hp.n_vocab;
    qw_ctx *h = qw_ctx_new_placed(m, 64, 1, &err);
    assert_int_equal(qw_ctx_eval(h, ids, 12, QW_LOGITS_LAST, &err), 0);
    setenv("QWISP_KV_TYPE", "f32", 1);
    assert_int_equal(qw_options_init(&err), 0);
    qw_ctx *f = qw_ctx_new_placed(m, 64, 1, &err);
    assert_int_equal(qw_ctx_eval(f, ids, 12, QW_LOGITS_LAST, &err), 0);
    assert_int_equal(qw_ctx_kv_bytes(f), 2 * qw_ctx_kv_bytes(h));
    float d = max_abs_diff(qw_ctx_logits(f), qw_ctx_logits(h), m->hp.n_vocab);
    assert_true(d > 0.0f && d < 0.05f); /* different rounding, same model */
    qw_ctx_free(f);
    check_chunking(g_f32);
    unsetenv("QWISP_KV_TYPE");
    assert_int_equal(qw_options_init(&err), 0);
    qw_ctx_free(h);
    qw_model_free(m);
}

static void test_bad_inputs(void **state) {
    (void)state;
    qw_error err = {0};
    qw_model *m = qw_model_load(g_q8, &err);
    assert_non_null(m);
    assert_true(m->tied_output);
    qw_ctx *c = qw_ctx_new_placed(m, 16, 2, &err);
    assert_non_null(c);
    int32_t bad = m->hp.n_vocab;
    assert_int_equal(qw_ctx_eval(c, &bad, 1, QW_LOGITS_LAST, &err), -1);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    int32_t ids[20] = {0};
    assert_int_equal(qw_ctx_eval(c, ids, 20, QW_LOGITS_LAST, &err), -1);
    assert_non_null(strstr(err.msg, "context full"));
    assert_int_equal(qw_ctx_n_past(c), 0); /* nothing half-applied */
    assert_int_equal(qw_ctx_eval(c, ids, 16, QW_LOGITS_LAST, &err), 0);
    qw_ctx_free(c);
    qw_model_free(m);
}

/* A GGUF that is valid but is not a qwen3moe model. */
static void test_wrong_arch(void **state) {
    (void)state;
    char path[320];
    snprintf(path, sizeof path, "%s/llama.gguf", g_dir);
    qw_gguf_writer *w = qw_gguf_writer_new();
    qw_gguf_set_str(w, "general.architecture", "llama");
    qw_error err = {0};
    assert_int_equal(qw_gguf_writer_write(w, path, NULL, NULL, &err), 0);
    qw_gguf_writer_free(w);
    assert_null(qw_model_load(path, &err));
    assert_non_null(strstr(err.msg, "architecture 'llama' is not supported"));
    unlink(path);
}

/* A qwen3moe file with one tensor missing names that tensor. */
static void test_missing_tensor(void **state) {
    (void)state;
    qw_error err = {0};
    char path[320];
    snprintf(path, sizeof path, "%s/missing.gguf", g_dir);
    write_gguf_variant(g_f32, path, "blk.1.ffn_up_exps.weight", NULL);
    assert_null(qw_model_load(path, &err));
    assert_non_null(strstr(err.msg, "missing tensor 'blk.1.ffn_up_exps.weight'"));
    unlink(path);
}

/* A batched step over three sequences gives each the logits it gets alone. */
static void test_batch_matches_single(void **state) {
    (void)state;
    qw_error err = {0};
    qw_model *m = qw_model_load(g_q8, &err);
    assert_non_null(m);
    const int V = m->hp.n_vocab;
    int32_t a[9], b[5], c3[13];
    for (int i = 0; i < 9; i++) a[i] = (i * 7 + 3) % V;
    for (int i = 0; i < 5; i++) b[i] = (i * 11 + 5) % V;
    for (int i = 0; i < 13; i++) c3[i] = (i * 13 + 1) % V;
    const int32_t *seqs[3] = {a, b, c3};
    const int lens[3] = {9, 5, 13};

    /* reference: each alone, prompt then two decode steps */
    float *ref = malloc((size_t)3 * 3 * V * sizeof(float));
    int32_t next[3][2];
    for (int s = 0; s < 3; s++) {
        qw_ctx *c = qw_ctx_new_placed(m, 64, 1, &err);
        assert_non_null(c);
        assert_int_equal(qw_ctx_eval(c, seqs[s], lens[s], QW_LOGITS_LAST, &err), 0);
        memcpy(ref + (size_t)(s * 3) * V, qw_ctx_logits(c), (size_t)V * sizeof(float));
        for (int k = 0; k < 2; k++) {
            next[s][k] = (s * 5 + k * 3 + 2) % V;
            assert_int_equal(qw_ctx_eval(c, &next[s][k], 1, QW_LOGITS_LAST, &err), 0);
            memcpy(ref + (size_t)(s * 3 + k + 1) * V, qw_ctx_logits(c), (size_t)V * sizeof(float));
        }
        qw_ctx_free(c);
    }
    /* batched: all three prompts in one step, then two joint decode steps */
    qw_ctx *ws = qw_ctx_new_placed(m, 64, 2, &err);
    qw_ctx *lanes[3];
    for (int s = 0; s < 3; s++) assert_non_null(lanes[s] = qw_ctx_new_placed(m, 64, 1, &err));
    qw_batch_seq bs[3];
    for (int s = 0; s < 3; s++) bs[s] = (qw_batch_seq){lanes[s], seqs[s], lens[s], true};
    assert_int_equal(qw_batch_eval(ws, bs, 3, &err), 0);
    for (int s = 0; s < 3; s++) {
        float d = max_abs_diff(qw_ctx_logits(lanes[s]), ref + (size_t)(s * 3) * V, V);
        if (d > 1e-4f) fail_msg("sequence %d prompt: batched vs alone differ by %g", s, d);
        assert_int_equal(qw_ctx_n_past(lanes[s]), lens[s]);
    }
    for (int k = 0; k < 2; k++) {
        for (int s = 0; s < 3; s++) bs[s] = (qw_batch_seq){lanes[s], &next[s][k], 1, true};
        assert_int_equal(qw_batch_eval(ws, bs, 3, &err), 0);
        for (int s = 0; s < 3; s++) {
            float d = max_abs_diff(qw_ctx_logits(lanes[s]), ref + (size_t)(s * 3 + k + 1) * V, V);
            if (d > 1e-4f) fail_msg("sequence %d step %d: batched vs alone differ by %g", s, k, d);
        }
    }
    /* errors leave every sequence untouched */
    bs[0] = (qw_batch_seq){lanes[0], a, 1, true};
    bs[1] = (qw_batch_seq){lanes[0], b, 1, true};
    assert_int_equal(qw_batch_eval(ws, bs, 2, &err), -1);
    assert_non_null(strstr(err.msg, "share a context"));
    assert_int_equal(qw_ctx_n_past(lanes[0]), 11);
    for (int s = 0; s < 3; s++) qw_ctx_free(lanes[s]);
    qw_ctx_free(ws);
    free(ref);
    qw_model_free(m);
}

int main(void) {
    simd_from_knob("test_forward");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunking_f32),
        cmocka_unit_test(test_chunking_q8),
        cmocka_unit_test(test_chunking_q4),
        cmocka_unit_test(test_levels_q4),
        cmocka_unit_test(test_levels_q8),
        cmocka_unit_test(test_kv_f32),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_wrong_arch),
        cmocka_unit_test(test_missing_tensor),
        cmocka_unit_test(test_batch_matches_single),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
