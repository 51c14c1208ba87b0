/* amx_q6k_avx512.c — the "avx512-amx" level's Q6_K: a dot and decode row loop
 * in the K-quant reference order (kquant_impl.h's contract: exactly
 * kquant_ref.c's bits; the loop is refrows_avx512.h's, with Q6_K's terms), and
 * AMX-INT8 prefill tiles with the same bits.
 *
 * Why the reference order: as for Q4_K (amx_kquant_avx512.c), the AVX-512
 * Q6_K dot keeps llama.cpp's eight float lanes a token, and a tile multiply
 * gives whole integer sums.  Q6_K is symmetric, so the reference's step per
 * super-block is  acc = acc + y.d * (d * (float)sumi)  with one exact
 * integer, sumi = sum_g sc_g * sum_{i in g} (q_i - 32) x_i over the sixteen
 * 16-element groups g, each with its signed 8-bit scale sc_g.
 *
 * The tile: TDPBSSD multiplies signed bytes of A (16 weight rows × 64
 * elements) with the signed bytes of B (64 elements × up to 16 tokens) into
 * exact int32.  A level (q - 32, in -32..31) times a scale does not fit a
 * byte, so each scale is written in three balanced base-8 digits,
 *     sc = d0 + 8 * d1 + 64 * d2,   d0, d1 in -3..4, d2 in -2..2,
 * (d = ((v + 3) & 7) - 3 then v = (v - d) / 8: every int8 has one such form)
 * and A is made three times, (q - 32) * d_k in -128..124, into three
 * accumulators: sumi = C0 + 8 * C1 + 64 * C2, exactly.  Four 64-element
 * steps make a super-block; the accumulators start from zero at each
 * super-block, whose float step runs with one lane a token, row after row.
 *
 * A is made once per (16-row strip, super-block) and serves every token of
 * the call, up to QW_GEMM_N_TOKS of them (GROUPS tiles of 16), so the matmul
 * gives this level all of a task's tokens at once (qw_gemm_n_get, matmul.c).
 */
#include <stdlib.h>

#include "kernels/amx_tiles_avx512.h"
#include "kernels/refrows_avx512.h"
#include "kernels/kquant_blocks_x86.h"
#include "kernels/quant_impl.h"

enum { NDIG = 3 }; /* base-8 digits of a scale */

/* ---- the reference-order dot ------------------------------------------- */

/* Term k of a reference-order row loop (refrows_avx512.h): block i of a
 * Q6_K row against token block i — sum_g sc_g * (q . y)_g with the levels
 * 0..63 as they are, folded to eight lanes, less 32 * sum_g sc_g * (the
 * token's group sums) lane by lane: the lanes' sum is sumi (exact). */
static inline __attribute__((always_inline)) void q6k_term(kq_terms8 *g, int k, const void *row, int64_t i,
                                                           const void *token) {
    const qw_block_q6_K *b = (const qw_block_q6_K *)row + i;
    const qw_block_q8_K *y = (const qw_block_q8_K *)token + i;
    __m256i sc16;
    const __m512i si = q6k_sumi_zmm(b, y, &sc16);
    const __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums));
    g->lanes[k] = _mm256_sub_epi32(_mm256_add_epi32(_mm512_castsi512_si256(si), _mm512_extracti64x4_epi64(si, 1)),
                                   _mm256_slli_epi32(off, 5));
    g->summ[k] = 0;
    uint16_t d;
    memcpy(&d, &b->d, sizeof d);
    g->dd[k] = d; /* dmin 0 */
    g->d8[k] = q8k_d(y);
}

/* Decode: the row loop, with its prefetch walk. */
static void gemv_q6_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    if (n < QW_QK_K || n_rows <= 0) return;
    kq_ref_rows(q6k_term, sizeof(qw_block_q6_K), n / QW_QK_K, w, rb, n_rows, x[0], y[0],
                decode_rows_start(w, rb, n_rows));
}

/* The dot: the loop on one row, nothing prefetched. */
static void dot_q6_K(int64_t n, float *s, const void *w, const void *x) {
    kq_ref_rows(q6k_term, sizeof(qw_block_q6_K), n / QW_QK_K, w, 0, 1, x, s, (decode_walk){1, 0});
}

/* ---- the tile body ------------------------------------------------------ */

/* One strip's super-block s as A: a[j][k] = (levels - 32) × digit k of their
 * group's scale, 16 rows of 64 bytes each; and its rows' d. */
typedef struct {
    alignas(64) uint8_t a[NSTEP][NDIG][TB];
    float d[M];
} strip_sb;

/* Bytes of x times the int16 of their word in m, the products fitting a
 * byte: the low 8 bits of a 16-bit product depend only on the low 8 bits of
 * its operands, so one multiply makes the even bytes, another (the odd
 * bytes moved up, the even ones cleared) the odd ones. */
INLINE __m512i mul_bytes(__m512i x, __m512i m) {
    const __m512i even = _mm512_mullo_epi16(x, m);
    const __m512i odd = _mm512_mullo_epi16(_mm512_and_si512(x, _mm512_set1_epi16((short)0xFF00)), m);
    return _mm512_mask_blend_epi8((__mmask64)0xAAAAAAAAAAAAAAAAull, even, odd);
}

INLINE void prep_strip_sb(const uint8_t *w, size_t rb, int64_t s, strip_sb *ss) {
    for (int r = 0; r < M; r++) {
        const qw_block_q6_K *b = (const qw_block_q6_K *)(w + (size_t)r * rb) + s;
        __m512i q[4], dz[NDIG][4];
        q6k_levels_zmm(b, q);
        /* the scales' balanced base-8 digits, spread per register as the scales are */
        __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        for (int k = 0; k < NDIG; k++) {
            const __m256i three = _mm256_set1_epi16(3);
            const __m256i dig = _mm256_sub_epi16(_mm256_and_si256(_mm256_add_epi16(v, three), _mm256_set1_epi16(7)), three);
            spread16_zmm(dig, dz[k]);
            v = _mm256_srai_epi16(_mm256_sub_epi16(v, dig), 3);
        }
        for (int j = 0; j < NSTEP; j++) {
            const __m512i x = _mm512_sub_epi8(q[j], _mm512_set1_epi8(32));
            for (int k = 0; k < NDIG; k++) _mm512_store_si512((void *)(ss->a[j][k] + r * 64), mul_bytes(x, dz[k][j]));
        }
        ss->d[r] = _cvtsh_ss(b->d);
    }
}

/* One strip (16 rows from r0) against one group of nt (1..16) tokens, the
 * strip's super-blocks laid out in ss[0..nsb); outputs y[t][r0 + r]. */
AMX INLINE void q6k_strip_group(const strip_sb *ss, int64_t nsb, const amx_tokens *tk, int nt, tile_model *e,
                                float *const *y, int64_t r0) {
    const __mmask16 mk = (__mmask16)((1u << nt) - 1);
    alignas(64) int32_t c[NDIG][M * M];
    __m512 acc[M];
    for (int r = 0; r < M; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        T_ZERO(e, 0);
        T_ZERO(e, 1);
        T_ZERO(e, 2);
        for (int j = 0; j < NSTEP; j++) {
            T_LOAD(e, 6, tk->b[s * NSTEP + j], 64);
            T_LOAD(e, 3, ss[s].a[j][0], 64);
            T_LOAD(e, 4, ss[s].a[j][1], 64);
            T_LOAD(e, 5, ss[s].a[j][2], 64);
            T_DPBSSD(e, 0, 3, 6);
            T_DPBSSD(e, 1, 4, 6);
            T_DPBSSD(e, 2, 5, 6);
        }
        T_STORE(e, 0, c[0], M * 4);
        T_STORE(e, 1, c[1], M * 4);
        T_STORE(e, 2, c[2], M * 4);
        __asm__ volatile("" : : "r"(c) : "memory");
        const __m512 yd = _mm512_load_ps(tk->yd[s]);
        for (int r = 0; r < M; r++) {
            const __m512i c0 = _mm512_maskz_loadu_epi32(mk, c[0] + r * M);
            const __m512i c1 = _mm512_maskz_loadu_epi32(mk, c[1] + r * M);
            const __m512i c2 = _mm512_maskz_loadu_epi32(mk, c[2] + r * M);
            const __m512i sumi = _mm512_add_epi32(_mm512_add_epi32(c0, _mm512_slli_epi32(c1, 3)), _mm512_slli_epi32(c2, 6));
            const __m512 t = _mm512_mul_ps(_mm512_set1_ps(ss[s].d[r]), _mm512_cvtepi32_ps(sumi));
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(yd, t)); /* the reference's step */
        }
    }
    amx_store_strip(acc, y, r0, nt);
}

/* Rows [0, n_rows) × n_tok tokens, up to GROUPS groups of 16 a round: each
 * strip's layout is made once a round and serves all its groups.  e: the
 * software model, or NULL for AMX; tk: GROUPS token layouts; ss: MAX_SB
 * super-block layouts. */
AMX INLINE void q6k_tiles(int64_t n, const void *wv, size_t rb, int64_t n_rows, const void *const *xv, float *const *y,
                          int64_t n_tok, tile_model *e, amx_tokens *tk, strip_sb *ss) {
    const int64_t nsb = n / QW_QK_K;
    const uint8_t *w = wv;
    const int64_t main_rows = n_rows / M * M;
    for (int64_t t0 = 0; t0 < n_tok; t0 += GROUPS * M) {
        const int nt = (int)(n_tok - t0 < GROUPS * M ? n_tok - t0 : GROUPS * M), ng = (nt + M - 1) / M;
        for (int g = 0; g < ng; g++) amx_tokens_prep(nsb, xv + t0 + g * M, amx_group_toks(nt, g), &tk[g]);
        /* tmm0..2: C0..C2; tmm3..5: A for digits 0..2; tmm6: B */
        amx_configure(e, nt < M ? nt : M, NDIG, NDIG);
        for (int64_t r0 = 0; r0 < main_rows; r0 += M) {
            for (int64_t s = 0; s < nsb; s++) prep_strip_sb(w + (size_t)r0 * rb, rb, s, &ss[s]);
            /* TILELOADD's asm names its address, not the memory behind it: keep
             * the stores into ss and tk before the loads */
            __asm__ volatile("" : : "r"(ss), "r"(tk) : "memory");
            for (int g = 0; g < ng; g++)
                q6k_strip_group(ss, nsb, &tk[g], amx_group_toks(nt, g), e, y + t0 + g * M, r0);
        }
        if (!e) _tile_release();
        /* the rows past the last strip: the row loop, each token prepared once for them all (the dot's bits) */
        if (main_rows < n_rows)
            for (int t = 0; t < nt; t++) {
                float *yr = y[t0 + t] + main_rows;
                gemv_q6_K(n, w + (size_t)main_rows * rb, rb, n_rows - main_rows, xv + t0 + t, &yr);
            }
    }
}

AMX static void amx_q6_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y,
                         int64_t n_tok) {
    /* on the stack, ~0.9 MiB at k = 8192 (the pages of a shorter row untouched) */
    amx_tokens tk[GROUPS];
    strip_sb ss[MAX_SB];
    q6k_tiles(n, w, rb, n_rows, x, y, n_tok, NULL, tk, ss);
}

static void gemm_q6_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    amx_q6_K(n, w, rb, n_rows, x, y, QW_GEMM_TOKS);
}
static void gemm_wide_q6_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x,
                           float *const *y) {
    amx_q6_K(n, w, rb, n_rows, x, y, QW_GEMM_WIDE_TOKS);
}

static void gemm_n_q6_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y,
                        int64_t n_tok) {
    amx_q6_K(n, w, rb, n_rows, x, y, n_tok);
}

/* The same tiles through the software model: any AVX-512 CPU (tests). */
AMX static bool emulated_q6_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x,
                              float *const *y, int nt) {
    if (!amx_emu_shape_ok(n, QW_QK_K, n_rows, nt)) return false;
    amx_emu_scratch s;
    const bool ok = amx_emu_alloc(&s, sizeof(amx_tokens) * GROUPS, sizeof(strip_sb) * MAX_SB);
    if (ok) q6k_tiles(n, w, rb, n_rows, x, y, nt, s.e, s.tok, s.strip);
    amx_emu_free(&s);
    return ok;
}

const qw_amx_kq_kernels qw_amx_q6_K = {
    .dot = dot_q6_K,
    .gemm = gemm_q6_K,
    .gemm_wide = gemm_wide_q6_K,
    .gemv = gemv_q6_K,
    .gemm_n = gemm_n_q6_K,
    .emulated = emulated_q6_K,
};
