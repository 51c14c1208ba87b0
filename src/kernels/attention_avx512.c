/* attention_avx512.c — the two inner loops of attention over an f16 KV cache
 * (attention.c), for one query row (or four sharing a KV head: the *4 forms)
 * against a run of cached positions:
 *
 *   qw_avx512_attn_scores_f16: scores[s] = dot(k_s, q16) for s < n_pos;
 *   qw_avx512_attn_values_f16: out = sum over s of p[s] * v_s (p[s] == 0 skipped).
 *
 * They give exactly the bits of the per-position kernel calls they replace —
 * the AVX-512 qw_vec_dot F16 (four 16-lane accumulators over 64-element
 * chunks, then one over 16-element chunks, reduce((a0 + a1) + (a2 + a3)))
 * and qw_axpy_f16 (y + p * v, multiply then add) — but the query is
 * converted once instead of once per position, the output row stays in
 * registers across positions, and no call is made per position.
 *
 * Compiled for head_dim 64, 128 and 256 (the register arrays need a constant
 * size); both return false for any other, and the caller keeps its loop.
 */
#include "kernels/quant_impl.h"

#include <immintrin.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>

static inline __m512 f16x16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

static inline __attribute__((always_inline)) void scores_d(const uint16_t *q16, const char *k, size_t kv_stride,
                                                           int64_t n_pos, float *scores, const int D) {
    __m512 qv[16];
#pragma GCC unroll 16
    for (int c = 0; c < D / 16; c++) qv[c] = f16x16(q16 + 16 * c);
    for (int64_t s = 0; s < n_pos; s++) {
        const uint16_t *kr = (const uint16_t *)(k + (size_t)s * kv_stride);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
#pragma GCC unroll 4
        for (int c = 0; c < D / 16; c += 4) {
            a0 = _mm512_fmadd_ps(f16x16(kr + 16 * c), qv[c], a0);
            a1 = _mm512_fmadd_ps(f16x16(kr + 16 * c + 16), qv[c + 1], a1);
            a2 = _mm512_fmadd_ps(f16x16(kr + 16 * c + 32), qv[c + 2], a2);
            a3 = _mm512_fmadd_ps(f16x16(kr + 16 * c + 48), qv[c + 3], a3);
        }
        scores[s] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    }
}

static inline __attribute__((always_inline)) void values_d(const float *p, const char *v, size_t kv_stride,
                                                           int64_t n_pos, float *out, const int D) {
    __m512 acc[16];
#pragma GCC unroll 16
    for (int c = 0; c < D / 16; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t s = 0; s < n_pos; s++) {
        if (p[s] == 0.0f) continue;
        const uint16_t *vr = (const uint16_t *)(v + (size_t)s * kv_stride);
        const __m512 a = _mm512_set1_ps(p[s]);
#pragma GCC unroll 16
        for (int c = 0; c < D / 16; c++) acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(a, f16x16(vr + 16 * c)));
    }
#pragma GCC unroll 16
    for (int c = 0; c < D / 16; c++) _mm512_storeu_ps(out + 16 * c, acc[c]);
}

/* The same two loops for four query rows that share one KV head (GQA): each
 * cached row is loaded and converted once for the four instead of once per
 * head, and a long context's K and V stream through the cache a quarter as
 * often.  Per head every operation is the single-row loop's, in its order:
 * the score's four accumulators over 64-element chunks and its reduction;
 * the value sums as mul then add, position by position, a position with
 * p == 0 left out (a masked add keeps the sum as the skip did) — so the same
 * bits.  The values run in 64-dimension slices (4 heads x 4 registers). */
static inline __attribute__((always_inline)) void scores4_d(const uint16_t *const *q16, const char *k, size_t kv_stride,
                                                            int64_t n_pos, float *const *scores, const int D) {
    alignas(64) float qf[4][256];
#pragma GCC unroll 4
    for (int h = 0; h < 4; h++)
        for (int c = 0; c < D / 16; c++) _mm512_store_ps(qf[h] + 16 * c, f16x16(q16[h] + 16 * c));
    for (int64_t s = 0; s < n_pos; s++) {
        const uint16_t *kr = (const uint16_t *)(k + (size_t)s * kv_stride);
        __m512 a[4][4];
#pragma GCC unroll 4
        for (int h = 0; h < 4; h++) a[h][0] = a[h][1] = a[h][2] = a[h][3] = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int c = 0; c < D / 16; c += 4) {
            const __m512 k0 = f16x16(kr + 16 * c), k1 = f16x16(kr + 16 * c + 16), k2 = f16x16(kr + 16 * c + 32),
                         k3 = f16x16(kr + 16 * c + 48);
#pragma GCC unroll 4
            for (int h = 0; h < 4; h++) {
                a[h][0] = _mm512_fmadd_ps(k0, _mm512_load_ps(qf[h] + 16 * c), a[h][0]);
                a[h][1] = _mm512_fmadd_ps(k1, _mm512_load_ps(qf[h] + 16 * c + 16), a[h][1]);
                a[h][2] = _mm512_fmadd_ps(k2, _mm512_load_ps(qf[h] + 16 * c + 32), a[h][2]);
                a[h][3] = _mm512_fmadd_ps(k3, _mm512_load_ps(qf[h] + 16 * c + 48), a[h][3]);
            }
        }
#pragma GCC unroll 4
        for (int h = 0; h < 4; h++)
            scores[h][s] =
                _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[h][0], a[h][1]), _mm512_add_ps(a[h][2], a[h][3])));
    }
}

static inline __attribute__((always_inline)) void values4_d(const float *const *p, const char *v, size_t kv_stride,
                                                            int64_t n_pos, float *const *out, const int D) {
    for (int c0 = 0; c0 < D / 16; c0 += 4) {
        __m512 acc[4][4];
#pragma GCC unroll 4
        for (int h = 0; h < 4; h++) acc[h][0] = acc[h][1] = acc[h][2] = acc[h][3] = _mm512_setzero_ps();
        for (int64_t s = 0; s < n_pos; s++) {
            const uint16_t *vr = (const uint16_t *)(v + (size_t)s * kv_stride) + 16 * c0;
            const __m512 v0 = f16x16(vr), v1 = f16x16(vr + 16), v2 = f16x16(vr + 32), v3 = f16x16(vr + 48);
#pragma GCC unroll 4
            for (int h = 0; h < 4; h++) {
                const __m512 a = _mm512_set1_ps(p[h][s]);
                /* the single loop's skip (p == 0); NaN compares unequal there too */
                const __mmask16 m = _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_NEQ_UQ);
                acc[h][0] = _mm512_mask_add_ps(acc[h][0], m, acc[h][0], _mm512_mul_ps(a, v0));
                acc[h][1] = _mm512_mask_add_ps(acc[h][1], m, acc[h][1], _mm512_mul_ps(a, v1));
                acc[h][2] = _mm512_mask_add_ps(acc[h][2], m, acc[h][2], _mm512_mul_ps(a, v2));
                acc[h][3] = _mm512_mask_add_ps(acc[h][3], m, acc[h][3], _mm512_mul_ps(a, v3));
            }
        }
#pragma GCC unroll 4
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < 4; i++) _mm512_storeu_ps(out[h] + 16 * (c0 + i), acc[h][i]);
    }
}

/* Runs CALL(D) for the compiled head_dims and returns true, else false. */
#define FOR_HEAD_DIM(D, CALL)                                                                                  \
    switch (D) {                                                                                               \
    case 64: CALL(64); return true;                                                                            \
    case 128: CALL(128); return true;                                                                          \
    case 256: CALL(256); return true;                                                                          \
    default: return false;                                                                                     \
    }

bool qw_avx512_attn_scores_f16(const uint16_t *q16, const char *k, size_t kv_stride, int64_t n_pos, int64_t D,
                               float *scores) {
#define SCORES(d) scores_d(q16, k, kv_stride, n_pos, scores, d)
    FOR_HEAD_DIM(D, SCORES)
#undef SCORES
}

bool qw_avx512_attn_values_f16(const float *p, const char *v, size_t kv_stride, int64_t n_pos, int64_t D,
                               float *out) {
#define VALUES(d) values_d(p, v, kv_stride, n_pos, out, d)
    FOR_HEAD_DIM(D, VALUES)
#undef VALUES
}

bool qw_avx512_attn_scores4_f16(const uint16_t *const *q16, const char *k, size_t kv_stride, int64_t n_pos, int64_t D,
                                float *const *scores) {
#define SCORES4(d) scores4_d(q16, k, kv_stride, n_pos, scores, d)
    FOR_HEAD_DIM(D, SCORES4)
#undef SCORES4
}

bool qw_avx512_attn_values4_f16(const float *const *p, const char *v, size_t kv_stride, int64_t n_pos, int64_t D,
                                float *const *out) {
#define VALUES4(d) values4_d(p, v, kv_stride, n_pos, out, d)
    FOR_HEAD_DIM(D, VALUES4)
#undef VALUES4
}
