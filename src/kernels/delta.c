/* delta.c — one token of the gated delta rule for one value head (the
 * recurrence of qwen35moe's Gated DeltaNet layers, see model/deltanet.c),
 * scalar reference and dispatch to the AVX-512 form (delta_avx512.c) at the
 * active SIMD level.
 *
 * M holds the S x S state transposed (row j = column j of the state), so
 * every per-output reduction runs over contiguous memory.  The order of
 * operations is llama.cpp's (ggml_compute_forward_gated_delta_net): scale
 * the whole state by the decay, then per row a dot with k, a multiply-add of
 * k, and a dot with q; rows are independent, so doing the three per row
 * rather than each over all rows changes nothing.
 */
#include "qwisp/ops.h"
#include "qwisp/quant.h"

#include <string.h>

void qw_delta_step_avx512(float *M, const float *q, const float *k, const float *v, float decay, float beta,
                          float scale, int64_t S, float *o);

static void delta_step_ref(float *M, const float *q, const float *k, const float *v, float decay, float beta,
                           float scale, int64_t S, float *o) {
    for (int64_t i = 0; i < S * S; i++) M[i] *= decay;
    for (int64_t j = 0; j < S; j++) {
        float *m = M + j * S;
        float s = 0.0f;
        for (int64_t i = 0; i < S; i++) s += m[i] * k[i];
        const float d = (v[j] - s) * beta;
        for (int64_t i = 0; i < S; i++) m[i] += k[i] * d;
        float acc = 0.0f;
        for (int64_t i = 0; i < S; i++) acc += m[i] * q[i];
        o[j] = acc * scale;
    }
}

/* The level comes from the kernels' one dispatcher (quant.c), so QWISP_SIMD
 * lowers this kernel with every other. */
void qw_delta_step(float *M, const float *q, const float *k, const float *v, float decay, float beta, float scale,
                   int64_t S, float *o) {
    if (qw_simd_isa() >= QW_ISA_AVX512)
        qw_delta_step_avx512(M, q, k, v, decay, beta, scale, S, o);
    else
        delta_step_ref(M, q, k, v, decay, beta, scale, S, o);
}

void qw_delta_step_scalar(float *M, const float *q, const float *k, const float *v, float decay, float beta,
                          float scale, int64_t S, float *o) {
    delta_step_ref(M, q, k, v, decay, beta, scale, S, o);
}
