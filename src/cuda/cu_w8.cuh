/* cu_w8.cuh — private to src/cuda: a Q8_0 / Q4_0 weight block as decode's
 * GEMV reads it — its 32 values as int8 words and its scale, from the words
 * it lies in or straight from a row of whole 16-byte words (cu_pick.h) —
 * its product with an activation block, and a round of 32 such products
 * added in block order.  The kernels of cu_matmul.cu use them, and so does
 * bench/cuda_layout.cu, which times the same block reads against a
 * repacked layout.
 */
#ifndef QWISP_CU_W8_CUH
#define QWISP_CU_W8_CUH

#include "cu_pick.h"
#include "cu_quant.cuh"

/* A Q4_0 block's 16 quant bytes (q, four words) as its 32 values - 8 in
 * int8, low nibbles first (w, eight words). */
__device__ __forceinline__ void cu_q4_unpack(const uint32_t *q, int32_t *w) {
#pragma unroll
    for (int c = 0; c < 4; c++) {
        w[c] = (int32_t)__vsub4(q[c] & 0x0f0f0f0fu, 0x08080808u);
        w[c + 4] = (int32_t)__vsub4((q[c] >> 4) & 0x0f0f0f0fu, 0x08080808u);
    }
}

/* Block bytes, and the 32-bit words a block lies in when it starts 0 or 2
 * bytes into its first (a staged round's, cu_matmul.cu's cu_w8_staged). */
template <int T> struct cu_w8_shape;
template <> struct cu_w8_shape<QW_TYPE_Q8_0> { enum { BS = 34, WORDS = 9 }; };
template <> struct cu_w8_shape<QW_TYPE_Q4_0> { enum { BS = 18, WORDS = 5 }; };

/* cu_w8 of a block from the WORDS 32-bit words it lies in, starting sh bits
 * (0 or 16) into the first. */
template <int T> __device__ __forceinline__ float cu_w8_words(const uint32_t *x, int sh, int32_t *w) {
    enum { WORDS = cu_w8_shape<T>::WORDS };
    uint32_t q[WORDS - 1]; /* the quant bytes start 2 bytes after d: 16 or 32 bits in */
    const float d = cu_h2f(cu_pick_block(x, sh, WORDS, q));
    if (T == QW_TYPE_Q8_0) {
#pragma unroll
        for (int c = 0; c < 8; c++) w[c] = (int32_t)q[c];
    } else {
        cu_q4_unpack(q, w);
    }
    return d;
}

/* cu_w8 of block j of a row that starts on 16 bytes and has a multiple of 8
 * blocks (so every 16-byte word a block touches lies in the row): the two
 * (Q4_0) or three (Q8_0) aligned 16-byte words around the block loaded
 * whole, the block's words then picked by its offset in them (0..14 bytes,
 * even) with selects and funnel shifts instead of indexing (cu_pick.h). */
template <int T> __device__ __forceinline__ float cu_w8_direct(const uint8_t *row, int j, int32_t *w) {
    enum { BS = cu_w8_shape<T>::BS, WORDS = cu_w8_shape<T>::WORDS, NQ = T == QW_TYPE_Q8_0 ? 3 : 2 };
    const uint4 *c = (const uint4 *)(row + cu_pick_base(j, BS));
    uint32_t x[4 * NQ], y[WORDS];
#pragma unroll
    for (int i = 0; i < NQ; i++) {
        const uint4 v = c[i];
        x[4 * i] = v.x, x[4 * i + 1] = v.y, x[4 * i + 2] = v.z, x[4 * i + 3] = v.w;
    }
    const int o = cu_pick_off(j, BS);
    cu_pick_words(x, o, WORDS, y);
    return cu_w8_words<T>(y, 8 * (o & 3), w);
}

/* Block j's product of a weight row (w, dw: cu_w8) and an activation row
 * (xrow: its int8 values, 16-byte aligned; xdrow: its block scales): the
 * exact integer sum (dp4a) times (d_w * d_x), each float operation rounded
 * on its own (quant_ref.c). */
__device__ __forceinline__ float cu_q8_block_prod(const int32_t *w, float dw, const int8_t *xrow, const float *xdrow, int j) {
    const int4 *y4 = (const int4 *)(xrow + (size_t)j * 32); /* 32 activation bytes in two 16-byte loads */
    const int4 ya = y4[0], yb = y4[1];
    const int yv[8] = {ya.x, ya.y, ya.z, ya.w, yb.x, yb.y, yb.z, yb.w};
    int isum = 0;
#pragma unroll
    for (int c = 0; c < 8; c++) isum = __dp4a(w[c], yv[c], isum);
    return __fmul_rn((float)isum, __fmul_rn(dw, xdrow[j]));
}

/* A round's products pw[0 .. nb) (shared memory, 16-byte aligned; nb <= 32)
 * added to s in block order, each add rounded on its own.  A full round is
 * read as eight 16-byte broadcasts, so the chain waits on its adds alone. */
__device__ __forceinline__ float cu_chain_round(const float *pw, int nb, float s) {
    if (nb == 32) {
        const float4 *q4 = (const float4 *)pw;
#pragma unroll
        for (int l = 0; l < 8; l++) {
            const float4 v = q4[l];
            s = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(s, v.x), v.y), v.z), v.w);
        }
    } else {
        for (int l = 0; l < nb; l++) s = __fadd_rn(s, pw[l]);
    }
    return s;
}
#endif
