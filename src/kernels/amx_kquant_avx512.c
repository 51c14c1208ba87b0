/* amx_kquant_avx512.c — the "avx512-amx" level's Q4_K: a dot and decode row
 * loop in the K-quant reference order (kquant_impl.h's contract: exactly
 * kquant_ref.c's bits; the loop is refrows_avx512.h's, with Q4_K's terms) and
 * AMX-INT8 prefill tiles that give the same bits; and the same tiles for Q5_K,
 * whose levels are Q4_K's plus a fifth bit (its AVX-512 dot already keeps the
 * reference's order).
 *
 * Why the reference order at this level: the AVX-512 level's Q4_K dot keeps
 * llama.cpp's eight float lanes a token, and a tile multiply gives whole
 * integer sums, not those lanes.  The reference's step per super-block,
 *     acc = acc + y.d * (d * (float)sumi - dmin * (float)summ),
 * needs only two exact integers, sumi = sum_j sc_j * sum_{i in j} q_i x_i
 * over the eight 32-element sub-blocks j, and summ = sum_j m_j * (the Q8_K
 * sum of x over sub-block j); AMX can make the first.
 *
 * The tile: TDPBUSD multiplies unsigned bytes of A (16 weight rows × 64
 * elements) with the signed bytes of B (64 elements × up to 16 tokens) into
 * exact int32.  A scale (6 bits) times a level (4 bits) does not fit a byte,
 * so each scale is split, sc = lo + 8 * hi with lo, hi in 0..7, and A is
 * made twice — q * lo and q * hi, both <= 105 (Q5_K: 217) — into two accumulators:
 * sumi = C_lo + 8 * C_hi, exactly.  Four 64-element steps make a
 * super-block; the C tiles start from zero at each super-block, whose float
 * step needs its own sums.  summ comes from the Q8_K group sums (VPDPWSSD),
 * and the float step runs with one lane a token, row after row, each lane
 * the reference's chain.
 *
 * A is made once per (16-row strip, super-block) and serves every token of
 * the call, up to QW_GEMM_N_TOKS of them (GROUPS tiles of 16), so a call
 * should carry as many tokens as it can: the matmul gives this level all of
 * a task's tokens at once (qw_gemm_n_get, matmul.c).
 *
 * Testing without AMX: the tile body is written once over the tile
 * operations of amx_tiles_avx512.h, which issue the AMX instructions or, for
 * emulated_k4, run a software model of them byte for byte, so a CPU
 * without AMX still checks the layout and the bits (tests/kernels/test_amx.c).
 */
#include <stdlib.h>

#include "kernels/amx_tiles_avx512.h"
#include "kernels/refrows_avx512.h"
#include "kernels/kquant_blocks_x86.h"
#include "kernels/quant_impl.h"

/* ---- the reference-order dot ------------------------------------------- */

/* Term k of a reference-order row loop (refrows_avx512.h): block i of a
 * Q4_K row against the prepared token — its int32 lanes by the AVX-512 row
 * loop's body (so that loop's token preparation serves here too), folded to
 * 8, and its summ. */
static inline __attribute__((always_inline)) void q4k_term(kq_terms8 *g, int k, const void *row, int64_t i,
                                                           const void *token) {
    const qw_block_q4_K *b = (const qw_block_q4_K *)row + i;
    const q4k_token *tok = token;
    const __m128i sm = q4k_scales_mins(b->scales);
    const __m512i sumi = q4k_sumi_halves(b, _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm)), tok->yv[i]);
    __m128i mm = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm)), tok->pairs[i]);
    mm = _mm_add_epi32(mm, _mm_shuffle_epi32(mm, _MM_SHUFFLE(1, 0, 3, 2)));
    g->summ[k] = _mm_cvtsi128_si32(_mm_add_epi32(mm, _mm_shuffle_epi32(mm, _MM_SHUFFLE(2, 3, 0, 1))));
    g->lanes[k] = _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
    memcpy(&g->dd[k], &b->d, sizeof g->dd[k]); /* d and dmin: two adjacent halves */
    g->d8[k] = tok->d8[i];
}

static inline __attribute__((always_inline)) void q4k_ref_rows(int64_t nb, const void *w, size_t rb, int64_t n_rows,
                                                               const qw_block_q8_K *x, float *y, decode_walk wk) {
    q4k_token tok;
    q4k_token_prep(x, nb, &tok);
    kq_ref_rows(q4k_term, sizeof(qw_block_q4_K), nb, w, rb, n_rows, &tok, y, wk);
}

/* Decode: the row loop, with its prefetch walk. */
static void gemv_q4_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    if (n < QW_QK_K || n_rows <= 0) return;
    q4k_ref_rows(n / QW_QK_K, w, rb, n_rows, x[0], y[0], decode_rows_start(w, rb, n_rows));
}

/* The dot: the loop on one row, nothing prefetched. */
static void dot_q4_K(int64_t n, float *s, const void *w, const void *x) {
    q4k_ref_rows(n / QW_QK_K, w, 0, 1, x, s, (decode_walk){1, 0});
}

/* ---- the tile body ------------------------------------------------------ */

/* What the tokens bring, laid out once per call: the B tiles and scales, and
 * the Q8_K sub-block sums the mins meet. */
typedef struct {
    amx_tokens tk;
    alignas(64) int32_t ps[MAX_SB][4][M]; /* sub-block sums 2p, 2p+1 as two int16 (0 past nt) */
} tokens_prep;

static void prep_tokens(int64_t nsb, const void *const *xv, int nt, tokens_prep *tp) {
    amx_tokens_prep(nsb, xv, nt, &tp->tk);
    memset(tp->ps, 0, sizeof(int32_t) * 4 * M * (size_t)nsb);
    for (int t = 0; t < nt; t++) {
        const qw_block_q8_K *y = xv[t];
        for (int64_t s = 0; s < nsb; s++) {
            int16_t p[8];
            _mm_storeu_si128((__m128i *)p, q8k_pair_sums(&y[s]));
            for (int q = 0; q < 4; q++) tp->ps[s][q][t] = (int32_t)(uint16_t)p[2 * q] | (int32_t)((uint32_t)(uint16_t)p[2 * q + 1] << 16);
        }
    }
}

/* One strip's super-block s as A: a[j][0] = levels × (sc & 7), a[j][1] =
 * levels × (sc >> 3), 16 rows of 64 bytes each; and its rows' d, dmin and
 * mins (as int16 pairs for VPDPWSSD). */
typedef struct {
    alignas(64) uint8_t a[NSTEP][2][TB];
    float d[M], dmin[M];
    int32_t mins[M][4];
} strip_sb;

INLINE void prep_strip_sb(const uint8_t *w, size_t rb, int64_t s, strip_sb *ss, bool five) {
    for (int r = 0; r < M; r++) {
        /* a Q5_K block starts as a Q4_K one does (d, dmin, the packed scales) */
        const qw_block_q4_K *b = (const void *)(w + (size_t)r * rb + (size_t)s * (five ? sizeof(qw_block_q5_K) : sizeof(qw_block_q4_K)));
        const qw_block_q5_K *b5 = (const void *)b;
        const __m512i qh2 = five ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b5->qh)) : _mm512_setzero_si512();
        uint32_t u32[4];
        uint8_t u[16];
        qw_kq_scales_mins_k4(b->scales, u32);
        memcpy(u, u32, sizeof u);
        const __m512i sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)u)));
        for (int j = 0; j < NSTEP; j++) {
            const __m512i v = five ? q5k_chunk_zmm(b5, qh2, j) : q4k_chunk_zmm(b, j);
            const __m512i sc = _mm512_shuffle_epi8(sc16, q4k_pick_zmm(j));
            /* each word holds two levels (<= 15, Q5_K's <= 31) and its scale
             * part is <= 7, so one 16-bit multiply makes both bytes' products
             * (<= 217), neither carrying into the other */
            _mm512_store_si512((void *)(ss->a[j][0] + r * 64), _mm512_mullo_epi16(v, _mm512_and_si512(sc, _mm512_set1_epi16(7))));
            _mm512_store_si512((void *)(ss->a[j][1] + r * 64), _mm512_mullo_epi16(v, _mm512_srli_epi16(sc, 3)));
        }
        for (int q = 0; q < 4; q++) ss->mins[r][q] = (int32_t)u[8 + 2 * q] | ((int32_t)u[9 + 2 * q] << 16);
        ss->d[r] = _cvtsh_ss(b->d);
        ss->dmin[r] = _cvtsh_ss(b->dmin);
    }
}

/* One strip (16 rows from r0) against one group of nt (1..16) tokens, the
 * strip's super-blocks laid out in ss[0..nsb); outputs y[t][r0 + r]. */
AMX INLINE void k4_strip_group(const strip_sb *ss, int64_t nsb, const tokens_prep *tp, int nt, tile_model *e,
                               float *const *y, int64_t r0) {
    const __mmask16 mk = (__mmask16)((1u << nt) - 1);
    alignas(64) int32_t c[2][M * M];
    __m512 acc[M];
    for (int r = 0; r < M; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        T_ZERO(e, 0);
        T_ZERO(e, 1);
        for (int j = 0; j < NSTEP; j++) {
            T_LOAD(e, 4, tp->tk.b[s * NSTEP + j], 64);
            T_LOAD(e, 2, ss[s].a[j][0], 64);
            T_LOAD(e, 3, ss[s].a[j][1], 64);
            T_DPBUSD(e, 0, 2, 4);
            T_DPBUSD(e, 1, 3, 4);
        }
        T_STORE(e, 0, c[0], M * 4);
        T_STORE(e, 1, c[1], M * 4);
        __asm__ volatile("" : : "r"(c) : "memory");
        const __m512 yd = _mm512_load_ps(tp->tk.yd[s]);
        __m512i ps[4]; /* the tokens' sub-block sums, the same for every row */
        for (int q = 0; q < 4; q++) ps[q] = _mm512_load_si512((const void *)tp->ps[s][q]);
        for (int r = 0; r < M; r++) {
            const __m512i lo = _mm512_maskz_loadu_epi32(mk, c[0] + r * M);
            const __m512i hi = _mm512_maskz_loadu_epi32(mk, c[1] + r * M);
            const __m512i sumi = _mm512_add_epi32(lo, _mm512_slli_epi32(hi, 3));
            __m512i summ = _mm512_setzero_si512();
            for (int q = 0; q < 4; q++) summ = _mm512_dpwssd_epi32(summ, ps[q], _mm512_set1_epi32(ss[s].mins[r][q]));
            /* the reference's step without its symmetric branch: that branch
             * drops "- dmin * 0", which changes at most the sign of a zero
             * term, and a zero term never changes acc's bits (acc starts at
             * +0, and +0 + -0 = +0) */
            const __m512 t1 = _mm512_mul_ps(_mm512_set1_ps(ss[s].d[r]), _mm512_cvtepi32_ps(sumi));
            const __m512 t2 = _mm512_mul_ps(_mm512_set1_ps(ss[s].dmin[r]), _mm512_cvtepi32_ps(summ));
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(yd, _mm512_sub_ps(t1, t2)));
        }
    }
    amx_store_strip(acc, y, r0, nt);
}

/* Rows [0, n_rows) × n_tok tokens, up to GROUPS groups of 16 a round: each
 * strip's layout is made once a round and serves all its groups.  e: the
 * software model, or NULL for AMX; tp: GROUPS token layouts; ss: MAX_SB
 * super-block layouts. */
AMX INLINE void k4_tiles(int64_t n, const void *wv, size_t rb, int64_t n_rows, const void *const *xv, float *const *y,
                         int64_t n_tok, tile_model *e, tokens_prep *tp, strip_sb *ss, bool five) {
    const int64_t nsb = n / QW_QK_K;
    const uint8_t *w = wv;
    const int64_t main_rows = n_rows / M * M;
    for (int64_t t0 = 0; t0 < n_tok; t0 += GROUPS * M) {
        const int nt = (int)(n_tok - t0 < GROUPS * M ? n_tok - t0 : GROUPS * M), ng = (nt + M - 1) / M;
        for (int g = 0; g < ng; g++) prep_tokens(nsb, xv + t0 + g * M, amx_group_toks(nt, g), &tp[g]);
        amx_configure(e, nt < M ? nt : M, 2, 2);
        for (int64_t r0 = 0; r0 < main_rows; r0 += M) {
            for (int64_t s = 0; s < nsb; s++) prep_strip_sb(w + (size_t)r0 * rb, rb, s, &ss[s], five);
            /* TILELOADD's asm names its address, not the memory behind it: keep
             * the stores into ss and tp before the loads */
            __asm__ volatile("" : : "r"(ss), "r"(tp) : "memory");
            for (int g = 0; g < ng; g++)
                k4_strip_group(ss, nsb, &tp[g], amx_group_toks(nt, g), e, y + t0 + g * M, r0);
        }
        if (!e) _tile_release();
        /* the rows past the last strip: the row loop, each token prepared once for them all (the dot's bits) */
        if (main_rows < n_rows)
            for (int t = 0; t < nt; t++) {
                float *yr = y[t0 + t] + main_rows;
                (five ? qw_kq_dots_avx512.gemv_q5_K : gemv_q4_K)(n, w + (size_t)main_rows * rb, rb, n_rows - main_rows,
                                                                 xv + t0 + t, &yr);
            }
    }
}

AMX static void amx_k4(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y,
                       int64_t n_tok, bool five) {
    /* on the stack, ~0.8 MiB at k = 8192 (the pages of a shorter row untouched) */
    tokens_prep tp[GROUPS];
    strip_sb ss[MAX_SB];
    k4_tiles(n, w, rb, n_rows, x, y, n_tok, NULL, tp, ss, five);
}

static void gemm_q4_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    amx_k4(n, w, rb, n_rows, x, y, QW_GEMM_TOKS, false);
}
static void gemm_wide_q4_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x,
                           float *const *y) {
    amx_k4(n, w, rb, n_rows, x, y, QW_GEMM_WIDE_TOKS, false);
}
static void gemm_q5_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    amx_k4(n, w, rb, n_rows, x, y, QW_GEMM_TOKS, true);
}
static void gemm_wide_q5_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x,
                           float *const *y) {
    amx_k4(n, w, rb, n_rows, x, y, QW_GEMM_WIDE_TOKS, true);
}
static void gemm_n_q4_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y,
                        int64_t n_tok) {
    amx_k4(n, w, rb, n_rows, x, y, n_tok, false);
}
static void gemm_n_q5_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y,
                        int64_t n_tok) {
    amx_k4(n, w, rb, n_rows, x, y, n_tok, true);
}

/* The same tiles through the software model: any AVX-512 CPU (tests).
 * false when out of memory or outside the tiles' limits (n_tok 1..
 * QW_GEMM_N_TOKS, n a multiple of 256 up to QW_GEMM_K_MAX). */
AMX static bool emulated_k4(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x,
                            float *const *y, int nt, bool five) {
    if (!amx_emu_shape_ok(n, QW_QK_K, n_rows, nt)) return false;
    amx_emu_scratch s;
    const bool ok = amx_emu_alloc(&s, sizeof(tokens_prep) * GROUPS, sizeof(strip_sb) * MAX_SB);
    if (ok) k4_tiles(n, w, rb, n_rows, x, y, nt, s.e, s.tok, s.strip, five);
    amx_emu_free(&s);
    return ok;
}
static bool emulated_q4_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y,
                          int nt) {
    return emulated_k4(n, w, rb, n_rows, x, y, nt, false);
}
static bool emulated_q5_K(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y,
                          int nt) {
    return emulated_k4(n, w, rb, n_rows, x, y, nt, true);
}

const qw_amx_kq_kernels qw_amx_q4_K = {
    .dot = dot_q4_K,
    .gemm = gemm_q4_K,
    .gemm_wide = gemm_wide_q4_K,
    .gemv = gemv_q4_K,
    .gemm_n = gemm_n_q4_K,
    .emulated = emulated_q4_K,
};

/* Q5_K's dot and row loop at the AVX-512 level already take the reference's
 * order (kquant_avx512.c): the tiles give their bits, and they stay. */
const qw_amx_kq_kernels qw_amx_q5_K = {
    .gemm = gemm_q5_K,
    .gemm_wide = gemm_wide_q5_K,
    .gemm_n = gemm_n_q5_K,
    .emulated = emulated_q5_K,
};
