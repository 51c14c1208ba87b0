/* test_kquant.c — the K-quant types Q2_K..Q6_K and their activation type Q8_K.
 *
 *   - type table: names (ggml spelling), block sizes, dot partner;
 *   - layouts: known answers for hand-built blocks (bit positions per
 *     qwisp/quant.h, which follows ggml-common.h);
 *   - Q8_K activation quantizer: known answers (scale -127/max of the signed
 *     largest-magnitude value, ties to even, group sums), and every SIMD
 *     level's bytes equal to the scalar level's (random rows, ties for the
 *     maximum, halfway values, zero, NaN and infinite blocks);
 *   - quantizers: all-zero input decodes to zero; random rows round-trip
 *     within a per-type RMS error limit per super-block (Q6_K 2.4%, Q5_K 4.7%,
 *     Q4_K 9.5%, Q3_K 20%, Q2_K 36% of the block's RMS; a Gaussian block's
 *     rounding error alone is ~8% at 4 bits and halves per extra bit); the
 *     Q8_K dot tracks the dot of the dequantized row;
 *   - dots: every SIMD level against the scalar reference on random bytes
 *     (any bit pattern is a valid block), extreme levels, and misaligned rows.
 *     The limit is 0 (every level computes the same exact integer sums per
 *     block and one identical float expression, kernels/kquant_impl.h),
 *     except Q4_K and Q6_K: 1e-5 of sum |w_i x_i| (their loops sum floats across blocks).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qwisp/quant.h"
#include "levels.h"

static const qw_type k_kq[] = {QW_TYPE_Q2_K, QW_TYPE_Q3_K, QW_TYPE_Q4_K, QW_TYPE_Q5_K, QW_TYPE_Q6_K};
#define N_KQ 5


static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint64_t rnd_u64(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static float rnd_unit(void) { return (float)((rnd_u64() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }
/* Roughly normal (sum of 4 uniforms), like trained weights. */
static float rnd_normal(void) { return (rnd_unit() + rnd_unit() + rnd_unit() + rnd_unit()) * 0.866f; }

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- type table ----------------------------------------------------------- */

static void test_type_table(void **state) {
    (void)state;
    const char *names[] = {"q2_K", "q3_K", "q4_K", "q5_K", "q6_K"};
    const size_t bytes[] = {84, 110, 144, 176, 210};
    for (int i = 0; i < N_KQ; i++) {
        assert_true(qw_type_supported(k_kq[i]));
        assert_string_equal(qw_type_name(k_kq[i]), names[i]);
        assert_int_equal(qw_type_from_name(names[i]), k_kq[i]);
        assert_int_equal(qw_type_block_elems(k_kq[i]), 256);
        assert_int_equal(qw_type_block_bytes(k_kq[i]), bytes[i]);
        assert_int_equal(qw_row_bytes(k_kq[i], 2048), 8 * bytes[i]);
        assert_int_equal(qw_vec_dot_type(k_kq[i]), QW_TYPE_Q8_K);
        assert_non_null(qw_vec_dot_get(k_kq[i]));
        /* tiles (test_gemm.c checks them): Q4_K from the AVX2 level on, all K-quants at AVX-512;
         * one-token row loops (test_gemm.c too): Q4_K and Q6_K from the AVX2 level on, Q5_K at
         * AVX-512, none at the scalar level; Q2_K and Q3_K decode with the dot */
        if (!strcmp(qw_simd_level(), "scalar") || k_kq[i] == QW_TYPE_Q2_K || k_kq[i] == QW_TYPE_Q3_K)
            assert_null(qw_gemv_get(k_kq[i]));
    }
    assert_int_equal(qw_type_from_name("Q4_k"), QW_TYPE_Q4_K); /* case-insensitive */
    assert_int_equal(qw_type_from_name("q8_K"), QW_TYPE_Q8_K);
    assert_int_equal(qw_type_block_bytes(QW_TYPE_Q8_K), 292);
    assert_int_equal(qw_row_bytes(QW_TYPE_Q8_K, 512), 584);
    assert_int_equal(QW_TYPE_Q2_K, 10); /* ggml's type ids */
    assert_int_equal(QW_TYPE_Q6_K, 14);
    assert_int_equal(QW_TYPE_Q8_K, 15);
}

/* ---- known layouts ---------------------------------------------------------- */

static void test_q6_K_layout(void **state) {
    (void)state;
    qw_block_q6_K b;
    memset(&b, 0, sizeof b);
    b.d = qw_f32_to_fp16(1.0f);
    b.ql[0] = 0x21;       /* element 0: low nibble 1; element 64: high nibble 2 */
    b.qh[0] = 0xE4;       /* 0b11100100: hi bits 0 (el 0), 1 (el 32), 2 (el 64), 3 (el 96) */
    b.ql[64 + 32 + 5] = 0x70; /* element 128+96+5: high nibble 7, hi bits 0 */
    b.scales[0] = 2, b.scales[2] = 3, b.scales[4] = -1, b.scales[6] = 1, b.scales[14] = 5;
    float y[256];
    qw_dequantize_row(QW_TYPE_Q6_K, &b, y, 256);
    assert_true(y[0] == 2.0f * (1 - 32));
    assert_true(y[32] == 3.0f * (16 - 32));
    assert_true(y[64] == -1.0f * (2 + 32 - 32));
    assert_true(y[96] == 1.0f * (48 - 32));
    assert_true(y[128 + 96 + 5] == 5.0f * (7 - 32));
    assert_true(y[1] == 2.0f * -32);
}

static void test_q4_K_layout(void **state) {
    (void)state;
    qw_block_q4_K b;
    memset(&b, 0, sizeof b);
    b.d = qw_f32_to_fp16(0.5f);
    b.dmin = qw_f32_to_fp16(0.25f);
    /* group 1 (j < 4): sc = s[1]&63, m = s[5]&63; group 6: sc = (s[10]&15)|(s[2]>>6)<<4,
     * m = (s[10]>>4)|(s[6]>>6)<<4 */
    b.scales[1] = 10, b.scales[5] = 4;
    b.scales[10] = 0x93, b.scales[2] = 0x40 | 7, b.scales[6] = 0x80;
    b.qs[0 + 3] = 0x50;       /* element 35 (group 1): 5 */
    b.qs[32 + 3] = 0x0A;      /* element 67 (group 2): 10 */
    b.qs[96 + 4] = 0xC0;      /* element 196 (group 6): 0; element 228 (group 7): 12 */
    float y[256];
    qw_dequantize_row(QW_TYPE_Q4_K, &b, y, 256);
    /* group 2: sc = 7, m = s[6]&63 = 0 */
    assert_true(y[67] == 0.5f * 7 * 10);
    assert_true(y[3] == 0.0f); /* group 0: sc 0, m 0 */
    /* group 1: sc 10, m 4 */
    assert_true(y[35] == 0.5f * 10 * 5 - 0.25f * 4);
    /* group 6: sc = 3 | 1<<4 = 19, m = 9 | 2<<4 = 41 */
    assert_true(y[196] == 0.5f * 19 * 0 - 0.25f * 41);
}

static void test_q5_K_q3_K_q2_K_layout(void **state) {
    (void)state;
    float y[256];
    qw_block_q5_K b5;
    memset(&b5, 0, sizeof b5);
    b5.d = qw_f32_to_fp16(1.0f);
    b5.scales[0] = 1, b5.scales[1] = 1, b5.scales[3] = 2; /* groups 0,1: sc 1; group 3: sc 2 */
    b5.qs[7] = 0x3;          /* element 7: low 3 */
    b5.qh[7] = 0x01 | 0x08;  /* element 7: +16; element 96+7 (group 3): +16 */
    qw_dequantize_row(QW_TYPE_Q5_K, &b5, y, 256);
    assert_true(y[7] == 19.0f);
    assert_true(y[96 + 7] == 32.0f);

    qw_block_q3_K b3;
    memset(&b3, 0, sizeof b3);
    b3.d = qw_f32_to_fp16(1.0f);
    /* scale 13 (element 13*16 = 208: h=1, s=2, l=16): low nibble scales[5]>>4,
     * high bits (scales[9] >> 6) & 3; value 0x25 - 32 = 5 */
    b3.scales[5] = 0x50, b3.scales[9] = 0x80;
    b3.qs[32 + 16] = 0x2 << 4;       /* low bits 2 at shift 4 */
    b3.hmask[16] = 1 << 6;           /* bit 4h+s = 6 set: +4 */
    qw_dequantize_row(QW_TYPE_Q3_K, &b3, y, 256);
    assert_true(y[208] == 5.0f * (2 + 4 - 4));
    assert_true(y[209] == 5.0f * (0 - 4));
    assert_true(y[0] == -32.0f * (0 - 4)); /* scale 0 decodes to 0 - 32 */

    qw_block_q2_K b2;
    memset(&b2, 0, sizeof b2);
    b2.d = qw_f32_to_fp16(2.0f);
    b2.dmin = qw_f32_to_fp16(1.0f);
    b2.scales[5] = 0x31;            /* group 5 (element 80 = h0, s2, l16): sc 1, m 3 */
    b2.qs[16] = 3 << 4;
    qw_dequantize_row(QW_TYPE_Q2_K, &b2, y, 256);
    assert_true(y[80] == 2.0f * 1 * 3 - 1.0f * 3);
    assert_true(y[81] == -3.0f);
}

/* ---- Q8_K activations ------------------------------------------------------- */

static void test_q8_K_known(void **state) {
    (void)state;
    float x[512];
    for (int i = 0; i < 256; i++) x[i] = 0.0f;
    x[0] = 127.0f; /* iscale = -1 */
    x[1] = 2.5f;   /* -2.5 -> -2 (ties to even) */
    x[2] = 3.5f;   /* -3.5 -> -4 */
    x[17] = -127.0f;
    for (int i = 256; i < 512; i++) x[i] = 0.0f; /* all-zero block */
    qw_block_q8_K q[2];
    memset(q, 0x77, sizeof q);
    qw_quantize_row(QW_TYPE_Q8_K, x, q, 512);
    assert_true(q[0].d == -1.0f);
    assert_int_equal(q[0].qs[0], -127);
    assert_int_equal(q[0].qs[1], -2);
    assert_int_equal(q[0].qs[2], -4);
    assert_int_equal(q[0].qs[17], 127);
    assert_int_equal(q[0].bsums[0], -133);
    assert_int_equal(q[0].bsums[1], 127);
    assert_true(q[1].d == 0.0f);
    for (int i = 0; i < 256; i++) assert_int_equal(q[1].qs[i], 0);
    /* negative max: iscale = 127/128; 64 * 127/128 = 63.5 -> 64 (even) */
    for (int i = 0; i < 256; i++) x[i] = 0.0f;
    x[5] = -128.0f, x[6] = 64.0f;
    qw_quantize_row(QW_TYPE_Q8_K, x, q, 256);
    assert_int_equal(q[0].qs[5], -127);
    assert_int_equal(q[0].qs[6], 64);
    assert_true(q[0].d == 128.0f / 127.0f || f2u(q[0].d) == f2u(1.0f / (127.0f / 128.0f)));
}

/* Every level's Q8_K bytes are the scalar level's, block by block. */
static void test_q8_K_levels(void **state) {
    (void)state;
    enum { NB = 12, N = NB * 256 };
    float *x = malloc(N * sizeof *x);
    for (int i = 0; i < N; i++) x[i] = rnd_normal() * (float)(1 + i / 256);
    for (int i = 256; i < 512; i++) x[i] = 0.0f;        /* block 1: zero */
    x[2 * 256 + 3] = 9.0f, x[2 * 256 + 200] = -9.0f;    /* block 2: the first of two equal magnitudes */
    x[3 * 256 + 7] = -9.0f, x[3 * 256 + 9] = 9.0f;      /* block 3: the same, negative first */
    for (int i = 0; i < 256; i++) x[4 * 256 + i] = (float)(i % 5) * 0.5f - 1.0f; /* block 4: halfway values */
    x[4 * 256 + 1] = 127.0f;
    x[5 * 256 + 17] = NAN;      /* block 5: a NaN */
    x[6 * 256 + 40] = INFINITY; /* block 6: an infinity */
    x[7 * 256 + 41] = -INFINITY;
    x[8 * 256 + 0] = -0.0f;
    qw_block_q8_K ref[NB], got[NB];
    assert_true(use_level("scalar"));
    memset(ref, 0x5A, sizeof ref);
    qw_quantize_row(QW_TYPE_Q8_K, x, ref, N);
    for (int li = 0; li < N_LEVELS; li++) {
        if (!use_level(k_levels[li])) continue;
        memset(got, 0xA5, sizeof got);
        qw_quantize_row(QW_TYPE_Q8_K, x, got, N);
        for (int b = 0; b < NB; b++) {
            if (memcmp(&ref[b], &got[b], sizeof ref[b]))
                print_message("level %s: Q8_K block %d differs from the scalar level's\n", k_levels[li], b);
            assert_memory_equal(&ref[b], &got[b], sizeof ref[b]);
        }
    }
    restore_best();
    free(x);
}

/* ---- quantizers ------------------------------------------------------------- */

static void test_quantize_zero(void **state) {
    (void)state;
    float x[256] = {0}, y[256];
    uint8_t buf[256];
    for (int t = 0; t < N_KQ; t++) {
        memset(buf, 0x5A, sizeof buf);
        qw_quantize_row(k_kq[t], x, buf, 256);
        qw_dequantize_row(k_kq[t], buf, y, 256);
        for (int i = 0; i < 256; i++) assert_true(y[i] == 0.0f);
    }
}

static void test_round_trip(void **state) {
    (void)state;
    const double limit[N_KQ] = {0.36, 0.20, 0.095, 0.047, 0.024};
    enum { N = 256 * 16 };
    float *x = malloc(N * 4), *y = malloc(N * 4), *x2 = malloc(N * 4);
    void *buf = malloc(qw_row_bytes(QW_TYPE_Q2_K, N) * 4);
    void *a = malloc(qw_row_bytes(QW_TYPE_Q8_K, N));
    for (int i = 0; i < N; i++) { /* blocks at two magnitudes, with 4-sigma outliers */
        const float sd = i % 512 < 256 ? 0.02f : 3.0f;
        x[i] = rnd_normal() * sd + (i % 700 == 0 ? 4.0f * sd : 0.0f);
    }
    for (int i = 0; i < N; i++) x2[i] = rnd_normal();
    qw_quantize_row(QW_TYPE_Q8_K, x2, a, N);
    double ref = 0;
    for (int i = 0; i < N; i++) ref += (double)x[i] * x2[i];
    for (int t = 0; t < N_KQ; t++) {
        qw_quantize_row(k_kq[t], x, buf, N);
        qw_dequantize_row(k_kq[t], buf, y, N);
        double worst = 0;
        for (int b = 0; b < N / 256; b++) { /* per super-block, so small and large blocks both count */
            double e = 0, s = 0;
            for (int i = 256 * b; i < 256 * b + 256; i++) e += (double)(y[i] - x[i]) * (y[i] - x[i]), s += (double)x[i] * x[i];
            const double rel = sqrt(e / s);
            if (rel > limit[t]) print_message("%s block %d: rel rms %.4f\n", qw_type_name(k_kq[t]), b, rel);
            assert_true(rel <= limit[t]);
            worst = rel > worst ? rel : worst;
        }
        float d;
        qw_vec_dot(k_kq[t], N, &d, buf, a);
        double deq = 0;
        for (int i = 0; i < N; i++) deq += (double)y[i] * x2[i];
        /* the Q8_K dot equals the dequantized dot up to Q8_K's own rounding */
        assert_true(fabs(d - deq) <= 0.02 * sqrt((double)N) * 3.0 + 1e-3 * fabs(deq));
        print_message("%s: worst block rel rms %.4f; dot %.3f (f32 %.3f)\n", qw_type_name(k_kq[t]), worst, (double)d, ref);
    }
    free(x), free(y), free(x2), free(buf), free(a);
}

/* ---- dots vs the reference ---------------------------------------------------- */

/* Random but sane block bytes: every bit pattern is a valid level/scale; the
 * fp16 fields get finite values so the floats stay meaningful. */
static void fill_random(qw_type t, void *w, int64_t n) {
    const size_t bb = qw_type_block_bytes(t);
    uint8_t *p = w;
    for (size_t i = 0; i < qw_row_bytes(t, n); i++) p[i] = (uint8_t)rnd_u64();
    for (int64_t b = 0; b < n / 256; b++) {
        uint8_t *blk = p + (size_t)b * bb;
        uint16_t d = qw_f32_to_fp16(rnd_unit() * 0.01f), dm = qw_f32_to_fp16(rnd_unit() * 0.01f);
        switch ((int)t) {
        case QW_TYPE_Q2_K: memcpy(blk + 80, &d, 2), memcpy(blk + 82, &dm, 2); break;
        case QW_TYPE_Q3_K: memcpy(blk + 108, &d, 2); break;
        case QW_TYPE_Q4_K:
        case QW_TYPE_Q5_K: memcpy(blk, &d, 2), memcpy(blk + 2, &dm, 2); break;
        case QW_TYPE_Q6_K: memcpy(blk + 208, &d, 2); break;
        }
    }
}

static void fill_q8_K(qw_block_q8_K *y, int64_t n, int mode) {
    for (int64_t b = 0; b < n / 256; b++) {
        y[b].d = rnd_unit() * 0.1f;
        for (int i = 0; i < 256; i++)
            y[b].qs[i] = mode == 0 ? (int8_t)rnd_u64() : mode == 1 ? (int8_t)-128 : (int8_t)127;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += y[b].qs[16 * g + i];
            y[b].bsums[g] = (int16_t)s;
        }
    }
}

/* sum_i |w_i * x_i| over the dequantized row and Q8_K values: the scale of
 * rounding differences when a kernel sums in another order. */
static double abs_terms(qw_type t, int64_t n, const void *w, const qw_block_q8_K *x) {
    float *wf = malloc((size_t)n * sizeof(float));
    qw_dequantize_row(t, w, wf, n);
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) m += fabs((double)wf[i] * x[i / 256].d * x[i / 256].qs[i % 256]);
    free(wf);
    return m;
}

static void check_levels(qw_type t, int64_t n, const void *w, const void *x) {
    float ref, got;
    qw_vec_dot_ref(t, n, &ref, w, x);
    /* Q4_K's and Q6_K's SIMD loops carry float accumulators across blocks (kquant_avx2.c):
     * same integer sums, another float order; every other type is exact. */
    const double tol = t == QW_TYPE_Q4_K || t == QW_TYPE_Q6_K ? 1e-5 * abs_terms(t, n, w, x) : 0.0;
    for (int li = 0; li < N_LEVELS; li++) {
        if (!use_level(k_levels[li])) continue;
        got = -1.0f;
        qw_vec_dot(t, n, &got, w, x);
        if (fabs((double)got - ref) > tol)
            print_message("%s n=%lld level %s: %.9g vs ref %.9g (tolerance %.3g)\n", qw_type_name(t), (long long)n,
                          k_levels[li], (double)got, (double)ref, tol);
        assert_true(fabs((double)got - ref) <= tol);
        qw_vec_dot_get(t)(n, &got, w, x);
        assert_true(fabs((double)got - ref) <= tol);
    }
    restore_best();
}

static void test_dot_random(void **state) {
    (void)state;
    const int64_t sizes[] = {256, 512, 768, 2048, 4096};
    for (int t = 0; t < N_KQ; t++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int rep = 0; rep < 4; rep++) {
                const int64_t n = sizes[si];
                void *w = malloc(qw_row_bytes(k_kq[t], n));
                qw_block_q8_K *x = malloc(qw_row_bytes(QW_TYPE_Q8_K, n));
                fill_random(k_kq[t], w, n);
                fill_q8_K(x, n, 0);
                check_levels(k_kq[t], n, w, x);
                free(w), free(x);
            }
}

/* All-ones bytes (every level at its maximum, scales maxed) against Q8_K at
 * -128 and 127: the widest int16 pair products and int32 sums. */
static void test_dot_extremes(void **state) {
    (void)state;
    const int64_t n = 1024;
    for (int t = 0; t < N_KQ; t++)
        for (int mode = 1; mode <= 2; mode++)
            for (int fillb = 0; fillb < 2; fillb++) {
                void *w = malloc(qw_row_bytes(k_kq[t], n));
                qw_block_q8_K *x = malloc(qw_row_bytes(QW_TYPE_Q8_K, n));
                fill_random(k_kq[t], w, n);
                /* keep the fp16 fields, saturate everything else */
                const size_t bb = qw_type_block_bytes(k_kq[t]);
                uint8_t *p = w;
                for (int64_t b = 0; b < n / 256; b++) {
                    uint8_t save[4];
                    const size_t off = k_kq[t] == QW_TYPE_Q4_K || k_kq[t] == QW_TYPE_Q5_K ? 0 : bb - (k_kq[t] == QW_TYPE_Q2_K ? 4 : 2);
                    memcpy(save, p + b * bb + off, 4 < bb - off ? 4 : bb - off);
                    memset(p + b * bb, fillb ? 0xFF : 0x00, bb);
                    memcpy(p + b * bb + off, save, 4 < bb - off ? 4 : bb - off);
                }
                fill_q8_K(x, n, mode);
                check_levels(k_kq[t], n, w, x);
                float ref;
                qw_vec_dot_ref(k_kq[t], n, &ref, w, x);
                assert_true(isfinite(ref));
                free(w), free(x);
            }
}

/* Weight rows at 2-byte, activations at 4-byte alignment only. */
static void test_dot_unaligned(void **state) {
    (void)state;
    const int64_t n = 512;
    for (int t = 0; t < N_KQ; t++) {
        const size_t wb = qw_row_bytes(k_kq[t], n), xb = qw_row_bytes(QW_TYPE_Q8_K, n);
        uint8_t *w = malloc(wb + 64), *x = malloc(xb + 64);
        fill_random(k_kq[t], w + 2, n);
        fill_q8_K((qw_block_q8_K *)(x + 4), n, 0);
        float ref;
        qw_vec_dot_ref(k_kq[t], n, &ref, w + 2, x + 4);
        /* the tolerance from aligned copies (abs_terms reads fields directly) */
        void *wa = malloc(wb);
        qw_block_q8_K *xa = malloc(xb);
        memcpy(wa, w + 2, wb), memcpy(xa, x + 4, xb);
        const double tol = k_kq[t] == QW_TYPE_Q4_K || k_kq[t] == QW_TYPE_Q6_K ? 1e-5 * abs_terms(k_kq[t], n, wa, xa) : 0.0;
        free(wa), free(xa);
        for (int li = 0; li < N_LEVELS; li++) {
            if (!use_level(k_levels[li])) continue;
            float got;
            qw_vec_dot(k_kq[t], n, &got, w + 2, x + 4);
            assert_true(fabs((double)got - ref) <= tol);
        }
        restore_best();
        free(w), free(x);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_q6_K_layout),
        cmocka_unit_test(test_q4_K_layout),
        cmocka_unit_test(test_q5_K_q3_K_q2_K_layout),
        cmocka_unit_test(test_q8_K_known),
        cmocka_unit_test(test_q8_K_levels),
        cmocka_unit_test(test_quantize_zero),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_dot_random),
        cmocka_unit_test(test_dot_extremes),
        cmocka_unit_test(test_dot_unaligned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
