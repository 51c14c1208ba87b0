/* ops.c — element-wise and row-wise f32 ops of the forward pass: RMSNorm,
 * NeoX RoPE, softmax, SwiGLU.
 *
 * Numerics follow llama.cpp's CPU backend where it decides results: RMSNorm
 * sums squares in double and applies the weight after the scale; softmax sums
 * exponentials in double; RoPE advances theta by repeated multiplication in
 * float (theta_i = pos * base^(-2/d) ^ i) exactly as its cache does.
 */
#include "qwisp/ops.h"

#include "kernels/quant_impl.h"

#include <math.h>

typedef struct {
    float *out;
    const float *x, *w;
    int64_t n;
    float eps;
} norm_job;

static void norm_apply(const norm_job *j, int64_t r, double sum) {
    const float *xr = j->x + r * j->n;
    float *o = j->out + r * j->n;
    const float mean = (float)(sum / (double)j->n);
    const float scale = 1.0f / sqrtf(mean + j->eps);
    for (int64_t i = 0; i < j->n; i++) o[i] = (xr[i] * scale) * j->w[i];
}

/* Rows [r0, r1).  A row's sum of squares is one chain of dependent double
 * adds (its order is the result's), so four rows' chains run side by side:
 * four times the adds in flight, each row's sum in its own order. */
static void norm_rows(void *p, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const norm_job *j = p;
    const int64_t n = j->n;
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
        const float *a = j->x + r * n, *b = a + n, *c = b + n, *d = c + n;
        double sa = 0.0, sb = 0.0, sc = 0.0, sd = 0.0;
        for (int64_t i = 0; i < n; i++) {
            sa += (double)(a[i] * a[i]);
            sb += (double)(b[i] * b[i]);
            sc += (double)(c[i] * c[i]);
            sd += (double)(d[i] * d[i]);
        }
        norm_apply(j, r, sa);
        norm_apply(j, r + 1, sb);
        norm_apply(j, r + 2, sc);
        norm_apply(j, r + 3, sd);
    }
    for (; r < r1; r++) {
        const float *xr = j->x + r * n;
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++) sum += (double)(xr[i] * xr[i]);
        norm_apply(j, r, sum);
    }
}

void qw_rmsnorm(qw_threadpool *tp, float *out, const float *x, const float *w, int64_t n, int64_t n_rows, float eps) {
    norm_job j = {out, x, w, n, eps};
    const int64_t grain = (8192 / (n > 0 ? n : 1) + 3) / 4 * 4; /* ~8K elements an item, whole quads */
    qw_parallel_for(tp, n_rows, grain > 4 ? grain : 4, norm_rows, &j);
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

/* silu(g) * u = (g / (1 + e^-g)) * u; e^-g from the level's exponentials
 * where it has them (quant_impl.h exp_f32: correctly rounded but for rare
 * inputs), in slices that stay in L1; the rest is the same float steps. */
void qw_swiglu(float *out, const float *g, const float *u, int64_t n) {
    const qw_kernel_table *kt = qw_kernels_active();
    if (!kt->exp_f32) {
        for (int64_t i = 0; i < n; i++) out[i] = (g[i] / (1.0f + expf(-g[i]))) * u[i];
        return;
    }
    enum { SLICE = 256 };
    float e[SLICE];
    for (int64_t i0 = 0; i0 < n; i0 += SLICE) {
        const int64_t m = n - i0 < SLICE ? n - i0 : SLICE;
        for (int64_t i = 0; i < m; i++) e[i] = -g[i0 + i];
        kt->exp_f32(e, e, m);
        for (int64_t i = 0; i < m; i++) out[i0 + i] = (g[i0 + i] / (1.0f + e[i])) * u[i0 + i];
    }
}
