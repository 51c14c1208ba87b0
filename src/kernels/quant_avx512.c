/* quant_avx512.c — AVX-512 kernels (F, BW, VL, DQ, VNNI, BF16; F16C, FMA).
 *
 * Only reached through qw_kernels_avx512 when the CPU has avx512f+bw+vl+vnni.
 * dot_bf16 also needs AVX512_BF16; quant.c swaps in the AVX2 one without it.
 *
 * Design (see quant_avx2.c for the shared reasoning):
 *  - Float dots keep four 16-lane accumulators and finish with one masked
 *    iteration, so any n works without a scalar tail.
 *  - BF16 uses VDPBF16PS, like ggml's build for this CPU: products of bf16
 *    pairs are exact in f32 and accumulate with round to nearest even; the
 *    instruction treats bf16 subnormal inputs as zero (so does ggml's).
 *  - Q8_0 keeps llama.cpp's order (see dot_q8_0).  VPDPBUSD multiplies
 *    unsigned by signed bytes: the weight gives |w| and its sign is moved
 *    onto the activation (x negated where w < 0, never overflowing since
 *    activations are in [-127, 127]).
 *  - Q4_0 (dot, tiles, decode rows) lives in q4_0_avx512vbmi.c: it needs
 *    AVX512_VBMI, which quant.c checks separately.
 *  - The Q8_0 quantizer rounds with an explicit round-to-nearest-even
 *    conversion and saturating narrowing; bytes match quant_ref.c.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/quant_impl.h"
#include "kernels/simd_x86.h"

static inline __mmask16 tail16(int64_t r) { return (__mmask16)((1u << r) - 1u); }
static inline __mmask32 tail32(int64_t r) { return (__mmask32)(r >= 32 ? 0xffffffffu : (1u << r) - 1u); }

/* ---- float dots -------------------------------------------------------- */

static void dot_f32(int64_t n, float *s, const void *wv, const void *xv) {
    const float *w = wv, *x = xv;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 32), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 48), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
    if (i < n) {
        const __mmask16 m = tail16(n - i);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_maskz_loadu_ps(m, x + i), a1);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

static inline __m512 load_f16x16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

static void dot_f16(int64_t n, float *s, const void *wv, const void *xv) {
    const uint16_t *w = wv, *x = xv;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(load_f16x16(w + i), load_f16x16(x + i), a0);
        a1 = _mm512_fmadd_ps(load_f16x16(w + i + 16), load_f16x16(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(load_f16x16(w + i + 32), load_f16x16(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(load_f16x16(w + i + 48), load_f16x16(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(load_f16x16(w + i), load_f16x16(x + i), a0);
    if (i < n) {
        const __mmask16 m = tail16(n - i);
        const __m512 wt = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + i));
        const __m512 xt = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
        a1 = _mm512_fmadd_ps(wt, xt, a1);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

static inline __m512bh load_bf16x32(const uint16_t *p) { return (__m512bh)_mm512_loadu_si512(p); }

static void dot_bf16(int64_t n, float *s, const void *wv, const void *xv) {
    const uint16_t *w = wv, *x = xv;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a0 = _mm512_dpbf16_ps(a0, load_bf16x32(w + i), load_bf16x32(x + i));
        a1 = _mm512_dpbf16_ps(a1, load_bf16x32(w + i + 32), load_bf16x32(x + i + 32));
        a2 = _mm512_dpbf16_ps(a2, load_bf16x32(w + i + 64), load_bf16x32(x + i + 64));
        a3 = _mm512_dpbf16_ps(a3, load_bf16x32(w + i + 96), load_bf16x32(x + i + 96));
    }
    for (; i < n; i += 32) {
        const __mmask32 m = tail32(n - i); /* all ones except on the last pass */
        const __m512bh wt = (__m512bh)_mm512_maskz_loadu_epi16(m, w + i);
        const __m512bh xt = (__m512bh)_mm512_maskz_loadu_epi16(m, x + i);
        a0 = _mm512_dpbf16_ps(a0, wt, xt);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* ---- block dots -------------------------------------------------------- */

/* 8 int32 lanes, each the exact sum of 4 products w*x. */
static inline __m256i dot_i8x32(__m256i w, __m256i x) {
    const __mmask32 neg = _mm256_movepi8_mask(w);
    const __m256i sx = _mm256_mask_sub_epi8(x, neg, _mm256_setzero_si256(), x);
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), sx);
}

static inline float scale1(uint16_t dw, uint16_t dx) { return _cvtsh_ss(dw) * _cvtsh_ss(dx); }

/* llama.cpp's x86 Q8_0 dot order (ggml_vec_dot_q8_0_q8_0 and its tinyBLAS
 * tiles): ONE 8-lane f32 accumulator, block by block, acc = fma(d_w*d_x,
 * float(lane sums of 4 products), acc), then hsum8.  Only this order gives
 * llama.cpp's bits; any other (two accumulators, 16 lanes) differs in the
 * last bit, and on Q8_0 models such last-bit differences flip the rounding
 * of a later Q8_0 / f16 conversion now and then, which grows to 1e-2 in the
 * logprobs.  The tiles in q8_0_avx512.c keep this order too. */
static void dot_q8_0(int64_t n, float *s, const void *wv, const void *xv) {
    const qw_block_q8_0 *w = wv, *x = xv;
    const int64_t nb = n / QW_QK8_0;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t k = 0; k < nb; k++) {
        const __m256i p = dot_i8x32(_mm256_loadu_si256((const __m256i *)w[k].qs),
                                    _mm256_loadu_si256((const __m256i *)x[k].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(scale1(load_u16(&w[k].d), load_u16(&x[k].d))),
                              _mm256_cvtepi32_ps(p), acc);
    }
    *s = hsum8(acc);
}

/* ---- Q8_0 activation quantizer ----------------------------------------- */

static void quantize_q8_0(const float *x, void *dst, int64_t n) {
    qw_block_q8_0 *y = dst;
    const int64_t nb = n / QW_QK8_0;
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * QW_QK8_0;
        const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const uint16_t dh = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        memcpy(&y[b].d, &dh, sizeof dh);
        const __m512 vid = _mm512_set1_ps(id);
        const __m512i i0 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v0, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m512i i1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v1, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)y[b].qs, _mm512_cvtsepi32_epi8(i0));
        _mm_storeu_si128((__m128i *)(y[b].qs + 16), _mm512_cvtsepi32_epi8(i1));
    }
}

/* ---- row conversions --------------------------------------------------- */

static void f32_to_fp16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (i < n) {
        const __mmask16 m = tail16(n - i);
        const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(y + i, m, h);
    }
}

static void fp16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, load_f16x16(x + i));
    if (i < n) {
        const __mmask16 m = tail16(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
    }
}

/* The scalar bf16 rule (quant_ref.c) on 16 lanes; deliberately not
 * VCVTNEPS2BF16, which flushes subnormals and would differ from ggml. */
static inline __m256i f32x16_to_bf16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 isnan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, isnan, hi, _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

static void f32_to_bf16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(y + i), f32x16_to_bf16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = tail16(n - i);
        _mm256_mask_storeu_epi16(y + i, m, f32x16_to_bf16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

static inline __m512 bf16x16_to_f32(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static void bf16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, bf16x16_to_f32(_mm256_loadu_si256((const __m256i *)(x + i))));
    if (i < n) {
        const __mmask16 m = tail16(n - i);
        _mm512_mask_storeu_ps(y + i, m, bf16x16_to_f32(_mm256_maskz_loadu_epi16(m, x + i)));
    }
}

/* ---- f32 helpers ------------------------------------------------------- */

static float dot_f32v(const float *a, const float *b, int64_t n) {
    float s;
    dot_f32(n, &s, a, b);
    return s;
}

static void axpy_f16(float *y, float a, const uint16_t *x, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_mul_ps(va, load_f16x16(x + i))));
    if (i < n) {
        const __mmask16 m = tail16(n - i);
        const __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_mul_ps(va, xv)));
    }
}

static void axpy_f32(float *y, float a, const float *x, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
        _mm512_storeu_ps(y + i + 16, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16)));
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

const qw_kernel_table qw_kernels_avx512 = {
    .name = "avx512",
    .isa = QW_ISA_AVX512,
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .dot_bf16 = dot_bf16,
    .dot_q8_0 = dot_q8_0,
    .dot_q4_0 = qw_avx512_dot_q4_0,
    .quantize_q8_0 = quantize_q8_0,
    .f32_to_fp16 = f32_to_fp16,
    .fp16_to_f32 = fp16_to_f32,
    .f32_to_bf16 = f32_to_bf16,
    .bf16_to_f32 = bf16_to_f32,
    .dot_f32v = dot_f32v,
    .axpy_f32 = axpy_f32,
    .gemm_q8_0 = qw_avx512_gemm_q8_0,
    .gemm_q4_0 = qw_avx512_gemm_q4_0,
    .gemv_q8_0 = qw_avx512_gemv_q8_0,
    .gemv_q4_0 = qw_avx512_gemv_q4_0,
    .gemm_wide_q8_0 = qw_avx512_gemm_wide_q8_0,
    .wide_toks_q8 = 8,
    .axpy_f16 = axpy_f16,
    .kq = &qw_kq_dots_avx512,
    .attn_scores_f16 = qw_avx512_attn_scores_f16,
    .attn_values_f16 = qw_avx512_attn_values_f16,
    .attn_scores4_f16 = qw_avx512_attn_scores4_f16,
    .attn_values4_f16 = qw_avx512_attn_values4_f16,
    .exp_row = qw_avx512_exp_row,
    .exp_f32 = qw_avx512_exp_f32,
    .delta_step = qw_avx512_delta_step,
};
