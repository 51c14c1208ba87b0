/* amx_avx512.c — AMX-INT8 prefill tiles for Q8_0 and Q4_0 weights (the
 * "avx512-amx" level), and the run-time test that the CPU and the kernel
 * allow AMX.
 *
 * One TDPBSSD multiplies a 16-row × 32-byte int8 tile A (block b of 16 weight
 * rows) with a 32 × N tile B (block b of N tokens' Q8_0 activations) into 16
 * × N exact int32: each is the whole block sum isum[row][token][b].  A comes
 * straight from the file's Q8_0 rows (tile rows at stride = row bytes, 2
 * bytes past each block's scale), or, for Q4_0, from the 16 rows widened to
 * int8 (nibble - 8) once per call into a stack buffer.  B is laid out once per
 * call the way the instruction reads it (4 consecutive k of a token per
 * dword).  Then, per block, in the scalar reference's order (see
 * blockorder_avx512.c, which holds the level's dots and row loops):
 *     acc[row][token] = acc + (float)isum * (d_w * d_x)
 * one f32 lane per token, one accumulator per row of the strip — so the tile
 * gives the level's dot bits exactly (the tile contract, quant.h), and those
 * are the scalar reference's bits.  Two blocks are in flight per step (two C,
 * two A, two B tiles).  Rows left over (n_rows % 16) take the level's dot.
 *
 * Entry points: 4 tokens (qw_gemm_fn, QW_GEMM_TOKS) and 16 tokens
 * (QW_GEMM_WIDE_TOKS, the width one TDPBSSD holds).  The tile configuration
 * is loaded per call and released at its end, so a thread never holds AMX
 * state between calls.
 *
 * Permission: Linux hands out the AMX tile data state only on request
 * (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, once per process);
 * qw_amx_usable checks CPUID (AMX-TILE, AMX-INT8), that the OS enabled the
 * tile state in XCR0, and that request.  Without all three, the level is not
 * offered and the AVX-512 tables run.
 */
#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cpuid.h>

#include "kernels/quant_impl.h"
#include "kernels/simd_x86.h"

#define AMX __attribute__((target("amx-tile,amx-int8")))

enum { M = 16, BLK = 32, MAX_NB = QW_GEMM_K_MAX / QW_QK8_0, B_STRIDE = 64 };

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64))) tilecfg;

/* tmm0, tmm1: C (16 × nt int32); tmm2, tmm3: A (16 × 32 int8); tmm4, tmm5: B (8 × nt dwords). */
AMX static void config(int nt) {
    tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 2; t++) c.rows[t] = M, c.colsb[t] = (uint16_t)(nt * 4);
    for (int t = 2; t < 4; t++) c.rows[t] = M, c.colsb[t] = BLK;
    for (int t = 4; t < 6; t++) c.rows[t] = BLK / 4, c.colsb[t] = (uint16_t)(nt * 4);
    /* the intrinsic tells the compiler it reads 8 bytes only: keep every store */
    __asm__ volatile("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
}

/* B for every block: bp[b][kk][t*4 + i] = x_t[b].qs[4kk + i]; scales dx[b][t]. */
static void prep_b(int64_t nb, const void *const *xv, int nt, uint8_t *bp, float *dx) {
    for (int t = 0; t < nt; t++) {
        const qw_block_q8_0 *x = xv[t];
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *d = bp + (size_t)b * (BLK / 4) * B_STRIDE + (size_t)t * 4;
            for (int kk = 0; kk < BLK / 4; kk++) memcpy(d + kk * B_STRIDE, x[b].qs + 4 * kk, 4);
            dx[b * M + t] = _cvtsh_ss(x[b].d);
        }
    }
}

/* 16 rows of Q4_0 widened to int8 (nibble - 8), row stride nb * 32 bytes. */
static void widen_q4(int64_t nb, const uint8_t *w, size_t rb, int8_t *a) {
    const __m256i m = _mm256_set1_epi8(0x0f), k8 = _mm256_set1_epi8(8);
    for (int r = 0; r < M; r++)
        for (int64_t b = 0; b < nb; b++) {
            const __m128i q = _mm_loadu_si128((const __m128i *)(w + (size_t)r * rb + b * (int64_t)sizeof(qw_block_q4_0) + 2));
            const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
            _mm256_storeu_si256((__m256i *)(a + ((size_t)r * nb + b) * BLK), _mm256_sub_epi8(_mm256_and_si256(v, m), k8));
        }
}

/* acc[r] += (float)C[r][t] * (dw[r] * dx[t]) over the nt lanes, rows in order. */
static inline __attribute__((always_inline)) void scale_add(__m512 *acc, const int32_t *c, const float *dw,
                                                            __m512 dx, __mmask16 mk) {
    for (int r = 0; r < M; r++) {
        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(dw[r]), dx);
        const __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(mk, c + r * M)), d);
        acc[r] = _mm512_add_ps(acc[r], p);
    }
}

/* Rows [0, n_rows) × nt tokens; q4 selects the weight type. */
AMX static void amx_tiles(int64_t n, const void *wv, size_t rb, int64_t n_rows, const void *const *xv,
                          float *const *y, int nt, bool q4) {
    const int64_t nb = n / QW_QK8_0;
    const size_t bw = q4 ? sizeof(qw_block_q4_0) : sizeof(qw_block_q8_0);
    uint8_t bp[MAX_NB * (BLK / 4) * B_STRIDE] __attribute__((aligned(64))); /* 128 KiB at k = 8192 */
    int8_t a4[q4 ? M * QW_GEMM_K_MAX : 1] __attribute__((aligned(64)));     /* the same, Q4_0 only */
    float dx[MAX_NB * M];
    memset(dx, 0, sizeof(float) * (size_t)nb * M); /* lanes past nt stay 0 */
    int32_t c[2][M * M] __attribute__((aligned(64)));
    float dw[2][M];
    prep_b(nb, xv, nt, bp, dx);
    const __mmask16 mk = (__mmask16)((1u << nt) - 1);
    const uint8_t *w = wv;
    const int64_t main_rows = n_rows / M * M;
    config(nt);
    /* TILELOADD's asm names its address, not the memory behind it: a barrier
     * keeps the compiler from dropping or sinking the stores into bp / a4 */
    __asm__ volatile("" : : "r"(bp) : "memory");
    for (int64_t r0 = 0; r0 < main_rows; r0 += M) {
        const uint8_t *ws = w + (size_t)r0 * rb;
        const int8_t *abase;
        size_t astride, ablk;
        if (q4) {
            widen_q4(nb, ws, rb, a4);
            __asm__ volatile("" : : "r"(a4) : "memory");
            abase = a4, astride = (size_t)nb * BLK, ablk = BLK;
        } else {
            abase = (const int8_t *)ws + 2, astride = rb, ablk = sizeof(qw_block_q8_0);
        }
        __m512 acc[M];
        for (int r = 0; r < M; r++) acc[r] = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; b += 2) { /* nb is a multiple of 4 (n % QW_GEMM_K == 0) */
            _tile_zero(0);
            _tile_zero(1);
            _tile_loadd(2, abase + b * ablk, astride);
            _tile_loadd(4, bp + (size_t)b * (BLK / 4) * B_STRIDE, B_STRIDE);
            _tile_dpbssd(0, 2, 4);
            _tile_loadd(3, abase + (b + 1) * ablk, astride);
            _tile_loadd(5, bp + (size_t)(b + 1) * (BLK / 4) * B_STRIDE, B_STRIDE);
            _tile_dpbssd(1, 3, 5);
            for (int r = 0; r < M; r++) {
                dw[0][r] = _cvtsh_ss(load_u16(ws + (size_t)r * rb + (size_t)b * bw));
                dw[1][r] = _cvtsh_ss(load_u16(ws + (size_t)r * rb + (size_t)(b + 1) * bw));
            }
            _tile_stored(0, c[0], M * 4);
            _tile_stored(1, c[1], M * 4);
            scale_add(acc, c[0], dw[0], _mm512_loadu_ps(dx + b * M), mk);
            scale_add(acc, c[1], dw[1], _mm512_loadu_ps(dx + (b + 1) * M), mk);
        }
        /* acc[r] lane t -> y[t][r0 + r] */
        for (int r = 0; r < M; r++) {
            float o[M];
            _mm512_storeu_ps(o, acc[r]);
            for (int t = 0; t < nt; t++) y[t][r0 + r] = o[t];
        }
    }
    _tile_release();
    const qw_vec_dot_fn dot = q4 ? qw_blockorder_avx512.dot_q4_0 : qw_blockorder_avx512.dot_q8_0;
    for (int64_t r = main_rows; r < n_rows; r++)
        for (int t = 0; t < nt; t++) dot(n, &y[t][r], w + (size_t)r * rb, xv[t]);
}

void qw_amx_gemm_q8_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    amx_tiles(n, w, rb, n_rows, x, y, QW_GEMM_TOKS, false);
}
void qw_amx_gemm_q4_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    amx_tiles(n, w, rb, n_rows, x, y, QW_GEMM_TOKS, true);
}
void qw_amx_gemm_wide_q8_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x,
                           float *const *y) {
    amx_tiles(n, w, rb, n_rows, x, y, QW_GEMM_WIDE_TOKS, false);
}
void qw_amx_gemm_wide_q4_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x,
                           float *const *y) {
    amx_tiles(n, w, rb, n_rows, x, y, QW_GEMM_WIDE_TOKS, true);
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
