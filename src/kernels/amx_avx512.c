/* amx_avx512.c — AMX-INT8 prefill tiles for Q8_0 and Q4_0 weights (the
 * "avx512-amx" level), and the run-time test that the CPU and the kernel
 * allow AMX.
 *
 * One TDPBSSD multiplies a 16-row × 32-byte int8 tile A (block b of 16 weight
 * rows) with a 32 × N tile B (block b of N ≤ 16 tokens' Q8_0 activations)
 * into 16 × N exact int32: each is the whole block sum isum[row][token][b].
 * A comes straight from the file's Q8_0 rows (tile rows at stride = row
 * bytes, 2 bytes past each block's scale), or, for Q4_0, from the strip's 16
 * rows widened to int8 (nibble - 8).  Then, per block, in the scalar
 * reference's order (see blockorder_avx512vbmi.c, which holds the level's dots
 * and row loops):
 *     acc[row][token] = acc + (float)isum * (d_w * d_x)
 * one f32 lane per token, one accumulator per row of the strip — so the tile
 * gives the level's dot bits exactly (the tile contract, quant.h), and those
 * are the scalar reference's bits.  Two blocks are in flight per step (two C,
 * two A, two B tiles).  Rows left over (n_rows % 16) take the level's row
 * loop.
 *
 * What a call lays out once serves as much as it can: the tokens, up to
 * QW_GEMM_N_TOKS of them in groups of 16 (B as the instruction reads it, 4
 * consecutive k of a token per dword, and their scales), and, per strip of
 * 16 rows, the rows' scales as floats and — Q4_0 — their widened blocks,
 * which every group of the call then multiplies.  So a call should carry all
 * of a task's tokens (gemm_n; matmul.c gives it them): before, each 16 tokens
 * widened the strip again, and Q4_0's prefill ran slower on AMX than on
 * AVX-512 (bench/RESULTS.md, 2026-12-06 session 17).
 *
 * The tile body is written over amx_tiles_avx512.h's tile operations, so the
 * same code runs AMX or, in qw_amx_emulated_q8_0 / _q4_0, a software model of
 * the tiles byte for byte: a CPU without AMX still checks the layout and the
 * bits (tests/kernels/test_amx.c).  The tile configuration is loaded per call
 * and released at its end, so a thread never holds AMX state between calls.
 *
 * Permission: Linux hands out the AMX tile data state only on request
 * (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, once per process);
 * qw_amx_usable checks CPUID (AMX-TILE, AMX-INT8), that the OS enabled the
 * tile state in XCR0, and that request.  Without all three, the level is not
 * offered and the AVX-512 tables run.
 */
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cpuid.h>

#include "kernels/amx_tiles_avx512.h"
#include "kernels/quant_impl.h"
#include "kernels/simd_x86.h"

enum {
    BLK = 32,                    /* elements of a block: one tile multiply's depth */
    B_ROWS = BLK / 4,            /* rows of a token tile: a block's dwords */
    MAX_NB = QW_GEMM_K_MAX / BLK /* blocks of a row at most */
};

/* A group of up to 16 tokens as the tiles read it. */
typedef struct {
    alignas(64) uint8_t b[MAX_NB][B_ROWS * 64]; /* block b's B tile: row kk = dword kk of the 16 tokens */
    alignas(64) float dx[MAX_NB][M];            /* the tokens' scales (0 past the group's tokens) */
} q8_tokens;

/* A strip of 16 rows: the scales, block by block; Q4_0's blocks widened. */
typedef struct {
    alignas(64) float dw[MAX_NB][M];
    alignas(64) int8_t a[M * QW_GEMM_K_MAX]; /* Q4_0 only: row r at r * nb * 32 */
} q8_strip;

/* The B tiles and scales of nt (1..16) tokens: two blocks of a token are one
 * row of 16 dwords, transposed into the two blocks' 8 tile rows each. */
static void prep_tokens(int64_t nb, const void *const *xv, int nt, q8_tokens *tk) {
    memset(tk->dx, 0, sizeof(float) * M * (size_t)nb);
    for (int64_t b = 0; b < nb; b += 2) { /* nb is even: n % QW_GEMM_K == 0 */
        __m512i r[16];
        for (int t = 0; t < M; t++) {
            const qw_block_q8_0 *x = (const qw_block_q8_0 *)xv[t < nt ? t : 0] + b;
            r[t] = t < nt ? _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x[0].qs)),
                                               _mm256_loadu_si256((const __m256i *)x[1].qs), 1)
                          : _mm512_setzero_si512();
        }
        transpose16(r);
        uint8_t *d = &tk->b[b][0]; /* blocks b and b + 1: 16 rows of 64 bytes in a row */
        for (int kk = 0; kk < M; kk++) _mm512_store_si512((void *)(d + kk * 64), r[kk]);
    }
    for (int t = 0; t < nt; t++)
        for (int64_t b = 0; b < nb; b++) tk->dx[b][t] = _cvtsh_ss(((const qw_block_q8_0 *)xv[t])[b].d);
}

/* The strip of 16 rows at ws: scales, and (q4) the widened blocks.  The
 * scales come 16 blocks of a row at a time (scales16: word permutes), and a
 * 16 × 16 transpose turns 16 rows' of them into dw[b], one lane a row: about
 * a quarter of the instructions of one scalar load and conversion a (row,
 * block), which at k = 768 (an A3B expert's down projection, 24 blocks a row)
 * came to a fifth of a strip's epilogue by count.  (On the Xeon the gain was
 * inside that host's noise: bench/RESULTS.md, session 30.) */
static void prep_strip(int64_t nb, const uint8_t *ws, size_t rb, bool q4, q8_strip *st) {
    const int bw = q4 ? (int)sizeof(qw_block_q4_0) : (int)sizeof(qw_block_q8_0);
    for (int64_t b0 = 0; b0 < nb; b0 += M) {
        const int m = nb - b0 < M ? (int)(nb - b0) : M;
        const __mmask16 mk = (__mmask16)((1u << m) - 1);
        __m512i v[M]; /* v[r]: row r's scales of blocks b0 .. b0 + m - 1 */
        for (int r = 0; r < M; r++) {
            const uint8_t *p = ws + (size_t)r * rb + (size_t)b0 * (size_t)bw;
            v[r] = _mm512_castps_si512(q4 ? scales16(p, (int)sizeof(qw_block_q4_0), mk)
                                          : scales16(p, (int)sizeof(qw_block_q8_0), mk));
        }
        transpose16(v); /* v[j]: block b0 + j's scales of the 16 rows */
        for (int j = 0; j < m; j++) _mm512_store_si512((void *)st->dw[b0 + j], v[j]);
    }
    if (q4)
        for (int r = 0; r < M; r++) {
            const uint8_t *row = ws + (size_t)r * rb;
            for (int64_t b = 0; b < nb; b++)
                _mm256_storeu_si256((__m256i *)(st->a + ((size_t)r * nb + b) * BLK),
                                    q4_0_i8(row + (size_t)b * sizeof(qw_block_q4_0) + 2));
        }
}

/* acc[r] += (float)C[r][t] * (dw[r] * dx[t]) over the nt lanes, rows in order. */
INLINE void scale_add(__m512 *acc, const int32_t *c, const float *dw, __m512 dx, __mmask16 mk) {
    for (int r = 0; r < M; r++) {
        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(dw[r]), dx);
        const __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(mk, c + r * M)), d);
        acc[r] = _mm512_add_ps(acc[r], p);
    }
}

/* One strip (rows r0..r0+15) × one group of nt (1..16) tokens: block b of
 * the strip's A at a + b * ablk, rows astride apart. */
AMX INLINE void strip_group(int64_t nb, const int8_t *a, size_t astride, size_t ablk, const q8_strip *st,
                            const q8_tokens *tk, int nt, tile_model *e, float *const *y, int64_t r0) {
    const __mmask16 mk = (__mmask16)((1u << nt) - 1);
    alignas(64) int32_t c[2][M * M];
    __m512 acc[M];
    for (int r = 0; r < M; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
        T_ZERO(e, 0);
        T_ZERO(e, 1);
        T_LOAD(e, 2, a + (size_t)b * ablk, astride);
        T_LOAD(e, 4, tk->b[b], 64);
        T_DPBSSD(e, 0, 2, 4);
        T_LOAD(e, 3, a + (size_t)(b + 1) * ablk, astride);
        T_LOAD(e, 5, tk->b[b + 1], 64);
        T_DPBSSD(e, 1, 3, 5);
        T_STORE(e, 0, c[0], M * 4);
        T_STORE(e, 1, c[1], M * 4);
        __asm__ volatile("" : : "r"(c) : "memory");
        scale_add(acc, c[0], st->dw[b], _mm512_load_ps(tk->dx[b]), mk);
        scale_add(acc, c[1], st->dw[b + 1], _mm512_load_ps(tk->dx[b + 1]), mk);
    }
    amx_store_strip(acc, y, r0, nt);
}

/* Rows [0, n_rows) × n_tok tokens, up to GROUPS groups of 16 a round; q4
 * selects the weight type.  e: the software model, or NULL for AMX; tk:
 * GROUPS token layouts; st: one strip's. */
AMX INLINE void q8_tiles(int64_t n, const void *wv, size_t rb, int64_t n_rows, const void *const *xv, float *const *y,
                         int64_t n_tok, bool q4, tile_model *e, q8_tokens *tk, q8_strip *st) {
    const int64_t nb = n / BLK;
    const uint8_t *w = wv;
    const int64_t main_rows = n_rows / M * M;
    const qw_gemm_fn rows_left = q4 ? qw_blockorder_avx512.gemv_q4_0 : qw_blockorder_avx512.gemv_q8_0;
    for (int64_t t0 = 0; t0 < n_tok; t0 += GROUPS * M) {
        const int nt = (int)(n_tok - t0 < GROUPS * M ? n_tok - t0 : GROUPS * M), ng = (nt + M - 1) / M;
        for (int g = 0; g < ng; g++) prep_tokens(nb, xv + t0 + g * M, amx_group_toks(nt, g), &tk[g]);
        amx_configure_tiles(e, nt < M ? nt : M, 2, 2, BLK, 2, B_ROWS);
        for (int64_t r0 = 0; r0 < main_rows; r0 += M) {
            const uint8_t *ws = w + (size_t)r0 * rb;
            prep_strip(nb, ws, rb, q4, st);
            /* TILELOADD's asm names its address, not the memory behind it: keep
             * the stores into st and tk before the loads */
            __asm__ volatile("" : : "r"(st), "r"(tk) : "memory");
            const int8_t *a = q4 ? st->a : (const int8_t *)ws + 2;
            const size_t astride = q4 ? (size_t)nb * BLK : rb, ablk = q4 ? BLK : sizeof(qw_block_q8_0);
            for (int g = 0; g < ng; g++)
                strip_group(nb, a, astride, ablk, st, &tk[g], amx_group_toks(nt, g), e, y + t0 + g * M, r0);
        }
        if (!e) _tile_release();
        /* the rows past the last strip: the row loop, each token prepared once for them all (the dot's bits) */
        if (main_rows < n_rows)
            for (int t = 0; t < nt; t++) {
                float *yr = y[t0 + t] + main_rows;
                rows_left(n, w + (size_t)main_rows * rb, rb, n_rows - main_rows, xv + t0 + t, &yr);
            }
    }
}

AMX static void amx_q8(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y,
                       int64_t n_tok, bool q4) {
    /* on the stack, ~0.7 MiB at k = 8192 (the pages of a shorter row untouched) */
    q8_tokens tk[GROUPS];
    q8_strip st;
    q8_tiles(n, w, rb, n_rows, x, y, n_tok, q4, NULL, tk, &st);
}

void qw_amx_gemm_q8_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    amx_q8(n, w, rb, n_rows, x, y, QW_GEMM_TOKS, false);
}
void qw_amx_gemm_q4_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    amx_q8(n, w, rb, n_rows, x, y, QW_GEMM_TOKS, true);
}
void qw_amx_gemm_wide_q8_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x,
                           float *const *y) {
    amx_q8(n, w, rb, n_rows, x, y, QW_GEMM_WIDE_TOKS, false);
}
void qw_amx_gemm_wide_q4_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x,
                           float *const *y) {
    amx_q8(n, w, rb, n_rows, x, y, QW_GEMM_WIDE_TOKS, true);
}
void qw_amx_gemm_n_q8_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y,
                        int64_t n_tok) {
    amx_q8(n, w, rb, n_rows, x, y, n_tok, false);
}
void qw_amx_gemm_n_q4_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y,
                        int64_t n_tok) {
    amx_q8(n, w, rb, n_rows, x, y, n_tok, true);
}

/* The same tiles through the software model: any AVX-512 VNNI + VBMI CPU (tests;
 * the rows past the last strip take blockorder_avx512vbmi.c's loop). */
AMX static bool emulated(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y,
                         int nt, bool q4) {
    if (!amx_emu_shape_ok(n, QW_GEMM_K, n_rows, nt)) return false;
    amx_emu_scratch s;
    const bool ok = amx_emu_alloc(&s, sizeof(q8_tokens) * GROUPS, sizeof(q8_strip));
    if (ok) q8_tiles(n, w, rb, n_rows, x, y, nt, q4, s.e, s.tok, s.strip);
    amx_emu_free(&s);
    return ok;
}
bool qw_amx_emulated_q8_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y,
                          int nt) {
    return emulated(n, w, rb, n_rows, x, y, nt, false);
}
bool qw_amx_emulated_q4_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y,
                          int nt) {
    return emulated(n, w, rb, n_rows, x, y, nt, true);
}

/* ---- may this process use AMX? ---- */

enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };

static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

bool qw_amx_usable(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tile = (d >> 24) & 1u, int8 = (d >> 25) & 1u;
    if (!tile || !int8) return false;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1u)) return false; /* OSXSAVE */
    if ((xgetbv0() & (3ull << 17)) != (3ull << 17)) return false;           /* XTILECFG + XTILEDATA */
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
