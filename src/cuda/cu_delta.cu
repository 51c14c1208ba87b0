/* cu_delta.cu — qwen35moe's Gated DeltaNet on the device (model/deltanet.c
 * is the CPU form and the math's description).
 *
 *   gates     beta = sigmoid(b), alpha = softplus(a + dt_bias) * A: made by
 *             the delta step from the raw projections
 *   conv      a thread per (token, channel), state [(K-1)][C] as the CPU,
 *   + l2norm  and in the same kernel the L2 norm of every key head's q and
 *             k, llama.cpp's composition (deltanet.c)
 *   delta     one warp per state row j of a value head, the row in registers
 *             for the whole chunk (S is a template argument: 16..128), so a
 *             prefill chunk reads and writes the S x S state once.  Per
 *             token: M_j *= decay; d = (v_j - M_j.k) * beta; M_j += d k; o_j
 *             = M_j.q / sqrt(S) — the CPU's operations in its summation order.
 *   gated norm  o = RMSNorm_S(o) * ssm_norm * silu(z)
 * The device state layout is the CPU's (row j of a head = column j).
 */
#include "cu_common.h"

#include <math.h>

/* A value head's gates for one token from the raw projections: beta =
 * sigmoid(b); alpha = softplus(a + dt_bias) * A (deltanet.c's), the decay
 * exp(alpha).  Made where they are used (delta_kernel), not stored. */
__device__ __forceinline__ void dn_gates1(float braw, float araw, float dt, float A, float *beta, float *decay) {
    *beta = 1.0f / (1.0f + cu_expf(-braw));
    const float x = araw + dt;
    const float alpha = (x > 20.0f ? x : cu_logf(1.0f + cu_expf(x))) * A;
    *decay = cu_expf(alpha);
}

/* The causal conv and SiLU of token t (blockIdx.y, and on by gridDim.y),
 * channels [128 blockIdx.x, +128): a token's conv reads inputs only (the
 * chunk's, or before it the state's row p + K - 1), never an earlier
 * output, so every (token, channel) runs at once.  Then the L2 norm of the
 * q and k vectors (channels below n_norm, vectors of S dividing 128, so
 * whole vectors in the block) on the block's values in shared memory: a
 * warp a vector, the squares summed in double lane-strided then by the
 * butterfly, x * (1 / sqrt(mean + eps / S)) * (1 / sqrt(S)).  One token (n == 1): each thread also moves its
 * channel's state, so decode is one launch; a chunk moves it afterwards
 * (conv_state_kernel), once every token has read it. */
__device__ __forceinline__ void conv_norm_body(const float *__restrict__ mix, float *__restrict__ cv, float *st,
                                               const float *__restrict__ w, int n, int C, int K, int n_norm, int S,
                                               float eps) {
    __shared__ float sh[128];
    const int base = blockIdx.x * 128, ch = base + threadIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float *wc = w + (size_t)(ch < C ? ch : 0) * K;
    for (int t = blockIdx.y; t < n; t += gridDim.y) {
        float out = 0.0f;
        if (ch < C) {
            float sum = 0.0f;
            /* products rounded before each add, as the CPU (built without FP contraction) */
            for (int q = 0; q < K - 1; q++) {
                const int p = t - (K - 1) + q;
                const float in = p < 0 ? st[(size_t)(p + K - 1) * C + ch] : mix[(size_t)p * C + ch];
                sum = __fadd_rn(sum, __fmul_rn(in, wc[q]));
            }
            const float in = mix[(size_t)t * C + ch];
            sum = __fadd_rn(sum, __fmul_rn(in, wc[K - 1]));
            out = sum / (1.0f + cu_expf(-sum));
            if (n == 1) { /* the state: this thread's channel only, read above */
                for (int q = 0; q + 1 < K - 1; q++) st[(size_t)q * C + ch] = st[(size_t)(q + 1) * C + ch];
                if (K > 1) st[(size_t)(K - 2) * C + ch] = in;
            }
        }
        float *row = cv + (size_t)t * C;
        if (base >= n_norm) { /* block-uniform: v channels only */
            if (ch < C) row[ch] = out;
            continue;
        }
        sh[threadIdx.x] = out;
        __syncthreads();
        for (int v = warp; v < 128 / S && base + v * S < n_norm; v += blockDim.x >> 5) {
            const float *x = sh + v * S;
            double s = 0.0;
            for (int i = lane; i < S; i += 32) s += (double)x[i] * x[i];
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            const float mean = (float)(s / (double)S);
            const float scale = 1.0f / sqrtf(mean + eps / (float)S);
            const float post = 1.0f / sqrtf((float)S);
            for (int i = lane; i < S; i += 32) row[base + v * S + i] = (x[i] * scale) * post;
        }
        if (ch >= n_norm && ch < C) row[ch] = out; /* a block across the q/k end */
        __syncthreads(); /* sh is rewritten by the next token */
    }
}

__global__ void conv_norm_kernel(const float *__restrict__ mix, float *__restrict__ cv, float *st,
                                 const float *__restrict__ w, int n, int C, int K, int n_norm, int S, float eps) {
    cu_pdl_enter();
    conv_norm_body(mix, cv, st, w, n, C, K, n_norm, S, eps);
}

/* One token a sequence: sequence blockIdx.z's row and state. */
__global__ void conv_norm_seqs_kernel(const float *__restrict__ mix, float *__restrict__ cv, const cu_seqs sq,
                                      const float *__restrict__ w, int C, int K, int n_norm, int S, float eps) {
    cu_pdl_enter();
    const size_t z = blockIdx.z;
    conv_norm_body(mix + z * C, cv + z * C, (float *)sq.a[z], w, 1, C, K, n_norm, S, eps);
}

/* The state after n tokens: its row q holds input n - (K - 1) + q, from the
 * chunk or, when the chunk is shorter, from the old state's row n + q (rows
 * are rewritten in ascending order, so each is read before it is written). */
__global__ void conv_state_kernel(const float *mix, float *st, int n, int C, int K) {
    cu_pdl_enter();
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    for (int q = 0; q < K - 1; q++) {
        const int p = n - (K - 1) + q;
        st[(size_t)q * C + ch] = p < 0 ? st[(size_t)(n + q) * C + ch] : mix[(size_t)p * C + ch];
    }
}

void cu_conv_l2norm(cudaStream_t s, const float *mix, float *cv, float *state, const float *w, int n_tok, int C, int K,
                    int n_norm, int S, float eps) {
    if (n_tok <= 0) return;
    const int blocks = (C + 127) / 128;
    cu_launch(conv_norm_kernel, dim3(blocks, n_tok < 65535 ? n_tok : 65535), 128, 0, s, mix, cv, state, w, n_tok, C, K,
                                                                                  n_norm, S, eps);
    if (n_tok > 1) cu_launch(conv_state_kernel, blocks, 128, 0, s, mix, state, n_tok, C, K);
}

void cu_conv_l2norm_seqs(cudaStream_t s, const float *mix, float *cv, const cu_seqs *sq, const float *w, int C, int K,
                         int n_norm, int S, float eps) {
    cu_launch(conv_norm_seqs_kernel, dim3((C + 127) / 128, 1, sq->n), 128, 0, s, mix, cv, *sq, w, C, K, n_norm, S, eps);
}

/* A state row's dot with x, in the CPU's order (delta_avx512.c) so that the
 * same inputs give the same bits: for S a multiple of 64, partial p (0..63)
 * is an FMA chain over i = p, p + 64, ... (lane L holds i = L + 32c, so its
 * partials are p = L and L + 32), then the pairwise tree (p, p+32), (p,
 * p+16), 8, 4, 2, 1 — the AVX-512 accumulators' adds and
 * _mm512_reduce_add_ps; for smaller S the scalar tail loop's order (one
 * running sum of rounded products; the C code is built without FP
 * contraction, so no FMA here either).  Every lane returns the sum. */
template <int S> __device__ __forceinline__ float dn_row_dot(const float *m, const float *x, int lane) {
    constexpr int NC = (S + 31) / 32;
    if constexpr (S % 64 == 0) {
        float pa = __fmaf_rn(m[0], x[0], 0.0f), pb = __fmaf_rn(m[1], x[1], 0.0f);
#pragma unroll
        for (int c = 2; c < NC; c += 2) {
            pa = __fmaf_rn(m[c], x[c], pa);
            pb = __fmaf_rn(m[c + 1], x[c + 1], pb);
        }
        float v = __fadd_rn(pa, pb);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
        return v;
    } else {
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const float p = __fmul_rn(m[c], x[c]);
            const int n = S - 32 * c < 32 ? S - 32 * c : 32;
            for (int l = 0; l < n; l++) sum = __fadd_rn(sum, __shfl_sync(0xffffffffu, p, l));
        }
        return sum;
    }
}

/* m += x * d, as the CPU's mad (FMA in the vector body, rounded product +
 * add in the scalar tail that is all of it for S < 64). */
template <int S> __device__ __forceinline__ void dn_row_mad(float *m, const float *x, float d) {
    constexpr int NC = (S + 31) / 32;
#pragma unroll
    for (int c = 0; c < NC; c++) m[c] = S % 64 == 0 ? __fmaf_rn(x[c], d, m[c]) : __fadd_rn(m[c], __fmul_rn(x[c], d));
}

enum { DN_WARPS = 4 };

/* One warp per state row j of value head h (row j = the state's column j,
 * contiguous as on the CPU); the row lives in registers, S/32 elements a
 * lane, for the whole chunk of n tokens, so a prefill chunk reads and writes
 * the state once and every load is coalesced. */
template <int S>
__device__ __forceinline__ void delta_body(float *state, const float *cv, const float *beta, const float *alpha,
                                           const float *dt, const float *A, float *o, int n, int HK, int HV) {
    constexpr int NC = (S + 31) / 32;
    const int h = blockIdx.x, lane = threadIdx.x & 31;
    const int j = blockIdx.y * DN_WARPS + (threadIdx.x >> 5);
    if (j >= S) return; /* whole warps only: j is uniform in a warp */
    const int KD = S * HK, VD = S * HV, C = 2 * KD + VD;
    float *Mj = state + ((size_t)h * S + j) * S;
    float m[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) m[c] = lane + 32 * c < S ? Mj[lane + 32 * c] : 0.0f;
    const float scale = 1.0f / sqrtf((float)S);
    float gb = 0.0f, gd = 0.0f; /* lane l: token (t & ~31) + l's beta and decay */
    for (int t = 0; t < n; t++) {
        const float *row = cv + (size_t)t * C;
        const float *qh = row + (h % HK) * S, *kh = row + KD + (h % HK) * S;
        float q[NC], k[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const bool in = lane + 32 * c < S;
            q[c] = in ? qh[lane + 32 * c] : 0.0f;
            k[c] = in ? kh[lane + 32 * c] : 0.0f;
        }
        const float vj = row[2 * KD + h * S + j];
        /* the gates of 32 tokens at a time, one a lane, off the token chain's
         * critical path (their exp / log run in double) */
        if ((t & 31) == 0 && t + lane < n)
            dn_gates1(beta[(size_t)(t + lane) * HV + h], alpha[(size_t)(t + lane) * HV + h], dt[h], A[h], &gb, &gd);
        const float b = __shfl_sync(0xffffffffu, gb, t & 31), decay = __shfl_sync(0xffffffffu, gd, t & 31);
#pragma unroll
        for (int c = 0; c < NC; c++) m[c] = __fmul_rn(m[c], decay);
        const float d = __fmul_rn(__fsub_rn(vj, dn_row_dot<S>(m, k, lane)), b);
        dn_row_mad<S>(m, k, d);
        const float acc = dn_row_dot<S>(m, q, lane);
        if (lane == 0) o[(size_t)t * VD + (size_t)h * S + j] = __fmul_rn(acc, scale);
    }
#pragma unroll
    for (int c = 0; c < NC; c++)
        if (lane + 32 * c < S) Mj[lane + 32 * c] = m[c];
}

template <int S>
__global__ void delta_kernel(float *state, const float *cv, const float *beta, const float *alpha, const float *dt,
                             const float *A, float *o, int n, int HK, int HV) {
    cu_pdl_enter();
    delta_body<S>(state, cv, beta, alpha, dt, A, o, n, HK, HV);
}

/* One token a sequence: sequence blockIdx.z's row and state. */
template <int S>
__global__ void delta_seqs_kernel(const cu_seqs sq, const float *cv, const float *beta, const float *alpha,
                                  const float *dt, const float *A, float *o, int HK, int HV) {
    cu_pdl_enter();
    const size_t z = blockIdx.z, C = (size_t)S * (2 * HK + HV);
    delta_body<S>((float *)sq.a[z], cv + z * C, beta + z * HV, alpha + z * HV, dt, A, o + z * S * HV, 1, HK, HV);
}

bool cu_delta_supported(int S) { return S == 16 || S == 32 || S == 64 || S == 128; }

void cu_delta(cudaStream_t s, float *state, const float *cv, const float *beta, const float *alpha, const float *dt,
              const float *A, float *o, int n_tok, int S, int HK, int HV) {
    if (n_tok <= 0) return;
    const dim3 grid(HV, (S + DN_WARPS - 1) / DN_WARPS);
#define DK(N) \
    case N: cu_launch(delta_kernel<N>, grid, 32 * DN_WARPS, 0, s, state, cv, beta, alpha, dt, A, o, n_tok, HK, HV); break;
    switch (S) {
        DK(16) DK(32) DK(64) DK(128)
    default: break; /* refused at upload (cu_delta_supported) */
    }
#undef DK
}

void cu_delta_seqs(cudaStream_t s, const cu_seqs *sq, const float *cv, const float *beta, const float *alpha,
                   const float *dt, const float *A, float *o, int S, int HK, int HV) {
    const dim3 grid(HV, (S + DN_WARPS - 1) / DN_WARPS, sq->n);
#define DK(N) \
    case N: cu_launch(delta_seqs_kernel<N>, grid, 32 * DN_WARPS, 0, s, *sq, cv, beta, alpha, dt, A, o, HK, HV); break;
    switch (S) {
        DK(16) DK(32) DK(64) DK(128)
    default: break;
    }
#undef DK
}

__global__ void gated_norm_kernel(float *o, const float *z, const float *w, int S, float eps) {
    cu_pdl_enter();
    __shared__ double sh[32];
    float *x = o + (size_t)blockIdx.x * S;
    const float *zr = z + (size_t)blockIdx.x * S;
    double s = 0.0;
    for (int i = threadIdx.x; i < S; i += blockDim.x) s += (double)(x[i] * x[i]);
    for (int q = 16; q > 0; q >>= 1) s += __shfl_xor_sync(0xffffffffu, s, q);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = s;
    __syncthreads();
    s = 0.0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) s += sh[i];
    const float mean = (float)(s / (double)S);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int i = threadIdx.x; i < S; i += blockDim.x) {
        const float g = zr[i];
        x[i] = ((x[i] * scale) * w[i]) * (g / (1.0f + cu_expf(-g)));
    }
}

void cu_gated_norm(cudaStream_t s, float *o, const float *z, const float *w, int n_tok, int HV, int S, float eps) {
    if (n_tok <= 0) return;
    cu_launch(gated_norm_kernel, n_tok * HV, S < 32 ? 32 : (S > 256 ? 256 : S), 0, s, o, z, w, S, eps);
}
