/* ops.c — element-wise and row-wise f32 ops of the forward pass: RMSNorm,
 * NeoX RoPE, softmax, SwiGLU.
 *
 * Numerics follow llama.cpp's CPU backend where it decides results: RMSNorm
 * sums squares in double and applies the weight after the scale; softmax sums
 * exponentials in double; RoPE advances theta by repeated multiplication in
 * float (theta_i = pos * base^(-2/d) ^ i) exactly as its cache does.
 */
#include "qwisp/ops.h"

#include <math.h>

void qw_rmsnorm(float *out, const float *x, const float *w, int64_t n, int64_t n_rows, float eps) {
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * n;
        float *o = out + r * n;
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++) sum += (double)(xr[i] * xr[i]);
        const float mean = (float)(sum / (double)n);
        const float scale = 1.0f / sqrtf(mean + eps);
        for (int64_t i = 0; i < n; i++) o[i] = (xr[i] * scale) * w[i];
    }
}

void qw_rope_neox_partial(float *x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int32_t pos,
                          float base) {
    const int64_t half = n_rot / 2;
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float cs[512], sn[512]; /* n_rot/2 <= 512: head_dim is checked at model load */
    float theta = (float)pos;
    for (int64_t i = 0; i < half; i++) {
        cs[i] = cosf(theta);
        sn[i] = sinf(theta);
        theta *= theta_scale;
    }
    for (int64_t h = 0; h < n_heads; h++) {
        float *v = x + h * head_dim;
        for (int64_t i = 0; i < half; i++) {
            const float x0 = v[i], x1 = v[i + half];
            v[i] = x0 * cs[i] - x1 * sn[i];
            v[i + half] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

void qw_softmax(float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += (double)x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void qw_swiglu(float *out, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = (g[i] / (1.0f + expf(-g[i]))) * u[i];
}
