/* cu_attn.cu — the device KV cache and causal attention over it.
 *
 * The cache is per attention layer [n_ctx_cap][n_head_kv*head_dim], f16 (the
 * CPU's default; rounded to nearest even as qw_f32_to_fp16 does) or f32.
 * Attention: one block per (query token, head), GQA head h reads KV head
 * h / (n_head / n_head_kv).  Scores are dotted in the AVX-512 levels' order;
 * the softmax is the CPU's (global max, double
 * sum, normalised p; q and p rounded to f16 for an f16 cache as the CPU
 * rounds them): the shipped Q8_0 models' greedy text depends on it.
 */
#include "cu_common.h"

#include <cuda_fp16.h>
#include <math.h>

/* AT_SMAX: the scores kept in shared memory (32 KB); longer contexts
 * recompute them (attn_kernel) */
#ifndef QW_AT_SMAX
#define QW_AT_SMAX 8192 /* build-time: tests/gpu/run.sh builds a small one to test the recompute path */
#endif
enum { AT_THREADS = 128, AT_GROUPS = AT_THREADS / 16, AT_MAXD = 512, AT_SMAX = QW_AT_SMAX };

__global__ void kv_append_kernel(void *kc, void *vc, int f32, const float *k, const float *v, int row, int pos0,
                                 const int32_t *pos_dev) {
    const int t = blockIdx.x;
    if (pos_dev) pos0 = *pos_dev;
    const size_t at = (size_t)(pos0 + t) * row;
    for (int i = threadIdx.x; i < row; i += blockDim.x) {
        const float kv = k[(size_t)t * row + i], vv = v[(size_t)t * row + i];
        if (f32) {
            ((float *)kc)[at + i] = kv;
            ((float *)vc)[at + i] = vv;
        } else {
            ((__half *)kc)[at + i] = __float2half_rn(kv);
            ((__half *)vc)[at + i] = __float2half_rn(vv);
        }
    }
}

void cu_kv_append(cudaStream_t s, void *kc, void *vc, bool f32, const float *k, const float *v, int n_tok,
                  int pos0, const int32_t *pos_dev, int row) {
    if (n_tok <= 0) return;
    kv_append_kernel<<<n_tok, 128, 0, s>>>(kc, vc, f32, k, v, row, pos0, pos_dev);
}

template <typename KT> __device__ __forceinline__ float ld(const KT *p, size_t i);
template <> __device__ __forceinline__ float ld<float>(const float *p, size_t i) { return p[i]; }
template <> __device__ __forceinline__ float ld<__half>(const __half *p, size_t i) { return __half2float(p[i]); }

/* q . k in the AVX-512 levels' order (quant_avx512.c's dot_f16 / dot_f32
 * and attention_avx512.c's score loop, which agree), by a half-warp whose
 * lane l is the vector lane l: four accumulators over 64-element chunks,
 * then 16-element chunks into a0, the last < 16 into a1 (the lanes past the
 * end adding 0 * 0), then (a0 + a1) + (a2 + a3) and _mm512_reduce_add_ps's
 * tree (lanes i + 8, + 4, + 2, + 1), as down-shuffles.  With an f16 cache
 * the products are exact, so only this order decides the bits; a plain
 * running sum differed from the CPU by rounding, which the trained default
 * model's greedy text amplified.  Lane l reads elements l, l + 16, ...: the
 * half-warp's loads are contiguous.  All 32 lanes of the warp must call it
 * (the shuffles); `valid` false gives 0 without reading.  Every lane gets
 * the score. */
template <typename KT>
__device__ __forceinline__ float score_hw(const float *qs, const KT *kr, int D, int l, bool valid) {
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    if (valid) {
        int i = 0;
#pragma unroll 4
        for (; i + 64 <= D; i += 64) {
            a0 = __fmaf_rn(ld(kr, i + l), qs[i + l], a0);
            a1 = __fmaf_rn(ld(kr, i + 16 + l), qs[i + 16 + l], a1);
            a2 = __fmaf_rn(ld(kr, i + 32 + l), qs[i + 32 + l], a2);
            a3 = __fmaf_rn(ld(kr, i + 48 + l), qs[i + 48 + l], a3);
        }
        for (; i + 16 <= D; i += 16) a0 = __fmaf_rn(ld(kr, i + l), qs[i + l], a0);
        if (i < D) a1 = i + l < D ? __fmaf_rn(ld(kr, i + l), qs[i + l], a1) : __fmaf_rn(0.0f, 0.0f, a1);
    }
    float v = __fadd_rn(__fadd_rn(a0, a1), __fadd_rn(a2, a3));
#pragma unroll
    for (int w = 8; w > 0; w >>= 1) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, w, 16));
    return __shfl_sync(0xffffffffu, v, 0, 16);
}

/* The CPU's softmax (kernels/attention.c): 1) the max score; 2) the sum of
 * exp(s - max) in double; 3) p = exp(s - max) * (1 / sum), rounded to f16 for
 * an f16 cache as the CPU rounds it, accumulated into p * v in position order.
 * q is rounded to f16 for an f16 cache too (the CPU's K.q dot is f16 x f16).
 * A half-warp dots one position (score_hw).  The scores live in dynamic
 * shared memory (smax floats) when all npos fit; past that, passes 2 and 3
 * recompute them (the same bits), pass 3 in tiles of smax positions. */
template <typename KT>
__global__ void attn_kernel(const float *q, const KT *K, const KT *V, float *out, int pos0, const int32_t *pos_dev,
                            int H, int HKV, int D, float scale, int smax) {
    if (pos_dev) pos0 = *pos_dev;
    const bool f16 = sizeof(KT) == 2;
    extern __shared__ float sc[];
    __shared__ float qs[AT_MAXD];
    __shared__ float redf[AT_THREADS / 32];
    __shared__ double redd[AT_THREADS / 32];
    const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
    const int g = tid >> 4, l = tid & 15;
    const int hkv = h / (H / HKV);
    const int npos = pos0 + t + 1;
    const bool cached = npos <= smax;
    const size_t kv_row = (size_t)HKV * D;
    const KT *Kh = K + (size_t)hkv * D, *Vh = V + (size_t)hkv * D;
    const float *qr = q + ((size_t)t * H + h) * D;
    for (int i = tid; i < D; i += AT_THREADS) qs[i] = f16 ? __half2float(__float2half_rn(qr[i])) : qr[i];
    __syncthreads();
    /* pass 1: the scores (kept when they fit) and their max */
    float mx = -INFINITY;
    for (int p0 = 0; p0 < npos; p0 += AT_GROUPS) {
        const int p = p0 + g;
        const float d = score_hw(qs, Kh + (size_t)p * kv_row, D, l, p < npos);
        if (p < npos) {
            const float s = __fmul_rn(d, scale);
            mx = fmaxf(mx, s);
            if (cached && l == 0) sc[p] = s;
        }
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((tid & 31) == 0) redf[tid >> 5] = mx;
    __syncthreads();
    mx = redf[0];
    for (int i = 1; i < AT_THREADS / 32; i++) mx = fmaxf(mx, redf[i]);
    /* pass 2: the sum in double */
    double sum = 0.0;
    if (cached) {
        for (int p = tid; p < npos; p += AT_THREADS) sum += (double)cu_expf(sc[p] - mx);
    } else {
        for (int p0 = 0; p0 < npos; p0 += AT_GROUPS) {
            const int p = p0 + g;
            const float d = score_hw(qs, Kh + (size_t)p * kv_row, D, l, p < npos);
            if (p < npos && l == 0) sum += (double)cu_expf(__fmul_rn(d, scale) - mx);
        }
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if ((tid & 31) == 0) redd[tid >> 5] = sum;
    __syncthreads();
    sum = 0.0;
    for (int i = 0; i < AT_THREADS / 32; i++) sum += redd[i];
    const float inv = (float)(1.0 / sum);
    /* pass 3: p (rounded like the CPU's) times v, tiles of smax positions */
    float acc[AT_MAXD / AT_THREADS];
#pragma unroll
    for (int i = 0; i < AT_MAXD / AT_THREADS; i++) acc[i] = 0.0f;
    for (int t0 = 0; t0 < npos; t0 += smax) {
        const int tn = min(smax, npos - t0);
        if (!cached) {
            __syncthreads(); /* the previous tile's readers are done */
            for (int i0 = 0; i0 < tn; i0 += AT_GROUPS) {
                const int i = i0 + g;
                const float d = score_hw(qs, Kh + (size_t)(t0 + i) * kv_row, D, l, i < tn);
                if (i < tn && l == 0) sc[i] = __fmul_rn(d, scale);
            }
        }
        __syncthreads();
        for (int i = tid; i < tn; i += AT_THREADS) {
            float pv = cu_expf(sc[i] - mx) * inv; /* no fma: the CPU rounds s * scale */
            if (f16) pv = __half2float(__float2half_rn(pv));
            sc[i] = pv;
        }
        __syncthreads();
#pragma unroll
        for (int di = 0; di < AT_MAXD / AT_THREADS; di++) {
            const int d = di * AT_THREADS + tid;
            if (d >= D) break;
            float a = acc[di];
            const KT *vr = Vh + (size_t)t0 * kv_row + d;
#pragma unroll 8
            for (int i = 0; i < tn; i++) /* the CPU's axpy: FMA (exact products with an f16 cache) */
                a = __fmaf_rn(sc[i], ld(vr, (size_t)i * kv_row), a);
            acc[di] = a;
        }
    }
    float *o = out + ((size_t)t * H + h) * D;
#pragma unroll
    for (int di = 0; di < AT_MAXD / AT_THREADS; di++)
        if (di * AT_THREADS + tid < D) o[di * AT_THREADS + tid] = acc[di];
}

void cu_attention(cudaStream_t s, const float *q, const void *k, const void *v, bool f32, float *out, int n_tok,
                  int pos0, const int32_t *pos_dev, int n_head, int n_head_kv, int head_dim, float scale) {
    if (n_tok <= 0) return;
    dim3 grid(n_head, n_tok);
    /* the decode graph reads the position at replay: room for AT_SMAX */
    const int smax = pos_dev ? AT_SMAX : min(pos0 + n_tok, (int)AT_SMAX);
    const size_t shm = (size_t)smax * sizeof(float);
    if (f32)
        attn_kernel<float><<<grid, AT_THREADS, shm, s>>>(q, (const float *)k, (const float *)v, out, pos0, pos_dev,
                                                         n_head, n_head_kv, head_dim, scale, smax);
    else
        attn_kernel<__half><<<grid, AT_THREADS, shm, s>>>(q, (const __half *)k, (const __half *)v, out, pos0, pos_dev,
                                                          n_head, n_head_kv, head_dim, scale, smax);
}
