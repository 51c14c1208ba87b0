/* micro_gemm.c — single-threaded speed of the prefill tile and the decode row
 * loop of one weight type at the active SIMD level (QWISP_SIMD lowers it).
 *
 *   tile (cache): qw_gemm_get(T) on 16 rows × 4 tokens of width 2048, repeated:
 *     the compute ceiling of prefill, in GMAC/s; wide: the same with the
 *     level's wide tile (qw_gemm_wide_toks tokens) where it has one;
 *   rows (cache): qw_gemv_get(T) on the same 16 rows, one token (the dot
 *     row by row where the type has no row loop: the K-quants);
 *   rows (DRAM):  the same over a 256 MiB matrix in 64-row calls, the
 *     way decode streams weights, in GB/s of weights read;
 *   matmul (cache): qw_matmul_q on one thread over 128 rows × 64 tokens,
 *     whatever the level does with them (its tiles, or the AMX K-quants'
 *     call that serves all 64 tokens from one weight layout).
 *
 * Built on request (the Makefile's rule rebuilds it when the library changes):
 *   make build/micro_gemm && build/micro_gemm q4_0     # or q8_0, q4_K, q6_K, ...; [k] after the type
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qwisp/ops.h"
#include "qwisp/quant.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fill(qw_type t, char *dst, int64_t rows, int64_t k) {
    float *f = malloc(sizeof(float) * (size_t)k);
    const size_t rb = qw_row_bytes(t, k);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < k; i++) f[i] = (float)(rand() % 2001 - 1000) / 1000.0f;
        qw_quantize_row(t, f, dst + (size_t)r * rb, k);
    }
    free(f);
}

static qw_type g_wt;
static void dot_rows(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    const qw_vec_dot_fn dot = qw_vec_dot_get(g_wt);
    for (int64_t r = 0; r < n_rows; r++) dot(n, &y[0][r], (const char *)w + (size_t)r * rb, x[0]);
}

int main(int argc, char **argv) {
    const char *simd = getenv("QWISP_SIMD"); /* read here: this program does not load the knob table */
    if (simd && *simd && strcmp(simd, "auto") && qw_simd_force(simd))
        return fprintf(stderr, "QWISP_SIMD=%s: not a level this build knows\n", simd), 2;
    const char *amx_kq = getenv("QWISP_AMX_KQUANT");
    qw_simd_amx_kquants(!(amx_kq && !strcmp(amx_kq, "0"))); /* the knob's default: 1 */
    const int wt_i = qw_type_from_name(argc > 1 ? argv[1] : "q4_0");
    if (wt_i < 0) return fprintf(stderr, "usage: micro_gemm q4_0|q8_0|q4_K|q6_K|... [k]\n"), 2;
    const qw_type wt = g_wt = (qw_type)wt_i;
    const qw_gemm_fn tile = qw_gemm_get(wt), wide = qw_gemm_wide_get(wt);
    const qw_gemm_fn rows_fn = qw_gemv_get(wt) ? qw_gemv_get(wt) : dot_rows;
    if (!tile) return fprintf(stderr, "%s has no tile at level %s\n", argv[1], qw_simd_level()), 1;
    const int n_wide = wide ? qw_gemm_wide_toks(wt) : 0;
    enum { ROWS = 16, TOKS = QW_GEMM_WIDE_TOKS };
    const int64_t K = argc > 2 ? atoll(argv[2]) : 2048; /* the row width: 512 is an A3B expert's down projection */
    if (K <= 0 || K % qw_type_block_elems(wt) || K % QW_GEMM_K || K > QW_GEMM_K_MAX)
        return fprintf(stderr, "k=%lld: a multiple of %d and %d, at most %d\n", (long long)K,
                       (int)qw_type_block_elems(wt), QW_GEMM_K, QW_GEMM_K_MAX), 2;
    const qw_type xt = qw_vec_dot_type(wt);
    const size_t wrb = qw_row_bytes(wt, K), xrb = qw_row_bytes(xt, K);
    char *w = malloc(wrb * ROWS), *x = malloc(xrb * TOKS);
    fill(wt, w, ROWS, K);
    fill(xt, x, TOKS, K);
    const void *xp[TOKS];
    float out[TOKS][ROWS], *yp[TOKS];
    for (int t = 0; t < TOKS; t++) xp[t] = x + (size_t)t * xrb, yp[t] = out[t];

    double best_tile = 0, best_wide = 0, best_rows = 0, best_dram = 0;
    for (int pass = 0; pass < 3; pass++) {
        const int it = 20000;
        double t0 = now_s();
        for (int i = 0; i < it; i++) tile(K, w, wrb, ROWS, xp, yp);
        double g = (double)it * K * ROWS * QW_GEMM_TOKS / (now_s() - t0) / 1e9;
        best_tile = g > best_tile ? g : best_tile;
        if (wide) {
            t0 = now_s();
            for (int i = 0; i < it; i++) wide(K, w, wrb, ROWS, xp, yp);
            g = (double)it * K * ROWS * n_wide / (now_s() - t0) / 1e9;
            best_wide = g > best_wide ? g : best_wide;
        }
        t0 = now_s();
        for (int i = 0; i < it; i++) rows_fn(K, w, wrb, ROWS, xp, yp);
        g = (double)it * K * ROWS / (now_s() - t0) / 1e9;
        best_rows = g > best_rows ? g : best_rows;
    }
    const int64_t big_rows = ((int64_t)256 << 20) / (int64_t)wrb / 64 * 64;
    char *big = malloc(wrb * (size_t)big_rows);
    float *y = malloc(sizeof(float) * (size_t)big_rows);
    for (int64_t r = 0; r < big_rows; r++) memcpy(big + (size_t)r * wrb, w + (size_t)(r % ROWS) * wrb, wrb);
    for (int pass = 0; pass < 4; pass++) {
        const double t0 = now_s();
        for (int64_t r = 0; r < big_rows; r += 64) {
            float *yr[1] = {y + r};
            rows_fn(K, big + (size_t)r * wrb, wrb, 64, xp, yr);
        }
        const double gbs = (double)wrb * (double)big_rows / (now_s() - t0) / 1e9;
        best_dram = gbs > best_dram ? gbs : best_dram;
    }
    enum { MM_ROWS = 128, MM_TOKS = 64 };
    char *x64 = malloc(xrb * MM_TOKS);
    float *y64 = malloc(sizeof(float) * MM_ROWS * MM_TOKS);
    fill(xt, x64, MM_TOKS, K);
    double best_mm = 0;
    for (int pass = 0; pass < 3; pass++) {
        const int it = 200;
        const double t0 = now_s();
        for (int i = 0; i < it; i++) qw_matmul_q(NULL, wt, big, wrb, MM_ROWS, K, x64, NULL, MM_TOKS, y64, MM_ROWS);
        const double g = (double)it * K * MM_ROWS * MM_TOKS / (now_s() - t0) / 1e9;
        best_mm = g > best_mm ? g : best_mm;
    }
    printf("%s at %s, k=%lld: tile (cache) %.1f GMAC/s, wide %d-token tile (cache) %.1f GMAC/s, rows (cache) %.1f "
           "GMAC/s, rows (DRAM) %.1f GB/s, matmul %dx%d (cache) %.1f GMAC/s\n",
           qw_type_name(wt), qw_simd_level(), (long long)K, best_tile, n_wide, best_wide, best_rows, best_dram,
           MM_ROWS, MM_TOKS, best_mm);
    free(big), free(y), free(w), free(x), free(x64), free(y64);
    return 0;
}
