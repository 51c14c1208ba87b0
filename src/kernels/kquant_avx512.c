/* kquant_avx512.c — the AVX-512 level's K-quant kernels: dots for every
 * K-quant, 4- and 8-token prefill tiles, and the Q8_K activation quantizer,
 * in 512-bit registers, each giving the bits of the AVX2 level's dot
 * (kquant_avx2.c, which this file includes for its helpers and its table;
 * the kernels below take its slots).
 * Tried and not kept: a VNNI Q4_K dot + tile (one vpdpbusd per 64 elements,
 * scales applied in float) decoded slower on the full-size qwen36-a3b file
 * (6.7-7.3 vs 8.5 tok/s with the AVX2 loop), prefill about the same; see
 * bench/RESULTS.md. */
#include <immintrin.h>
#include <stdalign.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kquant_impl.h"

/* The 4-token (qw_gemm_fn) and QW_KQ_WIDE_TOKS-token entry points of a
 * K-quant tile body BODY(n, w, row_bytes, n_rows, x, y, tokens). */
#define KQ_TILE_FN(name)                                                                                          \
    void name(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x, float *const *y)
#define KQ_TILE_DECLS(T) static KQ_TILE_FN(gemm_##T##_zmm); static KQ_TILE_FN(gemm_wide_##T##_zmm);
#define KQ_TILE_ENTRIES(T, BODY)                                                                                  \
    static KQ_TILE_FN(gemm_##T##_zmm) { BODY(n, w, w_row_bytes, n_rows, x, y, QW_GEMM_TOKS); }                    \
    static KQ_TILE_FN(gemm_wide_##T##_zmm) { BODY(n, w, w_row_bytes, n_rows, x, y, QW_KQ_WIDE_TOKS); }

/* The kernels this file brings in place of kquant_avx2.c's: the table at
 * the end of that file takes them by these names. */
static void dot_q2_K_zmm(int64_t n, float *s, const void *w, const void *x);
static void dot_q3_K_zmm(int64_t n, float *s, const void *w, const void *x);
static void dot_q4_K_zmm(int64_t n, float *s, const void *w, const void *x);
static void dot_q5_K_zmm(int64_t n, float *s, const void *w, const void *x);
static void dot_q6_K_zmm(int64_t n, float *s, const void *w, const void *x);
static void quantize_q8_K_zmm(const float *x, void *dst, int64_t n);
KQ_TILE_DECLS(q2_K)
KQ_TILE_DECLS(q3_K)
KQ_TILE_DECLS(q4_K)
static KQ_TILE_FN(gemv_q4_K_zmm);
static KQ_TILE_FN(gemv_q6_K_zmm);
static KQ_TILE_FN(gemv_q5_K_zmm);
KQ_TILE_DECLS(q5_K)
KQ_TILE_DECLS(q6_K)
#define KQ_DOT_Q2_K dot_q2_K_zmm
#define KQ_DOT_Q3_K dot_q3_K_zmm
#define KQ_DOT_Q4_K dot_q4_K_zmm
#define KQ_GEMV_Q4_K gemv_q4_K_zmm
#define KQ_GEMV_Q6_K gemv_q6_K_zmm
#define KQ_GEMV_Q5_K gemv_q5_K_zmm
#define KQ_DOT_Q5_K dot_q5_K_zmm
#define KQ_DOT_Q6_K dot_q6_K_zmm
#define KQ_QUANTIZE_Q8_K quantize_q8_K_zmm
#define KQ_GEMM_Q2_K gemm_q2_K_zmm
#define KQ_GEMM_WIDE_Q2_K gemm_wide_q2_K_zmm
#define KQ_GEMM_Q3_K gemm_q3_K_zmm
#define KQ_GEMM_WIDE_Q3_K gemm_wide_q3_K_zmm
#define KQ_GEMM_Q4_K gemm_q4_K_zmm
#define KQ_GEMM_WIDE_Q4_K gemm_wide_q4_K_zmm
#define KQ_GEMM_Q5_K gemm_q5_K_zmm
#define KQ_GEMM_WIDE_Q5_K gemm_wide_q5_K_zmm
#define KQ_GEMM_Q6_K gemm_q6_K_zmm
#define KQ_GEMM_WIDE_Q6_K gemm_wide_q6_K_zmm
#define qw_kq_dots_avx2 qw_kq_dots_avx512
#include "kquant_avx2.c"

/* One Q4_K row of nb blocks against a Q8_K token: the dot in 512-bit
 * registers, half the vector instructions of the 256-bit loop, the same
 * int32 lanes once the two halves are added and the same float steps, so
 * the same bits (d8*d and d8*dmin are the same products either way round).
 * tok: the token prepared (the row loop), or NULL to read it from y (the
 * dot, any width); pf: the row loop's prefetch. */
static inline __attribute__((always_inline)) float q4k_row(const qw_block_q4_K *b, const qw_block_q8_K *y,
                                                           int64_t nb, const q4k_token *tok, const row_prefetch *pf) {
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++, b++) {
        if (pf && pf->row) qw_prefetch_block((const qw_block_q4_K *)pf->row + i, sizeof *b, pf->l2);
        __m128 dd;
        const __m128i sm = q4k_block_head(b, tok ? tok->d8[i] : q8k_d(&y[i]),
                                          tok ? tok->pairs[i] : q8k_pair_sums(&y[i]), &accm, &dd);
        const __m512i scales = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
        __m512i yl[4];
        if (!tok) q4k_token_block(&y[i], yl);
        const __m512i *yv = tok ? tok->yv[i] : yl;
        const __m512i sumi = q4k_sumi_halves(b, scales, yv);
        const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
        acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(s8), acc);
    }
    return q4k_finish(acc, accm);
}

static void dot_q4_K_zmm(int64_t n, float *s, const void *w, const void *x) {
    *s = q4k_row(w, x, n / QW_QK_K, NULL, NULL);
}

/* Decode: the row loop (kquant_blocks_x86.h), the token prepared once a call. */
Q4K_GEMV_ROWS(gemv_q4_K_zmm, q4k_row)

/* The Q4_K prefill tile in 512-bit registers, bit-identical with dot_q4_K.
 *
 * One 512-bit register holds two tokens, one per 256-bit half: for each
 * 32-element group c of a block, token pair p's register is [token 2p's 32
 * bytes of group c | token 2p+1's], and the row's levels of group c sit in
 * both halves (a 32-byte chunk's low nibbles are group 2j, its high
 * nibbles group 2j+1, each broadcast once per row and block for all the
 * tokens).  So per 32 weights and token pair: one maddubs + one VPDPWSSD
 * weighted by the group's scale, as before per 64 weights and token, and
 * each half's eight int32 lanes are already that token's lanes of the dot:
 * lane l holds bytes 4l..4l+3 of every group times its scale.  A pair's
 * block then costs one multiply by d, one conversion and one fma, with no
 * folding of halves and no moving of lanes between registers.
 *  - What depends only on the tokens is prepared once per call for all
 *    rows: their bytes regrouped in pairs, their Q8_K scales (d8p: a pair's
 *    two scales, each in 8 lanes; d8x: a group of four's, each in 4 lanes,
 *    for the mins) and their group sums paired per 32.
 *  - The four tokens' mins corrections share one register (4 lanes each).
 * Bits: every int32 lane is the dot's (exact integers), every float product
 * and fma is the dot's, per lane, in the dot's order (d8*d in either order
 * is the same product).
 * Two widths from one body: 4 tokens (the qw_gemm_fn contract) and 8 (the
 * level's wide Q4_K tile: each unpacked chunk feeds eight tokens). */
enum { Q4K_TILE_BLOCKS = QW_GEMM_K_MAX / QW_QK_K, Q4K_WIDE = 8 };
_Static_assert(Q4K_WIDE == QW_KQ_WIDE_TOKS && QW_GEMM_TOKS == 4, "the tiles' register arrays hold 4 or 8 tokens");

/* pshufb control selecting int16 element g in every position. */
static inline __m512i q4k_pick_all(int g) { return _mm512_broadcast_i64x4(q4k_pick(g)); }

static inline __attribute__((always_inline)) void q4k_tile(int64_t n, const void *w, size_t w_row_bytes,
                                                          int64_t n_rows, const void *const *x, float *const *y,
                                                          const int nt) {
    const int ng = nt / 4, np = nt / 2; /* groups of four tokens, pairs */
    const int64_t nb = n / QW_QK_K;
    /* per pair, block and 32-element group: the pair's bytes of that group */
    alignas(64) __m512i yp[Q4K_WIDE / 2][Q4K_TILE_BLOCKS][8];
    alignas(64) __m512 d8p[Q4K_WIDE / 2][Q4K_TILE_BLOCKS];
    alignas(64) __m512 d8x[Q4K_WIDE / 4][Q4K_TILE_BLOCKS];
    alignas(64) __m512i pairs[Q4K_WIDE / 4][Q4K_TILE_BLOCKS];
    const __m512i rep4 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
#pragma GCC unroll 8
    for (int p = 0; p < np; p++)
        for (int64_t i = 0; i < nb; i++) {
            const qw_block_q8_K *ya = (const qw_block_q8_K *)x[2 * p] + i, *yb = (const qw_block_q8_K *)x[2 * p + 1] + i;
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++)
                yp[p][i][c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(ya->qs + 32 * c))),
                                                 _mm256_loadu_si256((const __m256i *)(yb->qs + 32 * c)), 1);
            d8p[p][i] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(q8k_d(ya))), _mm256_set1_ps(q8k_d(yb)), 1);
        }
#pragma GCC unroll 8
    for (int g = 0; g < ng; g++)
        for (int64_t i = 0; i < nb; i++) {
            float d8[4];
            __m128i pr[4];
            for (int t = 0; t < 4; t++) {
                const qw_block_q8_K *yb = (const qw_block_q8_K *)x[4 * g + t] + i;
                pr[t] = q8k_pair_sums(yb);
                d8[t] = q8k_d(yb);
            }
            d8x[g][i] = _mm512_permutexvar_ps(rep4, _mm512_castps128_ps512(_mm_set_ps(d8[3], d8[2], d8[1], d8[0])));
            pairs[g][i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(pr[1], pr[0])),
                                             _mm256_set_m128i(pr[3], pr[2]), 1);
        }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t r = 0; r < n_rows; r++) {
        const qw_block_q4_K *b = (const qw_block_q4_K *)((const char *)w + (size_t)r * w_row_bytes);
        __m512 acc[Q4K_WIDE / 2], accm[Q4K_WIDE / 4]; /* acc[p]: tokens 2p | 2p+1; accm[g]: 4 lanes a token */
#pragma GCC unroll 8
        for (int p = 0; p < np; p++) acc[p] = _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int g = 0; g < ng; g++) accm[g] = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; i++, b++) {
            const __m128i sm = q4k_scales_mins(b->scales);
            const __m512i scales = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
            const __m512i mins = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm)));
            const float d = _cvtsh_ss(b->d), dmin = _cvtsh_ss(b->dmin);
#pragma GCC unroll 8
            for (int g = 0; g < ng; g++)
                accm[g] = _mm512_fmadd_ps(_mm512_mul_ps(d8x[g][i], _mm512_set1_ps(dmin)),
                                          _mm512_cvtepi32_ps(_mm512_madd_epi16(mins, pairs[g][i])), accm[g]);
            __m512i s[Q4K_WIDE / 2];
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * j)));
                const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                const __m512i sc_lo = _mm512_shuffle_epi8(scales, q4k_pick_all(2 * j));
                const __m512i sc_hi = _mm512_shuffle_epi8(scales, q4k_pick_all(2 * j + 1));
#pragma GCC unroll 4
                for (int p = 0; p < np; p++) {
                    const __m512i pl = _mm512_maddubs_epi16(lo, yp[p][i][2 * j]);
                    /* the first group starts the sums (madd = dpwssd into zero, the same integers) */
                    s[p] = j ? _mm512_dpwssd_epi32(s[p], pl, sc_lo) : _mm512_madd_epi16(pl, sc_lo);
                    s[p] = _mm512_dpwssd_epi32(s[p], _mm512_maddubs_epi16(hi, yp[p][i][2 * j + 1]), sc_hi);
                }
            }
            const __m512 vd = _mm512_set1_ps(d);
#pragma GCC unroll 4
            for (int p = 0; p < np; p++)
                acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(d8p[p][i], vd), _mm512_cvtepi32_ps(s[p]), acc[p]);
        }
#pragma GCC unroll 8
        for (int g = 0; g < ng; g++) {
            float *const *yg = y + 4 * g;
            yg[0][r] = q4k_finish(_mm512_castps512_ps256(acc[2 * g]), _mm512_castps512_ps128(accm[g]));
            yg[1][r] = q4k_finish(_mm512_extractf32x8_ps(acc[2 * g], 1), _mm512_extractf32x4_ps(accm[g], 1));
            yg[2][r] = q4k_finish(_mm512_castps512_ps256(acc[2 * g + 1]), _mm512_extractf32x4_ps(accm[g], 2));
            yg[3][r] = q4k_finish(_mm512_extractf32x8_ps(acc[2 * g + 1], 1), _mm512_extractf32x4_ps(accm[g], 3));
        }
    }
}

KQ_TILE_ENTRIES(q4_K, q4k_tile)

/* ---- Q6_K: the same scheme.  A super-block is 8 chunks of 32 levels
 * (q6k_levels' element order); register z holds chunks 2z and 2z+1, i.e. the
 * 64 levels that meet the token's bytes 64z..64z+63, and its four 128-bit
 * lanes are the 16-element groups 4z..4z+3, each weighted by its own scale.
 * As in the 256-bit dot, lane l of the int32 sum (here lanes l and 8 + l
 * added) is taken 32 * (scales . group sums) for the -32 offset, converted
 * and multiplied by d8 * d: the same integers and float steps, the same bits.
 */

/* One Q6_K row of nb blocks against a Q8_K token (the dot, and the row
 * loop's body with its prefetch pf). */
static inline __attribute__((always_inline)) float q6k_row(const qw_block_q6_K *b, const qw_block_q8_K *y, int64_t nb,
                                                           const row_prefetch *pf) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++, b++, y++) {
        if (pf && pf->row) qw_prefetch_block((const qw_block_q6_K *)pf->row + i, sizeof *b, pf->l2);
        __m256i sc16;
        const __m512i sumi = q6k_sumi_zmm(b, y, &sc16);
        const __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums));
        const __m256i s8 = _mm256_sub_epi32(
            _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1)), _mm256_slli_epi32(off, 5));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(q8k_d(y) * _cvtsh_ss(b->d)), _mm256_cvtepi32_ps(s8), acc);
    }
    return hsum8_minus4(acc, _mm_setzero_ps());
}

static void dot_q6_K_zmm(int64_t n, float *s, const void *w, const void *x) { *s = q6k_row(w, x, n / QW_QK_K, NULL); }

/* Decode: the row loop (kquant_blocks_x86.h), the constants set once a call. */
KQ_GEMV_ROWS(gemv_q6_K_zmm, qw_block_q6_K, q6k_row)

/* The tokens' Q8_K scales for each block, one lane per token (lanes past nt zero). */
static inline void tokens_d8(const void *const *x, int nt, int64_t nb, __m256 *d8v) {
    for (int64_t i = 0; i < nb; i++) {
        float d8[8] = {0};
        for (int t = 0; t < nt; t++) d8[t] = q8k_d((const qw_block_q8_K *)x[t] + i);
        d8v[i] = _mm256_loadu_ps(d8);
    }
}

static inline __attribute__((always_inline)) void q6k_tile(int64_t n, const void *w, size_t w_row_bytes,
                                                          int64_t n_rows, const void *const *x, float *const *y,
                                                          const int nt) {
    const int64_t nb = n / QW_QK_K;
    /* per token pair and block: [token 2p | 2p+1]'s group sums; per block the
     * tokens' Q8_K scales */
    alignas(64) __m512i bsums[Q4K_WIDE / 2][Q4K_TILE_BLOCKS];
    alignas(32) __m256 d8v[Q4K_TILE_BLOCKS];
    tokens_d8(x, nt, nb, d8v);
    for (int64_t i = 0; i < nb; i++) {
#pragma GCC unroll 4
        for (int p = 0; p < nt / 2; p++)
            bsums[p][i] = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)((const qw_block_q8_K *)x[2 * p] + i)->bsums)),
                _mm256_loadu_si256((const __m256i *)((const qw_block_q8_K *)x[2 * p + 1] + i)->bsums), 1);
    }
    const qw_block_q8_K *yt[Q4K_WIDE];
    for (int t = 0; t < nt; t++) yt[t] = x[t];
    for (int64_t r = 0; r < n_rows; r++) {
        const qw_block_q6_K *b = (const qw_block_q6_K *)((const char *)w + (size_t)r * w_row_bytes);
        __m512 acc[Q4K_WIDE / 2]; /* tokens 2p | 2p+1 */
#pragma GCC unroll 4
        for (int p = 0; p < nt / 2; p++) acc[p] = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; i++, b++) {
            __m512i q[4], sc[4];
            q6k_levels_zmm(b, q);
            const __m512i sc16x2 = _mm512_broadcast_i64x4(q6k_scales_zmm(b, sc));
            __m512i s[Q4K_WIDE];
#pragma GCC unroll 4
            for (int z = 0; z < 4; z++)
#pragma GCC unroll 8
                for (int t = 0; t < nt; t++) {
                    const __m512i p = _mm512_maddubs_epi16(q[z], _mm512_loadu_si512((const void *)(yt[t][i].qs + 64 * z)));
                    s[t] = z ? _mm512_dpwssd_epi32(s[t], p, sc[z]) : _mm512_madd_epi16(p, sc[z]); /* as q4k_tile */
                }
            const __m512 dd = _mm512_castps256_ps512(_mm256_mul_ps(d8v[i], _mm256_set1_ps(_cvtsh_ss(b->d))));
#pragma GCC unroll 4
            for (int p = 0; p < nt / 2; p++) {
                const __m512i off = _mm512_slli_epi32(_mm512_madd_epi16(sc16x2, bsums[p][i]), 5);
                const __m512i sp = _mm512_sub_epi32(_mm512_add_epi32(_mm512_shuffle_i64x2(s[2 * p], s[2 * p + 1], 0x44),
                                                                     _mm512_shuffle_i64x2(s[2 * p], s[2 * p + 1], 0xEE)),
                                                    off);
                const __m512i pick = _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
                acc[p] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick, dd), _mm512_cvtepi32_ps(sp), acc[p]);
            }
        }
#pragma GCC unroll 4
        for (int p = 0; p < nt / 2; p++) {
            y[2 * p][r] = hsum8_minus4(_mm512_castps512_ps256(acc[p]), _mm_setzero_ps());
            y[2 * p + 1][r] = hsum8_minus4(_mm512_extractf32x8_ps(acc[p], 1), _mm_setzero_ps());
        }
    }
}

KQ_TILE_ENTRIES(q6_K, q6k_tile)

/* ---- Q8_K activations, the reference's bytes (qw_ref_quantize_q8_K): the
 * value of largest magnitude (the first of equals), iscale = -127 / it,
 * q = iscale * x rounded to nearest-even (the default MXCSR rounding of
 * VCVTPS2DQ, as the reference's magic-number rounding for |v| < 2^22) and
 * capped at 127; each 16-element group is one register, so its sum is one
 * reduction of exact int32 lanes.  A block holding a NaN or an infinity goes
 * to the reference, whose integer tricks on those values the vector
 * conversion would not reproduce. */
static void quantize_q8_K_zmm(const float *x, void *dst, int64_t n) {
    qw_block_q8_K *y = dst;
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / QW_QK_K; b++, x += QW_QK_K) {
        __m512 amax = _mm512_setzero_ps();
        __mmask16 bad = 0;
        for (int g = 0; g < 16; g++) {
            const __m512 v = _mm512_loadu_ps(x + 16 * g);
            amax = _mm512_max_ps(_mm512_andnot_ps(sign, v), amax); /* a NaN lane keeps amax */
            bad |= _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, v), _mm512_set1_ps(INFINITY), _CMP_NLT_UQ);
        }
        qw_block_q8_K *o = &y[b];
        if (bad) {
            qw_ref_quantize_q8_K(x, o, QW_QK_K);
            continue;
        }
        const float m = _mm512_reduce_max_ps(amax);
        if (m == 0.0f) {
            memset(o, 0, sizeof *o);
            continue;
        }
        float mx = 0.0f;
        for (int g = 0; g < 16; g++) {
            const __m512 v = _mm512_loadu_ps(x + 16 * g);
            const __mmask16 at = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, v), _mm512_set1_ps(m), _CMP_EQ_OQ);
            if (at) {
                mx = x[16 * g + __builtin_ctz(at)];
                break;
            }
        }
        const float iscale = -127.0f / mx;
        const __m512 is = _mm512_set1_ps(iscale);
        for (int g = 0; g < 16; g++) {
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(is, _mm512_loadu_ps(x + 16 * g)));
            q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
            o->bsums[g] = (int16_t)_mm512_reduce_add_epi32(q);
            _mm_storeu_si128((__m128i *)(o->qs + 16 * g), _mm512_cvtepi32_epi8(q));
        }
        const float d = 1.0f / iscale;
        memcpy(&o->d, &d, sizeof d);
    }
}

/* ---- Q5_K: Q4_K's chunks plus the fifth bit, and the reference's float
 * expression per block (dot_q5_K in kquant_avx2.c, kquant_impl.h):
 *     acc += d8 * (d * (float)sumi - dmin * (float)summ)
 * with sumi = sum_g scale_g * (q . y)_g and summ = sum_g min_g * (group sum
 * of y), both exact integers.  The tiles compute sumi and summ for 4 or 8
 * tokens at once and do that expression one lane per token with separate
 * multiplies and adds (the C file is compiled without contraction), so every
 * lane is the scalar expression's bits. */

/* sum_g scale_g * (q . y)_g of one block and token, in 16 int32 lanes. */
static inline __m512i q5k_sumi_zmm(const qw_block_q5_K *b, __m512i scales, __m512i qh2, const qw_block_q8_K *y) {
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        sumi = _mm512_dpwssd_epi32(
            sumi, _mm512_maddubs_epi16(q5k_chunk_zmm(b, qh2, j), _mm512_loadu_si512((const void *)(y->qs + 64 * j))),
            _mm512_shuffle_epi8(scales, q4k_pick_zmm(j)));
    return sumi;
}

/* One Q5_K row of nb blocks: the dot (pf NULL) and the row loop's body. */
static inline __attribute__((always_inline)) float q5k_row(const qw_block_q5_K *b, const qw_block_q8_K *y, int64_t nb,
                                                           const row_prefetch *pf) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++, b++, y++) {
        if (pf && pf->row) qw_prefetch_block((const qw_block_q5_K *)pf->row + i, sizeof *b, pf->l2);
        const __m128i sm = q4k_scales_mins(b->scales);
        const __m512i scales = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
        const __m512i qh2 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->qh));
        const int32_t sumi = _mm512_reduce_add_epi32(q5k_sumi_zmm(b, scales, qh2, y));
        __m128i mm = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm)), q8k_pair_sums(y));
        mm = _mm_add_epi32(mm, _mm_shuffle_epi32(mm, 0x4E));
        const int32_t summ = _mm_cvtsi128_si32(_mm_add_epi32(mm, _mm_shuffle_epi32(mm, 0xB1)));
        acc += q8k_d(y) * (_cvtsh_ss(b->d) * (float)sumi - _cvtsh_ss(b->dmin) * (float)summ);
    }
    return acc;
}

static void dot_q5_K_zmm(int64_t n, float *s, const void *w, const void *x) { *s = q5k_row(w, x, n / QW_QK_K, NULL); }

/* Decode: the row loop (kquant_blocks_x86.h), the constants set once a call. */
KQ_GEMV_ROWS(gemv_q5_K_zmm, qw_block_q5_K, q5k_row)

/* The sums of the 16 int32 lanes of s[0..3], one per lane. */
static inline __m128i hsum16_x4(const __m512i *s) {
    const __m512i r01 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
    const __m512i r23 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
    const __m512i r = _mm512_add_epi32(_mm512_unpacklo_epi64(r01, r23), _mm512_unpackhi_epi64(r01, r23));
    const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(r), _mm512_extracti64x4_epi64(r, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* The sums of each 128-bit lane's 4 int32 (one token each), one per lane. */
static inline __m128i hsum4_x4(__m512i m) {
    m = _mm512_add_epi32(m, _mm512_shuffle_epi32(m, (_MM_PERM_ENUM)0x4E));
    m = _mm512_add_epi32(m, _mm512_shuffle_epi32(m, (_MM_PERM_ENUM)0xB1));
    return _mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), m));
}

/* The 4 or 8 lanes of two halves as one register (ng = 1 or 2 groups of 4 tokens). */
static inline __m256i join_groups(const __m128i *v, int ng) {
    return ng == 2 ? _mm256_set_m128i(v[1], v[0]) : _mm256_castsi128_si256(v[0]);
}

/* acc += d8 * (d * (float)sumi - dmin * (float)summ) one lane per token,
 * every operation rounded on its own as in the scalar expression (Q3_K's
 * d8 * (d * sumi) is this with dmin = 0 and summ = 0: t - 0 is t, bit for
 * bit, -0 included). */
static inline __m256 kq_block_step(__m256 acc, __m256 d8, float d, __m256i sumi, float dmin, __m256i summ) {
    const __m256 t1 = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi));
    const __m256 t2 = _mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(summ));
    return _mm256_add_ps(acc, _mm256_mul_ps(d8, _mm256_sub_ps(t1, t2)));
}

/* y[t][r] = lane t of acc for t < nt. */
static inline void store_lanes(__m256 acc, float *const *y, int64_t r, int nt) {
    float out[8];
    _mm256_storeu_ps(out, acc);
    for (int t = 0; t < nt; t++) y[t][r] = out[t];
}

static inline __attribute__((always_inline)) void q5k_tile(int64_t n, const void *w, size_t w_row_bytes,
                                                          int64_t n_rows, const void *const *x, float *const *y,
                                                          const int nt) {
    const int ng = nt / 4;
    const int64_t nb = n / QW_QK_K;
    /* per block: the tokens' Q8_K scales (lane t) and, per group of four
     * tokens, their paired group sums (128-bit lane t) */
    alignas(64) __m512i pairs[Q4K_WIDE / 4][Q4K_TILE_BLOCKS];
    alignas(32) __m256 d8v[Q4K_TILE_BLOCKS];
    tokens_d8(x, nt, nb, d8v);
    for (int64_t i = 0; i < nb; i++) {
        __m128i pr[Q4K_WIDE];
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) pr[t] = q8k_pair_sums((const qw_block_q8_K *)x[t] + i);
#pragma GCC unroll 2
        for (int g = 0; g < ng; g++)
            pairs[g][i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(pr[4 * g + 1], pr[4 * g])),
                                             _mm256_set_m128i(pr[4 * g + 3], pr[4 * g + 2]), 1);
    }
    const qw_block_q8_K *yt[Q4K_WIDE];
    for (int t = 0; t < nt; t++) yt[t] = x[t];
    for (int64_t r = 0; r < n_rows; r++) {
        const qw_block_q5_K *b = (const qw_block_q5_K *)((const char *)w + (size_t)r * w_row_bytes);
        __m256 acc = _mm256_setzero_ps(); /* lane t: token t */
        for (int64_t i = 0; i < nb; i++, b++) {
            const __m128i sm = q4k_scales_mins(b->scales);
            const __m512i scales = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
            const __m512i mins = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm)));
            const __m512i qh2 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->qh));
            __m512i s[Q4K_WIDE];
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m512i q = q5k_chunk_zmm(b, qh2, j);
                const __m512i sc = _mm512_shuffle_epi8(scales, q4k_pick_zmm(j));
#pragma GCC unroll 8
                for (int t = 0; t < nt; t++) {
                    const __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512((const void *)(yt[t][i].qs + 64 * j)));
                    s[t] = j ? _mm512_dpwssd_epi32(s[t], p, sc) : _mm512_madd_epi16(p, sc); /* as q4k_tile */
                }
            }
            __m128i si[Q4K_WIDE / 4], mi[Q4K_WIDE / 4];
#pragma GCC unroll 2
            for (int g = 0; g < ng; g++) {
                si[g] = hsum16_x4(s + 4 * g);
                mi[g] = hsum4_x4(_mm512_madd_epi16(mins, pairs[g][i]));
            }
            acc = kq_block_step(acc, d8v[i], _cvtsh_ss(b->d), join_groups(si, ng), _cvtsh_ss(b->dmin),
                                join_groups(mi, ng));
        }
        store_lanes(acc, y, r, nt);
    }
}

KQ_TILE_ENTRIES(q5_K, q5k_tile)

/* ---- Q2_K and Q3_K: 2-bit levels (Q3_K: plus a third bit, minus 4), a
 * scale per 16 elements.  As for Q6_K, register z holds chunks 2z and 2z+1
 * (the token's bytes 64z..64z+63) and its 128-bit lanes are groups
 * 4z..4z+3.  The AVX2 dots (kquant_avx2.c) compute the reference's exact
 * integers and float expression per block:
 *     Q2_K: acc += d8 * (d * (float)sumi - dmin * (float)summ)
 *     Q3_K: acc += d8 * (d * (float)(sumi - 4 * off))
 * with off = sum_g scale_g * (group sum of y); the tiles compute the same
 * integers for 4 or 8 tokens and the expression one lane per token. */

/* Chunk pair z of 2-bit fields: (qs[32h + l] >> 2s) & 3 for chunks 4h + s,
 * s = 2(z & 1) in the low half and s + 1 in the high half. */
static inline __m512i q2bits_zmm(const uint8_t *qs, int z) {
    const int h = z >> 1, s = 2 * (z & 1);
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * h)));
    const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * s)), _mm256_set1_epi16((short)(2 * s + 2)), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(v, shift), _mm512_set1_epi8(3));
}

/* Q3_K's 16 scales (6 bits, minus 32) as int16. */
static inline __m256i q3k_scales16(const uint8_t *s) {
    uint64_t l8;
    uint32_t h;
    memcpy(&l8, s, 8);
    memcpy(&h, s + 8, 4);
    const uint64_t m4 = 0x0F0F0F0F0F0F0F0Full;
    const uint32_t m2 = 0x03030303u;
    const __m128i lo = _mm_set_epi64x((long long)((l8 >> 4) & m4), (long long)(l8 & m4));
    const __m128i hi = _mm_set_epi32((int)((h >> 6) & m2), (int)((h >> 4) & m2), (int)((h >> 2) & m2), (int)(h & m2));
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32)));
}

/* The sums of the 8 int32 lanes of m[0..3], one per lane. */
static inline __m128i hsum8_x4(const __m256i *m) {
    const __m256i r01 = _mm256_add_epi32(_mm256_unpacklo_epi32(m[0], m[1]), _mm256_unpackhi_epi32(m[0], m[1]));
    const __m256i r23 = _mm256_add_epi32(_mm256_unpacklo_epi32(m[2], m[3]), _mm256_unpackhi_epi32(m[2], m[3]));
    const __m256i r = _mm256_add_epi32(_mm256_unpacklo_epi64(r01, r23), _mm256_unpackhi_epi64(r01, r23));
    return _mm_add_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* One Q2_K or Q3_K block: its levels (0..3 or 0..7) in four registers,
 * its group scales (and Q2_K's mins; zero for Q3_K) as int16, d and dmin. */
static inline __attribute__((always_inline)) void kq16_unpack(const void *bv, const bool q3, __m512i q[4],
                                                             __m256i *sc16, __m256i *mn16, float *d, float *dmin) {
    if (q3) {
        const qw_block_q3_K *b = bv;
        const __m512i hm2 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->hmask));
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++) {
            const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * z))),
                                                   _mm256_set1_epi8((char)(1 << (2 * z + 1))), 1);
            const __m512i lv = q2bits_zmm(b->qs, z);
            q[z] = _mm512_mask_add_epi8(lv, _mm512_test_epi8_mask(hm2, bit), lv, _mm512_set1_epi8(4));
        }
        *sc16 = q3k_scales16(b->scales);
        *mn16 = _mm256_setzero_si256();
        *d = _cvtsh_ss(b->d), *dmin = 0.0f;
    } else {
        const qw_block_q2_K *b = bv;
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++) q[z] = q2bits_zmm(b->qs, z);
        const __m128i s8 = _mm_loadu_si128((const __m128i *)b->scales);
        *sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s8, _mm_set1_epi8(0x0F)));
        *mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(0x0F)));
        *d = _cvtsh_ss(b->d), *dmin = _cvtsh_ss(b->dmin);
    }
}

/* Q3_K's offset -4 * sum_g scale_g * (group sum of y) in 8 int32 lanes of a
 * zeroed 16-lane register: the start of the token's integer sum. */
static inline __m512i q3k_offset_zmm(__m256i sc16, const qw_block_q8_K *y) {
    const __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums));
    return _mm512_zextsi256_si512(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), off), 2));
}

/* The one-token dot (decode) with the same unpacking: the AVX2 dot's
 * integers and float expression, so its bits. */
static inline __attribute__((always_inline)) void kq16_dot(int64_t n, float *s, const void *w, const void *x,
                                                          const bool q3) {
    const qw_block_q8_K *y = x;
    const size_t blk = q3 ? sizeof(qw_block_q3_K) : sizeof(qw_block_q2_K);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QW_QK_K; i++, y++) {
        __m512i q[4], sc[4];
        __m256i sc16, mn16;
        float d, dmin;
        kq16_unpack((const char *)w + (size_t)i * blk, q3, q, &sc16, &mn16, &d, &dmin);
        spread16_zmm(sc16, sc);
        __m512i si = q3 ? q3k_offset_zmm(sc16, y) : _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++)
            si = _mm512_dpwssd_epi32(si, _mm512_maddubs_epi16(q[z], _mm512_loadu_si512((const void *)(y->qs + 64 * z))),
                                     sc[z]);
        const int32_t sumi = _mm512_reduce_add_epi32(si);
        if (q3) {
            acc += q8k_d(y) * (d * (float)sumi);
        } else {
            const __m256i mm = _mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)y->bsums));
            const int32_t summ = _mm512_reduce_add_epi32(_mm512_zextsi256_si512(mm));
            acc += q8k_d(y) * (d * (float)sumi - dmin * (float)summ);
        }
    }
    *s = acc;
}

static void dot_q2_K_zmm(int64_t n, float *s, const void *w, const void *x) { kq16_dot(n, s, w, x, false); }
static void dot_q3_K_zmm(int64_t n, float *s, const void *w, const void *x) { kq16_dot(n, s, w, x, true); }

static inline __attribute__((always_inline)) void kq16_tile(int64_t n, const void *w, size_t w_row_bytes,
                                                           int64_t n_rows, const void *const *x, float *const *y,
                                                           const int nt, const bool q3) {
    const int ng = nt / 4;
    const int64_t nb = n / QW_QK_K;
    alignas(32) __m256 d8v[Q4K_TILE_BLOCKS];
    tokens_d8(x, nt, nb, d8v);
    const qw_block_q8_K *yt[Q4K_WIDE];
    for (int t = 0; t < nt; t++) yt[t] = x[t];
    const size_t blk = q3 ? sizeof(qw_block_q3_K) : sizeof(qw_block_q2_K);
    for (int64_t r = 0; r < n_rows; r++) {
        const char *row = (const char *)w + (size_t)r * w_row_bytes;
        __m256 acc = _mm256_setzero_ps(); /* lane t: token t */
        for (int64_t i = 0; i < nb; i++) {
            __m512i q[4], sc[4];
            __m256i sc16, mn16;
            float d, dmin;
            kq16_unpack(row + (size_t)i * blk, q3, q, &sc16, &mn16, &d, &dmin);
            spread16_zmm(sc16, sc);
            __m512i s[Q4K_WIDE];
            __m256i m[Q4K_WIDE];
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) {
                /* Q3_K: -4 * off joins the integer sum (exact in any order) */
                s[t] = q3 ? q3k_offset_zmm(sc16, &yt[t][i]) : _mm512_setzero_si512();
                m[t] = q3 ? _mm256_setzero_si256()
                          : _mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)yt[t][i].bsums));
            }
#pragma GCC unroll 4
            for (int z = 0; z < 4; z++)
#pragma GCC unroll 8
                for (int t = 0; t < nt; t++)
                    s[t] = _mm512_dpwssd_epi32(
                        s[t], _mm512_maddubs_epi16(q[z], _mm512_loadu_si512((const void *)(yt[t][i].qs + 64 * z))),
                        sc[z]);
            __m128i si[Q4K_WIDE / 4], mi[Q4K_WIDE / 4];
#pragma GCC unroll 2
            for (int g = 0; g < ng; g++) {
                si[g] = hsum16_x4(s + 4 * g);
                mi[g] = q3 ? _mm_setzero_si128() : hsum8_x4(m + 4 * g);
            }
            acc = kq_block_step(acc, d8v[i], d, join_groups(si, ng), dmin, join_groups(mi, ng));
        }
        store_lanes(acc, y, r, nt);
    }
}

#define Q2K_TILE(n, w, rb, n_rows, x, y, nt) kq16_tile(n, w, rb, n_rows, x, y, nt, false)
#define Q3K_TILE(n, w, rb, n_rows, x, y, nt) kq16_tile(n, w, rb, n_rows, x, y, nt, true)
KQ_TILE_ENTRIES(q2_K, Q2K_TILE)
KQ_TILE_ENTRIES(q3_K, Q3K_TILE)
