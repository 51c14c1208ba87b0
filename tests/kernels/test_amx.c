/* test_amx.c — the "avx512-amx" level: AMX-INT8 prefill tiles and the
 * reference-order Q8_0/Q4_0 dots and row loops beside them.
 *
 * The level's contract is stronger than the other levels': every Q8_0 result
 * (and Q4_0's, unless qw_simd_amx_q4_0(false), QWISP_AMX_Q4_0=0, gives Q4_0
 * the AVX-512 level's kernels) — dot, one-token row loop, 4- and
 * 16-token AMX tiles, whole batched matmuls — has EXACTLY the bits of the
 * scalar reference qw_vec_dot_ref —
 * per block an exact int32, times d_w*d_x, summed in block order.  (The
 * other AVX-512 levels keep llama.cpp's 8-lane order for Q8_0 and a 16-lane
 * one for Q4_0, so they agree with the reference only within rounding; the
 * last test states that difference.)
 *
 *  - test_blockorder: the AVX-512 half (blockorder_avx512vbmi.c) on any CPU with
 *    AVX-512 VNNI + VBMI, called straight from the private table, and the Q8_0 and
 *    Q4_0 tiles through the software model of the tile instructions, so a
 *    machine without AMX still checks them;
 *  - test_amx_tiles / test_amx_matmul: the AMX tiles and matmul; skipped with
 *    one "SKIP:" line where the CPU or the kernel does not allow AMX.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/kquant_impl.h"
#include "kernels/quant_impl.h"
#include "qwisp/ops.h"
#include "qwisp/quant.h"
#include "qwisp/threadpool.h"
#include "qwisp/tune.h"
#include "levels.h"

static uint32_t g_rng = 7;
static float frand(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void *rand_rows(qw_type t, int64_t n_rows, int64_t k) {
    const size_t rb = qw_row_bytes(t, k);
    char *w = malloc(rb * (size_t)n_rows);
    float *f = malloc(sizeof(float) * (size_t)k);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < k; i++) f[i] = frand() * (1.0f + (float)(r % 7)) * (i % 97 == 0 ? 40.0f : 1.0f);
        qw_quantize_row(t, f, w + (size_t)r * rb, k);
    }
    free(f);
    return w;
}

static void assert_ref_bits(qw_type wt, int64_t k, const char *w, size_t rb, int64_t r, const void *x, float got,
                            const char *what) {
    float ref;
    qw_vec_dot_ref(wt, k, &ref, w + (size_t)r * rb, x);
    if (memcmp(&ref, &got, sizeof ref))
        fail_msg("%s %s k=%lld row %lld: %.9g, reference %.9g", what, qw_type_name(wt), (long long)k, (long long)r,
                 got, ref);
}

static const int64_t k_ks[] = {128, 256, 384, 640, 2048, QW_GEMM_K_MAX}; /* the row loop's chunks of 16 blocks: 4, 8, 12, 16 + 4, whole */
enum { ROWS = 40 }; /* two 16-row strips and 8 left over */

static void check_blockorder(qw_type wt) {
    const bool q4 = wt == QW_TYPE_Q4_0;
    const qw_vec_dot_fn dot = q4 ? qw_blockorder_avx512.dot_q4_0 : qw_blockorder_avx512.dot_q8_0;
    const qw_gemm_fn gemv = q4 ? qw_blockorder_avx512.gemv_q4_0 : qw_blockorder_avx512.gemv_q8_0;
    for (size_t ki = 0; ki < sizeof k_ks / sizeof k_ks[0]; ki++) {
        const int64_t k = k_ks[ki];
        const size_t rb = qw_row_bytes(wt, k);
        char *w = rand_rows(wt, ROWS, k);
        char *x = rand_rows(QW_TYPE_Q8_0, 1, k);
        float y[ROWS];
        const void *xp[1] = {x};
        float *yp[1] = {y};
        /* four rows side by side, and the rows past the last four alone */
        for (int64_t n_rows = ROWS; n_rows >= ROWS - 3; n_rows -= 1) {
            memset(y, 0xff, sizeof y);
            gemv(k, w, rb, n_rows, xp, yp);
            for (int64_t r = 0; r < n_rows; r++) assert_ref_bits(wt, k, w, rb, r, x, y[r], "row loop");
            for (int64_t r = n_rows; r < ROWS; r++) assert_true(isnan(y[r])); /* not written */
        }
        for (int64_t r = 0; r < ROWS; r++) {
            float d;
            dot(k, &d, w + (size_t)r * rb, x);
            assert_ref_bits(wt, k, w, rb, r, x, d, "dot");
        }
        free(w);
        free(x);
    }
    /* the dot (and the row loop, through it) also takes rows that are not whole 128-element groups */
    for (int64_t k = 32; k <= 224; k += 64) {
        char *w = rand_rows(wt, 3, k), *x = rand_rows(QW_TYPE_Q8_0, 1, k);
        float y[3];
        const void *xp[1] = {x};
        float *yp[1] = {y};
        gemv(k, w, qw_row_bytes(wt, k), 3, xp, yp);
        for (int64_t r = 0; r < 3; r++) {
            float d;
            dot(k, &d, w + (size_t)r * qw_row_bytes(wt, k), x);
            assert_ref_bits(wt, k, w, qw_row_bytes(wt, k), r, x, d, "dot");
            assert_ref_bits(wt, k, w, qw_row_bytes(wt, k), r, x, y[r], "row loop");
        }
        free(w);
        free(x);
    }
}

/* Tiles run through the software model of the tile instructions: nt tokens
 * (each of nts) of x, xrb bytes apart, against ROWS rows of w (two strips of
 * 16 and 8 rows left over) give the scalar reference's bits, and nothing
 * past the nt tokens is written; calls outside the tiles' limits are refused. */
typedef bool (*emulated_fn)(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                            float *const *y, int nt);
static void check_emulated(qw_type wt, emulated_fn emulated, int64_t k, const char *w, size_t rb, const char *x,
                           size_t xrb, const int *nts, size_t n_nts) {
    static float out[QW_GEMM_N_TOKS][ROWS];
    const void *xp[QW_GEMM_N_TOKS];
    float *yp[QW_GEMM_N_TOKS];
    for (size_t i = 0; i < n_nts; i++) {
        const int nt = nts[i];
        for (int t = 0; t < nt; t++) xp[t] = x + (size_t)t * xrb, yp[t] = out[t];
        memset(out, 0xff, sizeof out);
        assert_true(emulated(k, w, rb, ROWS, xp, yp, nt));
        for (int t = 0; t < nt; t++)
            for (int64_t r = 0; r < ROWS; r++) assert_ref_bits(wt, k, w, rb, r, xp[t], out[t][r], "modelled AMX tile");
        for (int t = nt; t < QW_GEMM_N_TOKS; t++) assert_true(isnan(out[t][0])); /* not written */
    }
    xp[0] = x, yp[0] = out[0];
    assert_false(emulated(k, w, rb, ROWS, xp, yp, 0)); /* outside the limits: refused */
    assert_false(emulated(k, w, rb, ROWS, xp, yp, QW_GEMM_N_TOKS + 1));
    assert_false(emulated(k + 32, w, rb, ROWS, xp, yp, 1));
    assert_false(emulated(QW_GEMM_K_MAX + QW_GEMM_K, w, rb, ROWS, xp, yp, 1));
}

/* One group of 1..16 tokens and several (each strip laid out once for all). */
static const int k_nts[] = {17, 1, 2, 3, 4, 7, 16, 35, QW_GEMM_N_TOKS};

/* The Q8_0 and Q4_0 AMX tiles through the software model (qw_amx_emulated_*). */
static void check_modelled_tiles(qw_type wt) {
    const emulated_fn emulated = wt == QW_TYPE_Q4_0 ? qw_amx_emulated_q4_0 : qw_amx_emulated_q8_0;
    for (size_t ki = 0; ki < sizeof k_ks / sizeof k_ks[0]; ki++) {
        const int64_t k = k_ks[ki];
        char *w = rand_rows(wt, ROWS, k), *x = rand_rows(QW_TYPE_Q8_0, QW_GEMM_N_TOKS, k);
        /* the model multiplies bytes one by one: the longest rows with two token counts only */
        const size_t n_nts = k < QW_GEMM_K_MAX ? sizeof k_nts / sizeof k_nts[0] : 2;
        check_emulated(wt, emulated, k, w, qw_row_bytes(wt, k), x, qw_row_bytes(QW_TYPE_Q8_0, k), k_nts, n_nts);
        free(w);
        free(x);
    }
}

static void test_blockorder(void **s) {
    (void)s;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512vbmi")) {
        printf("SKIP: reference-order AVX-512 kernels: this CPU has no AVX-512 VNNI + VBMI\n");
        return;
    }
    check_blockorder(QW_TYPE_Q8_0);
    check_blockorder(QW_TYPE_Q4_0);
    check_modelled_tiles(QW_TYPE_Q8_0);
    check_modelled_tiles(QW_TYPE_Q4_0);
}

/* ---- Q4_K, Q5_K and Q6_K: the level's dots in the K-quant reference order ---- */

static const int64_t k_kq_ks[] = {256, 512, 768, 2048, QW_GEMM_K_MAX}; /* 1, 2, 3, 8, 32 blocks a row */

static uint8_t rand_byte(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (uint8_t)(g_rng >> 24);
}

/* K-quant rows (Q4_K, Q5_K or Q6_K): even rows random bytes (every pattern is a
 * valid level, scale and min: all-63 Q4_K scales and the int8 extremes of
 * Q6_K's, the largest A bytes, come up), with fp16 d (and Q4_K's dmin) of
 * either sign near 0.06; odd rows quantized from floats. */
static char *kq_rows(qw_type wt, int64_t n_rows, int64_t k) {
    char *w = rand_rows(wt, n_rows, k);
    const size_t rb = qw_row_bytes(wt, k), bb = qw_row_bytes(wt, QW_QK_K);
    for (int64_t r = 0; r < n_rows; r += 2)
        for (int64_t b = 0; b < k / QW_QK_K; b++) {
            uint8_t *p = (uint8_t *)w + (size_t)r * rb + (size_t)b * bb;
            for (size_t i = 0; i < bb; i++) p[i] = rand_byte();
            const uint16_t d = (uint16_t)(0x2c00 | (g_rng & 0x83ff));
            if (wt == QW_TYPE_Q4_K || wt == QW_TYPE_Q5_K) { /* a Q5_K block starts as a Q4_K one */
                qw_block_q4_K *blk = (qw_block_q4_K *)p;
                blk->d = d;
                blk->dmin = (uint16_t)(0x2800 | ((g_rng >> 12) & 0x83ff));
                if (b % 5 == 4) blk->dmin = 0; /* the reference's symmetric branch */
            } else {
                qw_block_q6_K *blk = (qw_block_q6_K *)p;
                blk->d = d;
                if (b % 3 == 2) blk->scales[0] = -128, blk->scales[15] = 127; /* the digits' ends */
            }
        }
    return w;
}

/* Q8_K activations of n_tok tokens from random floats (a few large ones). */
static char *q8k_tokens(int64_t n_tok, int64_t k) {
    float *f = malloc(sizeof(float) * (size_t)(k * n_tok));
    for (int64_t i = 0; i < k * n_tok; i++) f[i] = frand() * (i % 61 == 0 ? 30.0f : 1.0f);
    char *x = malloc(qw_row_bytes(QW_TYPE_Q8_K, k) * (size_t)n_tok);
    qw_act_convert(NULL, QW_TYPE_Q4_K, f, k, k, n_tok, x);
    free(f);
    return x;
}

/* The dot and the row loop (any AVX-512 VNNI CPU) and the AMX tiles through
 * the software model of the tile instructions (`emulated`): the reference's
 * bits for 1..16 tokens, two strips of 16 rows and 8 rows left over. */
static void check_reference_order(qw_type wt, const qw_amx_kq_kernels *kk) {
    for (size_t ki = 0; ki < sizeof k_kq_ks / sizeof k_kq_ks[0]; ki++) {
        const int64_t k = k_kq_ks[ki];
        const size_t rb = qw_row_bytes(wt, k), xrb = qw_row_bytes(QW_TYPE_Q8_K, k);
        char *w = kq_rows(wt, ROWS, k), *x = q8k_tokens(QW_GEMM_N_TOKS, k);
        for (int64_t r = 0; r < ROWS; r++) {
            float d;
            (kk->dot ? kk->dot : qw_kq_dots_avx512.q5_K)(k, &d, w + (size_t)r * rb, x);
            assert_ref_bits(wt, k, w, rb, r, x, d, "reference-order dot");
        }
        { /* the decode row loop: the dot's bits, whatever the prefetch distance and
           * however the rows' blocks fall into eight-term groups (ROWS - 3 rows:
           * a last group of fewer than eight) */
            static float out[ROWS];
            const void *xp[1] = {x};
            float *yp[1] = {out};
            for (int ahead = 1024; ahead <= 65536; ahead *= 64)
                for (int64_t n_rows = ROWS; n_rows >= ROWS - 3; n_rows -= 3) {
                    qw_tune_set(QW_TUNE_DECODE_AHEAD, ahead, QW_TUNE_SRC_KNOB);
                    memset(out, 0xff, sizeof out);
                    (kk->gemv ? kk->gemv : qw_kq_dots_avx512.gemv_q5_K)(k, w, rb, n_rows, xp, yp);
                    for (int64_t r = 0; r < n_rows; r++)
                        assert_ref_bits(wt, k, w, rb, r, x, out[r], "reference-order row loop");
                    for (int64_t r = n_rows; r < ROWS; r++) assert_true(isnan(out[r])); /* not written */
                }
            qw_tune_reset();
        }
        if (k <= 2048) /* the model multiplies bytes one by one: keep it short */
            check_emulated(wt, kk->emulated, k, w, rb, x, xrb, k_nts, sizeof k_nts / sizeof k_nts[0]);
        free(w);
        free(x);
    }
}

static void test_kquant_reference_order(void **s) {
    (void)s;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq")) {
        printf("SKIP: reference-order K-quant kernels: this CPU has no AVX-512 VNNI\n");
        return;
    }
    check_reference_order(QW_TYPE_Q4_K, &qw_amx_q4_K);
    check_reference_order(QW_TYPE_Q5_K, &qw_amx_q5_K);
    check_reference_order(QW_TYPE_Q6_K, &qw_amx_q6_K);
}

/* The AMX tiles (4 and 16 tokens) at the avx512-amx level. */
static void check_tiles(qw_type wt, const int64_t *ks, size_t n_ks) {
    for (size_t ki = 0; ki < n_ks; ki++) {
        const int64_t k = ks[ki];
        const qw_type xt = qw_vec_dot_type(wt);
        const size_t rb = qw_row_bytes(wt, k), xrb = qw_row_bytes(xt, k);
        char *w = qw_is_kquant(wt) ? kq_rows(wt, ROWS, k) : rand_rows(wt, ROWS, k);
        char *x = rand_rows(xt, QW_GEMM_WIDE_TOKS, k);
        const void *xp[QW_GEMM_WIDE_TOKS];
        static float out[QW_GEMM_WIDE_TOKS][ROWS];
        float *yp[QW_GEMM_WIDE_TOKS];
        for (int t = 0; t < QW_GEMM_WIDE_TOKS; t++) xp[t] = x + (size_t)t * xrb, yp[t] = out[t];
        for (int wide = 0; wide < 2; wide++) {
            const int nt = wide ? QW_GEMM_WIDE_TOKS : QW_GEMM_TOKS;
            memset(out, 0xff, sizeof out);
            (wide ? qw_gemm_wide_get(wt) : qw_gemm_get(wt))(k, w, rb, ROWS, xp, yp);
            for (int t = 0; t < nt; t++)
                for (int64_t r = 0; r < ROWS; r++) {
                    assert_ref_bits(wt, k, w, rb, r, xp[t], out[t][r], wide ? "AMX 16-token tile" : "AMX 4-token tile");
                    float d;
                    qw_vec_dot_get(wt)(k, &d, w + (size_t)r * rb, xp[t]);
                    assert_memory_equal(&d, &out[t][r], sizeof d);
                }
        }
        free(w);
        free(x);
    }
}

static void test_amx_tiles(void **s) {
    (void)s;
    if (!use_level("avx512-amx")) return;
    assert_non_null(qw_gemm_wide_get(QW_TYPE_Q8_0));
    assert_int_equal(qw_gemm_wide_toks(QW_TYPE_Q5_K), QW_GEMM_WIDE_TOKS);
    check_tiles(QW_TYPE_Q8_0, k_ks, sizeof k_ks / sizeof k_ks[0]);
    /* Q4_0: AMX tiles by default, the AVX-512 level's kernels on request */
    assert_non_null(qw_gemm_wide_get(QW_TYPE_Q4_0));
    check_tiles(QW_TYPE_Q4_0, k_ks, sizeof k_ks / sizeof k_ks[0]);
    qw_simd_amx_q4_0(false);
    assert_null(qw_gemm_wide_get(QW_TYPE_Q4_0));
    assert_ptr_equal(qw_gemm_get(QW_TYPE_Q4_0), qw_kernels_avx512.gemm_q4_0);
    assert_ptr_equal(qw_gemv_get(QW_TYPE_Q4_0), qw_kernels_avx512.gemv_q4_0);
    qw_simd_amx_q4_0(true);
    check_tiles(QW_TYPE_Q5_K, k_kq_ks, sizeof k_kq_ks / sizeof k_kq_ks[0]);
    /* Q4_K and Q6_K on AMX by default; QWISP_AMX_KQUANT=0 gives them the AVX-512 kernels */
    assert_int_equal(qw_gemm_wide_toks(QW_TYPE_Q4_K), QW_GEMM_WIDE_TOKS);
    assert_int_equal(qw_gemm_wide_toks(QW_TYPE_Q6_K), QW_GEMM_WIDE_TOKS);
    check_tiles(QW_TYPE_Q4_K, k_kq_ks, sizeof k_kq_ks / sizeof k_kq_ks[0]);
    check_tiles(QW_TYPE_Q6_K, k_kq_ks, sizeof k_kq_ks / sizeof k_kq_ks[0]);
    qw_simd_amx_kquants(false);
    assert_int_equal(qw_gemm_wide_toks(QW_TYPE_Q4_K), QW_KQ_WIDE_TOKS);
    assert_ptr_equal(qw_gemm_wide_get(QW_TYPE_Q4_K), qw_kq_dots_avx512.gemm_wide_q4_K);
    qw_simd_amx_kquants(true);
    /* QWISP_SIMD=avx512 turns AMX off: its wide tiles are the AVX-512 ones */
    const qw_gemm_fn amx_wide = qw_gemm_wide_get(QW_TYPE_Q8_0);
    assert_int_equal(qw_simd_force("avx512"), 0);
    assert_ptr_not_equal(qw_gemm_wide_get(QW_TYPE_Q8_0), amx_wide);
    restore_best();
}

/* Whole matmuls at the AMX level: 16-token groups, 4-token groups, the
 * last tokens through the row loop, odd rows through the dot, 1 and 2
 * threads, gathered token ids — every (row, token) the reference's bits. */
static void check_matmul(qw_type wt, qw_threadpool *tp, int64_t n_tok) {
    const int64_t k = 1024, rows = 77;
    const size_t rb = qw_row_bytes(wt, k), xrb = qw_row_bytes(qw_vec_dot_type(wt), k);
    char *w = qw_is_kquant(wt) ? kq_rows(wt, rows, k) : rand_rows(wt, rows, k);
    float *xf = malloc(sizeof(float) * (size_t)(k * n_tok));
    for (int64_t i = 0; i < k * n_tok; i++) xf[i] = frand();
    char *xq = malloc(xrb * (size_t)n_tok);
    qw_act_convert(NULL, wt, xf, k, k, n_tok, xq);
    int32_t idx[64];
    assert_true(n_tok <= 64);
    for (int i = 0; i < n_tok; i++) idx[i] = (int32_t)((i * 7) % n_tok);
    float *y = malloc(sizeof(float) * (size_t)(rows * n_tok));
    for (int gather = 0; gather < 2; gather++) {
        qw_matmul_q(tp, wt, w, rb, rows, k, xq, gather ? idx : NULL, n_tok, y, rows);
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t r = 0; r < rows; r++)
                assert_ref_bits(wt, k, w, rb, r, xq + (size_t)(gather ? idx[t] : t) * xrb, y[t * rows + r], "matmul");
    }
    free(w), free(xf), free(xq), free(y);
}

static void test_amx_matmul(void **s) {
    (void)s;
    if (!use_level("avx512-amx")) return;
    for (int nt = 1; nt <= 2; nt++) {
        qw_threadpool *tp = qw_threadpool_new(nt);
        check_matmul(QW_TYPE_Q8_0, tp, 39);
        check_matmul(QW_TYPE_Q4_0, tp, 39); /* AMX by default */
        /* the K-quants: 16-token groups and a short last one; one token
         * left over goes through the row loop */
        static const int64_t kq_toks[] = {1, 2, 3, 16, 17, 39, 64};
        for (size_t i = 0; i < sizeof kq_toks / sizeof kq_toks[0]; i++) {
            check_matmul(QW_TYPE_Q5_K, tp, kq_toks[i]);
            check_matmul(QW_TYPE_Q4_K, tp, kq_toks[i]);
            check_matmul(QW_TYPE_Q6_K, tp, kq_toks[i]);
        }
        qw_threadpool_free(tp);
    }
    restore_best();
}

/* Where the AMX level differs: the plain avx512 level's Q8_0 dot scales 8
 * partial lanes per block (llama.cpp's order), so its bits differ from the
 * reference (and so from avx512-amx) within rounding.  Checked here so the
 * statement in docs/kernels.md stays true. */
static void test_differs_from_avx512(void **s) {
    (void)s;
    if (!use_level("avx512")) return;
    const int64_t k = 4096;
    char *w = rand_rows(QW_TYPE_Q8_0, 64, k), *x = rand_rows(QW_TYPE_Q8_0, 1, k);
    int differ = 0;
    for (int r = 0; r < 64; r++) {
        float a, ref;
        qw_vec_dot_get(QW_TYPE_Q8_0)(k, &a, w + (size_t)r * qw_row_bytes(QW_TYPE_Q8_0, k), x);
        qw_vec_dot_ref(QW_TYPE_Q8_0, k, &ref, w + (size_t)r * qw_row_bytes(QW_TYPE_Q8_0, k), x);
        differ += memcmp(&a, &ref, sizeof a) != 0;
        assert_true(fabsf(a - ref) <= 1e-4f * (1.0f + fabsf(ref)));
    }
    printf("INFO: avx512 Q8_0 dot vs reference order: %d of 64 rows differ in the last bits (avx512-amx: 0)\n",
           differ);
    free(w), free(x);
    restore_best();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blockorder),
        cmocka_unit_test(test_kquant_reference_order),
        cmocka_unit_test(test_amx_tiles),
        cmocka_unit_test(test_amx_matmul),
        cmocka_unit_test(test_differs_from_avx512),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
