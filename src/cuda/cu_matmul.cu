/* cu_matmul.cu — y = x W^T on the device, for every weight type, in the
 * weights' file layout (no repacking): a warp owns one output row; each lane
 * dequantizes 32-element sub-blocks of that row (cu_quant.cuh) into registers
 * and dots them with up to CU_MM_NT token rows, so a weight is read once per
 * tile of tokens.  Decode is the one-token case (a GEMV).
 *
 * Two ways to name the tokens: dense (token t = rows t of x and y), or expert
 * tiles (cu_tile: an expert e and up to CU_MM_NT assignment indices a; x row
 * a/xdiv, y row a) — the MoE's gate/up (xdiv = k: the token's normed row) and
 * down (xdiv = 1).  Prefill groups assignments by expert into tiles on the
 * host (cu_forward.cu); decode builds one tile per assignment on the device.
 * Sums: per lane in sub-block order, then a warp tree.  Not the CPU's order
 * nor its int8 activations, so results agree to rounding (tests/gpu/).
 */
#include "cu_common.h"
#include "cu_quant.cuh"

enum { MM_WARPS = 4 };

/* Q8_0 activations, as the CPU makes them (quant_ref.c): per 32-block amax,
 * d = fp16(amax / 127), q = round-half-even(x * 127 / amax) clamped to int8;
 * q kept as floats (integers) beside one d per block. */
__global__ void quant_q8_kernel(const float *x, int n_blocks, float *xq, float *xd) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_blocks) return;
    const float *xb = x + (size_t)b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
    const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    xd[b] = __half2float(__float2half_rn(d));
    for (int i = 0; i < 32; i++) {
        float r = rintf(xb[i] * id);
        r = fminf(fmaxf(r, -128.0f), 127.0f);
        xq[(size_t)b * 32 + i] = r;
    }
}

/* The weight's integer values of sub-block j and its scale (Q8_0, Q4_0). */
template <int T> __device__ __forceinline__ float cu_int32(const uint8_t *row, int j, float *w);
template <> __device__ __forceinline__ float cu_int32<QW_TYPE_Q8_0>(const uint8_t *row, int j, float *w) {
    const uint8_t *b = row + (size_t)j * 34;
    const int8_t *q = (const int8_t *)(b + 2);
#pragma unroll
    for (int i = 0; i < 32; i++) w[i] = (float)q[i];
    return cu_h2f(cu_ld16(b));
}
template <> __device__ __forceinline__ float cu_int32<QW_TYPE_Q4_0>(const uint8_t *row, int j, float *w) {
    const uint8_t *b = row + (size_t)j * 18;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        w[i] = (float)((b[2 + i] & 15) - 8);
        w[i + 16] = (float)((b[2 + i] >> 4) - 8);
    }
    return cu_h2f(cu_ld16(b));
}

/* The CPU's Q8_0 / Q4_0 dot: per block an exact integer sum (|sum| <= 32*128*127
 * < 2^24, so exact in f32) times d_w * d_x in f32. */
template <int T>
__global__ void mm_q8_kernel(const uint8_t *W, size_t mat_bytes, size_t row_bytes, int rows, int k, const float *xq,
                             const float *xd, int xdiv, const cu_tile *tiles, int n_tok, float *y, int ldy, int acc) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.x * MM_WARPS + warp;
    if (r >= rows) return;
    int nt, a[CU_MM_NT], e = 0;
    if (tiles) {
        const cu_tile *tl = &tiles[blockIdx.y];
        e = tl->e;
        nt = tl->n;
#pragma unroll
        for (int i = 0; i < CU_MM_NT; i++) a[i] = i < nt ? tl->a[i] : 0;
    } else {
        const int t0 = blockIdx.y * CU_MM_NT;
        nt = min(CU_MM_NT, n_tok - t0);
#pragma unroll
        for (int i = 0; i < CU_MM_NT; i++) a[i] = t0 + (i < nt ? i : 0);
    }
    const uint8_t *wr = W + (size_t)e * mat_bytes + (size_t)r * row_bytes;
    const int nsb = k >> 5;
    float s[CU_MM_NT];
#pragma unroll
    for (int i = 0; i < CU_MM_NT; i++) s[i] = 0.0f;
    for (int j = lane; j < nsb; j += 32) {
        float w[32];
        const float dw = cu_int32<T>(wr, j, w);
#pragma unroll
        for (int i = 0; i < CU_MM_NT; i++) {
            if (i >= nt) break;
            const size_t xr = (size_t)(a[i] / xdiv);
            const float4 *xv = (const float4 *)(xq + xr * k + (size_t)j * 32);
            float isum = 0.0f;
#pragma unroll
            for (int q = 0; q < 8; q++) {
                const float4 v = xv[q];
                isum += w[4 * q] * v.x + w[4 * q + 1] * v.y + w[4 * q + 2] * v.z + w[4 * q + 3] * v.w;
            }
            s[i] += __fmul_rn(isum, dw * xd[xr * nsb + j]); /* the CPU rounds the product before the sum */
        }
    }
#pragma unroll
    for (int i = 0; i < CU_MM_NT; i++) {
        float v = s[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0 && i < nt) {
            float *dst = y + (size_t)a[i] * ldy + r;
            *dst = acc ? *dst + v : v;
        }
    }
}

/* The Q8_0 activation scratch of the thread's current context (cu_forward.cu
 * sizes it before any capture). */
static __thread cu_q8_scratch *t_q8;
void cu_q8_scratch_use(cu_q8_scratch *sc) { t_q8 = sc; }

/* The CPU converts activations to the weight's dot type before a float dot
 * (kernels/matmul.c: F16 for F16 weights, BF16 for BF16 — half.c's rules:
 * RNE, NaN made quiet): the same rounding here keeps the two within the sum
 * order's rounding instead of the activations' 8 or 11 bits. */
template <int T> __device__ __forceinline__ float cu_act(float v) { return v; }
template <> __device__ __forceinline__ float cu_act<QW_TYPE_F16>(float v) { return __half2float(__float2half_rn(v)); }
template <> __device__ __forceinline__ float cu_act<QW_TYPE_BF16>(float v) {
    uint32_t u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(((u >> 16) | 0x40u) << 16);
    return __uint_as_float(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
}

template <int T>
__global__ void mm_kernel(const uint8_t *W, size_t mat_bytes, size_t row_bytes, int rows, int k, const float *x,
                          int ldx, int xdiv, const cu_tile *tiles, int n_tok, float *y, int ldy, int acc) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.x * MM_WARPS + warp;
    if (r >= rows) return;
    int nt, a[CU_MM_NT], e = 0;
    if (tiles) {
        const cu_tile *tl = &tiles[blockIdx.y];
        e = tl->e;
        nt = tl->n;
#pragma unroll
        for (int i = 0; i < CU_MM_NT; i++) a[i] = i < nt ? tl->a[i] : 0;
    } else {
        const int t0 = blockIdx.y * CU_MM_NT;
        nt = min(CU_MM_NT, n_tok - t0);
#pragma unroll
        for (int i = 0; i < CU_MM_NT; i++) a[i] = t0 + (i < nt ? i : 0);
    }
    const uint8_t *wr = W + (size_t)e * mat_bytes + (size_t)r * row_bytes;
    float s[CU_MM_NT];
#pragma unroll
    for (int i = 0; i < CU_MM_NT; i++) s[i] = 0.0f;
    const int nsb = k >> 5;
    for (int j = lane; j < nsb; j += 32) {
        float w[32];
        cu_deq32<T>(wr, j, w);
#pragma unroll
        for (int i = 0; i < CU_MM_NT; i++) {
            if (i >= nt) break;
            const float4 *xr = (const float4 *)(x + (size_t)(a[i] / xdiv) * ldx + (size_t)j * 32);
            float d = 0.0f;
#pragma unroll
            for (int q = 0; q < 8; q++) {
                const float4 v = xr[q];
                d += w[4 * q] * cu_act<T>(v.x) + w[4 * q + 1] * cu_act<T>(v.y) + w[4 * q + 2] * cu_act<T>(v.z) +
                     w[4 * q + 3] * cu_act<T>(v.w);
            }
            s[i] += d;
        }
    }
#pragma unroll
    for (int i = 0; i < CU_MM_NT; i++) {
        float v = s[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0 && i < nt) {
            float *dst = y + (size_t)a[i] * ldy + r;
            *dst = acc ? *dst + v : v;
        }
    }
}

bool cu_type_ok(int type) {
    switch (type) {
    case QW_TYPE_F32: case QW_TYPE_F16: case QW_TYPE_BF16: case QW_TYPE_Q8_0: case QW_TYPE_Q4_0:
    case QW_TYPE_Q2_K: case QW_TYPE_Q3_K: case QW_TYPE_Q4_K: case QW_TYPE_Q5_K: case QW_TYPE_Q6_K: return true;
    default: return false;
    }
}

void cu_matmul(cudaStream_t s, const cu_tensor *w, const uint8_t *wbase, const float *x, int ldx, int xdiv,
               const cu_tile *tiles, int n_tiles, int n_tok, float *y, int ldy, bool acc) {
    const uint8_t *W = wbase ? wbase : w->data;
    const int rows = (int)w->ne1, k = (int)w->ne0;
    dim3 grid((rows + MM_WARPS - 1) / MM_WARPS, tiles ? n_tiles : (n_tok + CU_MM_NT - 1) / CU_MM_NT);
    if (grid.y == 0) return;
    /* Q8_0 / Q4_0 weights: the CPU's Q8_0 activations and integer block dots
     * (x rows: n_tok, for tiles too); ldx must be k (packed rows) */
    if ((w->type == QW_TYPE_Q8_0 || w->type == QW_TYPE_Q4_0) && t_q8 && ldx == k && n_tok > 0 &&
        (size_t)n_tok * k <= t_q8->cap) {
        const int nb = n_tok * (k / 32);
        quant_q8_kernel<<<(nb + 127) / 128, 128, 0, s>>>(x, nb, t_q8->xq, t_q8->xd);
        if (w->type == QW_TYPE_Q8_0)
            mm_q8_kernel<QW_TYPE_Q8_0><<<grid, MM_WARPS * 32, 0, s>>>(W, w->matrix_bytes, w->row_bytes, rows, k, t_q8->xq,
                                                                     t_q8->xd, xdiv, tiles, n_tok, y, ldy, acc);
        else
            mm_q8_kernel<QW_TYPE_Q4_0><<<grid, MM_WARPS * 32, 0, s>>>(W, w->matrix_bytes, w->row_bytes, rows, k, t_q8->xq,
                                                                     t_q8->xd, xdiv, tiles, n_tok, y, ldy, acc);
        return;
    }
#define MM(T)                                                                                                  \
    case T:                                                                                                    \
        mm_kernel<T><<<grid, MM_WARPS * 32, 0, s>>>(W, w->matrix_bytes, w->row_bytes, rows, k, x, ldx, xdiv, tiles, \
                                                    n_tok, y, ldy, acc);                                       \
        break;
    switch (w->type) {
        MM(QW_TYPE_F32) MM(QW_TYPE_F16) MM(QW_TYPE_BF16) MM(QW_TYPE_Q8_0) MM(QW_TYPE_Q4_0) MM(QW_TYPE_Q2_K)
        MM(QW_TYPE_Q3_K) MM(QW_TYPE_Q4_K) MM(QW_TYPE_Q5_K) MM(QW_TYPE_Q6_K)
    default: break; /* refused at upload (cu_type_ok) */
    }
#undef MM
}

__global__ void tiles_kernel(const int32_t *sel, const int32_t *slot_of, int n, cu_tile *tiles) {
    const int a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a >= n) return;
    cu_tile t;
    t.e = slot_of ? slot_of[sel[a]] : sel[a];
    t.n = 1;
    t.a[0] = a;
    for (int i = 1; i < CU_MM_NT; i++) t.a[i] = 0;
    tiles[a] = t;
}

void cu_tiles_from_sel(cudaStream_t s, const int32_t *sel, int n, cu_tile *tiles) {
    tiles_kernel<<<(n + 127) / 128, 128, 0, s>>>(sel, NULL, n, tiles);
}

void cu_tiles_from_slots(cudaStream_t s, const int32_t *sel, const int32_t *slot_of, int n, cu_tile *tiles) {
    tiles_kernel<<<(n + 127) / 128, 128, 0, s>>>(sel, slot_of, n, tiles);
}

template <int T> __global__ void get_rows_kernel(const uint8_t *W, size_t row_bytes, int k, const int32_t *tok, float *out) {
    const int t = blockIdx.x;
    const uint8_t *wr = W + (size_t)tok[t] * row_bytes;
    for (int j = threadIdx.x; j < k / 32; j += blockDim.x) {
        float w[32];
        cu_deq32<T>(wr, j, w);
        float *o = out + (size_t)t * k + (size_t)j * 32;
#pragma unroll
        for (int i = 0; i < 32; i++) o[i] = w[i];
    }
}

void cu_get_rows(cudaStream_t s, const cu_tensor *w, const int32_t *tokens, int n, float *out) {
    const int k = (int)w->ne0;
#define GR(T)                                                                                      \
    case T: get_rows_kernel<T><<<n, 64, 0, s>>>(w->data, w->row_bytes, k, tokens, out); break;
    switch (w->type) {
        GR(QW_TYPE_F32) GR(QW_TYPE_F16) GR(QW_TYPE_BF16) GR(QW_TYPE_Q8_0) GR(QW_TYPE_Q4_0) GR(QW_TYPE_Q2_K)
        GR(QW_TYPE_Q3_K) GR(QW_TYPE_Q4_K) GR(QW_TYPE_Q5_K) GR(QW_TYPE_Q6_K)
    default: break;
    }
#undef GR
}
