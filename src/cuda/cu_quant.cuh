/* cu_quant.cuh — private to src/cuda: dequantizing sub-block j (32 elements)
 * of a weight row, straight from the GGUF block layout (quant.h, the scalar
 * references quant_ref.c / kquant_ref.c).  A K-quant super-block (256) is
 * eight sub-blocks; every type is addressed the same way, so one matmul
 * kernel serves all of them.  Written from the layouts in quant.h.
 */
#ifndef QWISP_CU_QUANT_CUH
#define QWISP_CU_QUANT_CUH

#include "qwisp/quant.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ float cu_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float cu_bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint16_t cu_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* 4N bytes at p into N little-endian words, with the widest loads p's
 * alignment allows (block strides such as Q6_K's 210 bytes leave some blocks
 * only 2-byte aligned): one or two 16-byte loads instead of 32 byte loads is
 * what keeps a decode GEMV's warp streaming.  The values are the bytes'. */
template <int N> __device__ __forceinline__ void cu_ldw(const uint8_t *p, uint32_t *o) {
    const uintptr_t a = (uintptr_t)p;
    if ((a & 15) == 0 && N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N / 4; i++) {
            const uint4 v = ((const uint4 *)p)[i];
            o[4 * i] = v.x, o[4 * i + 1] = v.y, o[4 * i + 2] = v.z, o[4 * i + 3] = v.w;
        }
    } else if ((a & 3) == 0) {
#pragma unroll
        for (int i = 0; i < N; i++) o[i] = ((const uint32_t *)p)[i];
    } else if ((a & 1) == 0) {
#pragma unroll
        for (int i = 0; i < N; i++) o[i] = (uint32_t)((const uint16_t *)p)[2 * i] | ((uint32_t)((const uint16_t *)p)[2 * i + 1] << 16);
    } else {
#pragma unroll
        for (int i = 0; i < N; i++)
            o[i] = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) | ((uint32_t)p[4 * i + 3] << 24);
    }
}
/* byte l of words loaded by cu_ldw */
__device__ __forceinline__ int cu_byte(const uint32_t *o, int l) { return (int)((o[l >> 2] >> (8 * (l & 3))) & 255u); }
__device__ __forceinline__ int cu_sbyte(const uint32_t *o, int l) { return (int)(int8_t)(uint8_t)(o[l >> 2] >> (8 * (l & 3))); }

/* 6-bit scale / min of 32-group j of a Q4_K / Q5_K super-block (quant.h). */
__device__ __forceinline__ void cu_scale_min_k4(int j, const uint8_t *s, float *sc, float *m) {
    if (j < 4) {
        *sc = (float)(s[j] & 63);
        *m = (float)(s[j + 4] & 63);
    } else {
        *sc = (float)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = (float)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

template <int T> __device__ __forceinline__ void cu_deq32(const uint8_t *row, int j, float *w);

template <> __device__ __forceinline__ void cu_deq32<QW_TYPE_F32>(const uint8_t *row, int j, float *w) {
    const float4 *p = (const float4 *)(row + (size_t)j * 128);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float4 v = p[i];
        w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
}
template <> __device__ __forceinline__ void cu_deq32<QW_TYPE_F16>(const uint8_t *row, int j, float *w) {
    const uint16_t *p = (const uint16_t *)(row + (size_t)j * 64);
#pragma unroll
    for (int i = 0; i < 32; i++) w[i] = cu_h2f(p[i]);
}
template <> __device__ __forceinline__ void cu_deq32<QW_TYPE_BF16>(const uint8_t *row, int j, float *w) {
    const uint16_t *p = (const uint16_t *)(row + (size_t)j * 64);
#pragma unroll
    for (int i = 0; i < 32; i++) w[i] = cu_bf2f(p[i]);
}
template <> __device__ __forceinline__ void cu_deq32<QW_TYPE_Q8_0>(const uint8_t *row, int j, float *w) {
    const uint8_t *b = row + (size_t)j * 34;
    const float d = cu_h2f(cu_ld16(b));
    uint32_t q[8];
    cu_ldw<8>(b + 2, q);
#pragma unroll
    for (int i = 0; i < 32; i++) w[i] = (float)cu_sbyte(q, i) * d;
}
template <> __device__ __forceinline__ void cu_deq32<QW_TYPE_Q4_0>(const uint8_t *row, int j, float *w) {
    const uint8_t *b = row + (size_t)j * 18;
    const float d = cu_h2f(cu_ld16(b));
    uint32_t q[4];
    cu_ldw<4>(b + 2, q);
#pragma unroll
    for (int i = 0; i < 16; i++) {
        w[i] = (float)((cu_byte(q, i) & 15) - 8) * d;
        w[i + 16] = (float)((cu_byte(q, i) >> 4) - 8) * d;
    }
}
/* Q2_K: 84 bytes {scales[16], qs[64], d, dmin}; element i = 32*s + l of the super-block */
template <> __device__ __forceinline__ void cu_deq32<QW_TYPE_Q2_K>(const uint8_t *row, int j, float *w) {
    const uint8_t *b = row + (size_t)(j >> 3) * 84;
    const int sb = j & 7;
    const float d = cu_h2f(cu_ld16(b + 80)), dmin = cu_h2f(cu_ld16(b + 82));
    const int h = sb >> 2, s = sb & 3;
    uint32_t qs[8];
    cu_ldw<8>(b + 16 + 32 * h, qs);
#pragma unroll
    for (int l = 0; l < 32; l++) {
        const int g = 2 * sb + (l >> 4);
        const int q = (cu_byte(qs, l) >> (2 * s)) & 3;
        w[l] = d * (float)(b[g] & 15) * (float)q - dmin * (float)(b[g] >> 4);
    }
}
/* Q3_K: 110 bytes {hmask[32], qs[64], scales[12], d} */
template <> __device__ __forceinline__ void cu_deq32<QW_TYPE_Q3_K>(const uint8_t *row, int j, float *w) {
    const uint8_t *b = row + (size_t)(j >> 3) * 110;
    const int sb = j & 7;
    const float d = cu_h2f(cu_ld16(b + 108));
    const uint8_t *sc = b + 96;
    const int h = sb >> 2, s = sb & 3;
    uint32_t hm[8], qs[8];
    cu_ldw<8>(b, hm);
    cu_ldw<8>(b + 32 + 32 * h, qs);
#pragma unroll
    for (int l = 0; l < 32; l++) {
        const int g = 2 * sb + (l >> 4);
        const int lo = g < 8 ? (sc[g] & 15) : (sc[g - 8] >> 4);
        const int hi = (sc[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
        const int scale = (lo | (hi << 4)) - 32;
        const int q = ((cu_byte(qs, l) >> (2 * s)) & 3) | (((cu_byte(hm, l) >> (4 * h + s)) & 1) << 2);
        w[l] = d * (float)scale * (float)(q - 4);
    }
}
/* Q4_K: 144 bytes {d, dmin, scales[12], qs[128]} */
template <> __device__ __forceinline__ void cu_deq32<QW_TYPE_Q4_K>(const uint8_t *row, int j, float *w) {
    const uint8_t *b = row + (size_t)(j >> 3) * 144;
    const int sb = j & 7;
    const float d = cu_h2f(cu_ld16(b)), dmin = cu_h2f(cu_ld16(b + 2));
    float sc, m;
    cu_scale_min_k4(sb, b + 4, &sc, &m);
    const float ds = d * sc, dm = dmin * m;
    uint32_t qs[8];
    cu_ldw<8>(b + 16 + 32 * (sb >> 1), qs);
    const int shift = (sb & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; l++) w[l] = ds * (float)((cu_byte(qs, l) >> shift) & 15) - dm;
}
/* Q5_K: 176 bytes {d, dmin, scales[12], qh[32], qs[128]} */
template <> __device__ __forceinline__ void cu_deq32<QW_TYPE_Q5_K>(const uint8_t *row, int j, float *w) {
    const uint8_t *b = row + (size_t)(j >> 3) * 176;
    const int sb = j & 7;
    const float d = cu_h2f(cu_ld16(b)), dmin = cu_h2f(cu_ld16(b + 2));
    float sc, m;
    cu_scale_min_k4(sb, b + 4, &sc, &m);
    const float ds = d * sc, dm = dmin * m;
    uint32_t qh[8], qs[8];
    cu_ldw<8>(b + 16, qh);
    cu_ldw<8>(b + 48 + 32 * (sb >> 1), qs);
    const int shift = (sb & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; l++) {
        const int q = ((cu_byte(qs, l) >> shift) & 15) | (((cu_byte(qh, l) >> sb) & 1) << 4);
        w[l] = ds * (float)q - dm;
    }
}
/* Q6_K: 210 bytes {ql[128], qh[64], scales[16] (int8), d} */
template <> __device__ __forceinline__ void cu_deq32<QW_TYPE_Q6_K>(const uint8_t *row, int j, float *w) {
    const uint8_t *b = row + (size_t)(j >> 3) * 210;
    const int sb = j & 7;
    const float d = cu_h2f(cu_ld16(b + 208));
    const int h = sb >> 2, k = sb & 3;
    uint32_t ql[8], qh[8];
    cu_ldw<8>(b + 64 * h + 32 * (k & 1), ql);
    cu_ldw<8>(b + 128 + 32 * h, qh);
    const int8_t *scales = (const int8_t *)(b + 192);
#pragma unroll
    for (int l = 0; l < 32; l++) {
        const int lo = k < 2 ? (cu_byte(ql, l) & 15) : (cu_byte(ql, l) >> 4);
        const int q = lo | (((cu_byte(qh, l) >> (2 * k)) & 3) << 4);
        w[l] = d * (float)scales[2 * sb + (l >> 4)] * (float)(q - 32);
    }
}

#endif
