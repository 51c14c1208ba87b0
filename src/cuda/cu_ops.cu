/* cu_ops.cu — the element- and row-wise steps of the forward pass on the
 * device: RMSNorm, routing (softmax + top-k + weights), SwiGLU, gated
 * attention's sigmoid gate, the MoE combine, and attention's preparation of
 * q and k (split, QK norm, NeoX (partial) RoPE, the KV cache append).
 *
 * Numerics follow kernels/ops.c and model/moe.c where they decide results:
 * RMSNorm sums float squares in double and scales before the weight; softmax
 * sums exponentials in double; RoPE advances theta by repeated float
 * multiplication; top-k takes the lower index on ties; the top-k weights are
 * renormalised with llama.cpp's clamp; expert outputs are summed in top-k
 * order before the shared expert is added.
 *
 * Decode is a chain of short kernels whose count sets its speed, so steps
 * that follow each other are fused where the values allow: RMSNorm and
 * SwiGLU convert their output to the int8 blocks the next matmul takes
 * (cu_q8act.cuh's bytes); attention's preparation is one kernel.  (The MoE
 * combine fused with the next norm was measured slower: one block a token
 * pulls the eight expert rows through one SM.)  A fused step does the
 * plain step's arithmetic in its order (rms_row, rope_pair, swiglu1, the
 * converters' block functions), so the bits agree with the CPU's as before.
 */
#include "cu_common.h"
#include "cu_q8act.cuh"

#include <cuda_fp16.h>
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

/* Where a step writes its output's int8 form too (kind 0: it does not). */
struct q8_out {
    int kind;
    int8_t *q;
    int32_t *bs;
    float *d;
};

/* The int8 form of a scratch the caller knows will take it (cu_q8_plan), and
 * the record that it holds out's. */
static q8_out q8_target(const cu_tensor *next, const float *out, int rows, int n) {
    q8_out t = {0, NULL, NULL, NULL};
    cu_q8_scratch *sc;
    if (!next || !(t.kind = cu_q8_plan(next, n, rows, &sc))) {
        cu_q8_forget(); /* out changes: an int8 form held of it is stale */
        return t;
    }
    t.q = (int8_t *)sc->xq, t.bs = cu_q8k_bsums(sc), t.d = sc->xd;
    cu_q8_held(sc, false, out, (size_t)rows * n, t.kind);
    return t;
}

/* Converts row `row` (n packed floats at o, written by this block before the
 * __syncthreads every thread reaches first) into q8's blocks of that row. */
__device__ void q8_row(const float *o, int row, int n, const q8_out &q8) {
    if (q8.kind == CU_Q8_K) {
        const int nb = n / 256, lane = threadIdx.x & 31;
        for (int b = threadIdx.x >> 5; b < nb; b += blockDim.x >> 5) {
            const size_t fb = (size_t)row * nb + b;
            cu_q8k_block(o + (size_t)b * 256, q8.q + fb * 256, q8.bs + fb * 16, &q8.d[fb], lane);
        }
    } else {
        const int nb = n / 32, lane = threadIdx.x & 31;
        for (int b = threadIdx.x >> 5; b < nb; b += blockDim.x >> 5) {
            const size_t fb = (size_t)row * nb + b;
            cu_q8_0_block(o[(size_t)b * 32 + lane], q8.q + fb * 32, &q8.d[fb], lane);
        }
    }
}

/* Row values a thread keeps in registers (i = tid + j * blockDim, j <
 * RMS_REG); past them (rows over RMS_REG x 256) the row is read again. */
enum { RMS_REG = 16 };

/* RMSNorm of one row into o (and q8's blocks of it): xv holds the thread's
 * first RMS_REG values of the row, xr the whole row (for the rest).  The
 * weight's loads are issued before the sum so that they overlap it.  The
 * sum's order (thread-strided, then block_sum_d) is the one every caller
 * shares, so a fused caller has the plain kernel's bits. */
__device__ void rms_row(const float *xr, const float *xv, const float *w, float *o, int n, float eps, double *sh,
                        const q8_out &q8, int row) {
    const int bd = blockDim.x, tid = threadIdx.x;
    float wv[RMS_REG];
#pragma unroll
    for (int j = 0; j < RMS_REG; j++) wv[j] = tid + j * bd < n ? w[tid + j * bd] : 0.0f;
    double s = 0.0;
#pragma unroll
    for (int j = 0; j < RMS_REG; j++)
        if (tid + j * bd < n) s += (double)(xv[j] * xv[j]);
    for (int i = tid + RMS_REG * bd; i < n; i += bd) s += (double)(xr[i] * xr[i]);
    s = block_sum_d(s, sh);
    const float mean = (float)(s / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < RMS_REG; j++)
        if (tid + j * bd < n) o[tid + j * bd] = (xv[j] * scale) * wv[j];
    for (int i = tid + RMS_REG * bd; i < n; i += bd) o[i] = (xr[i] * scale) * w[i];
    if (!q8.kind) return;
    __syncthreads(); /* the row's floats, written by every thread, read by the block's converters */
    q8_row(o, row, n, q8);
}

__global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int n, int ldx, int ldo, float eps,
                               q8_out q8) {
    cu_pdl_enter();
    __shared__ double sh[32];
    const float *xr = x + (size_t)blockIdx.x * ldx;
    float xv[RMS_REG];
#pragma unroll
    for (int j = 0; j < RMS_REG; j++) xv[j] = threadIdx.x + j * blockDim.x < n ? xr[threadIdx.x + j * blockDim.x] : 0.0f;
    rms_row(xr, xv, w, out + (size_t)blockIdx.x * ldo, n, eps, sh, q8, blockIdx.x);
}

static int rms_threads(int n) { return n >= 1024 ? 256 : n >= 256 ? 128 : 64; }

void cu_rmsnorm_q8(cudaStream_t s, float *out, const float *x, const float *w, int n, int rows, float eps,
                   const cu_tensor *next) {
    if (rows <= 0) return;
    cu_launch(rmsnorm_kernel, rows, rms_threads(n), 0, s, out, x, w, n, n, n, eps, q8_target(next, out, rows, n));
}

/* NeoX RoPE of pair (i, i + half) of one head's row at position pos: theta
 * advanced by repeated float multiplication as ops.c does. */
__device__ __forceinline__ void rope_pair(float *v, int i, int half, int pos, float theta_scale) {
    float theta = (float)pos;
    for (int q = 0; q < i; q++) theta *= theta_scale;
    const float c = cu_cosf(theta), sn = cu_sinf(theta);
    const float x0 = v[i], x1 = v[i + half];
    v[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn)); /* no FMA: the CPU rounds each product */
    v[i + half] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c));
}

/* one block per token: softmax over the experts, then top-k on thread 0 */
__global__ void route_kernel(const float *logits, int X, int k, int norm, float scale, int32_t *sel, float *selw,
                             cu_tile *tiles) {
    cu_pdl_enter();
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
    if (tiles) /* one tile per assignment a: a alone with its expert (decode's grouping) */
        for (int q = 0; q < k; q++) {
            cu_tile *t = &tiles[(size_t)blockIdx.x * k + q];
            t->e = s[q];
            t->n = 1, t->run = 0;
            t->a[0] = blockIdx.x * k + q;
            for (int i = 1; i < CU_MM_NT; i++) t->a[i] = 0;
        }
}

void cu_route(cudaStream_t s, const float *logits, int n_tok, int n_expert, int k, bool norm, float scale,
              int32_t *sel, float *selw, cu_tile *tiles) {
    if (n_tok <= 0) return;
    cu_launch(route_kernel, n_tok, 128, (size_t)n_expert * sizeof(float), s, logits, n_expert, k, norm, scale, sel, selw,
                                                                       tiles);
}

/* cu_group_tiles: count the assignments of each expert; then (one thread:
 * a few hundred experts) each expert's first tile; then place every
 * assignment at its expert's cursor, the first of each tile writing the
 * tile's expert, run and count. */
__global__ void group_count_kernel(const int32_t *sel, int nk, int32_t *count) {
    cu_pdl_enter();
    const int a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a < nk) atomicAdd(&count[sel[a]], 1);
}

__global__ void group_scan_kernel(const int32_t *count, int32_t *tile0, int X) {
    cu_pdl_enter();
    if (threadIdx.x) return;
    for (int e = 0, acc = 0; e < X; e++) {
        tile0[e] = acc;
        acc += (count[e] + CU_MM_NT - 1) / CU_MM_NT;
    }
}

__global__ void group_fill_kernel(const int32_t *sel, int nk, const int32_t *count, const int32_t *tile0,
                                  int32_t *cursor, cu_tile *tiles) {
    cu_pdl_enter();
    const int a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a >= nk) return;
    const int e = sel[a], p = atomicAdd(&cursor[e], 1);
    cu_tile *t = &tiles[tile0[e] + p / CU_MM_NT];
    t->a[p % CU_MM_NT] = a;
    if (p % CU_MM_NT == 0) t->e = e, t->run = p / CU_MM_NT, t->n = min((int)CU_MM_NT, count[e] - p);
}

void cu_group_tiles(cudaStream_t s, const int32_t *sel, int n_assign, int n_expert, int32_t *work, cu_tile *tiles) {
    if (n_assign <= 0) return;
    int32_t *count = work, *cursor = work + n_expert, *tile0 = work + 2 * (size_t)n_expert;
    /* the tiles past the last stay empty (n = 0) */
    cudaMemsetAsync(tiles, 0, (size_t)cu_group_bound(n_assign, n_expert) * sizeof(cu_tile), s);
    cudaMemsetAsync(work, 0, 2 * (size_t)n_expert * 4, s); /* count, cursor */
    const int blocks = (n_assign + 255) / 256;
    cu_launch(group_count_kernel, blocks, 256, 0, s, sel, n_assign, count);
    cu_launch(group_scan_kernel, 1, 32, 0, s, count, tile0, n_expert);
    cu_launch(group_fill_kernel, blocks, 256, 0, s, sel, n_assign, count, tile0, cursor, tiles);
}

__device__ __forceinline__ float swiglu1(float g, float u) { return (g / (1.0f + cu_expf(-g))) * u; }

__global__ void swiglu_kernel(float *g, const float *u, size_t n) {
    cu_pdl_enter();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = swiglu1(g[i], u[i]);
}

void cu_swiglu(cudaStream_t s, float *g, const float *u, size_t n) {
    if (!n) return;
    cu_launch(swiglu_kernel, (unsigned)((n + 255) / 256), 256, 0, s, g, u, n);
}

/* SwiGLU then the int8 form, block by block: a warp per 256 (Q8_K) or per
 * 32 (Q8_0) computes its block's values, then converts them. */
__global__ void swiglu_q8_kernel(float *g, const float *u, int n_blocks, q8_out q8) {
    cu_pdl_enter();
    if (q8.kind == CU_Q8_K) {
        const int b = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
        if (b >= n_blocks) return;
        float *gb = g + (size_t)b * 256;
        const float *ub = u + (size_t)b * 256;
        for (int i = 0; i < 8; i++) gb[8 * lane + i] = swiglu1(gb[8 * lane + i], ub[8 * lane + i]);
        __syncwarp(); /* the block's values, written by the warp, read by every lane */
        cu_q8k_block(gb, q8.q + (size_t)b * 256, q8.bs + (size_t)b * 16, &q8.d[b], lane);
    } else {
        const int b = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
        if (b >= n_blocks) return;
        const size_t i = (size_t)b * 32 + lane;
        const float v = swiglu1(g[i], u[i]);
        g[i] = v;
        cu_q8_0_block(v, q8.q + (size_t)b * 32, &q8.d[b], lane);
    }
}

void cu_swiglu_q8(cudaStream_t s, float *g, const float *u, int rows, int f, const cu_tensor *next) {
    if (rows <= 0) return;
    const q8_out q8 = q8_target(next, g, rows, f);
    const size_t n = (size_t)rows * f;
    if (!q8.kind) {
        cu_swiglu(s, g, u, n);
    } else if (q8.kind == CU_Q8_K) {
        const int nb = (int)(n / 256);
        cu_launch(swiglu_q8_kernel, (nb + 3) / 4, 128, 0, s, g, u, nb, q8);
    } else {
        const int nb = (int)(n / 32);
        cu_launch(swiglu_q8_kernel, (nb + 3) / 4, 128, 0, s, g, u, nb, q8);
    }
}

__global__ void swiglu_tiles_kernel(float *g, const float *u, const cu_tile *tiles, int f) {
    cu_pdl_enter();
    const cu_tile *t = &tiles[blockIdx.x];
    for (int i = 0; i < t->n; i++) {
        float *gr = g + (size_t)t->a[i] * f;
        const float *ur = u + (size_t)t->a[i] * f;
        for (int d = threadIdx.x; d < f; d += blockDim.x) gr[d] = swiglu1(gr[d], ur[d]);
    }
}

void cu_swiglu_tiles(cudaStream_t s, float *g, const float *u, const cu_tile *tiles, int n_tiles, int f) {
    if (n_tiles <= 0) return;
    cu_launch(swiglu_tiles_kernel, n_tiles, 128, 0, s, g, u, tiles, f);
}

/* a[t][h][d] *= sigmoid(g[t][h*g_stride + d]) (gated attention: g = qg + d) */
__global__ void sigmoid_mul_kernel(float *a, const float *g, int n_head, int d, int g_stride) {
    cu_pdl_enter();
    const int t = blockIdx.y, h = blockIdx.x;
    float *ar = a + ((size_t)t * n_head + h) * d;
    const float *gr = g + ((size_t)t * n_head + h) * g_stride;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ar[i] *= 1.0f / (1.0f + cu_expf(-gr[i]));
}

void cu_sigmoid_mul(cudaStream_t s, float *a, const float *g, int n_tok, int n_head, int d, int g_stride) {
    if (n_tok <= 0) return;
    cu_launch(sigmoid_mul_kernel, dim3(n_head, n_tok), 64, 0, s, a, g, n_head, d, g_stride);
}

__global__ void moe_combine_kernel(float *x, const float *down, const float *selw, const float *sd,
                                   const float *sgate, int k, int E) {
    cu_pdl_enter();
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

__global__ void scatter_rows_kernel(float *down, const float *rows, const int32_t *idx, int E) {
    cu_pdl_enter();
    const int i = blockIdx.y, d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d < E) down[(size_t)idx[i] * E + d] = rows[(size_t)i * E + d];
}

void cu_scatter_rows(cudaStream_t s, float *down, const float *rows, const int32_t *idx, int n, int E) {
    if (n <= 0) return;
    cu_launch(scatter_rows_kernel, dim3((E + 255) / 256, n), 256, 0, s, down, rows, idx, E);
}

void cu_moe_combine(cudaStream_t s, float *x, const float *down, const float *selw, const float *sd,
                    const float *sgate, int n_tok, int k, int n_embd) {
    if (n_tok <= 0) return;
    cu_launch(moe_combine_kernel, dim3((n_embd + 127) / 128, n_tok), 128, 0, s, x, down, selw, sd, sgate, k, n_embd);
}

/* Attention's steps between the q/k/v projections and the scores, one
 * block per (token, head): a query head takes its q (out of the gated
 * layout's [q | gate] when gated), RMSNorms it by q_norm and rotates it; a KV
 * head RMSNorms and rotates its k by k_norm and appends k and v to the cache
 * (f16 rounded to nearest even, or f32).  The norm is rms_row with the
 * plain RMSNorm's block size and the rotation ops.c's (rope_pair), so the
 * bits are what the separate steps gave. */
/* Row t (position pos) of the block's head b = blockIdx.x. */
__device__ __forceinline__ void attn_prep_body(const float *qg, float *q, float *k, const float *v, const float *qn,
                                               const float *kn, void *kc, void *vc, int f32, int H, int HKV, int D,
                                               int n_rot, int t, int pos, float theta_scale, float eps, int gated) {
    __shared__ double sh[32];
    const int b = blockIdx.x, half = n_rot / 2;
    const bool is_q = b < H;
    const float *src;
    float *row;
    if (is_q) {
        row = q + ((size_t)t * H + b) * D;
        src = gated ? qg + ((size_t)t * H + b) * 2 * D : row;
    } else {
        row = k + ((size_t)t * HKV + (b - H)) * D;
        src = row;
    }
    float xv[RMS_REG];
#pragma unroll
    for (int j = 0; j < RMS_REG; j++) xv[j] = threadIdx.x + j * blockDim.x < D ? src[threadIdx.x + j * blockDim.x] : 0.0f;
    if (src != row) /* the tail of a long head (past the registers) comes from src too */
        for (int i = threadIdx.x + RMS_REG * blockDim.x; i < D; i += blockDim.x) row[i] = src[i];
    const q8_out none = {0, NULL, NULL, NULL};
    rms_row(row, xv, is_q ? qn : kn, row, D, eps, sh, none, 0);
    __syncthreads(); /* the normed row, written by every thread, rotated in pairs */
    for (int i = threadIdx.x; i < half; i += blockDim.x) rope_pair(row, i, half, pos, theta_scale);
    if (is_q) return;
    __syncthreads();
    const int g = b - H, rw = HKV * D;
    const size_t at = (size_t)pos * rw + (size_t)g * D;
    const float *vr = v + (size_t)t * rw + (size_t)g * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        if (f32) {
            ((float *)kc)[at + i] = row[i];
            ((float *)vc)[at + i] = vr[i];
        } else {
            ((__half *)kc)[at + i] = __float2half_rn(row[i]);
            ((__half *)vc)[at + i] = __float2half_rn(vr[i]);
        }
    }
}

__global__ void attn_prep_kernel(const float *qg, float *q, float *k, const float *v, const float *qn, const float *kn,
                                 void *kc, void *vc, int f32, int H, int HKV, int D, int n_rot, int pos0,
                                 const int32_t *pos_dev, float theta_scale, float eps, int gated) {
    cu_pdl_enter();
    if (pos_dev) pos0 = *pos_dev;
    const int t = blockIdx.y;
    attn_prep_body(qg, q, k, v, qn, kn, kc, vc, f32, H, HKV, D, n_rot, t, pos0 + t, theta_scale, eps, gated);
}

/* One token a sequence: row blockIdx.y is sequence blockIdx.y's, into its cache. */
__global__ void attn_prep_seqs_kernel(const float *qg, float *q, float *k, const float *v, const float *qn,
                                      const float *kn, const cu_seqs sq, int f32, int H, int HKV, int D, int n_rot,
                                      float theta_scale, float eps, int gated) {
    cu_pdl_enter();
    const int z = blockIdx.y, pos = sq.pos_dev[z] ? *sq.pos_dev[z] : sq.pos0[z];
    attn_prep_body(qg, q, k, v, qn, kn, sq.a[z], sq.b[z], f32, H, HKV, D, n_rot, z, pos, theta_scale, eps, gated);
}

void cu_attn_prep(cudaStream_t s, const float *qg, float *q, float *k, const float *v, const float *q_norm,
                  const float *k_norm, void *kc, void *vc, bool f32, int n_tok, int H, int HKV, int D, int n_rot,
                  int pos0, const int32_t *pos_dev, float base, float eps, bool gated) {
    if (n_tok <= 0) return;
    const float theta_scale = powf(base, -2.0f / (float)n_rot); /* on the host, as ops.c computes it */
    cu_launch(attn_prep_kernel, dim3(H + HKV, n_tok), rms_threads(D), 0, s, qg, q, k, v, q_norm, k_norm, kc, vc, f32, H, HKV,
                                                                     D, n_rot, pos0, pos_dev, theta_scale, eps, gated);
}

void cu_attn_prep_seqs(cudaStream_t s, const float *qg, float *q, float *k, const float *v, const float *q_norm,
                       const float *k_norm, const cu_seqs *sq, bool f32, int H, int HKV, int D, int n_rot, float base,
                       float eps, bool gated) {
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    cu_launch(attn_prep_seqs_kernel, dim3(H + HKV, sq->n), rms_threads(D), 0, s, qg, q, k, v, q_norm, k_norm, *sq, f32,
                                                                           H, HKV, D, n_rot, theta_scale, eps, gated);
}
