/* q8_0_avx512.c — register-blocked Q8_0×Q8_0 tiles (AVX-512 VNNI) for prefill
 * matmuls (4 tokens × a block of rows) and decode (1 token, row by row).
 * (Q4_0's tiles are in q4_0_avx512vbmi.c.)
 *
 * Contract (qw_gemm_fn in quant.h): y[t][r] gets exactly the float that the
 * AVX-512 qw_vec_dot of the same type returns for (row r, token t), bit for
 * bit, for n % 128 == 0.  That lets prefill (tiles) and decode (single dots)
 * agree exactly and makes the test an equality.
 *
 * The dot is llama.cpp's order — per (row, token) ONE 8-lane f32
 * accumulator, acc = fma(d_w*d_x, float(int32 lane sums), acc) block by
 * block, then hsum8 — so in prefill one zmm holds two (row, token) pairs of
 * the SAME block, tokens t, t+1 of a row, one per 256-bit half, and each half
 * is reduced with hsum8 at the end; decode runs one ymm chain per row.
 *  - Integer lanes: x is made unsigned once per token (x ^ 0x80 = x + 128) and
 *    the correction 128*sum4(w) once per row and block, so a pair of pairs
 *    costs one VPDPBUSD started from -128*sum4(w).  Every lane is the same
 *    exact int32 as the dot's.
 *  - Scales: d_w * d_x is the same float product as the dot's.
 *  - The per-token parts are prepared once per call into a stack buffer
 *    (k <= QW_GEMM_K_MAX) and reused by every row of the block.
 * Weights are re-read from L1/L2 once per 4 (the wide tile: 8) tokens instead
 * of once per token.
 *
 * Decode turns the trick around: the one token's correction -128*sum4(x) is
 * prepared once and the weights are made unsigned (one XOR), and a zmm holds
 * two ROWS of the same block, one per half, each its own 8-lane chain: half
 * the instructions a (row, block) of one ymm chain per row, same bits.  The
 * scales come 16 blocks at a time (scales16: word permutes, no gather), so a block costs nine
 * instructions for two rows, not fourteen.  The rows read at once are far
 * apart (quant_impl.h's decode streams), not side by side.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/quant_impl.h"
#include "kernels/simd_x86.h"

/* ---- Q8_0: two (row, token) pairs per zmm, llama.cpp's dot order ---- */

static inline __m512i q8_two(const qw_block_q8_0 *a, const qw_block_q8_0 *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a->qs)),
                              _mm256_loadu_si256((const __m256i *)b->qs), 1);
}

static inline __m512 two_scales(uint16_t a, uint16_t b) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(_cvtsh_ss(a))), _mm256_set1_ps(_cvtsh_ss(b)), 1);
}

/* The row and token loops must be unrolled for the accumulators to live in
 * registers; -O2 does not do it by itself. */
#define UNROLL _Pragma("GCC unroll 4")

typedef struct {
    __m512i u; /* x ^ 0x80 of the two halves' tokens */
    __m512 d;  /* their scales, 8 lanes each */
} prep8;

/* Prefill: 2 rows × 2·NP tokens (NP token pairs: 2, or 4 for the wide
 * tile); zmm halves are tokens (0,1), (2,3), ...  The wide tile shares each
 * weight block's load, -128*sum4(w) correction and scale among eight tokens
 * instead of four; every (row, token) chain is the same either way. */
static inline __attribute__((always_inline)) void q8_gemm_tiles(int64_t n, const void *wv, size_t w_row_bytes,
                                                                int64_t n_rows, const void *const *xv,
                                                                float *const *y, prep8 *pp, const int NP) {
    const int64_t nb = n / QW_QK8_0;
    const __m512i k80 = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    for (int tp = 0; tp < NP; tp++) {
        const qw_block_q8_0 *xa = xv[2 * tp], *xb = xv[2 * tp + 1];
        for (int64_t k = 0; k < nb; k++) {
            uint16_t da, db;
            memcpy(&da, &xa[k].d, 2);
            memcpy(&db, &xb[k].d, 2);
            pp[tp * nb + k].u = _mm512_xor_si512(q8_two(xa + k, xb + k), k80);
            pp[tp * nb + k].d = two_scales(da, db);
        }
    }
    const size_t group_bytes = 2 * w_row_bytes;
    qw_prefetch_bytes(wv, (size_t)(n_rows < 4 ? n_rows : 4) * w_row_bytes);
    for (int64_t r0 = 0; r0 < n_rows; r0 += 2) {
        if (r0 + 4 < n_rows) qw_prefetch_bytes((const char *)wv + (size_t)(r0 + 4) * w_row_bytes, group_bytes);
        __m512 acc[2][4];
        UNROLL for (int r = 0; r < 2; r++) UNROLL for (int tp = 0; tp < NP; tp++) acc[r][tp] = _mm512_setzero_ps();
        for (int64_t k = 0; k < nb; k++) {
            UNROLL for (int r = 0; r < 2; r++) {
                const qw_block_q8_0 *wb = (const qw_block_q8_0 *)((const char *)wv + (size_t)(r0 + r) * w_row_bytes) + k;
                const __m512i w = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)wb->qs));
                const __m512i nw = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k80, w)); /* -128*sum4(w) */
                const __m512 dw = _mm512_set1_ps(_cvtsh_ss(load_u16(&wb->d)));
                UNROLL for (int tp = 0; tp < NP; tp++) {
                    const prep8 *q = &pp[tp * nb + k];
                    const __m512i p = _mm512_dpbusd_epi32(nw, q->u, w); /* x+128 u8, w s8 */
                    acc[r][tp] = _mm512_fmadd_ps(_mm512_mul_ps(dw, q->d), _mm512_cvtepi32_ps(p), acc[r][tp]);
                }
            }
        }
        UNROLL for (int r = 0; r < 2; r++)
            UNROLL for (int tp = 0; tp < NP; tp++) {
                y[2 * tp][r0 + r] = hsum8(_mm512_castps512_ps256(acc[r][tp]));
                y[2 * tp + 1][r0 + r] = hsum8(_mm512_extractf32x8_ps(acc[r][tp], 1));
            }
    }
}

/* Decode's token, prepared once per call: a block's 32 bytes as they are
 * (s8), -128*sum4(x) per lane, and its scale in 8 lanes.  The rows' weights
 * are then made unsigned (w ^ 0x80 = w + 128), so one VPDPBUSD started from
 * -128*sum4(x) gives the dot's exact int32 lanes: the correction is paid once
 * per token and block, not once per row and block. */
typedef struct {
    __m256i x, nx;
    __m256 d;
} prep_tok;

/* dx[k]: block k's scale as a float, for the row loop's 16-block chunks. */
static void q8_prep_token(const qw_block_q8_0 *x, int64_t nb, prep_tok *pt, float *dx) {
    const __m256i k80 = _mm256_set1_epi8((char)0x80), zero = _mm256_setzero_si256();
    for (int64_t k = 0; k < nb; k++) {
        pt[k].x = _mm256_loadu_si256((const __m256i *)x[k].qs);
        pt[k].nx = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, k80, pt[k].x));
        dx[k] = _cvtsh_ss(load_u16(&x[k].d));
        pt[k].d = _mm256_set1_ps(dx[k]);
    }
}

/* One row alone (a call's last odd row): the dot's step, block by block. */
static void q8_row1(int64_t nb, const qw_block_q8_0 *w, const prep_tok *pt, float *y) {
    const __m256i k80 = _mm256_set1_epi8((char)0x80);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t k = 0; k < nb; k++) {
        const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)w[k].qs), k80);
        const __m256i p = _mm256_dpbusd_epi32(pt[k].nx, u, pt[k].x);
        const __m256 d = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(load_u16(&w[k].d))), pt[k].d);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    *y = hsum8(acc);
}

/* R rows r, r + gap, r + 2 gap, ... (decode's streams, below), two rows a zmm
 * (one per 256-bit half), 16 blocks a chunk: each half is its row's own
 * 8-lane chain of the dot, so every row gets the dot's bits.  A chunk's 16
 * scales of a row come at once (scales16) and are multiplied by the token's
 * 16 at once (the dot's d_w * d_x products); a block's pair of them is then
 * one VPERMT2PS (fewer instructions a block than fetching and converting
 * each block's two scales). */
static inline __attribute__((always_inline)) void q8_rows(int64_t nb, const char *wv, size_t w_row_bytes, int64_t r,
                                                          int64_t gap, const prep_tok *pt, const float *dx, float *y,
                                                          const int R) {
    const __m512i k80 = _mm512_set1_epi8((char)0x80);
    const qw_block_q8_0 *w[8];
    __m512 acc[4];
    for (int i = 0; i < R; i++) w[i] = (const qw_block_q8_0 *)(wv + (size_t)(r + i * gap) * w_row_bytes);
    for (int i = 0; i < R / 2; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t k0 = 0; k0 < nb; k0 += 16) {
        const int m = nb - k0 < 16 ? (int)(nb - k0) : 16;
        const __mmask16 mk = (__mmask16)((1u << m) - 1);
        const __m512 dx16 = _mm512_maskz_loadu_ps(mk, dx + k0);
        __m512 ds[8]; /* row i's d_w * d_x of the chunk's blocks, one a lane */
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {
            ds[i] = _mm512_mul_ps(scales16(&w[i][k0], (int)sizeof(qw_block_q8_0), mk), dx16);
        }
        /* lanes 0..7 take lane j of the pair's first row, 8..15 of its second */
        __m512i pick = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16);
        for (int j = 0; j < m; j++) {
            const int64_t k = k0 + j;
            const __m512i x = _mm512_broadcast_i64x4(pt[k].x), nx = _mm512_broadcast_i64x4(pt[k].nx);
            _Pragma("GCC unroll 4") for (int i = 0; i < R / 2; i++) {
                const __m512i u = _mm512_xor_si512(q8_two(&w[2 * i][k], &w[2 * i + 1][k]), k80);
                const __m512i p = _mm512_dpbusd_epi32(nx, u, x);
                const __m512 d = _mm512_permutex2var_ps(ds[2 * i], pick, ds[2 * i + 1]);
                acc[i] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[i]);
            }
            pick = _mm512_add_epi32(pick, _mm512_set1_epi32(1));
        }
    }
    for (int i = 0; i < R / 2; i++) {
        y[r + 2 * i * gap] = hsum8(_mm512_castps512_ps256(acc[i]));
        y[r + (2 * i + 1) * gap] = hsum8(_mm512_extractf32x8_ps(acc[i], 1));
    }
}

/* Decode: the token prepared once, then the rows as R = decode_rows streams
 * (quant_impl.h): step r reads row r of each of R sections of gap rows, the
 * rows past the last whole section two at a time.  Every row gets the dot's
 * bits whatever R is. */
static void q8_gemv_rows(int64_t n, const void *wv, size_t w_row_bytes, int64_t n_rows, const void *const *xv,
                         float *const *y, prep_tok *pt, float *dx) {
    const int64_t nb = n / QW_QK8_0;
    q8_prep_token(xv[0], nb, pt, dx);
    const int R = (int)qw_tune_get(QW_TUNE_DECODE_ROWS);
    const int64_t gap = qw_decode_stream_gap(n_rows, R);
    const char *w = wv;
    for (int64_t r = 0; r < gap; r++) {
        if (R == 8) q8_rows(nb, w, w_row_bytes, r, gap, pt, dx, y[0], 8);
        else if (R == 4) q8_rows(nb, w, w_row_bytes, r, gap, pt, dx, y[0], 4);
        else q8_rows(nb, w, w_row_bytes, r, gap, pt, dx, y[0], 2);
    }
    int64_t r = gap * R;
    for (; r + 2 <= n_rows; r += 2) q8_rows(nb, w, w_row_bytes, r, 1, pt, dx, y[0], 2);
    if (r < n_rows) q8_row1(nb, (const qw_block_q8_0 *)(w + (size_t)r * w_row_bytes), pt, y[0] + r);
}

/* Prefill: 2 rows × 4 tokens per register tile. */
void qw_avx512_gemm_q8_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                         float *const *y) {
    prep8 pp[2 * QW_GEMM_K_MAX / QW_QK8_0];
    q8_gemm_tiles(n, w, w_row_bytes, n_rows, x, y, pp, 2);
}

/* Prefill, the level's wide tile: 2 rows × 8 tokens (wide_toks_q8 in quant_avx512.c's table). */
void qw_avx512_gemm_wide_q8_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                              float *const *y) {
    prep8 pp[4 * QW_GEMM_K_MAX / QW_QK8_0];
    q8_gemm_tiles(n, w, w_row_bytes, n_rows, x, y, pp, 4);
}

/* Decode (one token): the token prepared once, the rows as decode_rows far-apart streams. */
void qw_avx512_gemv_q8_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                         float *const *y) {
    prep_tok pt[QW_GEMM_K_MAX / QW_QK8_0];
    float dx[QW_GEMM_K_MAX / QW_QK8_0];
    q8_gemv_rows(n, w, w_row_bytes, n_rows, x, y, pt, dx);
}
