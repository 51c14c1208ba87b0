/* cu_attn.cu — causal attention over the device KV cache.
 *
 * The cache (appended by cu_attn_prep, cu_ops.cu) is per attention layer [n_ctx_cap][n_head_kv*head_dim], f16 (the
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

/* The block's max of every thread's mx (every thread gets it), and the
 * block's double sum in one fixed order (warp xor-tree, then the warps in
 * order): attn_kernel and the split softmax share them, so their p agree. */
__device__ __forceinline__ float block_max(float mx, float *redf) {
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0) redf[threadIdx.x >> 5] = mx;
    __syncthreads();
    mx = redf[0];
    for (int i = 1; i < AT_THREADS / 32; i++) mx = fmaxf(mx, redf[i]);
    return mx;
}

__device__ __forceinline__ double block_sum(double sum, double *redd) {
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if ((threadIdx.x & 31) == 0) redd[threadIdx.x >> 5] = sum;
    __syncthreads();
    sum = 0.0;
    for (int i = 0; i < AT_THREADS / 32; i++) sum += redd[i];
    return sum;
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
    cu_pdl_enter();
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
    mx = block_max(mx, redf);
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
    sum = block_sum(sum, redd);
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

/* ---- prefill: the query heads of one KV head together ----------------------
 *
 * attn_kernel gives each (token, head) a block, so the GQA heads that share a
 * KV head each read its K and V rows (8 times over for 32 heads on 4): at 512
 * positions that kernel took ~580 us a layer of an A3B-width file on an H100,
 * its loads waiting one after another.  attn_group_kernel gives a block GS
 * heads of one KV head (GS | H / HKV, the most whose q rows and scores fit
 * 40 KB of shared memory; past that, attn_kernel): a half-warp loads a K element once for
 * the GS scores, a thread a V element once for GS sums.  Each score, max,
 * double sum and p * v chain is attn_kernel's (cached form), in its order and
 * with its roundings, so the output is attn_kernel's, bit for bit. */

/* score_hw for GS heads' q rows (qs + j * D) against one K row. */
template <typename KT, int GS>
__device__ __forceinline__ void score_hw_g(const float *qs, const KT *kr, int D, int l, bool valid, float *out) {
    float a0[GS], a1[GS], a2[GS], a3[GS];
#pragma unroll
    for (int j = 0; j < GS; j++) a0[j] = a1[j] = a2[j] = a3[j] = 0.0f;
    if (valid) {
        int i = 0;
        for (; i + 64 <= D; i += 64) {
            const float k0 = ld(kr, i + l), k1 = ld(kr, i + 16 + l), k2 = ld(kr, i + 32 + l), k3 = ld(kr, i + 48 + l);
#pragma unroll
            for (int j = 0; j < GS; j++) {
                const float *qj = qs + j * D + i + l;
                a0[j] = __fmaf_rn(k0, qj[0], a0[j]);
                a1[j] = __fmaf_rn(k1, qj[16], a1[j]);
                a2[j] = __fmaf_rn(k2, qj[32], a2[j]);
                a3[j] = __fmaf_rn(k3, qj[48], a3[j]);
            }
        }
        for (; i + 16 <= D; i += 16) {
            const float k0 = ld(kr, i + l);
#pragma unroll
            for (int j = 0; j < GS; j++) a0[j] = __fmaf_rn(k0, qs[j * D + i + l], a0[j]);
        }
        if (i < D) {
            const bool in = i + l < D;
            const float k0 = in ? ld(kr, i + l) : 0.0f;
#pragma unroll
            for (int j = 0; j < GS; j++) a1[j] = __fmaf_rn(k0, in ? qs[j * D + i + l] : 0.0f, a1[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < GS; j++) {
        float v = __fadd_rn(__fadd_rn(a0[j], a1[j]), __fadd_rn(a2[j], a3[j]));
#pragma unroll
        for (int w = 8; w > 0; w >>= 1) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, w, 16));
        out[j] = __shfl_sync(0xffffffffu, v, 0, 16);
    }
}

/* Dynamic shared memory: qs[GS][D] (q rows), then sc[GS][cap] (scores, then p). */
template <typename KT, int GS>
__global__ void __launch_bounds__(AT_THREADS) attn_group_kernel(const float *q, const KT *K, const KT *V, float *out,
                                                                int pos0, int H, int HKV, int D, float scale, int cap) {
    cu_pdl_enter();
    const bool f16 = sizeof(KT) == 2;
    extern __shared__ float shm[];
    float *qs = shm, *sc = shm + GS * D;
    __shared__ float redf[GS][AT_THREADS / 32];
    __shared__ double redd[GS][AT_THREADS / 32];
    const int G = H / HKV, subs = G / GS;
    const int hkv = blockIdx.x / subs, h0 = hkv * G + (blockIdx.x % subs) * GS, t = blockIdx.y, tid = threadIdx.x;
    const int g = tid >> 4, l = tid & 15, warp = tid >> 5;
    const int npos = pos0 + t + 1;
    const size_t kv_row = (size_t)HKV * D;
    const KT *Kh = K + (size_t)hkv * D, *Vh = V + (size_t)hkv * D;
    for (int i = tid; i < GS * D; i += AT_THREADS) {
        const float x = q[((size_t)t * H + h0 + i / D) * D + i % D];
        qs[i] = f16 ? __half2float(__float2half_rn(x)) : x;
    }
    __syncthreads();
    /* pass 1: the scores and each head's max */
    float mx[GS];
#pragma unroll
    for (int j = 0; j < GS; j++) mx[j] = -INFINITY;
    for (int p0 = 0; p0 < npos; p0 += AT_GROUPS) {
        const int p = p0 + g;
        float d[GS];
        score_hw_g<KT, GS>(qs, Kh + (size_t)p * kv_row, D, l, p < npos, d);
        if (p < npos) {
#pragma unroll
            for (int j = 0; j < GS; j++) {
                const float sv = __fmul_rn(d[j], scale);
                mx[j] = fmaxf(mx[j], sv);
                if (l == 0) sc[j * cap + p] = sv;
            }
        }
    }
    /* block_max's order, each head's */
#pragma unroll
    for (int j = 0; j < GS; j++) {
        for (int o = 16; o > 0; o >>= 1) mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], o));
        if ((tid & 31) == 0) redf[j][warp] = mx[j];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < GS; j++) {
        mx[j] = redf[j][0];
        for (int i = 1; i < AT_THREADS / 32; i++) mx[j] = fmaxf(mx[j], redf[j][i]);
    }
    /* pass 2: each head's sum in double, block_sum's order */
    float inv[GS];
#pragma unroll
    for (int j = 0; j < GS; j++) {
        double sum = 0.0;
        for (int p = tid; p < npos; p += AT_THREADS) sum += (double)cu_expf(sc[j * cap + p] - mx[j]);
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if ((tid & 31) == 0) redd[j][warp] = sum;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < GS; j++) {
        double sum = 0.0;
        for (int i = 0; i < AT_THREADS / 32; i++) sum += redd[j][i];
        inv[j] = (float)(1.0 / sum);
    }
    /* pass 3: p (rounded as attn_kernel rounds it), then p times v per head, position by position */
#pragma unroll
    for (int j = 0; j < GS; j++)
        for (int i = tid; i < npos; i += AT_THREADS) {
            float pv = cu_expf(sc[j * cap + i] - mx[j]) * inv[j];
            if (f16) pv = __half2float(__float2half_rn(pv));
            sc[j * cap + i] = pv;
        }
    __syncthreads();
    for (int d0 = 0; d0 < D; d0 += AT_THREADS) {
        const int d = d0 + tid;
        if (d >= D) break;
        float a[GS];
#pragma unroll
        for (int j = 0; j < GS; j++) a[j] = 0.0f;
        const KT *vr = Vh + d;
#pragma unroll 4
        for (int i = 0; i < npos; i++) {
            const float v = ld(vr, (size_t)i * kv_row);
#pragma unroll
            for (int j = 0; j < GS; j++) a[j] = __fmaf_rn(sc[j * cap + i], v, a[j]);
        }
#pragma unroll
        for (int j = 0; j < GS; j++) out[((size_t)t * H + h0 + j) * D + d] = a[j];
    }
}

#ifndef QW_AT_GROUP /* 0: attn_kernel for prefill too (to time against) */
#define QW_AT_GROUP 1
#endif
/* The most heads (8, 4 or 2, dividing H / HKV) whose q rows and scores at
 * `cap` positions fit 40 KB of shared memory; 1: none (attn_kernel). */
static int attn_group_size(int H, int HKV, int D, int cap) {
    if (!QW_AT_GROUP || HKV <= 0 || H % HKV) return 1;
    for (int gs = 8; gs > 1; gs >>= 1)
        if ((H / HKV) % gs == 0 && (int64_t)gs * (cap + D) <= AT_SMAX + 2048) return gs; /* <= 40 KB */
    return 1;
}
template <typename KT>
static bool attention_group(cudaStream_t s, const float *q, const KT *k, const KT *v, float *out, int n_tok, int pos0,
                            int H, int HKV, int D, float scale) {
    const int cap = pos0 + n_tok, gs = attn_group_size(H, HKV, D, cap);
    const dim3 grid(H / gs, n_tok);
    const size_t shm = (size_t)gs * (D + cap) * sizeof(float);
    switch (gs) {
    case 8: cu_launch(attn_group_kernel<KT, 8>, grid, AT_THREADS, shm, s, q, k, v, out, pos0, H, HKV, D, scale, cap); return true;
    case 4: cu_launch(attn_group_kernel<KT, 4>, grid, AT_THREADS, shm, s, q, k, v, out, pos0, H, HKV, D, scale, cap); return true;
    case 2: cu_launch(attn_group_kernel<KT, 2>, grid, AT_THREADS, shm, s, q, k, v, out, pos0, H, HKV, D, scale, cap); return true;
    default: return false;
    }
}

/* ---- one query token over a long cache: the work split over positions ----
 *
 * attn_kernel gives each (token, head) one block, so a decode step (one token)
 * keeps only n_head blocks busy, each walking every cached position with a
 * few warps whose loads wait on memory one after another: at 16K positions
 * that was ~5 ms a layer.  The split form computes the same numbers in three
 * kernels with the work spread over the positions:
 *   1. scores: a block per (AT_CH positions, head) dots them (score_hw, the
 *      same bits) into scratch and writes its block's max;
 *   2. softmax: a block per head takes the max of the block maxima, sums
 *      exp(s - max) in double in attn_kernel's cached order (thread tid takes
 *      positions tid, tid + AT_THREADS, ...; the same reductions), and
 *      replaces each score by its p, rounded as attn_kernel rounds it;
 *   3. p times V: a block per (AT_PV_DIMS output dims, head); each thread
 *      keeps one dim's sum and adds p_i * v_i in position order, as the CPU's
 *      axpy and attn_kernel do (so the chain cannot be split), while the
 *      block loads the next tile of V and p into registers under the chain of
 *      the current one (software pipelining through shared memory).
 * So the output is attn_kernel's, bit for bit.  Scratch: [H][max_pos] scores
 * then [H][max_pos / AT_CH + 1] block maxima (cu_attention_split_floats).
 * Under the decode graph the grid is sized for max_pos (the KV capacity; the
 * graph is recaptured when it grows) and the blocks past the position exit. */
enum { AT_CH = 128, AT_PV_DIMS = 128, AT_TILE_BYTES = 32768 };

size_t cu_attention_split_floats(int n_head, int max_pos) {
    return (size_t)n_head * ((size_t)max_pos + (size_t)max_pos / AT_CH + 1);
}

template <typename KT>
__device__ __forceinline__ void split_scores_body(const float *q, const KT *K, float *S, int pos0, int H, int HKV, int D,
                                                  float scale, int max_pos) {
    const bool f16 = sizeof(KT) == 2;
    __shared__ float qs[AT_MAXD];
    __shared__ float redf[AT_THREADS / 32];
    const int h = blockIdx.y, tid = threadIdx.x, g = tid >> 4, l = tid & 15;
    const int npos = pos0 + 1, p0 = blockIdx.x * AT_CH, n_split = max_pos / AT_CH + 1;
    float *M = S + (size_t)H * max_pos + (size_t)h * n_split;
    if (p0 >= npos) {
        if (tid == 0) M[blockIdx.x] = -INFINITY;
        return;
    }
    const size_t kv_row = (size_t)HKV * D;
    const KT *Kh = K + (size_t)(h / (H / HKV)) * D;
    const float *qr = q + (size_t)h * D;
    for (int i = tid; i < D; i += AT_THREADS) qs[i] = f16 ? __half2float(__float2half_rn(qr[i])) : qr[i];
    __syncthreads();
    float mx = -INFINITY;
    for (int i0 = 0; i0 < AT_CH; i0 += AT_GROUPS) {
        const int p = p0 + i0 + g;
        const float d = score_hw(qs, Kh + (size_t)p * kv_row, D, l, p < npos);
        if (p < npos) {
            const float sv = __fmul_rn(d, scale);
            mx = fmaxf(mx, sv);
            if (l == 0) S[(size_t)h * max_pos + p] = sv;
        }
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((tid & 31) == 0) redf[tid >> 5] = mx;
    __syncthreads();
    if (tid == 0) {
        for (int i = 1; i < AT_THREADS / 32; i++) mx = fmaxf(mx, redf[i]);
        M[blockIdx.x] = fmaxf(redf[0], mx);
    }
}

template <typename KT>
__global__ void attn_split_scores(const float *q, const KT *K, float *S, int pos0, const int32_t *pos_dev, int H,
                                  int HKV, int D, float scale, int max_pos) {
    cu_pdl_enter();
    split_scores_body(q, K, S, pos_dev ? *pos_dev : pos0, H, HKV, D, scale, max_pos);
}

__device__ __forceinline__ void split_softmax_body(float *S, int pos0, int H, int max_pos, int f16) {
    __shared__ float redf[AT_THREADS / 32];
    __shared__ double redd[AT_THREADS / 32];
    const int h = blockIdx.x, tid = threadIdx.x, npos = pos0 + 1, n_split = max_pos / AT_CH + 1;
    float *sc = S + (size_t)h * max_pos;
    const float *M = S + (size_t)H * max_pos + (size_t)h * n_split;
    float mx = -INFINITY;
    for (int b = tid; b * AT_CH < npos; b += AT_THREADS) mx = fmaxf(mx, M[b]);
    mx = block_max(mx, redf);
    double sum = 0.0; /* attn_kernel's cached order, so the same double */
    for (int p = tid; p < npos; p += AT_THREADS) sum += (double)cu_expf(sc[p] - mx);
    sum = block_sum(sum, redd);
    const float inv = (float)(1.0 / sum);
    for (int p = tid; p < npos; p += AT_THREADS) {
        float pv = cu_expf(sc[p] - mx) * inv;
        if (f16) pv = __half2float(__float2half_rn(pv));
        sc[p] = pv;
    }
}

__global__ void attn_split_softmax(float *S, int pos0, const int32_t *pos_dev, int H, int max_pos, int f16) {
    cu_pdl_enter();
    split_softmax_body(S, pos_dev ? *pos_dev : pos0, H, max_pos, f16);
}

/* TP positions a tile: AT_TILE_BYTES of V rows (AT_PV_DIMS dims each) */
template <typename KT>
__device__ __forceinline__ void split_pv_body(const float *S, const KT *V, float *out, int pos0, int H, int HKV, int D,
                                              int max_pos) {
    constexpr int TP = AT_TILE_BYTES / (AT_PV_DIMS * (int)sizeof(KT));
    constexpr int VEC = 16 / (int)sizeof(KT);                 /* elements of one 16-byte load */
    constexpr int ROW_VECS = AT_PV_DIMS / VEC;                /* 16-byte loads a row */
    constexpr int LOADS = TP * ROW_VECS / AT_PV_DIMS;         /* a thread's loads a tile */
    __shared__ __align__(16) KT sv[TP][AT_PV_DIMS];
    __shared__ float sp[TP];
    const int h = blockIdx.y, tid = threadIdx.x, d0 = blockIdx.x * AT_PV_DIMS, npos = pos0 + 1;
    const size_t kv_row = (size_t)HKV * D;
    const KT *Vh = V + (size_t)(h / (H / HKV)) * D + d0;
    const float *ph = S + (size_t)h * max_pos;
    const int dims = min(AT_PV_DIMS, D - d0);
    uint4 reg[LOADS];
    float preg = 0.0f;
    auto load = [&](int t0) {
#pragma unroll
        for (int j = 0; j < LOADS; j++) {
            const int e = j * AT_PV_DIMS + tid, r = e / ROW_VECS, cv = e % ROW_VECS;
            reg[j] = (t0 + r < npos && cv * VEC < dims)
                         ? *(const uint4 *)(Vh + (size_t)(t0 + r) * kv_row + cv * VEC)
                         : make_uint4(0, 0, 0, 0);
        }
        if (tid < TP) preg = t0 + tid < npos ? ph[t0 + tid] : 0.0f;
    };
    auto store = [&]() {
#pragma unroll
        for (int j = 0; j < LOADS; j++) {
            const int e = j * AT_PV_DIMS + tid;
            *(uint4 *)&sv[e / ROW_VECS][(e % ROW_VECS) * VEC] = reg[j];
        }
        if (tid < TP) sp[tid] = preg;
    };
    float a = 0.0f;
    load(0);
    for (int t0 = 0; t0 < npos; t0 += TP) {
        __syncthreads(); /* the previous tile's readers are done */
        store();
        __syncthreads();
        if (t0 + TP < npos) load(t0 + TP); /* in flight under this tile's chain */
        const int tn = min(TP, npos - t0);
        if (tid < dims) {
#pragma unroll 8
            for (int i = 0; i < tn; i++) /* the CPU's axpy order: FMA, position by position */
                a = __fmaf_rn(sp[i], ld(&sv[i][0], (size_t)tid), a);
        }
    }
    if (tid < dims) out[(size_t)h * D + d0 + tid] = a;
}

template <typename KT>
__global__ void __launch_bounds__(AT_PV_DIMS) attn_split_pv(const float *S, const KT *V, float *out, int pos0,
                                                            const int32_t *pos_dev, int H, int HKV, int D,
                                                            int max_pos) {
    cu_pdl_enter();
    split_pv_body(S, V, out, pos_dev ? *pos_dev : pos0, H, HKV, D, max_pos);
}

/* The split form for one token a sequence: sequence blockIdx.z's q row,
 * cache, output row and part of the scratch (`per` floats each). */
__device__ __forceinline__ int seq_pos(const cu_seqs &sq, int z) { return sq.pos_dev[z] ? *sq.pos_dev[z] : sq.pos0[z]; }

template <typename KT>
__global__ void attn_seqs_scores(const float *q, const cu_seqs sq, float *S, size_t per, int H, int HKV, int D,
                                 float scale, int max_pos) {
    cu_pdl_enter();
    const int z = blockIdx.z;
    split_scores_body(q + (size_t)z * H * D, (const KT *)sq.a[z], S + z * per, seq_pos(sq, z), H, HKV, D, scale,
                      max_pos);
}

__global__ void attn_seqs_softmax(float *S, size_t per, const cu_seqs sq, int H, int max_pos, int f16) {
    cu_pdl_enter();
    const int z = blockIdx.z;
    split_softmax_body(S + z * per, seq_pos(sq, z), H, max_pos, f16);
}

template <typename KT>
__global__ void __launch_bounds__(AT_PV_DIMS) attn_seqs_pv(const float *S, size_t per, const cu_seqs sq, float *out,
                                                           int H, int HKV, int D, int max_pos) {
    cu_pdl_enter();
    const int z = blockIdx.z;
    split_pv_body(S + z * per, (const KT *)sq.b[z], out + (size_t)z * H * D, seq_pos(sq, z), H, HKV, D, max_pos);
}

/* The split form's three launches for a cache of KT. */
template <typename KT>
static void attention_split(cudaStream_t s, const float *q, const void *k, const void *v, float *out, int pos0,
                            const int32_t *pos_dev, int H, int HKV, int D, float scale, float *split, int max_pos) {
    const dim3 g1(max_pos / AT_CH + 1, H), g3((D + AT_PV_DIMS - 1) / AT_PV_DIMS, H);
    cu_launch(attn_split_scores<KT>, g1, AT_THREADS, 0, s, q, (const KT *)k, split, pos0, pos_dev, H, HKV, D, scale, max_pos);
    cu_launch(attn_split_softmax, H, AT_THREADS, 0, s, split, pos0, pos_dev, H, max_pos, sizeof(KT) == 2);
    cu_launch(attn_split_pv<KT>, g3, AT_PV_DIMS, 0, s, split, (const KT *)v, out, pos0, pos_dev, H, HKV, D, max_pos);
}

template <typename KT>
static void attention_seqs(cudaStream_t s, const float *q, const cu_seqs *sq, float *out, int H, int HKV, int D,
                           float scale, float *split, int max_pos) {
    const size_t per = cu_attention_split_floats(H, max_pos);
    const dim3 g1(max_pos / AT_CH + 1, H, sq->n), g2(H, 1, sq->n), g3((D + AT_PV_DIMS - 1) / AT_PV_DIMS, H, sq->n);
    cu_launch(attn_seqs_scores<KT>, g1, AT_THREADS, 0, s, q, *sq, split, per, H, HKV, D, scale, max_pos);
    cu_launch(attn_seqs_softmax, g2, AT_THREADS, 0, s, split, per, *sq, H, max_pos, (int)(sizeof(KT) == 2));
    cu_launch(attn_seqs_pv<KT>, g3, AT_PV_DIMS, 0, s, split, per, *sq, out, H, HKV, D, max_pos);
}

void cu_attention_seqs(cudaStream_t s, const float *q, const cu_seqs *sq, bool f32, float *out, int n_head,
                       int n_head_kv, int head_dim, float scale, float *split, int max_pos) {
    (f32 ? attention_seqs<float> : attention_seqs<__half>)(s, q, sq, out, n_head, n_head_kv, head_dim, scale, split,
                                                            max_pos);
}

/* 16-byte loads of V rows: head_dim a multiple of 8 (f16) */
bool cu_attention_split_ok(int head_dim) { return head_dim % 8 == 0 && head_dim <= AT_MAXD; }

void cu_attention(cudaStream_t s, const float *q, const void *k, const void *v, bool f32, float *out, int n_tok,
                  int pos0, const int32_t *pos_dev, int n_head, int n_head_kv, int head_dim, float scale,
                  float *split, int max_pos) {
    if (n_tok <= 0) return;
    if (n_tok == 1 && split && cu_attention_split_ok(head_dim)) {
        (f32 ? attention_split<float> : attention_split<__half>)(s, q, k, v, out, pos0, pos_dev, n_head, n_head_kv,
                                                                  head_dim, scale, split, max_pos);
        return;
    }
    /* prefill (the position known here, not read at a graph's replay): the grouped heads */
    if (!pos_dev && n_tok > 1 &&
        (f32 ? attention_group<float>(s, q, (const float *)k, (const float *)v, out, n_tok, pos0, n_head, n_head_kv,
                                      head_dim, scale)
             : attention_group<__half>(s, q, (const __half *)k, (const __half *)v, out, n_tok, pos0, n_head,
                                       n_head_kv, head_dim, scale)))
        return;
    dim3 grid(n_head, n_tok);
    /* the decode graph reads the position at replay: room for AT_SMAX */
    const int smax = pos_dev ? AT_SMAX : min(pos0 + n_tok, (int)AT_SMAX);
    const size_t shm = (size_t)smax * sizeof(float);
    if (f32)
        cu_launch(attn_kernel<float>, grid, AT_THREADS, shm, s, q, (const float *)k, (const float *)v, out, pos0, pos_dev,
                                                         n_head, n_head_kv, head_dim, scale, smax);
    else
        cu_launch(attn_kernel<__half>, grid, AT_THREADS, shm, s, q, (const __half *)k, (const __half *)v, out, pos0, pos_dev,
                                                          n_head, n_head_kv, head_dim, scale, smax);
}
