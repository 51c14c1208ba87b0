/* cu_q8act.cuh — private to src/cuda: activations to int8 blocks, as the CPU
 * makes them (quant_ref.c, kquant_ref.c), one block at a time, for the
 * kernels that produce them: the plain converters (cu_matmul.cu,
 * cu_matmul_kq.cu) and the steps that convert their own output on the way
 * out (cu_fused.cu).  One definition, so every producer gives the same bytes.
 */
#ifndef QWISP_CU_Q8ACT_CUH
#define QWISP_CU_Q8ACT_CUH

#include "cu_common.h"

#include <cuda_fp16.h>

/* Q8_0, one warp per 32 elements, lane i holding element v (every lane
 * calls it): amax, d = fp16(amax / 127), q = round-half-even(x * 127 /
 * amax) clamped to int8.  The maximum is exact in any order, and starting
 * from 0 it passes over NaN as the CPU's fmaxf chain does; a lane a block
 * (where one thread made all 32) left the loads uncoalesced and a 2048-wide
 * row's conversion on 64 threads. */
__device__ __forceinline__ void cu_q8_0_block(float v, int8_t *qb, float *d, int lane) {
    float amax = fmaxf(0.0f, fabsf(v));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float dd = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    if (lane == 0) *d = __half2float(__float2half_rn(dd));
    qb[lane] = (int8_t)(int)fminf(fmaxf(rintf(__fmul_rn(v, id)), -128.0f), 127.0f);
}

/* Q8_K, one warp per 256 elements (every lane calls it): max = the element
 * of largest magnitude (the first on ties) with its sign; iscale = -127 /
 * max; q = round-half-even(iscale * x) capped at 127; d = 1 / iscale; the
 * sixteen 16-element sums.  xb must be readable by every lane (written
 * before a __syncwarp / __syncthreads by whoever made it). */
__device__ __forceinline__ void cu_q8k_block(const float *xb, int8_t *qb, int32_t *bsums, float *d, int lane) {
    float v[8], amax = 0.0f;
    int idx = 256;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        v[i] = xb[8 * lane + i];
        if (fabsf(v[i]) > amax) amax = fabsf(v[i]), idx = 8 * lane + i;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(0xffffffffu, amax, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oa > amax || (oa == amax && oi < idx)) amax = oa, idx = oi;
    }
    if (amax == 0.0f) {
#pragma unroll
        for (int i = 0; i < 8; i++) qb[8 * lane + i] = 0;
        if (lane < 16) bsums[lane] = 0;
        if (lane == 0) *d = 0.0f;
        return;
    }
    const float mx = xb[idx], iscale = -127.0f / mx;
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int r = min((int)rintf(__fmul_rn(iscale, v[i])), 127);
        qb[8 * lane + i] = (int8_t)r;
        s += r;
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1); /* lanes 2g, 2g+1 hold group g's 16 */
    if ((lane & 1) == 0) bsums[lane >> 1] = s;
    if (lane == 0) *d = 1.0f / iscale;
}

#endif
