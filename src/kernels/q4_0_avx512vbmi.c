/* q4_0_avx512vbmi.c — Q4_0 weights × Q8_0 activations with AVX-512 VNNI + VBMI:
 * the dot, the prefill tile (rows × 4 tokens) and the decode row loop (its
 * rows read as far-apart streams, quant_impl.h).
 *
 * All three walk a row in groups of four blocks (72 bytes, 128 weights) and
 * keep one 16-lane f32 accumulator per (row, token): lanes 4b..4b+3 belong to
 * block b of the group.  Per group:
 *   - the 64 nibble bytes are gathered out of the 72-byte group with one
 *     VPERMT2B (a 64- and a 16-byte load; no repacked copy of the weights), then
 *     split into low nibbles (elements 0..15 of each block) and high nibbles
 *     (16..31);
 *   - the activations are laid out the same way once per token (x_lo, x_hi),
 *     with -8 * sum(x) per lane as the starting value, so two VPDPBUSD give
 *     per lane the exact int32 sum of (nibble - 8) * x over four elements;
 *   - the four fp16 weight scales are spread to their four lanes with one
 *     VPERMW and converted; acc = fma(float(int lanes), d_w * d_x, acc).
 * The end is _mm512_reduce_add_ps(acc).  Because the dot, the tile and the
 * row loop do exactly these operations in this order, they give the same
 * bits (the tile contract in quant.h).  Weights bytes are the file's: the
 * footprint stays file-backed.
 *
 * A row whose length is not a multiple of 128 (the dot only; matmul uses the
 * tiles for n % 128 == 0) ends with a masked group: missing blocks load as
 * zero bytes, so they add exact zeros.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/quant_impl.h"

enum { GROUP_BLOCKS = 4, GROUP_BYTES = GROUP_BLOCKS * (int)sizeof(qw_block_q4_0) };

/* What a token contributes to one group, prepared once per call. */
typedef struct {
    __m512i lo, hi; /* x elements 0..15 / 16..31 of each block, 16 bytes per block */
    __m512i bias;   /* -8 * (sum of the 8 elements each lane meets) */
    __m512 d;       /* d_x of the lane's block */
} q4_prep;

/* The weight side of one group: nibbles and per-lane scales. */
typedef struct {
    __m512i lo, hi;
    __m512 d;
} q4_group;

/* Output byte i of the nibble gather = group byte 18*(i/16) + 2 + i%16 (the
 * qs of block i/16); group bytes >= 64 come from the second load (16 bytes at
 * group + 56), which index bit 6 selects.  (Two overlapping 64-byte loads
 * would be simpler, but read DRAM at half the rate: measured 11 vs 21 GB/s.) */
#define SEL(b, e) (int8_t)(18 * (b) + 2 + (e) < 64 ? 18 * (b) + 2 + (e) : 64 + 18 * (b) + 2 + (e) - 56)
#define B16(b)                                                                                                   \
    SEL(b, 0), SEL(b, 1), SEL(b, 2), SEL(b, 3), SEL(b, 4), SEL(b, 5), SEL(b, 6), SEL(b, 7), SEL(b, 8), SEL(b, 9), \
        SEL(b, 10), SEL(b, 11), SEL(b, 12), SEL(b, 13), SEL(b, 14), SEL(b, 15)
static const int8_t k_nib_idx[64] = {B16(0), B16(1), B16(2), B16(3)};
#undef B16
#undef SEL

/* Word j of the result = the scale of block j/4 (group word 9 * (j/4)). */
static const int16_t k_scale_idx[32] = {0, 0, 0, 0, 9, 9, 9, 9, 18, 18, 18, 18, 27, 27, 27, 27};

/* Nibbles and scales of a group whose first 64 bytes are `a` and bytes 56..71 `b`. */
static inline __attribute__((always_inline)) q4_group unpack_group(__m512i a, __m512i b, __m512i nib_idx,
                                                                    __m512i scale_idx) {
    const __m512i q = _mm512_permutex2var_epi8(a, nib_idx, b);
    const __m512i m = _mm512_set1_epi8(0x0f);
    q4_group r;
    r.lo = _mm512_and_si512(q, m);
    r.hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m);
    r.d = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(scale_idx, a)));
    return r;
}

static inline __attribute__((always_inline)) q4_group load_group(const uint8_t *g, __m512i nib_idx,
                                                                  __m512i scale_idx) {
    return unpack_group(_mm512_loadu_si512(g), _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(g + 56))),
                        nib_idx, scale_idx);
}

/* The last, partial group of a row (1..3 blocks): masked loads, zeros beyond.
 * bytes <= 54: all in the first load; the second one (block 3) is zero. */
static inline q4_group load_group_tail(const uint8_t *g, int n_blocks, __m512i nib_idx, __m512i scale_idx) {
    const int bytes = n_blocks * (int)sizeof(qw_block_q4_0);
    return unpack_group(_mm512_maskz_loadu_epi8((1ull << bytes) - 1, g), _mm512_setzero_si512(), nib_idx, scale_idx);
}

/* Activation-side gathers over a 4-block Q8_0 group (136 bytes, block b at
 * byte 34b: d, then 32 qs).  x_lo takes qs 0..15 of each block (bytes
 * 34b+2+e, all below 128: loads at 0 and 64); x_hi takes qs 16..31 (bytes
 * 34b+18+e, 18..135: loads at 8 and 72, hence the -8); the scale words are
 * at word 17b of the first pair of loads. */
#define XLO(b, e) (int8_t)(34 * (b) + 2 + (e))
#define XHI(b, e) (int8_t)(34 * (b) + 18 + (e) - 8)
#define X16(F, b)                                                                                             \
    F(b, 0), F(b, 1), F(b, 2), F(b, 3), F(b, 4), F(b, 5), F(b, 6), F(b, 7), F(b, 8), F(b, 9), F(b, 10), F(b, 11), \
        F(b, 12), F(b, 13), F(b, 14), F(b, 15)
static const int8_t k_xlo_idx[64] = {X16(XLO, 0), X16(XLO, 1), X16(XLO, 2), X16(XLO, 3)};
static const int8_t k_xhi_idx[64] = {X16(XHI, 0), X16(XHI, 1), X16(XHI, 2), X16(XHI, 3)};
#undef X16
#undef XHI
#undef XLO
static const int16_t k_xscale_idx[32] = {0, 0, 0, 0, 17, 17, 17, 17, 34, 34, 34, 34, 51, 51, 51, 51};

/* Prepares the Q8_0 blocks of a token's group: `bytes` of them are real
 * (136 for a whole group; fewer in a row's masked tail, zeros beyond). */
static inline __attribute__((always_inline)) q4_prep prep_group(const qw_block_q8_0 *xb, int bytes) {
    const uint8_t *x = (const uint8_t *)xb;
    __m512i a, b, c, d;
    if (bytes == 4 * (int)sizeof(qw_block_q8_0)) {
        a = _mm512_loadu_si512(x), b = _mm512_loadu_si512(x + 64);
        c = _mm512_loadu_si512(x + 8), d = _mm512_loadu_si512(x + 72);
    } else {
        const __mmask64 all = ~0ull;
        a = _mm512_maskz_loadu_epi8(bytes >= 64 ? all : (1ull << bytes) - 1, x);
        b = _mm512_maskz_loadu_epi8(bytes >= 128 ? all : bytes > 64 ? (1ull << (bytes - 64)) - 1 : 0, x + 64);
        c = _mm512_maskz_loadu_epi8(bytes >= 72 ? all : bytes > 8 ? (1ull << (bytes - 8)) - 1 : 0, x + 8);
        d = _mm512_maskz_loadu_epi8(bytes > 72 ? (1ull << (bytes - 72)) - 1 : 0, x + 72);
    }
    q4_prep p;
    p.lo = _mm512_permutex2var_epi8(a, _mm512_loadu_si512(k_xlo_idx), b);
    p.hi = _mm512_permutex2var_epi8(c, _mm512_loadu_si512(k_xhi_idx), d);
    const __m512i k8 = _mm512_set1_epi8(8), zero = _mm512_setzero_si512();
    p.bias = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, k8, p.lo), k8, p.hi));
    p.d = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(a, _mm512_loadu_si512(k_xscale_idx), b)));
    return p;
}

/* acc += float(exact lane sums) * (d_w * d_x): one group of one (row, token). */
static inline __attribute__((always_inline)) __m512 group_fma(const q4_group *w, const q4_prep *x, __m512 acc) {
    const __m512i p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(x->bias, w->lo, x->lo), w->hi, x->hi);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(w->d, x->d), acc);
}

static inline __m512i nib_index(void) { return _mm512_loadu_si512(k_nib_idx); }
static inline __m512i scale_index(void) { return _mm512_loadu_si512(k_scale_idx); }

void qw_avx512_dot_q4_0(int64_t n, float *s, const void *wv, const void *xv) {
    const uint8_t *w = wv;
    const qw_block_q8_0 *x = xv;
    const int64_t nb = n / QW_QK8_0, ng = nb / GROUP_BLOCKS;
    const int tail = (int)(nb % GROUP_BLOCKS);
    const __m512i ni = nib_index(), si = scale_index();
    __m512 acc = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const q4_group wg = load_group(w + g * GROUP_BYTES, ni, si);
        const q4_prep xg = prep_group(x + g * GROUP_BLOCKS, 4 * (int)sizeof(qw_block_q8_0));
        acc = group_fma(&wg, &xg, acc);
    }
    if (tail) {
        const q4_group wg = load_group_tail(w + ng * GROUP_BYTES, tail, ni, si);
        const q4_prep xg = prep_group(x + ng * GROUP_BLOCKS, tail * (int)sizeof(qw_block_q8_0));
        acc = group_fma(&wg, &xg, acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

enum { TILE_ROWS = 4 };

/* The row and token loops must be unrolled for the accumulators to live in
 * registers; -O2 does not do it by itself (it kept them in memory: measured). */
#define UNROLL _Pragma("GCC unroll 4")

/* TR rows × TT tokens, groups outer so each row's group is unpacked once and
 * used by every token.  Rows [0, n_rows), n_rows % TR == 0; the rows
 * `ahead_rows` further on are prefetched. */
static inline __attribute__((always_inline)) void tile_rows(int64_t ng, const uint8_t *w, size_t w_row_bytes,
                                                            int64_t n_rows, const q4_prep *pp, float *const *y,
                                                            int64_t ahead_rows, const int TR, const int TT) {
    const __m512i ni = nib_index(), si = scale_index();
    const size_t group_bytes = (size_t)TR * w_row_bytes;
    qw_prefetch_bytes(w, (size_t)(n_rows < ahead_rows ? n_rows : ahead_rows) * w_row_bytes);
    for (int64_t r0 = 0; r0 < n_rows; r0 += TR) {
        const uint8_t *wr = w + (size_t)r0 * w_row_bytes;
        if (r0 + ahead_rows < n_rows) qw_prefetch_bytes(wr + (size_t)ahead_rows * w_row_bytes, group_bytes);
        __m512 acc[TILE_ROWS][QW_GEMM_TOKS];
        UNROLL for (int r = 0; r < TR; r++)
            UNROLL for (int t = 0; t < TT; t++) acc[r][t] = _mm512_setzero_ps();
        for (int64_t g = 0; g < ng; g++) {
            q4_group wg[TILE_ROWS];
            UNROLL for (int r = 0; r < TR; r++) wg[r] = load_group(wr + (size_t)r * w_row_bytes + g * GROUP_BYTES, ni, si);
            UNROLL for (int t = 0; t < TT; t++) {
                const q4_prep *xg = &pp[t * ng + g];
                UNROLL for (int r = 0; r < TR; r++) acc[r][t] = group_fma(&wg[r], xg, acc[r][t]);
            }
        }
        UNROLL for (int t = 0; t < TT; t++)
            UNROLL for (int r = 0; r < TR; r++) y[t][r0 + r] = _mm512_reduce_add_ps(acc[r][t]);
    }
}

static void prep_tokens(int64_t ng, const void *const *xv, int n_tok, q4_prep *pp) {
    for (int t = 0; t < n_tok; t++)
        for (int64_t g = 0; g < ng; g++) pp[t * ng + g] = prep_group((const qw_block_q8_0 *)xv[t] + g * GROUP_BLOCKS, 4 * (int)sizeof(qw_block_q8_0));
}

/* Prefill: 4 rows × 4 tokens per register tile, the last 2 rows of an
 * n_rows % 4 == 2 block as 2 × 4 (n % 128 == 0, n_rows even). */
void qw_avx512_gemm_q4_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                         float *const *y) {
    const int64_t ng = n / (QW_QK8_0 * GROUP_BLOCKS);
    q4_prep pp[QW_GEMM_TOKS * QW_GEMM_K_MAX / (QW_QK8_0 * GROUP_BLOCKS)];
    prep_tokens(ng, x, QW_GEMM_TOKS, pp);
    const int64_t main_rows = n_rows / TILE_ROWS * TILE_ROWS;
    tile_rows(ng, w, w_row_bytes, main_rows, pp, y, 2 * TILE_ROWS, TILE_ROWS, QW_GEMM_TOKS);
    if (main_rows < n_rows) {
        float *yt[QW_GEMM_TOKS];
        for (int t = 0; t < QW_GEMM_TOKS; t++) yt[t] = y[t] + main_rows;
        tile_rows(ng, (const uint8_t *)w + (size_t)main_rows * w_row_bytes, w_row_bytes, n_rows - main_rows, pp, yt,
                  2 * QW_GEMM_ROWS, QW_GEMM_ROWS, QW_GEMM_TOKS);
    }
}

/* Decode: R rows r, r + gap, ... at once (quant_impl.h's decode streams), each
 * row its own accumulator and the dot's steps, so the dot's bits whatever R is. */
static inline __attribute__((always_inline)) void decode_rows(int64_t ng, const uint8_t *w, size_t w_row_bytes,
                                                              int64_t r, int64_t gap, const q4_prep *pp, float *y,
                                                              const int R) {
    const __m512i ni = nib_index(), si = scale_index();
    __m512 acc[8];
    UNROLL for (int i = 0; i < R; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {
            const q4_group wg = load_group(w + (size_t)(r + i * gap) * w_row_bytes + g * GROUP_BYTES, ni, si);
            acc[i] = group_fma(&wg, &pp[g], acc[i]);
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) y[r + i * gap] = _mm512_reduce_add_ps(acc[i]);
}

/* Decode (one token): the token prepared once, the rows as decode_rows far-apart
 * streams, the rows past the last whole section one at a time. */
void qw_avx512_gemv_q4_0(int64_t n, const void *wv, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                         float *const *y) {
    const int64_t ng = n / (QW_QK8_0 * GROUP_BLOCKS);
    q4_prep pp[QW_GEMM_K_MAX / (QW_QK8_0 * GROUP_BLOCKS)];
    prep_tokens(ng, x, 1, pp);
    const uint8_t *w = wv;
    const int R = (int)qw_tune_get(QW_TUNE_DECODE_ROWS);
    const int64_t gap = qw_decode_stream_gap(n_rows, R);
    for (int64_t r = 0; r < gap; r++) {
        if (R == 8) decode_rows(ng, w, w_row_bytes, r, gap, pp, y[0], 8);
        else if (R == 4) decode_rows(ng, w, w_row_bytes, r, gap, pp, y[0], 4);
        else decode_rows(ng, w, w_row_bytes, r, gap, pp, y[0], 2);
    }
    for (int64_t r = gap * R; r < n_rows; r++) decode_rows(ng, w, w_row_bytes, r, 1, pp, y[0], 1);
}
