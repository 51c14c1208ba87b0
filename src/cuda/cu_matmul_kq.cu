/* cu_matmul_kq.cu — K-quant weights (Q2_K..Q6_K) times Q8_K activations on
 * the device, as the CPU and llama.cpp compute them (kquant_ref.c,
 * kquant_impl.h's contract): activations quantized per 256 to int8 with one
 * f32 scale and sixteen 16-element sums; per super-block the exact integer
 * sums sumi = sum_g sc[g] * (q . y)_g and summ = sum_g mn[g] * bsums[g]; one
 * float expression per block, yd * (d * sumi - dmin * summ), each operation
 * rounded on its own; blocks summed in order.  That is the scalar
 * reference's dot bit for bit, and the avx2/avx512 levels' for Q2_K, Q3_K
 * and Q5_K (their Q4_K and Q6_K carry float lanes across blocks: the same to
 * rounding).
 *
 * Layout: a warp per output row, a lane per 32-element sub-block (two
 * groups of 16): the lane unpacks its weights to int8 and dots them with
 * dp4a; the eight lanes of a super-block add their integer sums by
 * shuffles; the block terms are then summed in block order.  Decode's GEMV
 * (mv_kq_kernel) gives a short row fewer lanes (whole super-blocks' eight)
 * and a warp several such rows; the sums are the same, in the same order.
 */
#include "cu_common.h"
#include "cu_q8act.cuh"
#include "cu_quant.cuh"

enum { KQ_WARPS = CU_MM_WARPS };

/* Q8_K activations, one warp per 256-element block: cu_q8act.cuh. */
__global__ void quant_q8k_kernel(const float *x, int n_blocks, int8_t *q, int32_t *bsums, float *d) {
    cu_pdl_enter();
    const int b = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (b < n_blocks) cu_q8k_block(x + (size_t)b * 256, q + (size_t)b * 256, bsums + (size_t)b * 16, &d[b], lane);
}

/* Sub-block j of a row in integer form: q[32] as int8 packed four to a word,
 * the scales and mins of its two 16-groups, the block's d and dmin. */
struct kq_sub {
    int32_t w[8];
    int sc0, sc1, mn0, mn1;
    float d, dmin;
};

__device__ __forceinline__ int32_t pack4(int a, int b, int c, int e) {
    return (int32_t)((uint32_t)(uint8_t)a | ((uint32_t)(uint8_t)b << 8) | ((uint32_t)(uint8_t)c << 16) |
                     ((uint32_t)(uint8_t)e << 24));
}

template <int T> __device__ __forceinline__ void kq_unpack(const uint8_t *row, int j, kq_sub *u);

template <> __device__ __forceinline__ void kq_unpack<QW_TYPE_Q2_K>(const uint8_t *row, int j, kq_sub *u) {
    const uint8_t *b = row + (size_t)(j >> 3) * 84;
    const int sb = j & 7, h = sb >> 2, s = sb & 3;
    uint32_t qs[8];
    cu_ldw<8>(b + 16 + 32 * h, qs);
#pragma unroll
    for (int c = 0; c < 8; c++) {
        int e[4];
#pragma unroll
        for (int i = 0; i < 4; i++) e[i] = (cu_byte(qs, 4 * c + i) >> (2 * s)) & 3;
        u->w[c] = pack4(e[0], e[1], e[2], e[3]);
    }
    const int g = 2 * sb;
    u->sc0 = b[g] & 15, u->mn0 = b[g] >> 4, u->sc1 = b[g + 1] & 15, u->mn1 = b[g + 1] >> 4;
    u->d = cu_h2f(cu_ld16(b + 80)), u->dmin = cu_h2f(cu_ld16(b + 82));
}
template <> __device__ __forceinline__ void kq_unpack<QW_TYPE_Q3_K>(const uint8_t *row, int j, kq_sub *u) {
    const uint8_t *b = row + (size_t)(j >> 3) * 110;
    const int sb = j & 7, h = sb >> 2, s = sb & 3;
    uint32_t hm[8], qs[8];
    cu_ldw<8>(b, hm);
    cu_ldw<8>(b + 32 + 32 * h, qs);
#pragma unroll
    for (int c = 0; c < 8; c++) {
        int e[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int l = 4 * c + i;
            e[i] = (((cu_byte(qs, l) >> (2 * s)) & 3) | (((cu_byte(hm, l) >> (4 * h + s)) & 1) << 2)) - 4;
        }
        u->w[c] = pack4(e[0], e[1], e[2], e[3]);
    }
    const uint8_t *sc = b + 96;
    int scl[2];
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int g = 2 * sb + k;
        const int lo = g < 8 ? (sc[g] & 15) : (sc[g - 8] >> 4);
        const int hi = (sc[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
        scl[k] = (lo | (hi << 4)) - 32;
    }
    u->sc0 = scl[0], u->sc1 = scl[1], u->mn0 = u->mn1 = 0;
    u->d = cu_h2f(cu_ld16(b + 108)), u->dmin = 0.0f;
}
template <> __device__ __forceinline__ void kq_unpack<QW_TYPE_Q4_K>(const uint8_t *row, int j, kq_sub *u) {
    const uint8_t *b = row + (size_t)(j >> 3) * 144;
    const int sb = j & 7, shift = (sb & 1) * 4;
    uint32_t qs[8];
    cu_ldw<8>(b + 16 + 32 * (sb >> 1), qs);
#pragma unroll
    for (int c = 0; c < 8; c++) u->w[c] = (int32_t)((qs[c] >> shift) & 0x0f0f0f0fu);
    float sc, m;
    cu_scale_min_k4(sb, b + 4, &sc, &m);
    u->sc0 = u->sc1 = (int)sc, u->mn0 = u->mn1 = (int)m;
    u->d = cu_h2f(cu_ld16(b)), u->dmin = cu_h2f(cu_ld16(b + 2));
}
template <> __device__ __forceinline__ void kq_unpack<QW_TYPE_Q5_K>(const uint8_t *row, int j, kq_sub *u) {
    const uint8_t *b = row + (size_t)(j >> 3) * 176;
    const int sb = j & 7, shift = (sb & 1) * 4;
    uint32_t qh[8], qs[8];
    cu_ldw<8>(b + 16, qh);
    cu_ldw<8>(b + 48 + 32 * (sb >> 1), qs);
#pragma unroll
    for (int c = 0; c < 8; c++) {
        const uint32_t lo = (qs[c] >> shift) & 0x0f0f0f0fu, hi = ((qh[c] >> sb) & 0x01010101u) << 4;
        u->w[c] = (int32_t)(lo | hi);
    }
    float sc, m;
    cu_scale_min_k4(sb, b + 4, &sc, &m);
    u->sc0 = u->sc1 = (int)sc, u->mn0 = u->mn1 = (int)m;
    u->d = cu_h2f(cu_ld16(b)), u->dmin = cu_h2f(cu_ld16(b + 2));
}
template <> __device__ __forceinline__ void kq_unpack<QW_TYPE_Q6_K>(const uint8_t *row, int j, kq_sub *u) {
    const uint8_t *b = row + (size_t)(j >> 3) * 210;
    const int sb = j & 7, h = sb >> 2, k = sb & 3;
    uint32_t ql[8], qh[8];
    cu_ldw<8>(b + 64 * h + 32 * (k & 1), ql);
    cu_ldw<8>(b + 128 + 32 * h, qh);
#pragma unroll
    for (int c = 0; c < 8; c++) {
        const uint32_t lo = (k < 2 ? ql[c] : ql[c] >> 4) & 0x0f0f0f0fu, hi = ((qh[c] >> (2 * k)) & 0x03030303u) << 4;
        u->w[c] = (int32_t)__vsub4(lo | hi, 0x20202020u); /* bytes - 32, as signed int8 */
    }
    const int8_t *scales = (const int8_t *)(b + 192);
    u->sc0 = scales[2 * sb], u->sc1 = scales[2 * sb + 1], u->mn0 = u->mn1 = 0;
    u->d = cu_h2f(cu_ld16(b + 208)), u->dmin = 0.0f;
}

/* Q3_K and Q6_K have no mins (mn0 = mn1 = 0, dmin = 0): their sm is 0, so
 * its loads and shuffles are skipped — dmin * 0 is +0 either way, the same
 * bits. */
template <int T> __device__ __forceinline__ constexpr bool kq_mins() { return T != QW_TYPE_Q3_K && T != QW_TYPE_Q6_K; }

/* Sub-block j's 32 activation bytes of x row xr, in two 16-byte loads (xq
 * is the scratch's start and k a multiple of 256, so they are aligned), and
 * its two 16-sums where the type has mins. */
struct kq_act {
    int4 ya, yb;
    int32_t b0, b1;
};
template <int T>
__device__ __forceinline__ void kq_act_load(int j, int k, size_t xr, const int8_t *xq, const int32_t *xbs, kq_act *y) {
    const int4 *y4 = (const int4 *)(xq + xr * k + (size_t)j * 32);
    y->ya = y4[0], y->yb = y4[1];
    y->b0 = y->b1 = 0;
    if (kq_mins<T>()) {
        const int32_t *bs = xbs + xr * (k >> 4) + 2 * j;
        y->b0 = bs[0], y->b1 = bs[1];
    }
}

/* The integer sums of a weight sub-block and an activation sub-block:
 * si = sum_g sc[g] (q . y)_g, sm = sum_g mn[g] bsums[g]. */
template <int T> __device__ __forceinline__ void kq_sums_of(const kq_sub &u, const kq_act &y, int *si, int *sm) {
    int s0 = 0, s1 = 0;
    s0 = __dp4a(u.w[0], y.ya.x, s0), s0 = __dp4a(u.w[1], y.ya.y, s0), s0 = __dp4a(u.w[2], y.ya.z, s0), s0 = __dp4a(u.w[3], y.ya.w, s0);
    s1 = __dp4a(u.w[4], y.yb.x, s1), s1 = __dp4a(u.w[5], y.yb.y, s1), s1 = __dp4a(u.w[6], y.yb.z, s1), s1 = __dp4a(u.w[7], y.yb.w, s1);
    *si = u.sc0 * s0 + u.sc1 * s1;
    *sm = kq_mins<T>() ? u.mn0 * y.b0 + u.mn1 * y.b1 : 0;
}

/* Sub-block j's integer sums with x row xr (0 when the lane has no
 * sub-block). */
template <int T>
__device__ __forceinline__ void kq_sums(const kq_sub &u, bool have, int j, int k, size_t xr, const int8_t *xq,
                                        const int32_t *xbs, int *si, int *sm) {
    *si = *sm = 0;
    if (!have) return;
    kq_act y;
    kq_act_load<T>(j, k, xr, xq, xbs, &y);
    kq_sums_of<T>(u, y, si, sm);
}

/* Sub-block j's term of a super-block for x row xr: the integer sums of its
 * 32 elements (when j < nsub), added over the super-block's eight lanes by
 * shuffles (exact in any order), then the block's one float expression —
 * valid in the lane holding the block's first sub-block.  Every lane of the
 * warp calls it (the shuffles). */
template <int T>
__device__ __forceinline__ float kq_term(const kq_sub &u, bool have, int j, int k, size_t xr, const int8_t *xq,
                                         const int32_t *xbs, const float *xd) {
    int si, sm;
    kq_sums<T>(u, have, j, k, xr, xq, xbs, &si, &sm);
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) {
        si += __shfl_xor_sync(0xffffffffu, si, o);
        if (kq_mins<T>()) sm += __shfl_xor_sync(0xffffffffu, sm, o);
    }
    if (!have) return 0.0f;
    const float yd = xd[xr * (k >> 8) + (j >> 3)];
    return __fmul_rn(yd, __fsub_rn(__fmul_rn(u.d, (float)si), __fmul_rn(u.dmin, (float)sm)));
}

/* v[0..7] (a value per token) summed over the eight lanes of a super-block
 * (lane bits 0..2) so that lane l of the eight ends with token l's sum: each
 * xor stage swaps half the values still held and adds, 4 + 2 + 1 shuffles
 * for the eight tokens where a reduction per token took 3 x 8.  Integer
 * adds: exact in any order. */
__device__ __forceinline__ int kq_transpose_sum(const int *v, int lane) {
    const bool b2 = lane & 4, b1 = lane & 2, b0 = lane & 1;
    int w[4], x[2];
#pragma unroll
    for (int m = 0; m < 4; m++) w[m] = (b2 ? v[m + 4] : v[m]) + __shfl_xor_sync(0xffffffffu, b2 ? v[m] : v[m + 4], 4);
#pragma unroll
    for (int m = 0; m < 2; m++) x[m] = (b1 ? w[m + 2] : w[m]) + __shfl_xor_sync(0xffffffffu, b1 ? w[m] : w[m + 2], 2);
    return (b0 ? x[1] : x[0]) + __shfl_xor_sync(0xffffffffu, b0 ? x[0] : x[1], 1);
}

#ifndef QW_MM_KQ_ROWS /* rows a warp in mm_kq_kernel (1 or 2): 1 to time the two-row form against */
#define QW_MM_KQ_ROWS 2
#endif

/* Tiles of up to CU_MM_NT tokens (a lanes step's rows, prefill's expert
 * tiles when the tensor cores are off): a warp per R rows, a lane per
 * sub-block; each weight sub-block unpacked once for the tile's tokens, and
 * each token's activation sub-block loaded once for the R rows (at 8
 * tokens a row's warp read 14 times more activation bytes than weight
 * bytes).  The lane makes every token's integer sums, the super-block's
 * eight lanes add them with lane l ending with token l's
 * (kq_transpose_sum), lane l makes token l's block term, and lanes 0..7 add
 * the round's blocks in block order: kq_term's expression and order, so
 * the GEMV's bits, row by row. */
template <int T, int R>
__global__ void mm_kq_kernel(const cu_mm_dst D, int k, const int8_t *xq, const int32_t *xbs, const float *xd, int xdiv,
                             const cu_tile *tiles, int n_tok) {
    const int lane = threadIdx.x & 31, l = lane & 7;
    cu_mm_pick P[R];
    bool ok[R];
#pragma unroll
    for (int q = 0; q < R; q++) {
        ok[q] = cu_mm_row_in(D, CU_MM_WARPS * R, (int)(threadIdx.x >> 5) * R + q, &P[q]);
        if (ok[q]) cu_prefetch_row(tiles, P[q].W + (size_t)P[q].r * P[q].row_bytes, P[q].row_bytes, lane, 32);
    }
    cu_pdl_enter();
    if (!ok[0]) return; /* the warp's later rows are past the end too (a row past it names the last: safe to read) */
    int nt, a[CU_MM_NT], e;
    cu_tile_tokens(tiles, n_tok, a, &nt, &e);
    if (nt <= 0) return; /* an empty tile (cu_group_tiles) */
    int mine = a[0]; /* lane l's token: a[l] (a register array is not indexed by lane) */
#pragma unroll
    for (int i = 1; i < CU_MM_NT; i++) mine = l == i ? a[i] : mine;
    const size_t xr_mine = (size_t)(mine / xdiv);
    const uint8_t *wr[R];
#pragma unroll
    for (int q = 0; q < R; q++) wr[q] = P[q].W + (size_t)e * P[q].mat_bytes + (size_t)P[q].r * P[q].row_bytes;
    const int nsub = k >> 5, nblk = k >> 8;
    float s[R]; /* lanes 0..7: token l's sum of row q */
#pragma unroll
    for (int q = 0; q < R; q++) s[q] = 0.0f;
#pragma unroll 2 /* the next round's weight loads in flight during this one's sums */
    for (int j0 = 0; j0 < nsub; j0 += 32) {
        const int j = j0 + lane, nb = min(4, nblk - (j0 >> 3)); /* blocks in this round */
        kq_sub u[R];
#pragma unroll
        for (int q = 0; q < R; q++)
            if (j < nsub) kq_unpack<T>(wr[q], j, &u[q]);
        int si[R][CU_MM_NT], sm[R][CU_MM_NT];
#pragma unroll
        for (int i = 0; i < CU_MM_NT; i++) {
#pragma unroll
            for (int q = 0; q < R; q++) si[q][i] = sm[q][i] = 0;
            if (i < nt && j < nsub) {
                kq_act y;
                kq_act_load<T>(j, k, (size_t)(a[i] / xdiv), xq, xbs, &y);
#pragma unroll
                for (int q = 0; q < R; q++) kq_sums_of<T>(u[q], y, &si[q][i], &sm[q][i]);
            }
        }
        const float yd = j < nsub && l < nt ? xd[xr_mine * (k >> 8) + (j >> 3)] : 0.0f;
#pragma unroll
        for (int q = 0; q < R; q++) {
            const int tsi = kq_transpose_sum(si[q], lane), tsm = kq_mins<T>() ? kq_transpose_sum(sm[q], lane) : 0;
            float term = 0.0f;
            if (j < nsub && l < nt)
                term = __fmul_rn(yd, __fsub_rn(__fmul_rn(u[q].d, (float)tsi), __fmul_rn(u[q].dmin, (float)tsm)));
            for (int b = 0; b < nb; b++) s[q] = __fadd_rn(s[q], __shfl_sync(0xffffffffu, term, 8 * b + l));
        }
    }
#pragma unroll
    for (int q = 0; q < R; q++)
        if (ok[q] && lane < nt) {
            float *dst = P[q].y + (size_t)mine * P[q].ldy + P[q].r;
            *dst = D.acc ? *dst + s[q] : s[q];
        }
}

/* Lanes a row in the decode GEMV: a row's sub-blocks rounded up to whole
 * super-blocks' eight lanes, at most the warp's 32. */
static inline int kq_lanes(int k) {
    const int nsub = k / 32;
    return nsub <= 8 ? 8 : nsub <= 16 ? 16 : 32;
}

/* Decode's GEMV (cu_mm_one_token: one token a row, or a tile per
 * assignment): G = kq_lanes(k) lanes a row, 32 / G rows a warp, so a short
 * row (an expert's down projection: k = 512 is 16 sub-blocks) leaves no
 * lane idle and the grid has half or a quarter of the warps.  A tile of
 * more tokens is served one token at a time.  Each row's terms are summed
 * in block order as in mm_kq_kernel: the same bits. */
template <int T>
__global__ void mv_kq_kernel(const cu_mm_dst D, int k, const int8_t *xq, const int32_t *xbs, const float *xd, int xdiv,
                             const cu_tile *tiles, int n_tok, int G) {
    const int lane = threadIdx.x & 31, R = 32 / G, gl = lane & (G - 1), g0 = lane - gl;
    cu_mm_pick P;
    const bool mine = cu_mm_row_in(D, CU_MM_WARPS * R, (int)(threadIdx.x >> 5) * R + lane / G, &P);
    if (mine) cu_prefetch_row(tiles, P.W + (size_t)P.r * P.row_bytes, P.row_bytes, gl, G);
    cu_pdl_enter();
    if (!__any_sync(0xffffffffu, mine) || P.r < 0) return; /* P.r < 0 only for a block past every weight: the whole warp */
    int nt, e;
    cu_tile_head(tiles, n_tok, &nt, &e);
    if (nt <= 0) return;
    const uint8_t *wr = P.W + (size_t)e * P.mat_bytes + (size_t)P.r * P.row_bytes;
    const int nsub = k >> 5, nblk = k >> 8;
    for (int i = 0; i < nt; i++) {
        const int a = cu_tile_token(tiles, i);
        const size_t xr = (size_t)(a / xdiv);
        float s = 0.0f;
#pragma unroll 2
        for (int j0 = 0; j0 < nsub; j0 += G) {
            const int j = j0 + gl, nb = min(G >> 3, nblk - (j0 >> 3));
            kq_sub u;
            if (j < nsub) kq_unpack<T>(wr, j, &u);
            const float term = kq_term<T>(u, j < nsub, j, k, xr, xq, xbs, xd);
            for (int q = 0; q < nb; q++) s = __fadd_rn(s, __shfl_sync(0xffffffffu, term, g0 + 8 * q));
        }
        if (gl == 0 && mine) {
            float *dst = P.y + (size_t)a * P.ldy + P.r;
            *dst = D.acc ? *dst + s : s;
        }
    }
}

void cu_matmul_kq(cudaStream_t s, int type, int k, const cu_mm_dst *D, const float *x, int xdiv, const cu_tile *tiles,
                  int n_tiles, int n_tok, cu_q8_scratch *sc, bool reuse) {
    /* the scratch: int8 values in xq's bytes, then the 16-sums; d per block in xd */
    int8_t *q = (int8_t *)sc->xq;
    int32_t *bs = cu_q8k_bsums(sc); /* cap/4 bytes more: 4 * cap fit */
    const int nb = n_tok * (k / 256);
    if (!cu_q8_held(sc, reuse, x, (size_t)n_tok * k, CU_Q8_K))
        cu_launch(quant_q8k_kernel, (nb + 3) / 4, 128, 0, s, x, nb, q, bs, sc->xd);
    if (D->n == 1 && cu_mma_wanted(tiles, n_tiles, n_tok, xdiv) &&
        cu_matmul_mma_kq(s, type, D->W[0], D->mat_bytes[0], D->row_bytes[0], D->rows[0], k, q, bs, sc->xd, xdiv, tiles,
                         n_tiles, n_tok, D->y[0], D->ldy[0], D->acc))
        return;
    dim3 grid(D->blk_end[D->n - 1], tiles ? n_tiles : (n_tok + CU_MM_NT - 1) / CU_MM_NT);
    if (cu_mm_one_token(tiles, n_tiles, n_tok, xdiv)) {
        /* the grid counted in blocks of CU_MM_WARPS * (32 / G) rows */
        const int G = kq_lanes(k), per_block = CU_MM_WARPS * (32 / G);
        cu_mm_dst Dv = *D;
        for (int i = 0; i < Dv.n; i++)
            Dv.blk_end[i] = (i ? Dv.blk_end[i - 1] : 0) + (Dv.rows[i] + per_block - 1) / per_block;
        const dim3 gv(Dv.blk_end[Dv.n - 1], grid.y);
#define MV(T)                                                                                                    \
    case T: cu_launch(mv_kq_kernel<T>, gv, KQ_WARPS * 32, 0, s, Dv, k, q, bs, sc->xd, xdiv, tiles, n_tok, G); break;
        switch (type) {
            MV(QW_TYPE_Q2_K) MV(QW_TYPE_Q3_K) MV(QW_TYPE_Q4_K) MV(QW_TYPE_Q5_K) MV(QW_TYPE_Q6_K)
        default: break;
        }
#undef MV
        return;
    }
    /* the grid counted in blocks of CU_MM_WARPS * QW_MM_KQ_ROWS rows */
    cu_mm_dst Dr = *D;
    for (int i = 0; i < Dr.n; i++)
        Dr.blk_end[i] = (i ? Dr.blk_end[i - 1] : 0) + (Dr.rows[i] + CU_MM_WARPS * QW_MM_KQ_ROWS - 1) / (CU_MM_WARPS * QW_MM_KQ_ROWS);
    const dim3 gr(Dr.blk_end[Dr.n - 1], grid.y);
#define KQ(T)                                                                                                      \
    case T: cu_launch(mm_kq_kernel<T, QW_MM_KQ_ROWS>, gr, KQ_WARPS * 32, 0, s, Dr, k, q, bs, sc->xd, xdiv, tiles, n_tok); break;
    switch (type) {
        KQ(QW_TYPE_Q2_K) KQ(QW_TYPE_Q3_K) KQ(QW_TYPE_Q4_K) KQ(QW_TYPE_Q5_K) KQ(QW_TYPE_Q6_K)
    default: break;
    }
#undef KQ
}
