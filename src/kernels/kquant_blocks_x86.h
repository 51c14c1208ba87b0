/* kquant_blocks_x86.h — private to the x86 K-quant kernels (kquant_avx2.c,
 * kquant_avx512.c, amx_kquant_avx512.c, amx_q6k_avx512.c): the block pieces
 * they share, so that the levels read a Q8_K block, a Q4_K or Q5_K chunk and
 * a Q6_K super-block the same way, and the walk of their decode row loops.
 * The 512-bit ones exist where the including file is built for AVX-512. */
#ifndef QWISP_KERNELS_KQUANT_BLOCKS_X86_H
#define QWISP_KERNELS_KQUANT_BLOCKS_X86_H

#include <immintrin.h>
#include <string.h>

#include "kernels/kquant_impl.h"
#include "kernels/quant_impl.h"
#include "kernels/simd_x86.h"

/* A Q8_K block's scale (a float; Q8_K rows are only 4-byte aligned). */
static inline float q8k_d(const qw_block_q8_K *y) {
    float d;
    memcpy(&d, &y->d, sizeof d);
    return d;
}

/* A Q8_K block's sixteen group sums added in pairs: the sums over the 32
 * elements each Q4_K scale and min covers. */
static inline __m128i q8k_pair_sums(const qw_block_q8_K *y) {
    const __m256i bs = _mm256_loadu_si256((const __m256i *)y->bsums);
    return _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
}

/* pshufb control selecting int16 element g in every position of a lane. */
static inline __m256i q4k_pick(int g) { return _mm256_set1_epi16((short)(0x0100 * (2 * g + 1) + 2 * g)); }

/* A Q4_K / Q5_K block's eight scales (bytes 0-7) and eight mins (bytes
 * 8-15) from its 12 packed bytes, in vector registers: the values of
 * qw_kq_scales_mins_k4 without its scalar shifts and moves into a vector
 * register.  Reads 16 bytes from `packed` (the block's scales and its first
 * 4 level bytes, all inside the block). */
static inline __m128i q4k_scales_mins(const uint8_t *packed) {
    const __m128i v = _mm_loadu_si128((const __m128i *)packed); /* u0 u1 u2 (junk) */
    /* lanes u0 u2 u1 u2, the last shifted by 4: each output's low bits */
    const __m128i lo = _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)), _mm_set_epi32(4, 0, 0, 0));
    /* lanes u0 u0 u1 u1 >> 2: outputs 1 and 3 take bits 6-7 of u0 / u1 as bits 4-5 */
    const __m128i hi = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)), 2),
                                     _mm_set_epi32(0x30303030, 0, 0x30303030, 0));
    const __m128i mlo = _mm_set_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f);
#ifdef __AVX512VL__
    return _mm_ternarylogic_epi32(lo, mlo, hi, 0xEA); /* (lo & mlo) | hi */
#else
    return _mm_or_si128(_mm_and_si128(lo, mlo), hi);
#endif
}

/* The per-block head of a Q4_K row's dot: the block's scales and mins
 * unpacked (returned: scales in bytes 0-7, mins in 8-15), d and dmin
 * converted together and multiplied by the token's Q8_K scale (*d8d: lane 0
 * = d8*d, lane 1 = d8*dmin, the products of the reference's order), and the
 * mins' correction added to the row's 4 lanes: accm += d8*dmin *
 * (mins . pairs), pairs the token's group sums paired per 32. */
static inline __attribute__((always_inline)) __m128i q4k_block_head(const qw_block_q4_K *b, float d8, __m128i pairs,
                                                                    __m128 *accm, __m128 *d8d) {
    const __m128i sm = q4k_scales_mins(b->scales);
    uint32_t d_dmin;
    memcpy(&d_dmin, &b->d, sizeof d_dmin); /* d and dmin: two adjacent halves */
    *d8d = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)d_dmin)), _mm_set1_ps(d8));
    const __m128i mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm));
    *accm = _mm_fmadd_ps(_mm_permute_ps(*d8d, _MM_SHUFFLE(1, 1, 1, 1)), _mm_cvtepi32_ps(_mm_madd_epi16(mins, pairs)),
                         *accm);
    return sm;
}

/* The decode row loops (qw_gemv_get) of the K-quants: rows read strictly in
 * order, as the dot a row would (two rows side by side lost the hardware prefetcher's
 * stream; RESULTS.md).  What they save over a dot a row is the per-call
 * work: the constants, the token's preparation and the call itself — much
 * of the work on short rows (an A3B expert's down projection is 2
 * super-blocks a row, where the dot's set-up and finish were a third of its
 * instructions) — and the prefetch loop: each block prefetches its twin in
 * the row qw_decode_ahead_rows rows on (a few prefetches in the block's
 * work, not a separate loop of one branch a line). */
typedef struct {
    const void *row; /* the row to prefetch, NULL past the last */
    int l2;          /* into L2 (tune.h's decode_prefetch_l2) */
} row_prefetch;

/* A call's walk: rows of prefetch distance, and the prefetch level. */
typedef struct {
    int64_t ahead;
    int l2;
} decode_walk;

/* Prefetches the first `ahead` rows at once (the rest go block by block). */
static inline decode_walk decode_rows_start(const char *w, size_t w_row_bytes, int64_t n_rows) {
    const decode_walk wk = {qw_decode_ahead_rows(w_row_bytes), qw_tune_get(QW_TUNE_DECODE_PREFETCH_L2) != 0};
    qw_prefetch_decode(w, (size_t)(n_rows < wk.ahead ? n_rows : wk.ahead) * w_row_bytes);
    return wk;
}

static inline row_prefetch decode_row_prefetch(const char *w, size_t w_row_bytes, int64_t r, int64_t n_rows,
                                               decode_walk wk) {
    return (row_prefetch){r + wk.ahead < n_rows ? w + (size_t)(r + wk.ahead) * w_row_bytes : NULL, wk.l2};
}

/* A decode row loop NAME over blocks of BLOCK_T whose row body is
 * ROW(block, token, nb, &prefetch) (a K-quant's dot, inlined). */
#define KQ_GEMV_ROWS(NAME, BLOCK_T, ROW)                                                                          \
    static void NAME(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,        \
                     float *const *y) {                                                                          \
        const int64_t nb = n / QW_QK_K;                                                                          \
        if (nb <= 0) return; /* (lets the compiler set the row body's constants once, outside the rows) */      \
        const decode_walk wk = decode_rows_start(w, w_row_bytes, n_rows);                                       \
        for (int64_t r = 0; r < n_rows; r++) {                                                                   \
            const row_prefetch pf = decode_row_prefetch(w, w_row_bytes, r, n_rows, wk);                        \
            y[0][r] = ROW((const BLOCK_T *)((const char *)w + (size_t)r * w_row_bytes), x[0], nb, &pf);         \
        }                                                                                                        \
    }

/* A Q4_K decode row loop NAME whose row body is ROW(block, token, nb,
 * &prepared token, &prefetch): the token prepared once a call by the
 * including level's q4k_token_prep into its q4k_token (AVX2: the scales and
 * group sums; AVX-512: the bytes regrouped too). */
#define Q4K_GEMV_ROWS(NAME, ROW)                                                                                  \
    static void NAME(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,        \
                     float *const *y) {                                                                          \
        const int64_t nb = n / QW_QK_K;                                                                          \
        if (nb <= 0) return; /* (lets the compiler set the row body's constants once, outside the rows) */      \
        const qw_block_q8_K *xt = x[0];                                                                          \
        q4k_token tok;                                                                                           \
        q4k_token_prep(xt, nb, &tok);                                                                            \
        const decode_walk wk = decode_rows_start(w, w_row_bytes, n_rows);                                       \
        for (int64_t r = 0; r < n_rows; r++) {                                                                   \
            const row_prefetch pf = decode_row_prefetch(w, w_row_bytes, r, n_rows, wk);                        \
            y[0][r] = ROW((const qw_block_q4_K *)((const char *)w + (size_t)r * w_row_bytes), xt, nb, &tok, &pf); \
        }                                                                                                        \
    }

#ifdef __AVX512F__
/* Per chunk j of 32 bytes: group 2j's scale in the low half of a 512-bit
 * register, group 2j+1's in the high half (pshufb controls). */
static inline __m512i q4k_pick_zmm(int j) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(q4k_pick(2 * j)), q4k_pick(2 * j + 1), 1);
}

/* Chunk j of a Q4_K super-block as 64 levels in element order: the 32
 * bytes' low nibbles, then their high nibbles. */
static inline __m512i q4k_chunk_zmm(const qw_block_q4_K *b, int j) {
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * j)));
    return _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), _mm512_set1_epi8(0x0F));
}

/* The row body reads a block's 128 level bytes in two 64-byte halves h:
 * the low nibbles are groups 4h and 4h+2 (elements 128h..+31 and
 * 128h+64..+95), the high nibbles groups 4h+1 and 4h+3.  q4k_token_block
 * lays the token's bytes out to meet them: yv[2h] = elements 128h..+31 and
 * 128h+64..+95, yv[2h+1] = 128h+32..+63 and 128h+96..+127.  Each group
 * stays in one 256-bit half in its own order, so lane l of the folded int32
 * sum is the same integer as the dot's. */
static inline void q4k_token_block(const qw_block_q8_K *y, __m512i yv[4]) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i a = _mm512_loadu_si512(y->qs + 128 * h), b = _mm512_loadu_si512(y->qs + 128 * h + 64);
        yv[2 * h] = _mm512_shuffle_i64x2(a, b, 0x44);
        yv[2 * h + 1] = _mm512_shuffle_i64x2(a, b, 0xEE);
    }
}

/* pshufb controls: group g's scale in the low 256 bits, group g+2's in the high. */
static inline __m512i q4k_pick_pair(int g) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(q4k_pick(g)), q4k_pick(g + 2), 1);
}

/* What a Q4_K row's dot needs of the token, per block, prepared once for
 * the row loop: its bytes regrouped, its Q8_K scale and its group sums
 * paired per 32 elements. */
typedef struct {
    __m512i yv[QW_GEMM_K_MAX / QW_QK_K][4];
    float d8[QW_GEMM_K_MAX / QW_QK_K];
    __m128i pairs[QW_GEMM_K_MAX / QW_QK_K];
} q4k_token;

/* The token prepared once for a Q4_K row loop. */
static inline void q4k_token_prep(const qw_block_q8_K *xt, int64_t nb, q4k_token *tok) {
    for (int64_t i = 0; i < nb; i++) {
        q4k_token_block(&xt[i], tok->yv[i]);
        tok->d8[i] = q8k_d(&xt[i]);
        tok->pairs[i] = q8k_pair_sums(&xt[i]);
    }
}

/* Chunk h (0, 1) of a Q4_K block's levels against the token's regrouped
 * bytes yv: the two 64-byte halves' products, weighted by their groups'
 * scales (sc16: the eight scales as int16 in every 128-bit lane), added
 * into 16 int32 lanes; lane l of the two 256-bit halves added is the same
 * integer as the 256-bit dot's lane l. */
static inline __attribute__((always_inline)) __m512i q4k_sumi_halves(const qw_block_q4_K *b, __m512i sc16,
                                                                     const __m512i yv[4]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i v0 = _mm512_loadu_si512(b->qs), v1 = _mm512_loadu_si512(b->qs + 64);
    /* the first half starts the sums (madd = dpwssd into zero, the same integers) */
    __m512i sumi = _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_and_si512(v0, m4), yv[0]),
                                     _mm512_shuffle_epi8(sc16, q4k_pick_pair(0)));
    sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(v0, 4), m4), yv[1]),
                               _mm512_shuffle_epi8(sc16, q4k_pick_pair(1)));
    sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(_mm512_and_si512(v1, m4), yv[2]),
                               _mm512_shuffle_epi8(sc16, q4k_pick_pair(4)));
    return _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(v1, 4), m4), yv[3]),
                               _mm512_shuffle_epi8(sc16, q4k_pick_pair(5)));
}

/* Eight blocks' int32 lanes (s[b]: block b's 8 lanes) summed per block:
 * lane b of the result is the sum of s[b]'s lanes (exact). */
static inline __attribute__((always_inline)) __m256i sum8_lanes(const __m256i s[8]) {
    const __m256i a0 = _mm256_hadd_epi32(s[0], s[1]), a1 = _mm256_hadd_epi32(s[2], s[3]);
    const __m256i a2 = _mm256_hadd_epi32(s[4], s[5]), a3 = _mm256_hadd_epi32(s[6], s[7]);
    /* b0: blocks 0..3's lanes 0-3 sums in the low 128 bits, lanes 4-7 sums in the high */
    const __m256i b0 = _mm256_hadd_epi32(a0, a1), b1 = _mm256_hadd_epi32(a2, a3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20), _mm256_permute2x128_si256(b0, b1, 0x31));
}

/* Chunk j as 64 levels 0..31: Q4_K's nibbles, plus 16 where bit 2j (low
 * half) or 2j+1 (high half) of the element's qh byte is set. */
static inline __m512i q5k_chunk_zmm(const qw_block_q5_K *b, __m512i qh2, int j) {
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * j)));
    const __m512i lv = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), _mm512_set1_epi8(0x0F));
    const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * j))),
                                           _mm256_set1_epi8((char)(1 << (2 * j + 1))), 1);
    return _mm512_mask_add_epi8(lv, _mm512_test_epi8_mask(qh2, bit), lv, _mm512_set1_epi8(16));
}

/* The 256 levels (0..63) of a Q6_K super-block in four registers. */
static inline __attribute__((always_inline)) void q6k_levels_zmm(const qw_block_q6_K *b, __m512i q[4]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* per 16-bit word: the high bits' shift for the first and second chunk of a pair */
    const __m512i shl_a = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr_b = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i l = _mm512_loadu_si512((const void *)(b->ql + 64 * h));
        const __m512i hv = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
        q[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(hv, shl_a), m30));
        q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                       _mm512_and_si512(_mm512_srlv_epi16(hv, shr_b), m30));
    }
}

/* The group scales spread per register z (word w of sc[z] = scale of
 * group 4z + w / 8). */
static inline __attribute__((always_inline)) void spread16_zmm(__m256i sc16, __m512i sc[4]) {
    const __m512i wide = _mm512_castsi256_si512(sc16);
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++) {
        const __m512i idx = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16((short)(4 * z + 1)), _mm_set1_epi16((short)(4 * z)))),
            _mm256_set_m128i(_mm_set1_epi16((short)(4 * z + 3)), _mm_set1_epi16((short)(4 * z + 2))), 1);
        sc[z] = _mm512_permutexvar_epi16(idx, wide);
    }
}

/* Q6_K's 16 group scales as int16, and spread per register (spread16_zmm). */
static inline __attribute__((always_inline)) __m256i q6k_scales_zmm(const qw_block_q6_K *b, __m512i sc[4]) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    spread16_zmm(sc16, sc);
    return sc16;
}

/* sum_g sc_g * (q . y)_g of one Q6_K block and token with the levels 0..63
 * as they are (a pair's products fit int16), in 16 int32 lanes; *sc16: the
 * scales as int16, for the -32's correction against the group sums. */
static inline __attribute__((always_inline)) __m512i q6k_sumi_zmm(const qw_block_q6_K *b, const qw_block_q8_K *y,
                                                                  __m256i *sc16) {
    __m512i q[4], sc[4];
    q6k_levels_zmm(b, q);
    *sc16 = q6k_scales_zmm(b, sc);
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++)
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q[z], _mm512_loadu_si512((const void *)(y->qs + 64 * z))),
                                   sc[z]);
    return sumi;
}
#endif

#endif
