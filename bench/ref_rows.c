/* ref_rows.c — one thread's speed of the avx512-amx level's Q4_K or Q6_K
 * decode row loop (the K-quant reference order, QWISP_AMX_KQUANT=1) against
 * the avx512 level's, on any AVX-512 VNNI CPU.  That loop is plain AVX-512,
 * but its level only runs where AMX does, so the public API cannot reach it
 * on other CPUs: this program includes its source file to call it directly
 * (-DREF_Q6K: Q6_K's, else Q4_K's).
 *   rows (cache): 16 rows of width k, repeated; rows (DRAM): 256 MiB of rows
 *   in 64-row calls, the way decode streams weights.
 * Not built by the Makefile:
 *   make && gcc -O2 -std=c11 -D_GNU_SOURCE -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl \
 *       -mavx512dq -mavx512vnni -mavx512bf16 -Iinclude -Isrc bench/ref_rows.c build/libqwisp.a -lm -pthread \
 *       -o build/ref_rows_q4k && taskset -c 1 build/ref_rows_q4k 2048
 *   (and with -DREF_Q6K -o build/ref_rows_q6k)
 */
#ifdef REF_Q6K
#include "../src/kernels/amx_q6k_avx512.c"
typedef qw_block_q6_K ref_block;
#define REF_NAME "q6_K"
#define REF_GEMV gemv_q6_K
#define REF_GEMV_AVX512 qw_kq_dots_avx512.gemv_q6_K
#else
#include "../src/kernels/amx_kquant_avx512.c"
typedef qw_block_q4_K ref_block;
#define REF_NAME "q4_K"
#define REF_GEMV gemv_q4_K
#define REF_GEMV_AVX512 qw_kq_dots_avx512.gemv_q4_K
#endif

#include <stdio.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const int64_t k = argc > 1 ? atoll(argv[1]) : 2048;
    if (k <= 0 || k % QW_QK_K || k > QW_GEMM_K_MAX) return fprintf(stderr, "k: a multiple of 256 up to 8192\n"), 2;
    const size_t rb = (size_t)(k / QW_QK_K) * sizeof(ref_block);
    const int64_t rows = ((int64_t)256 << 20) / (int64_t)rb / 64 * 64;
    uint8_t *w = aligned_alloc(64, rb * (size_t)rows);
    qw_block_q8_K *x = aligned_alloc(64, (size_t)(k / QW_QK_K) * sizeof *x);
    float *y = malloc(sizeof(float) * (size_t)rows);
    if (!w || !x || !y) return fprintf(stderr, "out of memory\n"), 1;
    for (size_t i = 0; i < rb * (size_t)rows; i++) w[i] = (uint8_t)((i * 2654435761u) >> 13);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < k / QW_QK_K; b++) {
            ref_block *blk = (ref_block *)(w + (size_t)r * rb) + b;
            blk->d = 0x2c00; /* 0.0625 */
#ifndef REF_Q6K
            blk->dmin = 0x2800; /* 0.03125 */
#endif
        }
    float ones[QW_GEMM_K_MAX];
    for (int64_t i = 0; i < k; i++) ones[i] = (float)((i * 7) % 255 - 127) / 127.0f;
    qw_quantize_row(QW_TYPE_Q8_K, ones, x, k);
    const void *xp[1] = {x};
    const qw_gemm_fn fns[2] = {REF_GEMV, REF_GEMV_AVX512};
    const char *names[2] = {"reference order (avx512-amx)", "avx512"};
    for (int f = 0; f < 2; f++) {
        double best = 1e9, best_dram = 1e9;
        for (int rep = 0; rep < 300; rep++) { /* the best of 300 samples of 100 calls (a call is ~0.2 us at k = 512) */
            float *yp[1] = {y};
            const double t0 = now_s();
            for (int c = 0; c < 100; c++) fns[f](k, w, rb, 16, xp, yp);
            const double t = (now_s() - t0) / 100;
            best = t < best ? t : best;
        }
        for (int rep = 0; rep < 3; rep++) {
            const double t0 = now_s();
            for (int64_t r = 0; r < rows; r += 64) {
                float *yp[1] = {y + r};
                fns[f](k, w + (size_t)r * rb, rb, 64, xp, yp);
            }
            const double t = now_s() - t0;
            best_dram = t < best_dram ? t : best_dram;
        }
        printf(REF_NAME " k=%lld %s: rows (cache) %.1f GMAC/s, rows (DRAM) %.1f GB/s\n", (long long)k, names[f],
               16.0 * (double)k / best / 1e9, (double)rb * (double)rows / best_dram / 1e9);
    }
    free(w), free(x), free(y);
    return 0;
}
