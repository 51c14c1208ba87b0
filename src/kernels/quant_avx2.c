/* quant_avx2.c — AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c).
 *
 * Only reached through qw_kernels_avx2 when the CPU has those features.
 *
 * Design: decode is memory bound, so each dot streams the weight row once
 * with several independent vector accumulators in registers and reduces them
 * horizontally only at the end.  Block dots (Q8_0, Q4_0) handle two blocks per
 * iteration; each block's exact int32 lane partials are converted to f32 and
 * FMA'd with the block's scale d_w*d_x into an 8-lane f32 accumulator, so no
 * block ever needs its own horizontal sum.
 *
 * int8 x int8 without VNNI, and Q4_0's nibbles: avx2_blocks.h (shared with
 * the tiles).  |w| of -128 is 0x80 = 128 read as unsigned, which is right;
 * the activation side never holds -128 (our Q8_0 quantizer produces
 * [-127, 127]), so negating it cannot overflow.
 *
 * Conversions and the Q8_0 quantizer give bytes identical to quant_ref.c.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/avx2_blocks.h"
#include "kernels/quant_impl.h"
#include "kernels/simd_x86.h"

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* ---- float dots -------------------------------------------------------- */

static void dot_f32(int64_t n, float *s, const void *wv, const void *xv) {
    const float *w = wv, *x = xv;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    float sum = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += w[i] * x[i];
    *s = sum;
}

static inline __m256 load_f16x8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static void dot_f16(int64_t n, float *s, const void *wv, const void *xv) {
    const uint16_t *w = wv, *x = xv;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_f16x8(w + i), load_f16x8(x + i), a0);
        a1 = _mm256_fmadd_ps(load_f16x8(w + i + 8), load_f16x8(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16x8(w + i + 16), load_f16x8(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16x8(w + i + 24), load_f16x8(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_f16x8(w + i), load_f16x8(x + i), a0);
    float sum = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += h2f(w[i]) * h2f(x[i]);
    *s = sum;
}

static inline __m256 load_bf16x8(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static void dot_bf16(int64_t n, float *s, const void *wv, const void *xv) {
    const uint16_t *w = wv, *x = xv;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_bf16x8(w + i), load_bf16x8(x + i), a0);
        a1 = _mm256_fmadd_ps(load_bf16x8(w + i + 8), load_bf16x8(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_bf16x8(w + i + 16), load_bf16x8(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_bf16x8(w + i + 24), load_bf16x8(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_bf16x8(w + i), load_bf16x8(x + i), a0);
    float sum = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += qw_bf16_to_f32(w[i]) * qw_bf16_to_f32(x[i]);
    *s = sum;
}

/* ---- block dots -------------------------------------------------------- */

/* One 8-lane accumulator in block order, then hsum8: llama.cpp's order
 * (ggml_vec_dot_q8_0_q8_0, AVX2), so the result has its bits. */
static void dot_q8_0(int64_t n, float *s, const void *wv, const void *xv) {
    const qw_block_q8_0 *w = wv, *x = xv;
    const int64_t nb = n / QW_QK8_0;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t k = 0; k < nb; k++) {
        const __m256 d = _mm256_set1_ps(h2f(load_u16(&w[k].d)) * h2f(load_u16(&x[k].d)));
        const __m256i p = dot_i8x32(_mm256_loadu_si256((const __m256i *)w[k].qs),
                                    _mm256_loadu_si256((const __m256i *)x[k].qs));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    *s = hsum8(acc);
}

static void dot_q4_0(int64_t n, float *s, const void *wv, const void *xv) {
    const qw_block_q4_0 *w = wv;
    const qw_block_q8_0 *x = xv;
    const int64_t nb = n / QW_QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 2 <= nb; k += 2) {
        const __m256 d0 = _mm256_set1_ps(h2f(load_u16(&w[k].d)) * h2f(load_u16(&x[k].d)));
        const __m256 d1 = _mm256_set1_ps(h2f(load_u16(&w[k + 1].d)) * h2f(load_u16(&x[k + 1].d)));
        const __m256i p0 = dot_q4x32(q4_nibbles(w[k].qs), _mm256_loadu_si256((const __m256i *)x[k].qs));
        const __m256i p1 =
            dot_q4x32(q4_nibbles(w[k + 1].qs), _mm256_loadu_si256((const __m256i *)x[k + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), d0, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), d1, acc1);
    }
    if (k < nb) {
        const __m256 d0 = _mm256_set1_ps(h2f(load_u16(&w[k].d)) * h2f(load_u16(&x[k].d)));
        const __m256i p0 = dot_q4x32(q4_nibbles(w[k].qs), _mm256_loadu_si256((const __m256i *)x[k].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), d0, acc0);
    }
    *s = hsum8(_mm256_add_ps(acc0, acc1));
}

/* ---- Q8_0 activation quantizer ----------------------------------------- */

/* Same arithmetic as qw_ref_quantize_q8_0: amax, d = amax/127 (stored fp16,
 * nearest even), id = 127/amax, q = x*id rounded half to even.  The max is
 * exact in any order for non-NaN inputs, so bytes match the reference. */
static void quantize_q8_0(const float *x, void *dst, int64_t n) {
    qw_block_q8_0 *y = dst;
    const int64_t nb = n / QW_QK8_0;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * QW_QK8_0;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, absmask), _mm256_and_ps(v1, absmask)),
                                 _mm256_max_ps(_mm256_and_ps(v2, absmask), _mm256_and_ps(v3, absmask)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        uint16_t dh = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        memcpy(&y[b].d, &dh, sizeof dh);
        const __m256 vid = _mm256_set1_ps(id);
        enum { rnd = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }; /* must be a constant for clang */
        __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, vid), rnd));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, vid), rnd));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, vid), rnd));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, vid), rnd));
        /* packs work per 128-bit lane; the dword permute restores order. */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)y[b].qs, p);
    }
}

/* ---- row conversions --------------------------------------------------- */

static void f32_to_fp16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = qw_f32_to_fp16(x[i]);
}

static void fp16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_f16x8(x + i));
    for (; i < n; i++) y[i] = qw_fp16_to_f32(x[i]);
}

/* The scalar bf16 rule on 8 lanes at once (see quant_ref.c). */
static inline __m128i f32x8_to_bf16(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __m256i qnan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    const __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i isnan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f800000)); /* mag >= 0: signed ok */
    const __m256i res = _mm256_blendv_epi8(r, qnan, isnan);
    /* all lanes are <= 0xffff, so the unsigned-saturating pack is exact */
    const __m256i p = _mm256_packus_epi32(res, res);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
}

static void f32_to_bf16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i *)(y + i), f32x8_to_bf16(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = qw_f32_to_bf16(x[i]);
}

static void bf16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_bf16x8(x + i));
    for (; i < n; i++) y[i] = qw_bf16_to_f32(x[i]);
}

/* ---- f32 helpers ------------------------------------------------------- */

static float dot_f32v(const float *a, const float *b, int64_t n) {
    float s;
    dot_f32(n, &s, a, b);
    return s;
}

static void axpy_f16(float *y, float a, const uint16_t *x, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, xv)));
    }
    for (; i < n; i++) y[i] += a * _cvtsh_ss(x[i]);
}

static void axpy_f32(float *y, float a, const float *x, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8)));
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

const qw_kernel_table qw_kernels_avx2 = {
    .name = "avx2",
    .isa = QW_ISA_AVX2,
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .dot_bf16 = dot_bf16,
    .dot_q8_0 = dot_q8_0,
    .dot_q4_0 = dot_q4_0,
    .quantize_q8_0 = quantize_q8_0,
    .f32_to_fp16 = f32_to_fp16,
    .fp16_to_f32 = fp16_to_f32,
    .f32_to_bf16 = f32_to_bf16,
    .bf16_to_f32 = bf16_to_f32,
    .dot_f32v = dot_f32v,
    .axpy_f32 = axpy_f32,
    .gemm_q8_0 = qw_avx2_gemm_q8_0,
    .gemm_q4_0 = qw_avx2_gemm_q4_0,
    .gemv_q8_0 = qw_avx2_gemv_q8_0,
    .gemv_q4_0 = qw_avx2_gemv_q4_0,
    .axpy_f16 = axpy_f16,
    .kq = &qw_kq_dots_avx2,
    .exp_row = qw_avx2_exp_row,
    .exp_f32 = qw_avx2_exp_f32,
    .delta_step = qw_avx2_delta_step,
};
