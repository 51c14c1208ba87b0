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
 *  - Q8_0 / Q4_0 put two blocks in one 512-bit register (block k in the low
 *    256 bits, k+1 in the high) and four blocks per iteration.  VPDPBUSD
 *    multiplies unsigned by signed bytes: for Q8_0 the weight gives |w| and
 *    its sign is moved onto the activation (x negated where w < 0, never
 *    overflowing since activations are in [-127, 127]); for Q4_0 the nibbles
 *    are already unsigned and the -8 offset is taken off as 8 * sum(x),
 *    computed by a second VPDPBUSD against a vector of 8s.  The four block
 *    scales d_w*d_x are converted together (VCVTPH2PS) and spread over the
 *    lanes with one permute per register.
 *  - The Q8_0 quantizer rounds with an explicit round-to-nearest-even
 *    conversion and saturating narrowing; bytes match quant_ref.c.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/quant_impl.h"

static inline uint16_t load_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float hsum8(__m256 v) {
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
}

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

/* Blocks k and k+1 of a Q8_0 row as one register: k low, k+1 high. */
static inline __m512i load_q8_pair(const qw_block_q8_0 *b) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)b[0].qs);
    const __m256i hi = _mm256_loadu_si256((const __m256i *)b[1].qs);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* 16 int32 lanes, each the exact sum of 4 products w*x. */
static inline __m512i dot_i8x64(__m512i w, __m512i x) {
    const __mmask64 neg = _mm512_movepi8_mask(w);
    const __m512i sx = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), sx);
}

static inline __m256i dot_i8x32(__m256i w, __m256i x) {
    const __mmask32 neg = _mm256_movepi8_mask(w);
    const __m256i sx = _mm256_mask_sub_epi8(x, neg, _mm256_setzero_si256(), x);
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), sx);
}

/* d_w * d_x for four consecutive blocks; blocks are 34 (Q8_0) or 18 (Q4_0)
 * bytes apart on the weight side, 34 on the activation side. */
static inline __m128 scales4(const uint8_t *wd, size_t wstride, const qw_block_q8_0 *x) {
    const __m128i hw = _mm_setr_epi16((short)load_u16(wd), (short)load_u16(wd + wstride),
                                      (short)load_u16(wd + 2 * wstride), (short)load_u16(wd + 3 * wstride),
                                      0, 0, 0, 0);
    const __m128i hx = _mm_setr_epi16((short)load_u16(&x[0].d), (short)load_u16(&x[1].d),
                                      (short)load_u16(&x[2].d), (short)load_u16(&x[3].d), 0, 0, 0, 0);
    return _mm_mul_ps(_mm_cvtph_ps(hw), _mm_cvtph_ps(hx));
}

static inline float scale1(uint16_t dw, uint16_t dx) { return _cvtsh_ss(dw) * _cvtsh_ss(dx); }

/* llama.cpp's x86 Q8_0 dot order (ggml_vec_dot_q8_0_q8_0 and its tinyBLAS
 * tiles): ONE 8-lane f32 accumulator, block by block, acc = fma(d_w*d_x,
 * float(lane sums of 4 products), acc), then hsum8.  Only this order gives
 * llama.cpp's bits; any other (two accumulators, 16 lanes) differs in the
 * last bit, and on Q8_0 models such last-bit differences flip the rounding
 * of a later Q8_0 / f16 conversion now and then, which grows to 1e-2 in the
 * logprobs.  The tiles in gemm_avx512.c keep this order too. */
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

/* Q4_0 blocks k and k+1 as 64 unsigned nibbles in element order:
 * [lo(k) | hi(k) | lo(k+1) | hi(k+1)], 16 bytes each. */
static inline __m512i q4_pair_nibbles(const qw_block_q4_0 *b) {
    const __m128i q0 = _mm_loadu_si128((const __m128i *)b[0].qs);
    const __m128i q1 = _mm_loadu_si128((const __m128i *)b[1].qs);
    const __m512i t = _mm512_castsi256_si512(_mm256_set_m128i(q1, q0));
    const __m512i z = _mm512_shuffle_i64x2(t, t, 0x50); /* 128-bit lanes q0 q0 q1 q1 */
    const __m512i m = _mm512_set1_epi8(0x0f);
    const __m512i lo = _mm512_and_si512(z, m);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m);
    return _mm512_mask_blend_epi64(0xcc, lo, hi); /* lanes 1 and 3 take the high nibbles */
}

/* 16 int32 lanes of sum(nib * x) - 8 * sum(x), exact. */
static inline __m512i dot_q4x64(__m512i nib, __m512i x) {
    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nib, x);
    const __m512i e = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(8), x);
    return _mm512_sub_epi32(p, e);
}

static inline __m256i q4_nibbles(const uint8_t *qs) {
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

static void dot_q4_0(int64_t n, float *s, const void *wv, const void *xv) {
    const qw_block_q4_0 *w = wv;
    const qw_block_q8_0 *x = xv;
    const int64_t nb = n / QW_QK8_0;
    const __m512i idx01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i idx23 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 4 <= nb; k += 4) {
        const __m512 d = _mm512_castps128_ps512(scales4((const uint8_t *)&w[k].d, sizeof(qw_block_q4_0), x + k));
        const __m512i p0 = dot_q4x64(q4_pair_nibbles(w + k), load_q8_pair(x + k));
        const __m512i p1 = dot_q4x64(q4_pair_nibbles(w + k + 2), load_q8_pair(x + k + 2));
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), _mm512_permutexvar_ps(idx01, d), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), _mm512_permutexvar_ps(idx23, d), acc1);
    }
    __m256 acc2 = _mm256_setzero_ps();
    for (; k < nb; k++) {
        const __m256i xq = _mm256_loadu_si256((const __m256i *)x[k].qs);
        const __m256i p = _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), q4_nibbles(w[k].qs), xq),
                                           _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(8), xq));
        acc2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(scale1(load_u16(&w[k].d), load_u16(&x[k].d))),
                               acc2);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + hsum8(acc2);
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
    .gemm_q8_0 = qw_avx512_gemm_q8_0,
    .gemm_q4_0 = qw_avx512_gemm_q4_0,
    .gemv_q8_0 = qw_avx512_gemv_q8_0,
    .gemv_q4_0 = qw_avx512_gemv_q4_0,
    .axpy_f16 = axpy_f16,
};
