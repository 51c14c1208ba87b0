/* delta_avx2.c — the gated delta rule step (delta.c) with AVX2 + FMA: dots
 * and multiply-adds over 32 floats at a time in four 8-lane accumulators,
 * reduced (0+2) + (1+3), then the 8 lanes as 4 + 4, and a scalar tail — the
 * summation order of ggml's vec_dot_f32 / vec_mad_f32 in an AVX2 build, so for
 * state sizes that are multiples of 32 (the real model's 128) the roundings
 * are llama.cpp's on such a CPU (the AVX-512 form, delta_avx512.c, follows
 * ggml's AVX-512 build instead).
 *
 * The reference decays the whole S x S state before the rows; here each row
 * is decayed right before its own dots (rows never meet each other's values,
 * so the operations and their order per row are the same), which keeps the
 * row in L1 for all four passes over it instead of streaming the 64 KB state
 * an extra time.
 */
#include "kernels/quant_impl.h"

#include <immintrin.h>
#include <stdint.h>

/* ggml's 8-lane reduction: low + high 128 bits, then two horizontal adds. */
static inline float reduce8(__m256 s) {
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

static float dot(const float *x, const float *y, int64_t n) {
    const int64_t np = n & ~(int64_t)31;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t i = 0; i < np; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), s3);
    }
    float sum = reduce8(_mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3)));
    for (int64_t i = np; i < n; i++) sum += x[i] * y[i];
    return sum;
}

static void mad(float *y, const float *x, float v, int64_t n) {
    const int64_t np = n & ~(int64_t)31;
    const __m256 vv = _mm256_set1_ps(v);
    for (int64_t i = 0; i < np; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), vv, _mm256_loadu_ps(y + i)));
    for (int64_t i = np; i < n; i++) y[i] += x[i] * v;
}

static void scale_row(float *y, float v, int64_t n) {
    const int64_t n8 = n & ~(int64_t)7;
    const __m256 vv = _mm256_set1_ps(v);
    for (int64_t i = 0; i < n8; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vv));
    for (int64_t i = n8; i < n; i++) y[i] *= v;
}

void qw_avx2_delta_step(float *M, const float *q, const float *k, const float *v, float decay, float beta,
                        float scale, int64_t S, float *o) {
    for (int64_t j = 0; j < S; j++) {
        float *m = M + j * S;
        scale_row(m, decay, S);
        const float d = (v[j] - dot(m, k, S)) * beta;
        mad(m, k, d, S);
        o[j] = dot(m, q, S) * scale;
    }
}
