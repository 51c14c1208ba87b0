/* micro_dot.c — single-threaded GB/s of qw_vec_dot per weight type and SIMD level.
 *
 * Streams a 64 MB weight matrix (rows x 4096, each type's own encoding) through
 * qw_vec_dot against one activation row already converted to the paired type,
 * the way a decode-time matvec does, and reports weight bytes read per second.
 * 64 MB is larger than the last-level cache of most machines, so the number is
 * the memory-bound rate a decode step can reach on one core; the best of
 * several passes is kept.  A second column repeats the run on a 1 MB matrix
 * (cache resident), which shows the kernel's compute ceiling.
 *
 * Built on request (the Makefile's rule rebuilds it when the library changes):
 *   make build/micro_dot && build/micro_dot [MB]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qwisp/quant.h"

#define K 4096

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float rnd_unit(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

typedef struct {
    qw_type type;
    uint8_t *w;    /* [rows][row_bytes] */
    int64_t rows;
    size_t row_bytes;
    uint8_t *x;    /* one activation row in qw_vec_dot_type(type) */
    float *out;    /* [rows] */
} matrix;

static void matrix_init(matrix *m, qw_type type, size_t bytes) {
    m->type = type;
    m->row_bytes = qw_row_bytes(type, K);
    m->rows = (int64_t)(bytes / m->row_bytes);
    m->w = aligned_alloc(64, (size_t)m->rows * m->row_bytes + 64);
    m->x = aligned_alloc(64, K * 4);
    m->out = malloc((size_t)m->rows * sizeof(float));
    float *tmp = malloc(K * 4);
    /* 16 distinct random rows, repeated: contents do not change the speed */
    for (int64_t r = 0; r < m->rows; r++) {
        if (r < 16)
            for (int i = 0; i < K; i++) tmp[i] = rnd_unit() * 0.05f;
        if (r < 16) qw_quantize_row(type, tmp, m->w + r * m->row_bytes, K);
        else memcpy(m->w + r * m->row_bytes, m->w + (r % 16) * m->row_bytes, m->row_bytes);
    }
    for (int i = 0; i < K; i++) tmp[i] = rnd_unit();
    qw_quantize_row(qw_vec_dot_type(type), tmp, m->x, K);
    free(tmp);
}

static void matrix_free(matrix *m) { free(m->w), free(m->x), free(m->out); }

/* Best GB/s over passes of the whole matrix (at least min_s seconds total). */
static double run(const matrix *m, double min_s) {
    const qw_vec_dot_fn dot = qw_vec_dot_get(m->type);
    double best = 1e30, spent = 0;
    int passes = 0;
    while (passes < 3 || (spent < min_s && passes < 200)) {
        const double t0 = now_s();
        for (int64_t r = 0; r < m->rows; r++) dot(K, &m->out[r], m->w + r * m->row_bytes, m->x);
        const double dt = now_s() - t0;
        if (dt < best) best = dt;
        spent += dt;
        passes++;
    }
    return (double)m->rows * (double)m->row_bytes / best / 1e9;
}

int main(int argc, char **argv) {
    const size_t mb = argc > 1 ? (size_t)atoi(argv[1]) : 64;
    const qw_type types[] = {QW_TYPE_F32, QW_TYPE_F16, QW_TYPE_BF16, QW_TYPE_Q8_0, QW_TYPE_Q4_0};
    const char *levels[] = {"scalar", "avx2", "avx512"};
    printf("qw_vec_dot, 1 thread, rows x %d; GB/s of weight bytes (best pass)\n", K);
    printf("%-7s %-6s %12s %12s\n", "level", "type", "64MB-ish", "1MB (cache)");
    double sink = 0;
    for (int l = 0; l < 3; l++) {
        qw_simd_force(levels[l]);
        if (strcmp(qw_simd_level(), levels[l]) != 0) {
            printf("%-7s (not supported by this CPU)\n", levels[l]);
            continue;
        }
        for (int t = 0; t < 5; t++) {
            matrix big, small;
            matrix_init(&big, types[t], mb << 20);
            matrix_init(&small, types[t], 1 << 20);
            const double gbs = run(&big, 1.0);
            const double gbs_small = run(&small, 0.3);
            printf("%-7s %-6s %12.2f %12.2f\n", levels[l], qw_type_name(types[t]), gbs, gbs_small);
            fflush(stdout);
            sink += big.out[0] + small.out[0];
            matrix_free(&big);
            matrix_free(&small);
        }
    }
    printf("(checksum %g)\n", sink);
    return 0;
}
