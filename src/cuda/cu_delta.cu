/* cu_delta.cu — qwen35moe's Gated DeltaNet on the device (model/deltanet.c
 * is the CPU form and the math's description).
 *
 *   gates     beta = sigmoid(b), alpha = softplus(a + dt_bias) * A
 *   conv      thread per channel, tokens in order, state [(K-1)][C] as the CPU
 *   l2norm    per key head of q and k, llama.cpp's composition (deltanet.c)
 *   delta     one block per value head, one thread per state column j; the
 *             column lives in registers for the whole chunk (S is a template
 *             argument: 16..256), so a prefill chunk reads and writes the
 *             S x S state once.  Per token: M_j *= decay; d = (v_j - M_j.k)
 *             * beta; M_j += d k; o_j = M_j.q / sqrt(S) — the CPU's order.
 *   gated norm  o = RMSNorm_S(o) * ssm_norm * silu(z)
 * The device state layout is the CPU's (row j of a head = column j).
 */
#include "cu_common.h"

#include <math.h>

__global__ void gates_kernel(float *beta, float *alpha, const float *dt, const float *A, int n, int hv) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * hv) return;
    const int h = i % hv;
    beta[i] = 1.0f / (1.0f + expf(-beta[i]));
    const float x = alpha[i] + dt[h];
    alpha[i] = (x > 20.0f ? x : logf(1.0f + expf(x))) * A[h];
}

void cu_dn_gates(cudaStream_t s, float *beta, float *alpha, const float *dt, const float *A, int n_tok, int hv) {
    if (n_tok <= 0) return;
    gates_kernel<<<(n_tok * hv + 127) / 128, 128, 0, s>>>(beta, alpha, dt, A, n_tok, hv);
}

__global__ void conv_kernel(const float *mix, float *cv, float *st, const float *w, int n, int C, int K) {
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    const float *wc = w + (size_t)ch * K;
    for (int t = 0; t < n; t++) {
        const size_t r = (size_t)t * C + ch;
        const float in = mix[r];
        float sum = 0.0f;
        for (int q = 0; q < K - 1; q++) sum += st[(size_t)q * C + ch] * wc[q];
        sum += in * wc[K - 1];
        cv[r] = sum / (1.0f + expf(-sum));
        for (int q = 0; q + 1 < K - 1; q++) st[(size_t)q * C + ch] = st[(size_t)(q + 1) * C + ch];
        if (K > 1) st[(size_t)(K - 2) * C + ch] = in;
    }
}

void cu_conv(cudaStream_t s, const float *mix, float *cv, float *state, const float *w, int n_tok, int C, int K) {
    if (n_tok <= 0) return;
    conv_kernel<<<(C + 127) / 128, 128, 0, s>>>(mix, cv, state, w, n_tok, C, K);
}

/* one warp per (token, vector): x / sqrt(sum x^2 + eps) as deltanet.c's l2norm */
__global__ void l2norm_kernel(float *cv, int C, int n_vec, int S, float eps) {
    const int t = blockIdx.y, v = blockIdx.x;
    float *x = cv + (size_t)t * C + (size_t)v * S;
    double s = 0.0;
    for (int i = threadIdx.x; i < S; i += 32) s += (double)x[i] * x[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float mean = (float)(s / (double)S);
    const float scale = 1.0f / sqrtf(mean + eps / (float)S);
    const float post = 1.0f / sqrtf((float)S);
    for (int i = threadIdx.x; i < S; i += 32) x[i] = (x[i] * scale) * post;
}

void cu_l2norm_qk(cudaStream_t s, float *cv, int n_tok, int C, int n_vec, int S, float eps) {
    if (n_tok <= 0) return;
    l2norm_kernel<<<dim3(n_vec, n_tok), 32, 0, s>>>(cv, C, n_vec, S, eps);
}

template <int S>
__global__ void delta_kernel(float *state, const float *cv, const float *beta, const float *alpha, float *o, int n,
                             int HK, int HV) {
    __shared__ float qs[S], ks[S];
    const int h = blockIdx.x, j = threadIdx.x;
    const int KD = S * HK, VD = S * HV, C = 2 * KD + VD;
    float *Mj = state + ((size_t)h * S + j) * S;
    float m[S];
#pragma unroll
    for (int i = 0; i < S; i++) m[i] = Mj[i];
    const float scale = 1.0f / sqrtf((float)S);
    for (int t = 0; t < n; t++) {
        const float *row = cv + (size_t)t * C;
        __syncthreads();
        qs[j] = row[(h % HK) * S + j];
        ks[j] = row[KD + (h % HK) * S + j];
        __syncthreads();
        const float vj = row[2 * KD + h * S + j];
        const float decay = expf(alpha[(size_t)t * HV + h]), b = beta[(size_t)t * HV + h];
        float sk = 0.0f;
#pragma unroll
        for (int i = 0; i < S; i++) {
            m[i] *= decay;
            sk += m[i] * ks[i];
        }
        const float d = (vj - sk) * b;
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < S; i++) {
            m[i] += ks[i] * d;
            acc += m[i] * qs[i];
        }
        o[(size_t)t * VD + (size_t)h * S + j] = acc * scale;
    }
#pragma unroll
    for (int i = 0; i < S; i++) Mj[i] = m[i];
}

bool cu_delta_supported(int S) { return S == 16 || S == 32 || S == 64 || S == 128; }

void cu_delta(cudaStream_t s, float *state, const float *cv, const float *beta, const float *alpha, float *o,
              int n_tok, int S, int HK, int HV) {
    if (n_tok <= 0) return;
    switch (S) {
    case 16: delta_kernel<16><<<HV, 16, 0, s>>>(state, cv, beta, alpha, o, n_tok, HK, HV); break;
    case 32: delta_kernel<32><<<HV, 32, 0, s>>>(state, cv, beta, alpha, o, n_tok, HK, HV); break;
    case 64: delta_kernel<64><<<HV, 64, 0, s>>>(state, cv, beta, alpha, o, n_tok, HK, HV); break;
    case 128: delta_kernel<128><<<HV, 128, 0, s>>>(state, cv, beta, alpha, o, n_tok, HK, HV); break;
    default: break; /* refused at upload (cu_delta_supported) */
    }
}

__global__ void gated_norm_kernel(float *o, const float *z, const float *w, int S, float eps) {
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
        x[i] = ((x[i] * scale) * w[i]) * (g / (1.0f + expf(-g)));
    }
}

void cu_gated_norm(cudaStream_t s, float *o, const float *z, const float *w, int n_tok, int HV, int S, float eps) {
    if (n_tok <= 0) return;
    gated_norm_kernel<<<n_tok * HV, S < 32 ? 32 : (S > 256 ? 256 : S), 0, s>>>(o, z, w, S, eps);
}
