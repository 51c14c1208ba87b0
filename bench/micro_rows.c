/* micro_rows.c — the Q8_0 / Q4_0 decode row loops of this CPU's AVX-512 level
 * and the reference-order ones of the avx512-amx level (blockorder_avx512vbmi.c,
 * which need AVX-512 VNNI + VBMI, not AMX), alternated in one process over one
 * matrix larger than the caches: this machine's speed moves by ±20 % over
 * minutes, so loops timed in turn, pass by pass, compare where separate runs
 * do not.  Prints each loop's median (min, max) GB/s from DRAM and from a
 * 256 KiB matrix (cache), one thread — pin it (taskset).
 *
 *   make build/micro_rows && taskset -c 1 build/micro_rows q8_0 [k=2048] [GB=1.0] [passes=9]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/quant_impl.h"
#include "qwisp/quant.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint32_t g_rng = 1;
static float frand(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { MAX_PASSES = 64 };

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "q8_0") && strcmp(argv[1], "q4_0"))) {
        fprintf(stderr, "usage: micro_rows q8_0|q4_0 [k] [GB] [passes]\n");
        return 2;
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vbmi")) {
        fprintf(stderr, "micro_rows: this CPU has no AVX-512 VNNI + VBMI\n");
        return 1;
    }
    const bool q4 = !strcmp(argv[1], "q4_0");
    const qw_type wt = q4 ? QW_TYPE_Q4_0 : QW_TYPE_Q8_0;
    const int64_t k = argc > 2 ? atoll(argv[2]) : 2048;
    const double gb = argc > 3 ? atof(argv[3]) : 1.0;
    const int passes = argc > 4 ? atoi(argv[4]) : 9;
    if (k <= 0 || k % 128 || k > QW_GEMM_K_MAX || gb <= 0 || passes < 1 || passes > MAX_PASSES) {
        fprintf(stderr, "micro_rows: k a multiple of 128 up to %d, GB > 0, passes 1..%d\n", QW_GEMM_K_MAX, MAX_PASSES);
        return 2;
    }
    const size_t rb = qw_row_bytes(wt, k);
    const int64_t rows = (int64_t)(gb * 1e9 / (double)rb) / 16 * 16, cache_rows = (256 << 10) / (int64_t)rb / 16 * 16;
    char *w = malloc(rb * (size_t)rows), *x = malloc(qw_row_bytes(QW_TYPE_Q8_0, k));
    float *f = malloc(sizeof(float) * (size_t)k), *y = malloc(sizeof(float) * (size_t)rows);
    if (!w || !x || !f || !y || rows < 16) {
        fprintf(stderr, "micro_rows: out of memory for %.2f GB\n", gb);
        return 1;
    }
    for (int64_t r = 0; r < rows; r++) { /* 64 distinct rows, repeated */
        if (r < 64) {
            for (int64_t i = 0; i < k; i++) f[i] = frand();
            qw_quantize_row(wt, f, w + (size_t)r * rb, k);
        } else {
            memcpy(w + (size_t)r * rb, w + (size_t)(r % 64) * rb, rb);
        }
    }
    for (int64_t i = 0; i < k; i++) f[i] = frand();
    qw_quantize_row(QW_TYPE_Q8_0, f, x, k);
    const void *xp[1] = {x};
    float *yp[1] = {y};
    const qw_gemm_fn loops[2] = {q4 ? qw_kernels_avx512.gemv_q4_0 : qw_kernels_avx512.gemv_q8_0,
                                 q4 ? qw_blockorder_avx512.gemv_q4_0 : qw_blockorder_avx512.gemv_q8_0};
    const char *names[2] = {"avx512 (llama.cpp's lane order)", "avx512-amx (reference order)"};
    double dram[2][MAX_PASSES], cache[2][MAX_PASSES];
    for (int p = 0; p < passes; p++)
        for (int v = 0; v < 2; v++) {
            double t0 = now();
            loops[v](k, w, rb, rows, xp, yp);
            dram[v][p] = (double)rows * (double)rb / (now() - t0) / 1e9;
            int reps = 0;
            t0 = now();
            do loops[v](k, w, rb, cache_rows, xp, yp), reps++;
            while (now() - t0 < 0.05);
            cache[v][p] = (double)reps * (double)cache_rows * (double)rb / (now() - t0) / 1e9;
        }
    printf("%s k=%lld, %.2f GB, %d passes alternated, one thread\n", argv[1], (long long)k, (double)rows * (double)rb / 1e9,
           passes);
    for (int v = 0; v < 2; v++) {
        qsort(dram[v], (size_t)passes, sizeof(double), cmp_double);
        qsort(cache[v], (size_t)passes, sizeof(double), cmp_double);
        printf("  %-32s DRAM %.1f GB/s (%.1f-%.1f), cache %.1f GB/s (%.1f-%.1f)\n", names[v], dram[v][passes / 2],
               dram[v][0], dram[v][passes - 1], cache[v][passes / 2], cache[v][0], cache[v][passes - 1]);
    }
    free(w), free(x), free(f), free(y);
    return 0;
}
