/* host_experts_speed.c — how fast the host computes a device backend's
 * experts (qwisp/host_experts.h): per layer of MODEL, N experts picked at
 * random for one token (decode), timed over every layer, REPS times after a
 * warm pass over every expert (no first-touch page faults timed).  Prints microseconds a layer and the expert weights read per
 * second, the figures QWISP_DEVICE_HOST_EXPERTS's choice of N weighs against
 * the bus (docs/cuda.md).
 *
 * Not built by the Makefile:
 *   make && gcc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/host_experts_speed.c build/libqwisp.a \
 *       $(pkg-config --libs libpcre2-8 libcjson libmicrohttpd liburing) -lm -pthread -o build/host_experts_speed
 *   build/host_experts_speed MODEL.gguf [N=4] [THREADS=all CPUs] [REPS=20]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "qwisp/host_experts.h"
#include "qwisp/options.h"
#include "qwisp/threadpool.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [N] [THREADS] [REPS]\n", argv[0]);
        return 2;
    }
    qw_error err = {{0}};
    if (qw_options_init(&err)) return fprintf(stderr, "%s\n", err.msg), 2;
    const int N = argc > 2 ? atoi(argv[2]) : 4, T = argc > 3 ? atoi(argv[3]) : qw_cpu_count(),
              reps = argc > 4 ? atoi(argv[4]) : 20;
    qw_model *m = qw_model_load(argv[1], &err);
    if (!m) return fprintf(stderr, "%s\n", err.msg), 1;
    const qw_hparams *hp = &m->hp;
    if (N < 1 || N > hp->n_expert) return fprintf(stderr, "N must be 1..%d\n", hp->n_expert), 2;
    float *xn = malloc((size_t)hp->n_embd * sizeof(float)), *out = malloc((size_t)N * hp->n_embd * sizeof(float));
    for (int i = 0; i < hp->n_embd; i++) xn[i] = (float)((i * 7919) % 2003) / 1001.0f - 1.0f;
    int32_t tok[256] = {0}, ex[256];
    qw_host_experts *hx = qw_host_experts_new(m, T);
    const qw_layer *L0 = &m->layers[0];
    const double expert_mb =
        (L0->gate_exps.matrix_bytes + L0->up_exps.matrix_bytes + L0->down_exps.matrix_bytes) / 1e6;
    /* warm: every expert of every layer once, so the timed passes meet no
     * first-touch page faults of the mapping (a device's pinned experts have none) */
    for (int il = 0; il < hp->n_layer; il++)
        for (int e0 = 0; e0 < hp->n_expert; e0 += N) {
            const int n = hp->n_expert - e0 < N ? hp->n_expert - e0 : N;
            for (int i = 0; i < n; i++) ex[i] = e0 + i;
            if (qw_host_experts_run(hx, il, xn, 1, tok, ex, n, out, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        }
    unsigned seed = 1;
    const double t0 = now_s();
    for (int r = 0; r < reps; r++) {
        for (int il = 0; il < hp->n_layer; il++) {
            for (int i = 0; i < N; i++) { /* N distinct experts */
                int e, dup;
                do {
                    seed = seed * 1103515245u + 12345u;
                    e = (int)((seed >> 8) % (unsigned)hp->n_expert);
                    dup = 0;
                    for (int j = 0; j < i; j++) dup |= ex[j] == e;
                } while (dup);
                ex[i] = e;
            }
            if (qw_host_experts_run(hx, il, xn, 1, tok, ex, N, out, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        }
    }
    const double per_layer = (now_s() - t0) / reps / hp->n_layer;
    printf("%s: %d experts a layer (%.2f MB each), %d threads: %.1f us a layer, %.1f GB/s of expert weights\n",
           argv[1], N, expert_mb, T, per_layer * 1e6, N * expert_mb / 1e3 / per_layer);
    qw_host_experts_free(hx);
    qw_model_free(m);
    free(xn), free(out);
    return 0;
}
