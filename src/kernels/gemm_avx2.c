/* gemm_avx2.c — the AVX2 level's prefill tiles for Q8_0 and Q4_0 weights
 * (one weight row × 4 tokens a step, qw_gemm_fn in quant.h) and its decode
 * row loops (one token), bit-identical with the level's dots in
 * quant_avx2.c.  The AVX-512 tables without VBMI borrow the Q4_0 ones with
 * the AVX2 Q4_0 dot (quant.c's build_patched).
 *
 * Bits: per (row, token) the same chain as the dot — the same exact int32
 * lanes (pair sums of |w| · sign(x, w) for Q8_0; nib·x − 8·x for Q4_0, both
 * through maddubs/madd), the same scale d_w·d_x (one f32 product), the same
 * fma into the same accumulator: one 8-lane accumulator for Q8_0, two for
 * Q4_0 (even and odd blocks, added before hsum8) — so y[t][r] is the dot's
 * float, bit for bit.
 * What the tile saves over four dots: each weight block is loaded, made
 * unsigned (Q8_0: |w|) or unpacked (Q4_0: nibbles) and its scale converted
 * once for four tokens; the tokens' scales (and Q4_0's 8·x sums, which
 * depend only on the token) are prepared once per call for every row.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/avx2_blocks.h"
#include "kernels/quant_impl.h"
#include "kernels/simd_x86.h"

enum { NB_MAX = QW_GEMM_K_MAX / QW_QK8_0, T = QW_GEMM_TOKS };

static inline __m256 scale8(uint16_t h) { return _mm256_set1_ps(_cvtsh_ss(h)); }

/* The tokens' f16 scales as f32, [block][token] (broadcast where used). */
static void prep_scales(const void *const *x, int64_t nb, float d[][T]) {
    for (int t = 0; t < T; t++) {
        const qw_block_q8_0 *xt = x[t];
        for (int64_t k = 0; k < nb; k++) d[k][t] = _cvtsh_ss(load_u16(&xt[k].d));
    }
}

/* One (row, token) pair's step for block k: the dot's int32 lanes, scale and fma. */
static inline __attribute__((always_inline)) __m256 q8_pair(__m256i aw, __m256i wq, const qw_block_q8_0 *xb,
                                                            __m256 dw, const float *dx, __m256 acc) {
    const __m256i p = dot_i8x32_abs(aw, wq, _mm256_loadu_si256((const __m256i *)xb->qs));
    return _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(dx)), _mm256_cvtepi32_ps(p), acc);
}

void qw_avx2_gemm_q8_0(int64_t n, const void *wv, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                       float *const *y) {
    const int64_t nb = n / QW_QK8_0;
    float dx[NB_MAX][T];
    prep_scales(x, nb, dx);
    const qw_block_q8_0 *xt[T] = {x[0], x[1], x[2], x[3]};
    for (int64_t r = 0; r < n_rows; r++) {
        const qw_block_q8_0 *w = (const qw_block_q8_0 *)((const char *)wv + (size_t)r * w_row_bytes);
        if (r + 2 < n_rows) qw_prefetch_bytes((const char *)wv + (size_t)(r + 2) * w_row_bytes, w_row_bytes);
        /* named accumulators: an array of them was kept in memory, each fma waiting on a store */
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t k = 0; k < nb; k++) {
            const __m256i wq = _mm256_loadu_si256((const __m256i *)w[k].qs);
            const __m256i aw = _mm256_sign_epi8(wq, wq);
            const __m256 dw = scale8(load_u16(&w[k].d));
            a0 = q8_pair(aw, wq, &xt[0][k], dw, &dx[k][0], a0);
            a1 = q8_pair(aw, wq, &xt[1][k], dw, &dx[k][1], a1);
            a2 = q8_pair(aw, wq, &xt[2][k], dw, &dx[k][2], a2);
            a3 = q8_pair(aw, wq, &xt[3][k], dw, &dx[k][3], a3);
        }
        y[0][r] = hsum8(a0), y[1][r] = hsum8(a1), y[2][r] = hsum8(a2), y[3][r] = hsum8(a3);
    }
}

/* One (row, token) pair's step for block k: the dot's int32 lanes, scale and fma. */
static inline __attribute__((always_inline)) __m256 q4_pair(__m256i nib, const qw_block_q8_0 *xb, __m256i e8,
                                                            __m256 dw, const float *dx, __m256 acc) {
    const __m256i p = dot_q4x32_e8(nib, _mm256_loadu_si256((const __m256i *)xb->qs), e8);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dw, _mm256_broadcast_ss(dx)), acc);
}

/* Block k of one row for the four tokens (named accumulators, see Q8_0). */
#define Q4_BLOCK(k, A0, A1, A2, A3)                                                 \
    do {                                                                            \
        const __m256i nib = q4_nibbles(w[k].qs);                                    \
        const __m256 dw = scale8(load_u16(&w[k].d));                                \
        A0 = q4_pair(nib, &xt[0][k], e8[k][0], dw, &dx[k][0], A0);                  \
        A1 = q4_pair(nib, &xt[1][k], e8[k][1], dw, &dx[k][1], A1);                  \
        A2 = q4_pair(nib, &xt[2][k], e8[k][2], dw, &dx[k][2], A2);                  \
        A3 = q4_pair(nib, &xt[3][k], e8[k][3], dw, &dx[k][3], A3);                  \
    } while (0)

void qw_avx2_gemm_q4_0(int64_t n, const void *wv, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                       float *const *y) {
    const int64_t nb = n / QW_QK8_0;
    float dx[NB_MAX][T];
    __m256i e8[NB_MAX][T]; /* maddubs(8, x): the dot's "8 * x" pairs, per token and block */
    prep_scales(x, nb, dx);
    const qw_block_q8_0 *xt[T] = {x[0], x[1], x[2], x[3]};
    for (int t = 0; t < T; t++)
        for (int64_t k = 0; k < nb; k++)
            e8[k][t] = q4_e8(_mm256_loadu_si256((const __m256i *)xt[t][k].qs));
    for (int64_t r = 0; r < n_rows; r++) {
        const qw_block_q4_0 *w = (const qw_block_q4_0 *)((const char *)wv + (size_t)r * w_row_bytes);
        if (r + 2 < n_rows) qw_prefetch_bytes((const char *)wv + (size_t)(r + 2) * w_row_bytes, w_row_bytes);
        /* the dot's two accumulators a token: even (e) and odd (o) blocks */
        __m256 e0 = _mm256_setzero_ps(), e1 = e0, e2 = e0, e3 = e0, o0 = e0, o1 = e0, o2 = e0, o3 = e0;
        int64_t k = 0;
        for (; k + 2 <= nb; k += 2) {
            Q4_BLOCK(k, e0, e1, e2, e3);
            Q4_BLOCK(k + 1, o0, o1, o2, o3);
        }
        if (k < nb) Q4_BLOCK(k, e0, e1, e2, e3);
        y[0][r] = hsum8(_mm256_add_ps(e0, o0)), y[1][r] = hsum8(_mm256_add_ps(e1, o1));
        y[2][r] = hsum8(_mm256_add_ps(e2, o2)), y[3][r] = hsum8(_mm256_add_ps(e3, o3));
    }
}

#undef Q4_BLOCK

/* ---- decode: one token, the rows streamed (qw_gemv_get's form) ----------
 * Each row is the dot's own chain again; what the row loop saves is the
 * token's side of every block (its scale's conversion, Q4_0's 8·x pair
 * sums), prepared once per call instead of once per row.  Q8_0 reads two
 * far-apart rows at once (quant_impl.h's decode streams); Q4_0 one row at a
 * time, the rows qw_decode_ahead_rows ahead prefetched whole (tune.h).
 * Whether this or the plain dot streams DRAM faster is the calibrated
 * QWISP_DECODE_GEMV. */

void qw_avx2_gemv_q8_0(int64_t n, const void *wv, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                       float *const *y) {
    const int64_t nb = n / QW_QK8_0;
    const qw_block_q8_0 *xb = x[0];
    float dx[NB_MAX];
    for (int64_t k = 0; k < nb; k++) dx[k] = _cvtsh_ss(load_u16(&xb[k].d));
    /* two rows at a time, r and r + gap (quant_impl.h's decode streams): each row
     * is one fma chain (the dot's order), and one chain alone waits on the fma
     * latency every block */
    const int64_t gap = qw_decode_stream_gap(n_rows, 2);
    for (int64_t r = 0; r < gap; r++) {
        const qw_block_q8_0 *w0 = (const qw_block_q8_0 *)((const char *)wv + (size_t)r * w_row_bytes);
        const qw_block_q8_0 *w1 = (const qw_block_q8_0 *)((const char *)w0 + (size_t)gap * w_row_bytes);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (int64_t k = 0; k < nb; k++) {
            const __m256i q0 = _mm256_loadu_si256((const __m256i *)w0[k].qs);
            const __m256i q1 = _mm256_loadu_si256((const __m256i *)w1[k].qs);
            a0 = q8_pair(_mm256_sign_epi8(q0, q0), q0, &xb[k], scale8(load_u16(&w0[k].d)), &dx[k], a0);
            a1 = q8_pair(_mm256_sign_epi8(q1, q1), q1, &xb[k], scale8(load_u16(&w1[k].d)), &dx[k], a1);
        }
        y[0][r] = hsum8(a0), y[0][r + gap] = hsum8(a1);
    }
    if (2 * gap < n_rows) {
        const int64_t r = 2 * gap;
        const qw_block_q8_0 *w = (const qw_block_q8_0 *)((const char *)wv + (size_t)r * w_row_bytes);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t k = 0; k < nb; k++) {
            const __m256i wq = _mm256_loadu_si256((const __m256i *)w[k].qs);
            acc = q8_pair(_mm256_sign_epi8(wq, wq), wq, &xb[k], scale8(load_u16(&w[k].d)), &dx[k], acc);
        }
        y[0][r] = hsum8(acc);
    }
}

void qw_avx2_gemv_q4_0(int64_t n, const void *wv, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                       float *const *y) {
    const int64_t nb = n / QW_QK8_0;
    const qw_block_q8_0 *xb = x[0];
    float dx[NB_MAX];
    __m256i e8[NB_MAX];
    for (int64_t k = 0; k < nb; k++) {
        dx[k] = _cvtsh_ss(load_u16(&xb[k].d));
        e8[k] = q4_e8(_mm256_loadu_si256((const __m256i *)xb[k].qs));
    }
    const int64_t ahead = qw_decode_ahead_rows(w_row_bytes);
    qw_prefetch_decode(wv, (size_t)(n_rows < ahead ? n_rows : ahead) * w_row_bytes);
    for (int64_t r = 0; r < n_rows; r++) {
        if (r + ahead < n_rows) qw_prefetch_decode((const char *)wv + (size_t)(r + ahead) * w_row_bytes, w_row_bytes);
        const qw_block_q4_0 *w = (const qw_block_q4_0 *)((const char *)wv + (size_t)r * w_row_bytes);
        __m256 ev = _mm256_setzero_ps(), od = ev; /* the dot's even- and odd-block accumulators */
        int64_t k = 0;
        for (; k + 2 <= nb; k += 2) {
            ev = q4_pair(q4_nibbles(w[k].qs), &xb[k], e8[k], scale8(load_u16(&w[k].d)), &dx[k], ev);
            od = q4_pair(q4_nibbles(w[k + 1].qs), &xb[k + 1], e8[k + 1], scale8(load_u16(&w[k + 1].d)), &dx[k + 1],
                         od);
        }
        if (k < nb) ev = q4_pair(q4_nibbles(w[k].qs), &xb[k], e8[k], scale8(load_u16(&w[k].d)), &dx[k], ev);
        y[0][r] = hsum8(_mm256_add_ps(ev, od));
    }
}
