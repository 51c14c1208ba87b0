/* delta_avx512.c — the gated delta rule step (delta.c) with AVX-512: dots
 * and multiply-adds over 64 floats at a time in four 16-lane accumulators,
 * reduced pairwise, and a scalar tail — the summation order of ggml's
 * vec_dot_f32 / vec_mad_f32 in an AVX-512 build, so for state sizes that are
 * multiples of 64 (the real model's 128) the roundings match llama.cpp's.
 * For those sizes each state row is also loaded and stored once a step
 * (delta_step_rows), with the same operations in the same order.
 */
#include "kernels/quant_impl.h"

#include <immintrin.h>
#include <stdint.h>

static float dot(const float *x, const float *y, int64_t n) {
    const int64_t np = n & ~(int64_t)63;
    __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            s[j] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * j), _mm512_loadu_ps(y + i + 16 * j), s[j]);
    s[0] = _mm512_add_ps(s[0], s[2]);
    s[1] = _mm512_add_ps(s[1], s[3]);
    s[0] = _mm512_add_ps(s[0], s[1]);
    float sum = _mm512_reduce_add_ps(s[0]);
    for (int64_t i = np; i < n; i++) sum += x[i] * y[i];
    return sum;
}

static void mad(float *y, const float *x, float v, int64_t n) {
    const int64_t np = n & ~(int64_t)63;
    const __m512 vv = _mm512_set1_ps(v);
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++) {
            float *p = y + i + 16 * j;
            _mm512_storeu_ps(p, _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * j), vv, _mm512_loadu_ps(p)));
        }
    for (int64_t i = np; i < n; i++) y[i] += x[i] * v;
}

/* dot over a row held in registers (r[0..S/16)), in dot()'s order: four
 * accumulators over 64-float chunks, reduced (0+2) + (1+3). */
static inline __attribute__((always_inline)) float dot_regs(const __m512 *r, const float *y, const int S) {
    __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
#pragma GCC unroll 16
    for (int c = 0; c < S / 16; c++) s[c & 3] = _mm512_fmadd_ps(r[c], _mm512_loadu_ps(y + 16 * c), s[c & 3]);
    s[0] = _mm512_add_ps(s[0], s[2]);
    s[1] = _mm512_add_ps(s[1], s[3]);
    s[0] = _mm512_add_ps(s[0], s[1]);
    return _mm512_reduce_add_ps(s[0]);
}

/* The step with each state row loaded once: decayed, dotted with k, updated,
 * dotted with q and stored, all from registers, where the plain step below
 * reads the S x S state four times and writes it twice (a 128 x 128 state is
 * 64 KB, past L1).  Every operation is the plain step's, in its order (a row
 * only ever meets its own values), so the bits are the same.  S % 64 == 0. */
static inline __attribute__((always_inline)) void delta_step_rows(float *M, const float *q, const float *k,
                                                                  const float *v, float decay, float beta, float scale,
                                                                  float *o, const int S) {
    const __m512 dv = _mm512_set1_ps(decay);
    for (int j = 0; j < S; j++) {
        float *m = M + (size_t)j * S;
        __m512 r[S / 16];
#pragma GCC unroll 16
        for (int c = 0; c < S / 16; c++) r[c] = _mm512_mul_ps(_mm512_loadu_ps(m + 16 * c), dv);
        const float d = (v[j] - dot_regs(r, k, S)) * beta;
        const __m512 vd = _mm512_set1_ps(d);
#pragma GCC unroll 16
        for (int c = 0; c < S / 16; c++) r[c] = _mm512_fmadd_ps(_mm512_loadu_ps(k + 16 * c), vd, r[c]);
        o[j] = dot_regs(r, q, S) * scale;
#pragma GCC unroll 16
        for (int c = 0; c < S / 16; c++) _mm512_storeu_ps(m + 16 * c, r[c]);
    }
}

void qw_avx512_delta_step(float *M, const float *q, const float *k, const float *v, float decay, float beta,
                          float scale, int64_t S, float *o) {
    switch (S) {
    case 64: delta_step_rows(M, q, k, v, decay, beta, scale, o, 64); return;
    case 128: delta_step_rows(M, q, k, v, decay, beta, scale, o, 128); return;
    case 256: delta_step_rows(M, q, k, v, decay, beta, scale, o, 256); return;
    default: break;
    }
    const int64_t n = S * S, n16 = n & ~(int64_t)15;
    const __m512 dv = _mm512_set1_ps(decay);
    for (int64_t i = 0; i < n16; i += 16) _mm512_storeu_ps(M + i, _mm512_mul_ps(_mm512_loadu_ps(M + i), dv));
    for (int64_t i = n16; i < n; i++) M[i] *= decay;
    for (int64_t j = 0; j < S; j++) {
        float *m = M + j * S;
        const float d = (v[j] - dot(m, k, S)) * beta;
        mad(m, k, d, S);
        o[j] = dot(m, q, S) * scale;
    }
}
