/* blockorder_avx512vbmi.c — Q8_0 and Q4_0 dots and decode row loops (AVX-512 VNNI + VBMI)
 * in the scalar reference's order: the kernels of the "avx512-amx" level
 * beside its AMX prefill tiles (amx_avx512.c).
 *
 * Why a second order: an AMX tile multiply gives one exact int32 per (row,
 * token, block) — the block's whole 32-element sum — not the 8 partial lanes
 * the AVX-512 Q8_0 dot (llama.cpp's order) scales one by one.  So the AMX
 * level computes every Q8_0/Q4_0 dot as the reference does (quant_ref.c):
 *     sum = 0;  for each block b:  sum = sum + (float)isum_b * (d_w * d_x)
 * — the int32 exact, each float operation a separate IEEE single rounding
 * (no FMA).  Its dot, row loop and tiles all do exactly that, so within the
 * level prefill and decode agree bit for bit (the tile contract, quant.h),
 * and every Q8_0/Q4_0 result equals the scalar level's bits — only the other
 * AVX-512 levels differ from it (by their lane order, as they always did).
 * (The level's Q4_0 takes these only with QWISP_AMX_Q4_0=1: by default it
 * runs the AVX-512 level's Q4_0 kernels, faster on the Xeon measured; quant.c.)
 *
 * Decode (one token): each row is read front to back as one stream, 16
 * blocks a chunk (this file's first loop, 16 rows at once with a row a
 * lane, read 16 streams of 18 or 34 bytes a step and ran at half the
 * AVX-512 loops' speed: 6.6 against 11.7 GB/s on the Xeon, bench/RESULTS.md).
 * Per chunk the 16 blocks' exact sums come out in the 16 lanes of one zmm
 * (VPDPBUSD against the token prepared once a call: Q8_0 weights made
 * unsigned by one XOR with the token's -128 * sum4(x) as the start, Q4_0's
 * nibbles against the token's two halves with -8 * sum(x) as the start, then
 * an unpack tree), the 16 scales come at once (scales16), and the 16 products
 * (float)isum * (d_w * d_x) are made at once.  Q4_0's four blocks of a
 * group come out of the chunk's bytes, loaded whole, with one VPERMT2B
 * (AVX-512 VBMI, which the level requires), where four 16-byte loads and
 * three inserts did it: +17-25 % from cache on the AMD EPYC; on the Xeon
 * this loop stayed the slower of the two orders (bench/RESULTS.md, session
 * 24).  Four rows go at once, far apart (quant_impl.h's decode streams), and
 * their products are turned so that one 4-lane add takes block j of all
 * four: each row's sum still adds its products one by one in block order.
 * Rows past the last whole section go alone; a row that is not whole groups of 4
 * blocks (the matmul never sends one) takes the dot.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/quant_impl.h"
#include "kernels/simd_x86.h"

/* Block b of a row as 32 signed bytes, and its fp16 scale's byte offset. */
static inline __attribute__((always_inline)) __m256i w8_q8(const uint8_t *row, int64_t b) {
    return _mm256_loadu_si256((const __m256i *)(row + b * (int64_t)sizeof(qw_block_q8_0) + 2));
}
static inline __attribute__((always_inline)) __m256i w8_q4(const uint8_t *row, int64_t b) {
    return q4_0_i8(row + b * (int64_t)sizeof(qw_block_q4_0) + 2);
}

/* The exact int32 sum of 32 products w[i] * x[i] (xu = x ^ 0x80), as 8 lanes. */
static inline __attribute__((always_inline)) __m256i lanes8(__m256i w, __m256i xu) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i nw = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, _mm256_set1_epi8((char)0x80), w));
    return _mm256_dpbusd_epi32(nw, xu, w);
}

/* One row's dot in the reference order (the integer sum is exact in any order). */
static inline __attribute__((always_inline)) float dot_row(int64_t nb, const uint8_t *w, const qw_block_q8_0 *x,
                                                           const bool q4) {
    const size_t bw = q4 ? sizeof(qw_block_q4_0) : sizeof(qw_block_q8_0);
    const __m256i k80 = _mm256_set1_epi8((char)0x80);
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const __m256i xu = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x[b].qs), k80);
        const int32_t isum = sum8_epi32(lanes8(q4 ? w8_q4(w, b) : w8_q8(w, b), xu));
        const float d = _cvtsh_ss(load_u16(w + (size_t)b * bw)) * _cvtsh_ss(x[b].d);
        const float p = (float)isum * d;
        sum = sum + p;
    }
    return sum;
}

static void dot_q8_0(int64_t n, float *s, const void *w, const void *x) {
    *s = dot_row(n / QW_QK8_0, w, x, false);
}
static void dot_q4_0(int64_t n, float *s, const void *w, const void *x) {
    *s = dot_row(n / QW_QK8_0, w, x, true);
}

/* ---- the decode row loop ------------------------------------------------
 * A row is read front to back, 16 blocks a chunk: the chunk's 16 exact block
 * sums in the lanes of one zmm, their 16 products (float)isum * (d_w * d_x)
 * at once, then the row's sum takes them one by one, in block order — the
 * reference's chain.  ROWS_AT_ONCE far-apart rows go at once so their chains
 * overlap; each is still read as one front-to-back stream. */

enum { CHUNK = 16, ROWS_AT_ONCE = 4, MAX_GROUPS = QW_GEMM_K_MAX / (4 * QW_QK8_0) };

/* The token's group g (blocks 4g..4g+3) as the row loop meets it, made once a
 * call.  Q8_0: x0, x1 = blocks 4g, 4g+1 and 4g+2, 4g+3 (one per 256-bit
 * half), b0, b1 = -128 · the sum of each lane's four x (the weights are read
 * as w + 128).  Q4_0: x0 = elements 0..15, x1 = 16..31 of each block (16
 * bytes a block), b0 = -8 · the sum of the eight x each lane meets; b1 unused. */
typedef struct {
    __m512i x0, x1, b0, b1;
} bo_group;

typedef struct {
    bo_group g[MAX_GROUPS];
    float dx[QW_GEMM_K_MAX / QW_QK8_0];
} bo_token;

static inline __attribute__((always_inline)) __m512i load_2x256(const void *lo, const void *hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}
/* the 16 bytes at each of p, p + s, p + 2s, p + 3s */
static inline __attribute__((always_inline)) __m512i load_4x128(const uint8_t *p, size_t s) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + s)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 2 * s)), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 3 * s)), 3);
}

static void token_prep(int64_t nb, const qw_block_q8_0 *x, bo_token *tk, const bool q4) {
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t g = 0; g < nb / 4; g++) {
        const qw_block_q8_0 *xb = x + 4 * g;
        bo_group *o = &tk->g[g];
        if (q4) {
            o->x0 = load_4x128((const uint8_t *)xb[0].qs, sizeof(qw_block_q8_0));
            o->x1 = load_4x128((const uint8_t *)xb[0].qs + 16, sizeof(qw_block_q8_0));
            const __m512i k8 = _mm512_set1_epi8(8);
            o->b0 = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, k8, o->x0), k8, o->x1));
            o->b1 = zero;
        } else {
            const __m512i k80 = _mm512_set1_epi8((char)0x80);
            o->x0 = load_2x256(xb[0].qs, xb[1].qs);
            o->x1 = load_2x256(xb[2].qs, xb[3].qs);
            o->b0 = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k80, o->x0));
            o->b1 = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k80, o->x1));
        }
    }
    for (int64_t b = 0; b < nb; b++) tk->dx[b] = _cvtsh_ss(x[b].d);
}

/* Byte j of a group's quants (block j / 16, byte j % 16 of its 16) as an
 * offset from the group's first block: 18 (j / 16) + j % 16. */
static inline __attribute__((always_inline)) __m512i q4_group_idx(void) {
    static const uint8_t idx[64] = {
        0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 18, 19, 20, 21, 22, 23,
        24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
        48, 49, 50, 51, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69};
    return _mm512_loadu_si512(idx);
}

/* Q4_0: the chunk's 72 ng bytes in zb[0..4] (masked: only its blocks; zb[5]
 * zero), for its quants and its scales (scales16_picked) alike. */
static inline __attribute__((always_inline)) void q4_chunk_bytes(const uint8_t *chunk, int ng, __m512i zb[6]) {
#pragma GCC unroll 5
    for (int i = 0; i < 5; i++) {
        const int nbytes = 72 * ng - 64 * i;
        zb[i] = nbytes >= 64 ? _mm512_loadu_si512(chunk + 64 * i)
                : nbytes > 0 ? _mm512_maskz_loadu_epi8((__mmask64)((1ull << nbytes) - 1), chunk + 64 * i)
                             : _mm512_setzero_si512();
    }
    zb[5] = _mm512_setzero_si512();
}

/* The exact sums of blocks 16c .. 16c + 4 ng - 1 of a row, lane j block 16c + j
 * (lanes past them 0); Q4_0's from the chunk's bytes zb (q4_chunk_bytes). */
static inline __attribute__((always_inline)) __m512i chunk_sums(const uint8_t *row, int64_t c, int ng,
                                                                const bo_token *tk, const __m512i *zb, const bool q4) {
    const int64_t bw = q4 ? (int64_t)sizeof(qw_block_q4_0) : (int64_t)sizeof(qw_block_q8_0);
    const __m512i zero = _mm512_setzero_si512();
    if (q4) {
        /* group g's quant byte 16b + i = chunk byte 72g + 18b + 2 + i = byte
         * 8g + 18b + 2 + i of zb[g]:zb[g + 1] (72g = 64g + 8g); its sums:
         * lanes 4b..4b+3 hold block b's sum in four parts */
        __m512i z[4];
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            if (g >= ng) {
                z[g] = zero;
                continue;
            }
            const bo_group *x = &tk->g[4 * c + g];
            const __m512i at = _mm512_add_epi8(q4_group_idx(), _mm512_set1_epi8((char)(8 * g + 2)));
            const __m512i q = _mm512_permutex2var_epi8(zb[g], at, zb[g + 1]);
            const __m512i m = _mm512_set1_epi8(0x0f);
            z[g] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(x->b0, _mm512_and_si512(q, m), x->x0),
                                       _mm512_and_si512(_mm512_srli_epi16(q, 4), m), x->x1);
        }
        /* four parts -> one: lane 4b + g = group g's block b, then back to lane 4g + b */
        const __m512i u01 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
        const __m512i u23 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
        const __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi64(u01, u23), _mm512_unpackhi_epi64(u01, u23));
        return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), t);
    }
    /* pair i: blocks 2i, 2i + 1 of the chunk, eight lanes each */
    const __m512i k80 = _mm512_set1_epi8((char)0x80);
    __m512i z[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        if (i >= 2 * ng) {
            z[i] = zero;
            continue;
        }
        const bo_group *x = &tk->g[4 * c + i / 2];
        const uint8_t *b0 = row + (16 * c + 2 * i) * bw + 2;
        const __m512i wu = _mm512_xor_si512(load_2x256(b0, b0 + bw), k80);
        z[i] = _mm512_dpbusd_epi32(i & 1 ? x->b1 : x->b0, wu, i & 1 ? x->x1 : x->x0);
    }
    /* 8 pairs of 8 lanes -> 16 sums: pairwise unpack-adds, then across 128-bit lanes */
    __m512i u[4], s2[2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]), _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
        s2[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(u[2 * i], u[2 * i + 1]), _mm512_unpackhi_epi64(u[2 * i], u[2 * i + 1]));
    const __m512i t = _mm512_add_epi32(_mm512_shuffle_i32x4(s2[0], s2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(s2[0], s2[1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* the tree leaves block j's sum in element perm[j]; this puts it back */
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15), t);
}

/* The chunk's products (float)isum * (d_w * d_x), lane j block 16c + j (0 past the chunk's blocks). */
static inline __attribute__((always_inline)) __m512 chunk_products(const uint8_t *row, int64_t c, int ng,
                                                                   const bo_token *tk, const bool q4) {
    const int64_t bw = q4 ? (int64_t)sizeof(qw_block_q4_0) : (int64_t)sizeof(qw_block_q8_0);
    const uint8_t *chunk = row + 16 * c * bw;
    const __mmask16 mk = (__mmask16)((1u << (4 * ng)) - 1);
    __m512i zb[6]; /* Q4_0: the chunk's bytes, loaded once for its quants and scales */
    if (q4) q4_chunk_bytes(chunk, ng, zb);
    const __m512i isum = chunk_sums(row, c, ng, tk, zb, q4);
    const __m512 dw = q4 ? scales16_picked(zb, (int)bw, mk) : scales16(chunk, (int)bw, mk);
    const __m512 d = _mm512_mul_ps(dw, _mm512_maskz_loadu_ps(mk, tk->dx + 16 * c));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(isum), d);
}

/* Four rows' chains: acc lane i = row i's sum; p[i] = row i's chunk of
 * products, of which the first m are added, in block order.  The 4 × 16
 * products are turned so that one 4-lane add takes block j of all four rows. */
static inline __attribute__((always_inline)) __m128 add_chunk4(__m128 acc, const __m512 p[4], const int m) {
    const __m512 a = _mm512_unpacklo_ps(p[0], p[1]), b = _mm512_unpackhi_ps(p[0], p[1]);
    const __m512 c = _mm512_unpacklo_ps(p[2], p[3]), d = _mm512_unpackhi_ps(p[2], p[3]);
    /* t[k]'s 128-bit lane L = block 4L + k of rows 0..3 */
    __m512 t[4];
    t[0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(c)));
    t[1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(c)));
    t[2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(b), _mm512_castps_pd(d)));
    t[3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(b), _mm512_castps_pd(d)));
#pragma GCC unroll 16
    for (int j = 0; j < m; j++) {
        const __m512 v = t[j & 3];
        const __m128 q = (j >> 2) == 0 ? _mm512_castps512_ps128(v)
                         : (j >> 2) == 1 ? _mm512_extractf32x4_ps(v, 1)
                         : (j >> 2) == 2 ? _mm512_extractf32x4_ps(v, 2)
                                         : _mm512_extractf32x4_ps(v, 3);
        acc = _mm_add_ps(acc, q);
    }
    return acc;
}

/* R rows (1 or ROWS_AT_ONCE) of nb blocks, row i at w + i * gap * rb: y[i * gap] = its dot. */
static inline __attribute__((always_inline)) void rows_dots(int64_t nb, const uint8_t *w, size_t rb, int64_t gap,
                                                            const bo_token *tk, float *y, const int R, const bool q4) {
    __m128 acc = _mm_setzero_ps();
    __m512 p[ROWS_AT_ONCE] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    const size_t step = (size_t)gap * rb;
    const int64_t full = nb / CHUNK;
    for (int64_t c = 0; c < full; c++) {
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) p[i] = chunk_products(w + (size_t)i * step, c, 4, tk, q4);
        acc = add_chunk4(acc, p, CHUNK);
    }
    const int ng = (int)(nb % CHUNK) / 4; /* nb % 4 == 0 */
    if (ng) {
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) p[i] = chunk_products(w + (size_t)i * step, full, ng, tk, q4);
        acc = ng == 1 ? add_chunk4(acc, p, 4) : ng == 2 ? add_chunk4(acc, p, 8) : add_chunk4(acc, p, 12);
    }
    float o[4];
    _mm_storeu_ps(o, acc);
    for (int i = 0; i < R; i++) y[(size_t)i * gap] = o[i];
}

/* The rows as ROWS_AT_ONCE far-apart streams (quant_impl.h's decode streams),
 * the rows past the last whole section one at a time. */
static inline __attribute__((always_inline)) void gemv_rows(int64_t n, const void *wv, size_t rb, int64_t n_rows,
                                                            const void *const *xv, float *const *yv, const bool q4) {
    const int64_t nb = n / QW_QK8_0;
    const uint8_t *w = wv;
    float *y = yv[0];
    if (nb % 4) { /* not a whole number of groups: the dot (matmul's row loop needs n % 128 == 0) */
        for (int64_t r = 0; r < n_rows; r++) y[r] = dot_row(nb, w + (size_t)r * rb, xv[0], q4);
        return;
    }
    bo_token tk;
    token_prep(nb, xv[0], &tk, q4);
    const int64_t gap = qw_decode_stream_gap(n_rows, ROWS_AT_ONCE);
    for (int64_t r = 0; r < gap; r++) rows_dots(nb, w + (size_t)r * rb, rb, gap, &tk, y + r, ROWS_AT_ONCE, q4);
    for (int64_t r = gap * ROWS_AT_ONCE; r < n_rows; r++) rows_dots(nb, w + (size_t)r * rb, rb, 1, &tk, y + r, 1, q4);
}

static void gemv_q8_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    gemv_rows(n, w, rb, n_rows, x, y, false);
}
static void gemv_q4_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    gemv_rows(n, w, rb, n_rows, x, y, true);
}

const qw_blockorder_kernels qw_blockorder_avx512 = {
    .dot_q8_0 = dot_q8_0,
    .dot_q4_0 = dot_q4_0,
    .gemv_q8_0 = gemv_q8_0,
    .gemv_q4_0 = gemv_q4_0,
};
