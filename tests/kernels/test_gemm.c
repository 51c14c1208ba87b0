/* test_gemm.c — the prefill tiles and batched matmuls against the dot.
 *
 *  - qw_gemm_get(T) tiles (6 rows × 4 tokens, k up to QW_GEMM_K_MAX), and the
 *    wide ones where the level has them (qw_gemm_wide_toks), must give EXACTLY the bits of
 *    qw_vec_dot_get(T) at the same level (their contract), and be within the
 *    quant test's limit of the scalar reference qw_vec_dot_ref.
 *  - qw_gemv_get(T) (rows × 1 token): the same exactness, under every
 *    calibration of its rows at once / prefetch level and distance (tune.h).
 *  - qw_matmul_batch (tiles + dot tails, idx gathers, several tasks in one
 *    pass, 1 and 2 threads) equals a plain loop of qw_vec_dot for every
 *    (row, token), bit for bit, for token counts 1..9 and odd row counts.
 *  - qw_axpy_f16 equals the reference's bits at every level.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qwisp/ops.h"
#include "qwisp/quant.h"
#include "qwisp/tune.h"
#include "levels.h"

static uint32_t g_rng = 1;
static float frand(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* n_rows random rows of type t (quantized from random floats) of length k. */
static void *rand_rows(qw_type t, int64_t n_rows, int64_t k) {
    const size_t rb = qw_row_bytes(t, k);
    char *w = malloc(rb * (size_t)n_rows);
    float *f = malloc(sizeof(float) * (size_t)k);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < k; i++) f[i] = frand() * (1.0f + (float)(r % 7));
        qw_quantize_row(t, f, w + (size_t)r * rb, k);
    }
    free(f);
    return w;
}

/* The tile of `nt` tokens (fn) against the level's dot and the reference. */
static void check_tile_form(qw_type wt, qw_gemm_fn fn, int nt) {
    const int64_t ks[] = {128, 256, 2048, QW_GEMM_K_MAX};
    const qw_type xt = qw_vec_dot_type(wt);
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        const int64_t k = ks[ki];
        if (k % qw_type_block_elems(wt)) continue; /* K-quants: whole 256-element blocks */
        const size_t wrb = qw_row_bytes(wt, k), xrb = qw_row_bytes(xt, k);
        enum { ROWS = 6 };
        char *w = rand_rows(wt, ROWS, k);
        char *x = rand_rows(xt, nt, k);
        const void *xp[QW_GEMM_WIDE_TOKS];
        float out[QW_GEMM_WIDE_TOKS][ROWS];
        float *yp[QW_GEMM_WIDE_TOKS];
        for (int t = 0; t < nt; t++) xp[t] = x + (size_t)t * xrb, yp[t] = out[t];
        fn(k, w, wrb, ROWS, xp, yp);
        for (int t = 0; t < nt; t++)
            for (int r = 0; r < ROWS; r++) {
                float d, ref;
                qw_vec_dot_get(wt)(k, &d, w + (size_t)r * wrb, xp[t]);
                qw_vec_dot_ref(wt, k, &ref, w + (size_t)r * wrb, xp[t]);
                assert_memory_equal(&d, &out[t][r], sizeof d);
/* rounding against the reference grows with the sum of |terms|,
                 * at most k * |w| * |x| = k * (1 + r % 7) * (1 + t % 7) here
                 * (rand_rows' scales): the results may cancel to far less */
                const float terms = (float)k * (float)(1 + r % 7) * (float)(1 + t % 7);
                assert_true(fabsf(out[t][r] - ref) <= 1e-4f * (1.0f + fabsf(ref)) + 1e-7f * terms);
            }
        free(w);
        free(x);
    }
}

static void check_tiles(qw_type wt) {
    if (!qw_gemm_get(wt)) {
        print_message("no tile for %s at level %s: skipped\n", qw_type_name(wt), qw_simd_level());
        return;
    }
    check_tile_form(wt, qw_gemm_get(wt), QW_GEMM_TOKS);
    if (qw_gemm_wide_get(wt)) {
        assert_true(qw_gemm_wide_toks(wt) > QW_GEMM_TOKS && qw_gemm_wide_toks(wt) <= QW_GEMM_WIDE_TOKS);
        check_tile_form(wt, qw_gemm_wide_get(wt), qw_gemm_wide_toks(wt));
    }
}

/* Q4_K / Q5_K rows of random bytes (every packed scale and min pattern,
 * every level in every place) with finite d and dmin (both blocks start
 * with them). */
static bool has_d_dmin_first(qw_type t) { return t == QW_TYPE_Q4_K || t == QW_TYPE_Q5_K; }
static void randomize_blocks(qw_type t, char *w, int64_t n_rows, int64_t k) {
    const size_t bb = qw_type_block_bytes(t);
    for (int64_t i = 0; i < n_rows * (k / QW_QK_K); i++) {
        unsigned char *p = (unsigned char *)w + (size_t)i * bb;
        for (size_t j = 0; j < bb; j++) p[j] = (unsigned char)(frand() * 128.0f + 128.0f);
        const uint16_t d = qw_f32_to_fp16(frand() * 0.01f), dmin = qw_f32_to_fp16(frand() * 0.01f);
        memcpy(p, &d, 2);
        memcpy(p + 2, &dmin, 2);
    }
}

static void check_gemv(qw_type wt) {
    if (!qw_gemv_get(wt)) return;
    /* whole and partial chunks of 16 blocks (the Q8_0 loops' scale gathers): 4, 8, 12, 16, 16 + 8, 32, 256 */
    const int64_t ks[] = {128, 256, 384, 512, 768, 1024, QW_GEMM_K_MAX};
    const qw_type xt = qw_vec_dot_type(wt);
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
        for (int raw = 0; raw <= has_d_dmin_first(wt); raw++) {
            const int64_t k = ks[ki];
            if (k % qw_type_block_elems(wt)) continue; /* K-quants: whole 256-element blocks */
            enum { ROWS = 21 }; /* not a multiple of 2, 4, 8 or 16 */
            const size_t wrb = qw_row_bytes(wt, k);
            char *w = rand_rows(wt, ROWS, k);
            if (raw) randomize_blocks(wt, w, ROWS, k);
            char *x = rand_rows(xt, 1, k);
            float out[ROWS];
            const void *xp[1] = {x};
            float *yp[1] = {out};
            /* every calibration of the row loop (tune.h) gives the dot's bits */
            for (int64_t rows_at_once = 2; rows_at_once <= 8; rows_at_once *= 2)
                for (int l2 = 0; l2 <= 1; l2++) {
                    qw_tune_set(QW_TUNE_DECODE_ROWS, rows_at_once, QW_TUNE_SRC_KNOB);
                    qw_tune_set(QW_TUNE_DECODE_PREFETCH_L2, l2, QW_TUNE_SRC_KNOB);
                    qw_tune_set(QW_TUNE_DECODE_AHEAD, l2 ? 1 << 10 : 64 << 10, QW_TUNE_SRC_KNOB);
                    memset(out, 0xff, sizeof out);
                    qw_gemv_get(wt)(k, w, wrb, ROWS, xp, yp);
                    for (int r = 0; r < ROWS; r++) {
                        float d;
                        qw_vec_dot_get(wt)(k, &d, w + (size_t)r * wrb, x);
                        assert_memory_equal(&d, &out[r], sizeof d);
                    }
                }
            qw_tune_reset();
            free(w);
            free(x);
        }
}

/* Tiles and row loops at every level this CPU runs: each level's tile must
 * give its own dot's bits (a patched table swaps tile and dot together). */
static void check_levels(qw_type wt, bool gemv) {
    for (int l = 0; l < N_LEVELS; l++) {
        if (!use_level(k_levels[l])) continue;
        check_tiles(wt);
        if (gemv) check_gemv(wt);
    }
    restore_best();
}
static void test_tile_q8_0(void **s) { (void)s; check_levels(QW_TYPE_Q8_0, true); }
static void test_tile_q4_0(void **s) { (void)s; check_levels(QW_TYPE_Q4_0, true); }
static void test_tile_q4_K(void **s) { (void)s; check_levels(QW_TYPE_Q4_K, true); }
static void test_tile_q2_K(void **s) { (void)s; check_levels(QW_TYPE_Q2_K, false); }
static void test_tile_q3_K(void **s) { (void)s; check_levels(QW_TYPE_Q3_K, false); }
static void test_tile_q5_K(void **s) { (void)s; check_levels(QW_TYPE_Q5_K, true); }
static void test_tile_q6_K(void **s) { (void)s; check_levels(QW_TYPE_Q6_K, true); }

static void check_batch(qw_type wt, int64_t k, int threads) {
    qw_threadpool *tp = qw_threadpool_new(threads);
    const int64_t rows[2] = {37, 64};
    const int64_t n_in = 12;
    const qw_type at = qw_vec_dot_type(wt);
    const size_t xrb = qw_row_bytes(at, k);
    float *xf = malloc(sizeof(float) * (size_t)(n_in * k));
    for (int64_t i = 0; i < n_in * k; i++) xf[i] = frand();
    void *xq = malloc(qw_act_bytes(wt, k, n_in));
    qw_act_convert(tp, wt, xf, k, k, n_in, xq);
    int32_t idx[9] = {11, 0, 5, 5, 3, 9, 1, 2, 7};
    for (int64_t n_tok = 1; n_tok <= 9; n_tok++) {
        char *w[2];
        float *y[2];
        qw_mm_task tasks[2];
        for (int m = 0; m < 2; m++) {
            w[m] = rand_rows(wt, rows[m], k);
            y[m] = calloc((size_t)(n_tok * rows[m]), sizeof(float));
            tasks[m] = (qw_mm_task){w[m], qw_row_bytes(wt, k), rows[m], xq, m ? idx : NULL, n_tok, y[m], rows[m]};
        }
        qw_matmul_batch(tp, wt, k, tasks, 2);
        for (int m = 0; m < 2; m++) {
            for (int64_t t = 0; t < n_tok; t++)
                for (int64_t r = 0; r < rows[m]; r++) {
                    float d;
                    const char *xr = (const char *)xq + (size_t)(m ? idx[t] : t) * xrb;
                    qw_vec_dot(wt, k, &d, w[m] + (size_t)r * qw_row_bytes(wt, k), xr);
                    assert_memory_equal(&d, &y[m][t * rows[m] + r], sizeof d);
                }
            free(w[m]);
            free(y[m]);
        }
    }
    free(xf);
    free(xq);
    qw_threadpool_free(tp);
}

static void test_batch(void **s) {
    (void)s;
    const qw_type types[] = {QW_TYPE_Q8_0, QW_TYPE_Q4_0, QW_TYPE_Q2_K, QW_TYPE_Q3_K, QW_TYPE_Q4_K,
                             QW_TYPE_Q5_K, QW_TYPE_Q6_K, QW_TYPE_F32,  QW_TYPE_F16};
    for (int l = 0; l < N_LEVELS; l++) {
        if (!use_level(k_levels[l])) continue;
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            check_batch(types[i], 256, 1);
            check_batch(types[i], 256, 2);
            if (96 % qw_type_block_elems(types[i]) == 0)
                check_batch(types[i], 96, 2); /* k not a multiple of the tile's: dot path */
        }
    }
    restore_best();
}

static void test_axpy_f16(void **s) {
    (void)s;
    enum { N = 77 };
    uint16_t x[N];
    float y0[N], ref[N], got[N];
    for (int i = 0; i < N; i++) x[i] = qw_f32_to_fp16(frand() * 3.0f), y0[i] = frand();
    assert_int_equal(qw_simd_force("scalar"), 0);
    memcpy(ref, y0, sizeof ref);
    qw_axpy_f16(ref, 0.3717f, x, N);
    for (int l = 0; l < N_LEVELS; l++) {
        if (!use_level(k_levels[l])) continue;
        memcpy(got, y0, sizeof got);
        qw_axpy_f16(got, 0.3717f, x, N);
        assert_memory_equal(got, ref, sizeof got);
    }
    restore_best();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tile_q8_0),
        cmocka_unit_test(test_tile_q4_0),
        cmocka_unit_test(test_tile_q4_K),
        cmocka_unit_test(test_tile_q2_K),
        cmocka_unit_test(test_tile_q3_K),
        cmocka_unit_test(test_tile_q5_K),
        cmocka_unit_test(test_tile_q6_K),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_axpy_f16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
