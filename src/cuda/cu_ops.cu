/* cu_ops.cu — the element- and row-wise steps of the forward pass on the
 * device: RMSNorm, NeoX (partial) RoPE, routing (softmax + top-k + weights),
 * SwiGLU, gated attention's split and sigmoid gate, and the MoE combine.
 *
 * Numerics follow kernels/ops.c and model/moe.c where they decide results:
 * RMSNorm sums float squares in double and scales before the weight; softmax
 * sums exponentials in double; RoPE advances theta by repeated float
 * multiplication; top-k takes the lower index on ties; the top-k weights are
 * renormalised with llama.cpp's clamp; expert outputs are summed in top-k
 * order before the shared expert is added.
 */
#include "cu_common.h"

#include <math.h>

__device__ double block_sum_d(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    double t = 0.0;
    for (int i = 0; i < nw; i++) t += sh[i];
    return t;
}

__device__ float block_max_f(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    float t = -INFINITY;
    for (int i = 0; i < nw; i++) t = fmaxf(t, sh[i]);
    return t;
}

__global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int n, int ldx, int ldo, float eps) {
    __shared__ double sh[32];
    const float *xr = x + (size_t)blockIdx.x * ldx;
    float *o = out + (size_t)blockIdx.x * ldo;
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += (double)(xr[i] * xr[i]);
    s = block_sum_d(s, sh);
    const float mean = (float)(s / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = (xr[i] * scale) * w[i];
}

void cu_rmsnorm(cudaStream_t s, float *out, const float *x, const float *w, int n, int rows, int ldx, int ldo,
                float eps) {
    if (rows <= 0) return;
    const int th = n >= 1024 ? 256 : n >= 256 ? 128 : 64;
    rmsnorm_kernel<<<rows, th, 0, s>>>(out, x, w, n, ldx, ldo, eps);
}

/* one block per (token, head); thread i rotates pair (i, i + n_rot/2) */
__global__ void rope_kernel(float *x, int n_heads, int head_dim, int n_rot, int pos0, const int32_t *pos_dev,
                            float theta_scale) {
    const int t = blockIdx.y, h = blockIdx.x, half = n_rot / 2;
    if (pos_dev) pos0 = *pos_dev;
    float *v = x + ((size_t)t * n_heads + h) * head_dim;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float theta = (float)(pos0 + t);
        for (int q = 0; q < i; q++) theta *= theta_scale;
        const float c = cu_cosf(theta), sn = cu_sinf(theta);
        const float x0 = v[i], x1 = v[i + half];
        v[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn)); /* no FMA: the CPU rounds each product */
        v[i + half] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c));
    }
}

void cu_rope(cudaStream_t s, float *x, int n_tok, int n_heads, int head_dim, int n_rot, int pos0,
             const int32_t *pos_dev, float base) {
    if (n_tok <= 0) return;
    const float theta_scale = powf(base, -2.0f / (float)n_rot); /* on the host, as ops.c computes it */
    rope_kernel<<<dim3(n_heads, n_tok), 64, 0, s>>>(x, n_heads, head_dim, n_rot, pos0, pos_dev, theta_scale);
}

/* one block per token: softmax over the experts, then top-k on thread 0 */
__global__ void route_kernel(const float *logits, int X, int k, int norm, float scale, int32_t *sel, float *selw) {
    extern __shared__ float p[];
    __shared__ double shd[32];
    __shared__ float shf[32];
    const float *l = logits + (size_t)blockIdx.x * X;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < X; i += blockDim.x) mx = fmaxf(mx, l[i]);
    mx = block_max_f(mx, shf);
    double sum = 0.0;
    for (int i = threadIdx.x; i < X; i += blockDim.x) {
        p[i] = cu_expf(l[i] - mx);
        sum += (double)p[i];
    }
    sum = block_sum_d(sum, shd);
    const float inv = (float)(1.0 / sum);
    for (int i = threadIdx.x; i < X; i += blockDim.x) p[i] *= inv;
    __syncthreads();
    if (threadIdx.x >= 32) return;
    /* top-k by one warp: each pick is an argmax (lower index on ties), the
     * picked probability then set to -1 (probabilities are >= 0) */
    const int lane = threadIdx.x;
    int32_t *s = sel + (size_t)blockIdx.x * k;
    float *w = selw + (size_t)blockIdx.x * k;
    float tot = 0.0f;
    for (int q = 0; q < k; q++) {
        float bv = -2.0f;
        int bi = X;
        for (int e = lane; e < X; e += 32)
            if (p[e] > bv) bv = p[e], bi = e;
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
        }
        __syncwarp();
        if (lane == 0) {
            s[q] = bi;
            w[q] = bv;
            p[bi] = -1.0f;
        }
        tot += bv;
        __syncwarp();
    }
    if (lane != 0) return;
    if (norm) {
        if (tot < 6.103515625e-5f) tot = 6.103515625e-5f;
        for (int q = 0; q < k; q++) w[q] /= tot;
    }
    if (scale != 0.0f && scale != 1.0f)
        for (int q = 0; q < k; q++) w[q] *= scale;
}

void cu_route(cudaStream_t s, const float *logits, int n_tok, int n_expert, int k, bool norm, float scale,
              int32_t *sel, float *selw) {
    if (n_tok <= 0) return;
    route_kernel<<<n_tok, 128, (size_t)n_expert * sizeof(float), s>>>(logits, n_expert, k, norm, scale, sel, selw);
}

__global__ void swiglu_kernel(float *g, const float *u, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = (g[i] / (1.0f + cu_expf(-g[i]))) * u[i];
}

void cu_swiglu(cudaStream_t s, float *g, const float *u, size_t n) {
    if (!n) return;
    swiglu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(g, u, n);
}

__global__ void swiglu_tiles_kernel(float *g, const float *u, const cu_tile *tiles, int f) {
    const cu_tile *t = &tiles[blockIdx.x];
    for (int i = 0; i < t->n; i++) {
        float *gr = g + (size_t)t->a[i] * f;
        const float *ur = u + (size_t)t->a[i] * f;
        for (int d = threadIdx.x; d < f; d += blockDim.x) gr[d] = (gr[d] / (1.0f + cu_expf(-gr[d]))) * ur[d];
    }
}

void cu_swiglu_tiles(cudaStream_t s, float *g, const float *u, const cu_tile *tiles, int n_tiles, int f) {
    if (n_tiles <= 0) return;
    swiglu_tiles_kernel<<<n_tiles, 128, 0, s>>>(g, u, tiles, f);
}

/* a[t][h][d] *= sigmoid(g[t][h*g_stride + d]) (gated attention: g = qg + d) */
__global__ void sigmoid_mul_kernel(float *a, const float *g, int n_head, int d, int g_stride) {
    const int t = blockIdx.y, h = blockIdx.x;
    float *ar = a + ((size_t)t * n_head + h) * d;
    const float *gr = g + ((size_t)t * n_head + h) * g_stride;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ar[i] *= 1.0f / (1.0f + cu_expf(-gr[i]));
}

void cu_sigmoid_mul(cudaStream_t s, float *a, const float *g, int n_tok, int n_head, int d, int g_stride) {
    if (n_tok <= 0) return;
    sigmoid_mul_kernel<<<dim3(n_head, n_tok), 64, 0, s>>>(a, g, n_head, d, g_stride);
}

__global__ void split_q_kernel(const float *qg, float *q, int n_head, int d) {
    const int t = blockIdx.y, h = blockIdx.x;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        q[((size_t)t * n_head + h) * d + i] = qg[((size_t)t * n_head + h) * 2 * d + i];
}

void cu_split_q(cudaStream_t s, const float *qg, float *q, int n_tok, int n_head, int d) {
    if (n_tok <= 0) return;
    split_q_kernel<<<dim3(n_head, n_tok), 64, 0, s>>>(qg, q, n_head, d);
}

__global__ void moe_combine_kernel(float *x, const float *down, const float *selw, const float *sd,
                                   const float *sgate, int k, int E) {
    const int t = blockIdx.y;
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= E) return;
    const float *dr = down + (size_t)t * k * E + d;
    const float *w = selw + (size_t)t * k;
    /* moe.c: each expert row scaled by its weight (rounded), then summed in top-k order */
    float acc = __fmul_rn(dr[0], w[0]);
    for (int q = 1; q < k; q++) acc = __fadd_rn(acc, __fmul_rn(dr[(size_t)q * E], w[q]));
    float *xr = x + (size_t)t * E + d;
    if (sd) {
        const float g = 1.0f / (1.0f + cu_expf(-sgate[t]));
        *xr += __fadd_rn(acc, __fmul_rn(sd[(size_t)t * E + d], g));
    } else {
        *xr += acc;
    }
}

void cu_moe_combine(cudaStream_t s, float *x, const float *down, const float *selw, const float *sd,
                    const float *sgate, int n_tok, int k, int n_embd) {
    if (n_tok <= 0) return;
    moe_combine_kernel<<<dim3((n_embd + 127) / 128, n_tok), 128, 0, s>>>(x, down, selw, sd, sgate, k, n_embd);
}
