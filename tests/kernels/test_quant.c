/* test_quant.c — element types, conversions, quantizers and dot kernels.
 *
 * Every SIMD level this CPU offers (levels.h: scalar, avx2, the patched
 * AVX-512 tables of CPUs without VBMI/BF16, avx512)
 * is run against the scalar reference (qw_vec_dot_ref and the scalar level's
 * conversions), with these limits:
 *   - conversions (fp16, bf16 rows) and the Q8_0 activation quantizer: bytes
 *     identical at every level;
 *   - Q8_0 / Q4_0 dots: with all scales 1.0 the result is an integer below
 *     2^24 and must be exact; with random scales |got - ref| <=
 *     1e-5 * sum_b |d_b| * sum_j |w_j x_j| (only the f32 summation differs);
 *   - F32 / F16 / BF16 dots: |got - ref| <= 1e-5 * sum_i |w_i x_i| (products
 *     are exact for fp16/bf16 inputs; only the summation order differs).
 * fp16 conversion is checked exhaustively over all 65536 halves and against
 * the F16C instructions when the CPU has them.  Known answers were worked
 * out by hand (comments next to each).
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
#include <immintrin.h>

#include "qwisp/quant.h"
#include "levels.h"



/* ---- deterministic random numbers ---------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd_u64(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static float rnd_unit(void) { return (float)((rnd_u64() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; } /* [-1,1) */
static int rnd_int(int lo, int hi) { return lo + (int)(rnd_u64() % (uint64_t)(hi - lo + 1)); }

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- hardware F16C as an independent oracle ------------------------------ */

static bool have_f16c(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c");
}

__attribute__((target("f16c"))) static float hw_h2f(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) static uint16_t hw_f2h(float f) { return (uint16_t)_cvtss_sh(f, 0); }

/* ---- type table ----------------------------------------------------------- */

static void test_type_table(void **state) {
    (void)state;
    assert_true(qw_type_supported(QW_TYPE_F32));
    assert_true(qw_type_supported(QW_TYPE_BF16));
    assert_false(qw_type_supported(3));  /* q4_1: not ours */
    assert_false(qw_type_supported(6));  /* q5_0 */
    assert_string_equal(qw_type_name(QW_TYPE_Q8_0), "q8_0");
    assert_string_equal(qw_type_name(QW_TYPE_BF16), "bf16");
    assert_string_equal(qw_type_name(99), "unknown");
    assert_int_equal(qw_type_from_name("Q4_0"), QW_TYPE_Q4_0);
    assert_int_equal(qw_type_from_name("f16"), QW_TYPE_F16);
    assert_int_equal(qw_type_from_name("q5_0"), -1);
    assert_int_equal(qw_type_from_name(NULL), -1);
    assert_int_equal(qw_type_block_elems(QW_TYPE_Q4_0), 32);
    assert_int_equal(qw_type_block_elems(QW_TYPE_F16), 1);
    assert_int_equal(qw_type_block_bytes(QW_TYPE_Q8_0), 34);
    assert_int_equal(qw_type_block_bytes(7), 0);
    assert_int_equal(qw_row_bytes(QW_TYPE_Q4_0, 4096), 128 * 18);
    assert_int_equal(qw_row_bytes(QW_TYPE_Q8_0, 4096), 128 * 34);
    assert_int_equal(qw_row_bytes(QW_TYPE_BF16, 3), 6);
    assert_int_equal(qw_row_bytes(QW_TYPE_F32, 5), 20);
    assert_int_equal(qw_vec_dot_type(QW_TYPE_Q4_0), QW_TYPE_Q8_0);
    assert_int_equal(qw_vec_dot_type(QW_TYPE_Q8_0), QW_TYPE_Q8_0);
    assert_int_equal(qw_vec_dot_type(QW_TYPE_F16), QW_TYPE_F16);
    assert_int_equal(qw_vec_dot_type(QW_TYPE_BF16), QW_TYPE_BF16);
    assert_int_equal(qw_vec_dot_type(QW_TYPE_F32), QW_TYPE_F32);
}

static void test_simd_force(void **state) {
    (void)state;
    assert_int_equal(qw_simd_force("sse9"), -1);
    assert_int_equal(qw_simd_force(NULL), -1);
    assert_int_equal(qw_simd_force("scalar"), 0);
    assert_string_equal(qw_simd_level(), "scalar");
    assert_int_equal(qw_simd_force("AVX2"), 0); /* case-insensitive, never above the CPU */
    const char *l = qw_simd_level();
    assert_true(strcmp(l, "avx2") == 0 || strcmp(l, "scalar") == 0);
    restore_best();
    assert_non_null(qw_vec_dot_get(QW_TYPE_Q4_0));
    assert_null(qw_vec_dot_get((qw_type)3));
    printf("INFO: best SIMD level on this CPU: %s\n", qw_simd_level());
    /* every name the dispatcher takes is walked by the kernel tests */
    int n = 0;
    for (; qw_simd_levels[n]; n++) {
        bool listed = false;
        for (int i = 0; i < N_LEVELS; i++) listed |= !strcmp(k_levels[i], qw_simd_levels[n]);
        if (!listed) fail_msg("SIMD level %s is not in tests/kernels/levels.h", qw_simd_levels[n]);
    }
    assert_int_equal(n, N_LEVELS);
    /* a patched level is never above the CPU either, and names itself */
    assert_int_equal(qw_simd_force("avx512-novbmi"), 0);
    const char *p = qw_simd_level();
    assert_true(!strncmp(p, "avx512-novbmi", 13) || !strcmp(p, "avx2") || !strcmp(p, "scalar"));
    restore_best();
}

/* ---- fp16 ------------------------------------------------------------------ */

static void test_fp16_exhaustive(void **state) {
    (void)state;
    const bool hw = have_f16c();
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = qw_fp16_to_f32((uint16_t)h);
        if (hw) assert_int_equal(f2u(f), f2u(hw_h2f((uint16_t)h)));
        if (isnan(f)) {
            /* NaN comes back quiet, payload and sign kept */
            assert_int_equal(qw_f32_to_fp16(f), h | 0x200);
        } else {
            assert_int_equal(qw_f32_to_fp16(f), h);
        }
    }
}

static void test_fp16_known(void **state) {
    (void)state;
    assert_int_equal(qw_f32_to_fp16(1.0f), 0x3c00);
    assert_int_equal(qw_f32_to_fp16(-2.0f), 0xc000);
    assert_int_equal(qw_f32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(qw_f32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(qw_f32_to_fp16(65519.996f), 0x7bff);    /* just below the midpoint */
    assert_int_equal(qw_f32_to_fp16(65520.0f), 0x7c00);      /* tie, 0x3ff is odd: up to inf */
    assert_int_equal(qw_f32_to_fp16(1e9f), 0x7c00);
    assert_int_equal(qw_f32_to_fp16(-INFINITY), 0xfc00);
    assert_int_equal(qw_f32_to_fp16(0x1p-14f), 0x0400);      /* smallest normal */
    assert_int_equal(qw_f32_to_fp16(0x1p-24f), 0x0001);      /* smallest subnormal */
    assert_int_equal(qw_f32_to_fp16(0x1p-25f), 0x0000);      /* tie to even (0) */
    assert_int_equal(qw_f32_to_fp16(u2f(f2u(0x1p-25f) + 1)), 0x0001);
    assert_int_equal(qw_f32_to_fp16(3 * 0x1p-25f), 0x0002);  /* tie between 1 and 2 -> 2 */
    assert_int_equal(qw_f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);      /* tie -> even */
    assert_int_equal(qw_f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);  /* tie -> even (up) */
    assert_int_equal(qw_f32_to_fp16(0x1p-14f - 0x1p-25f), 0x0400);  /* rounds up into normal */
    assert_int_equal(qw_f32_to_fp16(u2f(0x7f800001)), 0x7e00);      /* sNaN -> qNaN */
    assert_int_equal(qw_f32_to_fp16(u2f(0xffc00000)), 0xfe00);
    assert_true(qw_fp16_to_f32(0x7c00) == INFINITY);
    assert_true(qw_fp16_to_f32(0x0001) == 0x1p-24f);
    assert_true(isnan(qw_fp16_to_f32(0x7c01)));

    /* f32 -> fp16 against F16C on every half's neighbourhood and random bits */
    if (!have_f16c()) return;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        const uint32_t b = f2u(qw_fp16_to_f32((uint16_t)h));
        /* the value, its neighbours, and around the midpoint to the next half */
        const uint32_t probes[] = {b, b + 1, b - 1, b + 0x1000, b + 0xfff, b + 0x1001, b | 0x80000000u};
        for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
            const float f = u2f(probes[k]);
            assert_int_equal(qw_f32_to_fp16(f), hw_f2h(f));
        }
    }
    for (int i = 0; i < 2000000; i++) {
        const float f = u2f((uint32_t)rnd_u64());
        assert_int_equal(qw_f32_to_fp16(f), hw_f2h(f));
    }
    /* the whole subnormal/underflow range below 2^-14, with every low bit */
    for (uint32_t b = f2u(0x1p-26f); b < f2u(0x1p-14f); b += 7) {
        assert_int_equal(qw_f32_to_fp16(u2f(b)), hw_f2h(u2f(b)));
    }
}

/* Every level's row conversions are bit-identical to the scalar ones. */
static void test_fp16_rows(void **state) {
    (void)state;
    const int64_t n = 65536 + 13; /* odd tail */
    uint16_t *h = malloc((size_t)n * 2), *h2 = malloc((size_t)n * 2);
    float *f = malloc((size_t)n * 4), *g = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) h[i] = (uint16_t)i;
    for (int li = 0; li < N_LEVELS; li++) {
        if (!use_level(k_levels[li])) continue;
        qw_dequantize_row(QW_TYPE_F16, h, f, n);
        for (int64_t i = 0; i < n; i++) assert_int_equal(f2u(f[i]), f2u(qw_fp16_to_f32(h[i])));
        /* f32 -> f16: values near halves, midpoints, huge, tiny */
        for (int64_t i = 0; i < n; i++) {
            uint32_t b = f2u(qw_fp16_to_f32((uint16_t)rnd_u64()));
            g[i] = u2f(b + (uint32_t)rnd_int(-0x1001, 0x1001));
        }
        g[0] = 65520.0f;
        g[1] = 0x1p-25f;
        g[2] = u2f(0x7f800001);
        for (int len = 0; len <= 40; len++) { /* all tail lengths */
            memset(h2, 0xee, 100);
            qw_quantize_row(QW_TYPE_F16, g, h2, len);
            for (int i = 0; i < len; i++) assert_int_equal(h2[i], qw_f32_to_fp16(g[i]));
            assert_int_equal(h2[len], 0xeeee); /* nothing written past n */
        }
        qw_quantize_row(QW_TYPE_F16, g, h2, n);
        for (int64_t i = 0; i < n; i++) assert_int_equal(h2[i], qw_f32_to_fp16(g[i]));
    }
    restore_best();
    free(h), free(h2), free(f), free(g);
}

/* ---- bf16 ------------------------------------------------------------------ */

static void test_bf16_known(void **state) {
    (void)state;
    assert_int_equal(qw_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(qw_f32_to_bf16(u2f(0x3f808000)), 0x3f80); /* tie -> even (down) */
    assert_int_equal(qw_f32_to_bf16(u2f(0x3f818000)), 0x3f82); /* tie -> even (up) */
    assert_int_equal(qw_f32_to_bf16(u2f(0x3f808001)), 0x3f81);
    assert_int_equal(qw_f32_to_bf16(u2f(0x7f7fffff)), 0x7f80); /* FLT_MAX rounds to inf */
    assert_int_equal(qw_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(qw_f32_to_bf16(u2f(0x7f800001)), 0x7fc0); /* sNaN -> quiet */
    assert_int_equal(qw_f32_to_bf16(u2f(0xffa12345)), 0xffe1);
    assert_int_equal(qw_f32_to_bf16(u2f(0x00018000)), 0x0002); /* subnormals kept, tie -> even */
    assert_int_equal(qw_f32_to_bf16(u2f(0x00008000)), 0x0000);
    assert_true(qw_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(qw_bf16_to_f32(0xc040) == -3.0f);
    for (uint32_t h = 0; h < 65536; h++) { /* exact round trip for non-NaN */
        const float f = qw_bf16_to_f32((uint16_t)h);
        if (!isnan(f)) assert_int_equal(qw_f32_to_bf16(f), h);
    }
}

static void test_bf16_rows(void **state) {
    (void)state;
    const int64_t n = 4096 + 37;
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    uint16_t *h = malloc((size_t)n * 2 + 64);
    for (int64_t i = 0; i < n; i++) x[i] = u2f((uint32_t)rnd_u64());
    const uint32_t special[] = {0x7f800001, 0xff800000, 0x7f7fffff, 0x00008000, 0x00018000, 0x3f808000,
                                0x3f818000, 0x80000000, 0x7fffffff, 0xffffffff};
    for (size_t i = 0; i < sizeof special / 4; i++) x[i * 17] = u2f(special[i]);
    for (int li = 0; li < N_LEVELS; li++) {
        if (!use_level(k_levels[li])) continue;
        for (int len = 0; len <= 40; len++) {
            memset(h, 0xee, 100);
            qw_quantize_row(QW_TYPE_BF16, x, h, len);
            for (int i = 0; i < len; i++) assert_int_equal(h[i], qw_f32_to_bf16(x[i]));
            assert_int_equal(h[len], 0xeeee);
        }
        qw_quantize_row(QW_TYPE_BF16, x, h, n);
        for (int64_t i = 0; i < n; i++) assert_int_equal(h[i], qw_f32_to_bf16(x[i]));
        qw_dequantize_row(QW_TYPE_BF16, h, y, n);
        for (int64_t i = 0; i < n; i++) assert_int_equal(f2u(y[i]), (uint32_t)h[i] << 16);
    }
    restore_best();
    free(x), free(y), free(h);
}

/* ---- Q8_0 activation quantizer ------------------------------------------- */

/* Quantizes x at every level and checks the bytes equal the scalar level's. */
static void q8_all_levels_equal(const float *x, int64_t n) {
    const int64_t nb = n / QW_QK8_0;
    qw_block_q8_0 *ref = malloc((size_t)nb * sizeof *ref), *got = malloc((size_t)nb * sizeof *got);
    assert_true(use_level("scalar"));
    qw_quantize_row(QW_TYPE_Q8_0, x, ref, n);
    for (int li = 1; li < N_LEVELS; li++) {
        if (!use_level(k_levels[li])) continue;
        memset(got, 0x5a, (size_t)nb * sizeof *got);
        qw_quantize_row(QW_TYPE_Q8_0, x, got, n);
        for (int64_t b = 0; b < nb; b++) {
            if (memcmp(&ref[b], &got[b], sizeof ref[b]) != 0) {
                fail_msg("q8_0 bytes differ at %s, block %lld (d %04x vs %04x)", k_levels[li], (long long)b,
                         ref[b].d, got[b].d);
            }
        }
    }
    restore_best();
    free(ref), free(got);
}

static void test_q8_0_quantize_levels_agree(void **state) {
    (void)state;
    const int64_t n = 4096 + 32;
    float *x = malloc((size_t)n * 4);
    const float scales[] = {1.0f, 1e-3f, 37.5f, 1e4f, 1e-30f};
    for (size_t s = 0; s < sizeof scales / sizeof scales[0]; s++) {
        for (int64_t i = 0; i < n; i++) x[i] = rnd_unit() * scales[s];
        q8_all_levels_equal(x, n);
    }
    /* adversarial: products landing exactly on k + 0.5 */
    for (int64_t b = 0; b < n / 32; b++) {
        float *xb = x + b * 32;
        const float amax = (float)rnd_int(1, 254); /* id = 127/amax */
        const float sign = (b & 1) ? -1.0f : 1.0f;
        xb[0] = sign * amax;
        for (int j = 1; j < 32; j++) xb[j] = ((float)rnd_int(-127, 126) + 0.5f) * amax / 127.0f;
    }
    q8_all_levels_equal(x, n);
    /* zero blocks, one-hot blocks, subnormal and near-underflow blocks */
    for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
    for (int j = 0; j < 32; j++) x[32 + j] = (j == 5) ? -3.0f : 0.0f;
    for (int j = 0; j < 32; j++) x[64 + j] = u2f((uint32_t)rnd_int(0, 0x7fffff)) * ((j & 1) ? -1.0f : 1.0f);
    for (int j = 0; j < 32; j++) x[96 + j] = rnd_unit() * 1e-38f;
    for (int j = 0; j < 32; j++) x[128 + j] = (j == 0) ? -1.0f : 0.5f; /* negative max */
    q8_all_levels_equal(x, 5 * 32);
    free(x);
}

static void test_q8_0_quantize_known(void **state) {
    (void)state;
    /* amax = 127 -> d = 1, id = 1: exact halves round to even */
    float x[32] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.49f, -126.5f, 125.5f};
    const int8_t want[10] = {127, 0, 2, 2, 0, -2, -2, 3, -126, 126};
    for (int li = 0; li < N_LEVELS; li++) {
        if (!use_level(k_levels[li])) continue;
        qw_block_q8_0 b;
        qw_quantize_row(QW_TYPE_Q8_0, x, &b, 32);
        assert_int_equal(b.d, 0x3c00);
        for (int j = 0; j < 10; j++) assert_int_equal(b.qs[j], want[j]);
        for (int j = 10; j < 32; j++) assert_int_equal(b.qs[j], 0);
        /* all zeros: d = 0, quants 0 */
        float z[32] = {0};
        qw_quantize_row(QW_TYPE_Q8_0, z, &b, 32);
        assert_int_equal(b.d, 0);
        for (int j = 0; j < 32; j++) assert_int_equal(b.qs[j], 0);
    }
    restore_best();
}

/* ---- quantize -> dequantize round trips ----------------------------------- */

static void test_round_trip(void **state) {
    (void)state;
    const int64_t n = 4096;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    void *buf = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = rnd_unit() * (float)(1 + (i % 7)) * 0.3f;
    for (int li = 0; li < N_LEVELS; li++) {
        if (!use_level(k_levels[li])) continue;
        /* Q8_0: |error| <= d/2 from rounding plus 127 * |d - fp16(d)| */
        qw_quantize_row(QW_TYPE_Q8_0, x, buf, n);
        qw_dequantize_row(QW_TYPE_Q8_0, buf, y, n);
        for (int64_t b = 0; b < n / 32; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
            for (int j = 0; j < 32; j++) assert_true(fabsf(x[b * 32 + j] - y[b * 32 + j]) <= 0.56f * amax / 127.0f);
        }
        /* Q4_0: |error| <= d (the clamp at +8*d costs a whole step) */
        qw_quantize_row(QW_TYPE_Q4_0, x, buf, n);
        qw_dequantize_row(QW_TYPE_Q4_0, buf, y, n);
        for (int64_t b = 0; b < n / 32; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
            for (int j = 0; j < 32; j++) assert_true(fabsf(x[b * 32 + j] - y[b * 32 + j]) <= 1.01f * amax / 8.0f);
        }
        /* F16: relative 2^-11 in the normal range; BF16: 2^-8 */
        qw_quantize_row(QW_TYPE_F16, x, buf, n);
        qw_dequantize_row(QW_TYPE_F16, buf, y, n);
        for (int64_t i = 0; i < n; i++) assert_true(fabsf(x[i] - y[i]) <= fabsf(x[i]) * 0x1p-11f + 0x1p-25f);
        qw_quantize_row(QW_TYPE_BF16, x, buf, n);
        qw_dequantize_row(QW_TYPE_BF16, buf, y, n);
        for (int64_t i = 0; i < n; i++) assert_true(fabsf(x[i] - y[i]) <= fabsf(x[i]) * 0x1p-8f);
        qw_quantize_row(QW_TYPE_F32, x, buf, n);
        qw_dequantize_row(QW_TYPE_F32, buf, y, n);
        assert_memory_equal(x, y, n * 4);
    }
    restore_best();
    free(x), free(y), free(buf);
}

static void test_q4_0_quantize_known(void **state) {
    (void)state;
    /* x[j] = j - 16: max |x| is 16 at j = 0, value -16, so d = -16/-8 = 2,
     * id = 0.5, q = min(15, trunc((j-16)/2 + 8.5)) = min(15, trunc(j/2 + 0.5)):
     * j=0 -> 0, j=1 -> 1, j=2 -> 1, j=3 -> 2, …, j=29 -> 15, j=30 -> 15 (15.5),
     * j=31 -> 16 clamped to 15. */
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
    qw_block_q4_0 b;
    qw_quantize_row(QW_TYPE_Q4_0, x, &b, 32);
    assert_int_equal(b.d, 0x4000); /* 2.0 */
    for (int j = 0; j < 32; j++) {
        int want = (int)((float)j * 0.5f + 0.5f);
        if (want > 15) want = 15;
        const int got = j < 16 ? (b.qs[j] & 15) : (b.qs[j - 16] >> 4);
        assert_int_equal(got, want);
    }
    assert_int_equal(b.qs[0], 0x80); /* element 0 -> 0, element 16 -> trunc(8.5) = 8 */
    /* positive max: d negative */
    for (int j = 0; j < 32; j++) x[j] = (j == 3) ? 4.0f : 0.0f;
    qw_quantize_row(QW_TYPE_Q4_0, x, &b, 32);
    assert_int_equal(b.d, 0xb800); /* -0.5 */
    assert_int_equal(b.qs[3] & 15, 0); /* 4 * -2 + 8.5 = 0.5 -> 0, i.e. (0-8) * -0.5 = 4 */
    assert_int_equal(b.qs[4], 0x88);   /* zeros -> 8 */
}

/* ---- dot products ---------------------------------------------------------- */

static const int64_t k_block_sizes[] = {32, 64, 96, 224, 2048, 4096, 4096 + 32};
static const int64_t k_float_sizes[] = {1, 3, 17, 32, 33, 64, 100, 1000, 4096, 4096 + 32, 4096 + 37};

typedef struct {
    qw_type type;
    void *w;
    void *x;
    float *wf, *xf; /* the same values as f32 */
    double bound;   /* sum |w_i x_i| (float types) or sum_b |d| sum |w x| */
} dot_case;

/* Fills a random case of n elements; unit_scales sets every block scale to 1. */
static void make_case(dot_case *c, qw_type type, int64_t n, bool unit_scales, int wrange) {
    c->type = type;
    c->wf = malloc((size_t)n * 4);
    c->xf = malloc((size_t)n * 4);
    c->w = malloc((size_t)n * 4 + 64);
    c->x = malloc((size_t)n * 4 + 64);
    c->bound = 0;
    if (type == QW_TYPE_F32 || type == QW_TYPE_F16 || type == QW_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            c->wf[i] = rnd_unit();
            c->xf[i] = rnd_unit() * 3.0f;
        }
        for (int64_t i = 0; i < n; i++) {
            if (type == QW_TYPE_F16) {
                ((uint16_t *)c->w)[i] = qw_f32_to_fp16(c->wf[i]);
                ((uint16_t *)c->x)[i] = qw_f32_to_fp16(c->xf[i]);
                c->wf[i] = qw_fp16_to_f32(((uint16_t *)c->w)[i]);
                c->xf[i] = qw_fp16_to_f32(((uint16_t *)c->x)[i]);
            } else if (type == QW_TYPE_BF16) {
                ((uint16_t *)c->w)[i] = qw_f32_to_bf16(c->wf[i]);
                ((uint16_t *)c->x)[i] = qw_f32_to_bf16(c->xf[i]);
                c->wf[i] = qw_bf16_to_f32(((uint16_t *)c->w)[i]);
                c->xf[i] = qw_bf16_to_f32(((uint16_t *)c->x)[i]);
            } else {
                ((float *)c->w)[i] = c->wf[i];
                ((float *)c->x)[i] = c->xf[i];
            }
            c->bound += fabs((double)c->wf[i] * c->xf[i]);
        }
        return;
    }
    const int64_t nb = n / 32;
    qw_block_q8_0 *xb = c->x;
    for (int64_t b = 0; b < nb; b++) {
        const uint16_t dw = unit_scales ? 0x3c00 : qw_f32_to_fp16(0.01f + 0.02f * fabsf(rnd_unit()));
        const uint16_t dx = unit_scales ? 0x3c00 : qw_f32_to_fp16(0.5f * fabsf(rnd_unit()) + 1e-3f);
        xb[b].d = dx;
        for (int j = 0; j < 32; j++) xb[b].qs[j] = (int8_t)rnd_int(-127, 127);
        double isum = 0;
        if (type == QW_TYPE_Q8_0) {
            qw_block_q8_0 *wb = c->w;
            wb[b].d = dw;
            for (int j = 0; j < 32; j++) {
                wb[b].qs[j] = (int8_t)rnd_int(-wrange - 1, wrange); /* -128 included at full range */
                isum += fabs((double)wb[b].qs[j] * xb[b].qs[j]);
                c->wf[b * 32 + j] = wb[b].qs[j];
            }
        } else {
            qw_block_q4_0 *wb = c->w;
            wb[b].d = dw;
            for (int j = 0; j < 16; j++) wb[b].qs[j] = (uint8_t)rnd_u64();
            for (int j = 0; j < 32; j++) {
                const int q = (j < 16 ? (wb[b].qs[j] & 15) : (wb[b].qs[j - 16] >> 4)) - 8;
                isum += fabs((double)q * xb[b].qs[j]);
                c->wf[b * 32 + j] = (float)q;
            }
        }
        for (int j = 0; j < 32; j++) c->xf[b * 32 + j] = xb[b].qs[j];
        c->bound += isum * fabs((double)qw_fp16_to_f32(dw) * qw_fp16_to_f32(dx));
    }
}

static void free_case(dot_case *c) { free(c->w), free(c->x), free(c->wf), free(c->xf); }

static void check_dot_levels(qw_type type, const int64_t *sizes, size_t n_sizes) {
    for (size_t si = 0; si < n_sizes; si++) {
        const int64_t n = sizes[si];
        dot_case c;
        make_case(&c, type, n, false, 127);
        float ref;
        qw_vec_dot_ref(type, n, &ref, c.w, c.x);
        /* the reference itself agrees with a double-precision dot */
        double exact = 0;
        if (type == QW_TYPE_F32 || type == QW_TYPE_F16 || type == QW_TYPE_BF16) {
            for (int64_t i = 0; i < n; i++) exact += (double)c.wf[i] * c.xf[i];
            assert_true(fabs(ref - exact) <= 1e-6 * c.bound + 1e-30);
        }
        for (int li = 0; li < N_LEVELS; li++) {
            if (!use_level(k_levels[li])) continue;
            float got = -12345.0f;
            qw_vec_dot(type, n, &got, c.w, c.x);
            const double err = fabs((double)got - ref);
            if (!(err <= 1e-5 * c.bound + 1e-30))
                fail_msg("%s %s n=%lld: got %.9g ref %.9g (err %.3g, limit %.3g)", qw_type_name(type), k_levels[li],
                         (long long)n, got, ref, err, 1e-5 * c.bound);
            float got2 = -1.0f;
            qw_vec_dot_get(type)(n, &got2, c.w, c.x);
            assert_int_equal(f2u(got), f2u(got2));
        }
        free_case(&c);
    }
    restore_best();
}

static void test_dot_f32(void **state) { (void)state; check_dot_levels(QW_TYPE_F32, k_float_sizes, 11); }
static void test_dot_f16(void **state) { (void)state; check_dot_levels(QW_TYPE_F16, k_float_sizes, 11); }
static void test_dot_bf16(void **state) { (void)state; check_dot_levels(QW_TYPE_BF16, k_float_sizes, 11); }
static void test_dot_q8_0(void **state) { (void)state; check_dot_levels(QW_TYPE_Q8_0, k_block_sizes, 7); }
static void test_dot_q4_0(void **state) { (void)state; check_dot_levels(QW_TYPE_Q4_0, k_block_sizes, 7); }

/* With unit scales the block dots are integers below 2^24: exact everywhere. */
static void test_dot_integer_exact(void **state) {
    (void)state;
    const qw_type types[] = {QW_TYPE_Q8_0, QW_TYPE_Q4_0};
    const int64_t sizes[] = {32, 64, 96, 128, 160, 224, 4096 + 32};
    for (int t = 0; t < 2; t++) {
        for (int si = 0; si < 7; si++) {
            const int64_t n = sizes[si];
            dot_case c;
            /* |sum| <= blocks * 32 * 128 * 127 < 2^24 for <= 7 blocks;
             * larger rows use weights in [-16, 15] */
            make_case(&c, types[t], n, true, n > 224 ? 15 : 127);
            int64_t exact = 0;
            for (int64_t i = 0; i < n; i++) exact += (int64_t)c.wf[i] * (int64_t)c.xf[i];
            assert_true(llabs(exact) < (1 << 24));
            for (int li = 0; li < N_LEVELS; li++) {
                if (!use_level(k_levels[li])) continue;
                float got;
                qw_vec_dot(types[t], n, &got, c.w, c.x);
                if (got != (float)exact)
                    fail_msg("%s %s n=%lld: %.1f != %lld", qw_type_name(types[t]), k_levels[li], (long long)n, got,
                             (long long)exact);
            }
            free_case(&c);
        }
    }
    restore_best();
}

static void test_dot_known(void **state) {
    (void)state;
    /* Q4_0 x Q8_0, two blocks, worked on paper:
     * block 0: w d = 0.5, qs = 0xA9 -> elements 0..15 = 9-8 = 1, 16..31 = 10-8 = 2;
     *          x d = 2, qs[j] = j - 16 (j = 0..31);
     *          int dot = sum_{j<16}(j-16) + 2 * sum_{j>=16}(j-16) = -136 + 240 = 104;
     *          times 0.5 * 2 = 104.
     * block 1: w d = 0.25, qs = 0x08 -> low 8-8 = 0, high 0-8 = -8;
     *          x d = 1, qs = 3: int dot = 16 * (-8 * 3) = -384, times 0.25 = -96.
     * total 8. */
    qw_block_q4_0 w4[2];
    qw_block_q8_0 x8[2];
    w4[0].d = 0x3800;
    memset(w4[0].qs, 0xa9, 16);
    w4[1].d = 0x3400;
    memset(w4[1].qs, 0x08, 16);
    x8[0].d = 0x4000;
    for (int j = 0; j < 32; j++) x8[0].qs[j] = (int8_t)(j - 16);
    x8[1].d = 0x3c00;
    memset(x8[1].qs, 3, 32);
    /* Q8_0 x Q8_0: w d = 1, qs[j] = j - 16 except qs[0] = -128; x d = 0.5,
     * qs = 2 except qs[0] = 127: int dot = -128*127 + 2 * sum_{j=1..31}(j-16)
     * = -16256 + 2 * 0 = -16256 ... sum_{j=1..31}(j-16) = 0, so -16256 * 0.5 = -8128. */
    qw_block_q8_0 w8, x8b;
    w8.d = 0x3c00;
    for (int j = 0; j < 32; j++) w8.qs[j] = (int8_t)(j - 16);
    w8.qs[0] = -128;
    x8b.d = 0x3800;
    memset(x8b.qs, 2, 32);
    x8b.qs[0] = 127;
    /* F16: (1.5, -2, 0.25) . (2, 0.5, -4) = 3 - 1 - 1 = 1 */
    const uint16_t wh[3] = {0x3e00, 0xc000, 0x3400}, xh[3] = {0x4000, 0x3800, 0xc400};
    /* BF16: same numbers */
    const uint16_t wb[3] = {0x3fc0, 0xc000, 0x3e80}, xb[3] = {0x4000, 0x3f00, 0xc080};
    for (int li = 0; li < N_LEVELS; li++) {
        if (!use_level(k_levels[li])) continue;
        float s;
        qw_vec_dot(QW_TYPE_Q4_0, 64, &s, w4, x8);
        assert_true(s == 8.0f);
        qw_vec_dot(QW_TYPE_Q4_0, 32, &s, w4, x8);
        assert_true(s == 104.0f);
        qw_vec_dot(QW_TYPE_Q8_0, 32, &s, &w8, &x8b);
        assert_true(s == -8128.0f);
        qw_vec_dot(QW_TYPE_F16, 3, &s, wh, xh);
        assert_true(s == 1.0f);
        qw_vec_dot(QW_TYPE_BF16, 3, &s, wb, xb);
        assert_true(s == 1.0f);
        qw_vec_dot(QW_TYPE_F16, 0, &s, wh, xh);
        assert_true(s == 0.0f);
    }
    restore_best();
}

/* Rows that are only 2-byte aligned (the contract's minimum: GGUF data is
 * 32-byte aligned and every row of these types has an even size). */
static void test_dot_unaligned(void **state) {
    (void)state;
    const int64_t n = 4096 + 32;
    dot_case c;
    make_case(&c, QW_TYPE_Q4_0, n, false, 127);
    uint8_t *wbuf = malloc(qw_row_bytes(QW_TYPE_Q4_0, n) + 8), *xbuf = malloc(qw_row_bytes(QW_TYPE_Q8_0, n) + 8);
    memcpy(wbuf + 2, c.w, qw_row_bytes(QW_TYPE_Q4_0, n));
    memcpy(xbuf + 6, c.x, qw_row_bytes(QW_TYPE_Q8_0, n));
    for (int li = 0; li < N_LEVELS; li++) {
        if (!use_level(k_levels[li])) continue;
        float a, b;
        qw_vec_dot(QW_TYPE_Q4_0, n, &a, c.w, c.x);
        qw_vec_dot(QW_TYPE_Q4_0, n, &b, wbuf + 2, xbuf + 6);
        assert_int_equal(f2u(a), f2u(b));
    }
    restore_best();
    free(wbuf), free(xbuf);
    free_case(&c);
}

/* ---- f32 helpers ----------------------------------------------------------- */

static void test_dot_axpy_f32(void **state) {
    (void)state;
    for (size_t si = 0; si < 11; si++) {
        const int64_t n = k_float_sizes[si];
        float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
        float *y0 = malloc((size_t)n * 4 + 4), *y1 = malloc((size_t)n * 4 + 4);
        double bound = 0;
        for (int64_t i = 0; i < n; i++) {
            a[i] = rnd_unit();
            b[i] = rnd_unit();
            bound += fabs((double)a[i] * b[i]);
            y0[i] = rnd_unit();
        }
        y0[n] = 777.0f;
        assert_true(use_level("scalar"));
        const float ref = qw_dot_f32(a, b, n);
        for (int li = 0; li < N_LEVELS; li++) {
            if (!use_level(k_levels[li])) continue;
            assert_true(fabs((double)qw_dot_f32(a, b, n) - ref) <= 1e-5 * bound + 1e-30);
            memcpy(y1, y0, (size_t)n * 4 + 4);
            qw_axpy_f32(y1, -0.75f, a, n);
            for (int64_t i = 0; i < n; i++) /* one FMA vs mul+add: within one rounding */
                assert_true(fabsf(y1[i] - (y0[i] - 0.75f * a[i])) <= 2e-7f * (fabsf(y0[i]) + fabsf(a[i])));
            assert_true(y1[n] == 777.0f); /* nothing written past n */
        }
        restore_best();
        free(a), free(b), free(y0), free(y1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_simd_force),
        cmocka_unit_test(test_fp16_exhaustive),
        cmocka_unit_test(test_fp16_known),
        cmocka_unit_test(test_fp16_rows),
        cmocka_unit_test(test_bf16_known),
        cmocka_unit_test(test_bf16_rows),
        cmocka_unit_test(test_q8_0_quantize_levels_agree),
        cmocka_unit_test(test_q8_0_quantize_known),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_q4_0_quantize_known),
        cmocka_unit_test(test_dot_f32),
        cmocka_unit_test(test_dot_f16),
        cmocka_unit_test(test_dot_bf16),
        cmocka_unit_test(test_dot_q8_0),
        cmocka_unit_test(test_dot_q4_0),
        cmocka_unit_test(test_dot_integer_exact),
        cmocka_unit_test(test_dot_known),
        cmocka_unit_test(test_dot_unaligned),
        cmocka_unit_test(test_dot_axpy_f32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
