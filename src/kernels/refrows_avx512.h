/* refrows_avx512.h — private to the avx512-amx level's K-quants
 * (amx_kquant_avx512.c for Q4_K, amx_q6k_avx512.c for Q6_K): their decode row
 * loop and dot in the K-quant reference order, which their AMX tiles share
 * (kquant_impl.h's contract: exactly kquant_ref.c's bits).
 *
 * The reference's step per super-block of a row is
 *     acc = acc + y.d * (d * (float)sumi - dmin * (float)summ)
 * (Q6_K: no mins, so dmin = summ = 0, and x - 0 * 0 is x: the same bits), a
 * float chain per row.  A type gives, per (row, block) "term", eight int32
 * lanes whose sum is sumi, its summ, d and dmin as two fp16, and y.d; the
 * loop sums each term's lanes (exact), makes eight terms' float steps at
 * once in vector lanes, each operation rounded on its own, and then adds
 * each row's terms to its sum one after another, from +0, in block order.
 *
 * Rows of a multiple of eight blocks take their terms eight blocks of one
 * row at a time.  Other rows (an A3B expert's down projection is 2 or 3
 * blocks) go through one stream of terms in the rows' order, eight of which
 * may span rows, so short rows fill the vector lanes too (a scalar step a
 * block ran them ~20 % slower, bench/RESULTS.md).
 *
 * (The reference's symmetric branch drops "- dmin * 0", which changes at
 * most the sign of a zero term, and a zero term never changes a row's sum:
 * it starts at +0, and +0 + -0 = +0.) */
#ifndef QWISP_KERNELS_REFROWS_AVX512_H
#define QWISP_KERNELS_REFROWS_AVX512_H

#include <immintrin.h>
#include <stdalign.h>
#include <stdint.h>

#include "kernels/kquant_blocks_x86.h"

/* Eight terms on their way to the float step. */
typedef struct {
    __m256i lanes[8];            /* term k's eight int32 lanes: their sum is its sumi */
    alignas(32) int32_t summ[8]; /* the mins' integer (0 for Q6_K) */
    alignas(32) uint32_t dd[8];  /* d in the low half, dmin in the high, fp16 */
    alignas(32) float d8[8];     /* the token's Q8_K scale */
} kq_terms8;

/* Term k of g from block i of `row` and the token as the type prepares it
 * (inlined: the row loop is always_inline and passes a constant). */
typedef void (*kq_term_fn)(kq_terms8 *g, int k, const void *row, int64_t i, const void *tok);

/* The eight terms' float steps, lane k term k. */
static inline __attribute__((always_inline)) void kq_step8(const kq_terms8 *g, float t[8]) {
    const __m256i ddv = _mm256_load_si256((const __m256i *)g->dd);
    const __m256 d = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_and_si256(ddv, _mm256_set1_epi32(0xFFFF))));
    const __m256 dmin = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(ddv, 16)));
    const __m256 t1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sum8_lanes(g->lanes)));
    const __m256 t2 = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_load_si256((const __m256i *)g->summ)));
    _mm256_store_ps(t, _mm256_mul_ps(_mm256_load_ps(g->d8), _mm256_sub_ps(t1, t2)));
}

/* n_rows rows of nb blocks of block_bytes each, rb bytes apart, against one
 * token: y[r] = row r's dot.  Each block prefetches its twin `wk.ahead` rows
 * on (the dot passes ahead = 1 on one row: nothing). */
static inline __attribute__((always_inline)) void kq_ref_rows(kq_term_fn term, size_t block_bytes, int64_t nb,
                                                              const char *w, size_t rb, int64_t n_rows, const void *tok,
                                                              float *y, decode_walk wk) {
    kq_terms8 g;
    alignas(32) float t[8];
#define KQ_ROW(r) (w + (size_t)(r) * rb)
#define KQ_TERM(k, r, i)                                                                                             \
    do {                                                                                                             \
        if ((r) + wk.ahead < n_rows) qw_prefetch_block(KQ_ROW((r) + wk.ahead) + (size_t)(i) * block_bytes, block_bytes, wk.l2); \
        term(&g, k, KQ_ROW(r), i, tok);                                                                              \
    } while (0)
    if (nb % 8 == 0) {
        for (int64_t r = 0; r < n_rows; r++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < nb; i += 8) {
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++) KQ_TERM(k, r, i + k);
                kq_step8(&g, t);
                for (int k = 0; k < 8; k++) acc += t[k];
            }
            y[r] = acc;
        }
        return;
    }
    int64_t rin = 0, iin = 0; /* the row and block of the next term made */
    int64_t r = 0, i = 0;     /* ... and of the next one added */
    float acc = 0.0f;
    /* the next m terms into g, lanes past m zero (m a constant 8 but in the last group) */
#define KQ_STREAM(m)                                                                        \
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {                                   \
        if (k >= (m)) {                                                                     \
            g.lanes[k] = _mm256_setzero_si256(), g.summ[k] = 0, g.dd[k] = 0, g.d8[k] = 0.0f; \
            continue;                                                                       \
        }                                                                                   \
        KQ_TERM(k, rin, iin);                                                               \
        if (++iin == nb) iin = 0, rin++;                                                    \
    }
    for (int64_t left = n_rows * nb; left > 0; left -= 8) {
        const int m = left < 8 ? (int)left : 8;
        if (m == 8) {
            KQ_STREAM(8)
        } else {
            KQ_STREAM(m)
        }
        kq_step8(&g, t);
        for (int k = 0; k < m; k++) {
            acc += t[k];
            if (++i == nb) y[r++] = acc, acc = 0.0f, i = 0;
        }
    }
#undef KQ_STREAM
#undef KQ_TERM
#undef KQ_ROW
}

#endif
