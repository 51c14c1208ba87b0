/* delta.c — one token of the gated delta rule for one value head (the
 * recurrence of qwen35moe's Gated DeltaNet layers, see model/deltanet.c),
 * scalar reference and dispatch through the active level's kernel table (the
 * AVX-512 form: delta_avx512.c).
 *
 * M holds the S x S state transposed (row j = column j of the state), so
 * every per-output reduction runs over contiguous memory.  The order of
 * operations is llama.cpp's (ggml_compute_forward_gated_delta_net): scale
 * the whole state by the decay, then per row a dot with k, a multiply-add of
 * k, and a dot with q; rows are independent, so doing the three per row
 * rather than each over all rows changes nothing.
 */
#include "kernels/quant_impl.h"
#include "qwisp/ops.h"

void qw_ref_delta_step(float *M, const float *q, const float *k, const float *v, float decay, float beta,
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

/* The level's table (quant.c) picks the form, so QWISP_SIMD lowers this
 * kernel with every other. */
void qw_delta_step(float *M, const float *q, const float *k, const float *v, float decay, float beta, float scale,
                   int64_t S, float *o) {
    qw_kernels_active()->delta_step(M, q, k, v, decay, beta, scale, S, o);
}

void qw_delta_step_scalar(float *M, const float *q, const float *k, const float *v, float decay, float beta,
                          float scale, int64_t S, float *o) {
    qw_ref_delta_step(M, q, k, v, decay, beta, scale, S, o);
}
