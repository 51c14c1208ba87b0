/* amx_tiles_avx512.h — private to the AMX tiles (amx_avx512.c for Q8_0 and
 * Q4_0, amx_kquant_avx512.c for Q4_K, amx_q6k_avx512.c for Q6_K): what they
 * need around their own weight layout.
 *
 *   - The five tile operations (load, store, zero, and the two int8 dot
 *     products TDPBUSD / TDPBSSD) as macros that issue the AMX instruction,
 *     or, given a software model of the tile registers, run that model byte
 *     for byte: a tile body is written once and a CPU without AMX still
 *     checks its layout and its bits (tests/kernels/test_amx.c).
 *   - The tile configuration: n_c accumulators (16 rows × nt int32), n_a
 *     weight tiles (16 rows × 64 bytes, or a_bytes), then the token tiles.
 *   - The software model's calls (the tests' qw_amx_emulated_* and the
 *     K-quants' .emulated): the shapes they take, and their scratch.
 *   - The tokens' side, laid out once per call: every 64-element step of
 *     every Q8_K super-block as the B tile (dword kk of the 16 tokens in row
 *     kk), and the tokens' Q8_K scales, one lane a token.
 */
#ifndef QWISP_KERNELS_AMX_TILES_AVX512_H
#define QWISP_KERNELS_AMX_TILES_AVX512_H

#include <immintrin.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kquant_blocks_x86.h"

#define AMX __attribute__((target("amx-tile,amx-int8")))
#define INLINE inline __attribute__((always_inline)) static

enum {
    M = 16,                           /* rows of a strip (one tile's rows), and tokens of a call at most */
    STEP = 64,                        /* elements of one tile multiply */
    NSTEP = QW_QK_K / STEP,           /* steps a super-block */
    MAX_SB = QW_GEMM_K_MAX / QW_QK_K, /* super-blocks a row at most */
    TB = M * 64,                      /* bytes of one tile */
    GROUPS = QW_GEMM_N_TOKS / M       /* token groups one weight layout serves */
};

/* ---- the tile operations: AMX, or the software model -------------------- */

/* The model: eight tiles of up to 16 rows × 64 bytes, shaped as configured. */
typedef struct {
    uint8_t rows[8];
    uint16_t colsb[8];
    alignas(64) uint8_t t[8][TB];
} tile_model;

static inline void model_load(tile_model *e, int t, const void *p, size_t stride) {
    memset(e->t[t], 0, TB);
    for (int r = 0; r < e->rows[t]; r++) memcpy(e->t[t] + r * 64, (const char *)p + (size_t)r * stride, e->colsb[t]);
}
static inline void model_store(const tile_model *e, int t, void *p, size_t stride) {
    for (int r = 0; r < e->rows[t]; r++) memcpy((char *)p + (size_t)r * stride, e->t[t] + r * 64, e->colsb[t]);
}
/* C[m][n] += sum over k of A[m][4k..4k+3] · B[k][4n..4n+3]; B's bytes signed,
 * A's unsigned (TDPBUSD) or signed (TDPBSSD) */
static inline void model_dp(tile_model *e, int c, int a, int b, bool a_signed) {
    for (int m = 0; m < e->rows[c]; m++)
        for (int n = 0; n < e->colsb[c] / 4; n++) {
            int32_t acc;
            memcpy(&acc, e->t[c] + m * 64 + 4 * n, 4);
            for (int k = 0; k < e->colsb[a] / 4; k++)
                for (int i = 0; i < 4; i++) {
                    const uint8_t av = e->t[a][m * 64 + 4 * k + i];
                    acc += (a_signed ? (int32_t)(int8_t)av : (int32_t)av) * (int32_t)(int8_t)e->t[b][k * 64 + 4 * n + i];
                }
            memcpy(e->t[c] + m * 64 + 4 * n, &acc, 4);
        }
}

#define T_LOAD(e, T, p, stride)                                                                                   \
    do {                                                                                                          \
        if (e) model_load(e, T, p, stride);                                                                       \
        else _tile_loadd(T, p, stride);                                                                           \
    } while (0)
#define T_STORE(e, T, p, stride)                                                                                  \
    do {                                                                                                          \
        if (e) model_store(e, T, p, stride);                                                                      \
        else _tile_stored(T, p, stride);                                                                          \
    } while (0)
#define T_ZERO(e, T)                                                                                              \
    do {                                                                                                          \
        if (e) memset((e)->t[T], 0, TB);                                                                          \
        else _tile_zero(T);                                                                                       \
    } while (0)
#define T_DPBUSD(e, C, A, B)                                                                                      \
    do {                                                                                                          \
        if (e) model_dp(e, C, A, B, false);                                                                       \
        else _tile_dpbusd(C, A, B);                                                                               \
    } while (0)
#define T_DPBSSD(e, C, A, B)                                                                                      \
    do {                                                                                                          \
        if (e) model_dp(e, C, A, B, true);                                                                        \
        else _tile_dpbssd(C, A, B);                                                                               \
    } while (0)

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64))) tilecfg;

/* tmm0 .. n_c-1: accumulators (16 rows × nt int32); the next n_a: weights
 * (16 rows × a_bytes); then n_b token tiles (b_rows dwords of 4 elements ×
 * nt tokens). */
AMX static inline void amx_configure_tiles(tile_model *e, int nt, int n_c, int n_a, int a_bytes, int n_b, int b_rows) {
    tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < n_c + n_a + n_b; t++) {
        const bool a = t >= n_c && t < n_c + n_a, b = t >= n_c + n_a;
        c.rows[t] = (uint8_t)(b ? b_rows : M);
        c.colsb[t] = (uint16_t)(a ? a_bytes : nt * 4);
    }
    if (e) {
        for (int t = 0; t < 8; t++) e->rows[t] = c.rows[t], e->colsb[t] = c.colsb[t];
        return;
    }
    /* the intrinsic tells the compiler it reads 8 bytes only: keep every store */
    __asm__ volatile("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
}

/* The K-quants' shape: n_a weight tiles of 64 bytes a row, one token tile of 16 dwords. */
AMX static inline void amx_configure(tile_model *e, int nt, int n_c, int n_a) {
    amx_configure_tiles(e, nt, n_c, n_a, 64, 1, M);
}

/* ---- the software model's runs (tests) ---------------------------------- */

/* Whether an emulated call's shape is one the tiles take: 1..QW_GEMM_N_TOKS
 * tokens, n a multiple of `unit` (a block or a super-block) up to
 * QW_GEMM_K_MAX. */
static inline bool amx_emu_shape_ok(int64_t n, int64_t unit, int64_t n_rows, int nt) {
    return nt >= 1 && nt <= QW_GEMM_N_TOKS && n > 0 && n % unit == 0 && n <= QW_GEMM_K_MAX && n_rows >= 0;
}

/* The scratch of one emulated call: the tile model and the kernel's token and
 * strip areas (sizes its own), 64-byte aligned.  amx_emu_alloc is false when
 * any is missing; amx_emu_free frees whatever was allocated. */
typedef struct {
    tile_model *e;
    void *tok, *strip;
} amx_emu_scratch;

static inline bool amx_emu_alloc(amx_emu_scratch *s, size_t tok_bytes, size_t strip_bytes) {
    s->e = aligned_alloc(64, sizeof *s->e);
    s->tok = aligned_alloc(64, tok_bytes);
    s->strip = aligned_alloc(64, strip_bytes);
    return s->e && s->tok && s->strip;
}
static inline void amx_emu_free(amx_emu_scratch *s) {
    free(s->e);
    free(s->tok);
    free(s->strip);
}

/* Tokens of group g (16 a group) in a round of nt. */
static inline int amx_group_toks(int nt, int g) { return nt - g * M < M ? nt - g * M : M; }

/* ---- the tokens' side --------------------------------------------------- */

typedef struct {
    /* B for super-block s, step j: dword kk of token t at [(s*NSTEP + j)][kk][4t] */
    alignas(64) uint8_t b[MAX_SB * NSTEP][TB];
    alignas(64) float yd[MAX_SB][M]; /* the tokens' Q8_K scales (0 past nt) */
} amx_tokens;

/* r[t] = 16 dwords of token t  ->  r[kk] = dword kk of the 16 tokens: a
 * 16 x 16 transpose of 32-bit elements in four rounds of unpacks and
 * 128-bit-lane shuffles. */
INLINE void transpose16(__m512i r[16]) {
    __m512i a[16], b[16];
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        a[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4)
        for (int h = 0; h < 2; h++) {
            b[i + 2 * h] = _mm512_unpacklo_epi64(a[i + h], a[i + 2 + h]);
            b[i + 2 * h + 1] = _mm512_unpackhi_epi64(a[i + h], a[i + 2 + h]);
        }
    /* b[4g + c]'s 128-bit lane l holds dword 4l + c of tokens 4g..4g+3; row
     * 4l + c wants lane l of b[c], b[4 + c], b[8 + c], b[12 + c]: pair the
     * groups' lanes (0, 2 | 1, 3), then the pairs */
    for (int i = 0; i < 16; i += 8)
        for (int c = 0; c < 4; c++) {
            a[i + c] = _mm512_shuffle_i32x4(b[i + c], b[i + 4 + c], _MM_SHUFFLE(2, 0, 2, 0));
            a[i + 4 + c] = _mm512_shuffle_i32x4(b[i + c], b[i + 4 + c], _MM_SHUFFLE(3, 1, 3, 1));
        }
    for (int c = 0; c < 4; c++)
        for (int h = 0; h < 2; h++) {
            r[4 * h + c] = _mm512_shuffle_i32x4(a[4 * h + c], a[8 + 4 * h + c], _MM_SHUFFLE(2, 0, 2, 0));
            r[4 * (h + 2) + c] = _mm512_shuffle_i32x4(a[4 * h + c], a[8 + 4 * h + c], _MM_SHUFFLE(3, 1, 3, 1));
        }
}

/* A strip's results, acc[r] lane t = row r0 + r of token t, into y[t][r0 ..
 * r0 + 15] for t < nt: the 16 × 16 block transposed in registers, then one
 * 64-byte store a token (16 × nt scalar stores before: at k = 768, an A3B
 * expert's down projection, they were a large share of a strip's work). */
INLINE void amx_store_strip(const __m512 acc[M], float *const *y, int64_t r0, int nt) {
    __m512i r[M];
    for (int i = 0; i < M; i++) r[i] = _mm512_castps_si512(acc[i]);
    transpose16(r);
    for (int t = 0; t < nt; t++) _mm512_storeu_ps(y[t] + r0, _mm512_castsi512_ps(r[t]));
}

/* The B tiles and scales of nt (1..16) Q8_K tokens of nsb super-blocks. */
static inline void amx_tokens_prep(int64_t nsb, const void *const *xv, int nt, amx_tokens *tk) {
    memset(tk->yd, 0, sizeof(float) * M * (size_t)nsb);
    for (int64_t s = 0; s < nsb; s++)
        for (int j = 0; j < NSTEP; j++) {
            /* B rows: token t's 64 bytes of this step as 16 dwords, transposed */
            __m512i r[16];
            for (int t = 0; t < M; t++)
                r[t] = t < nt ? _mm512_loadu_si512((const void *)(((const qw_block_q8_K *)xv[t])[s].qs + STEP * j))
                              : _mm512_setzero_si512();
            transpose16(r);
            for (int kk = 0; kk < M; kk++) _mm512_store_si512((void *)(tk->b[s * NSTEP + j] + kk * 64), r[kk]);
        }
    for (int t = 0; t < nt; t++)
        for (int64_t s = 0; s < nsb; s++) tk->yd[s][t] = q8k_d((const qw_block_q8_K *)xv[t] + s);
}

#endif
