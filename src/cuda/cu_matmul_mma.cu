/* cu_matmul_mma.cu — multi-token matmuls of int8-block weights (Q8_0,
 * Q4_0, Q2_K..Q6_K) on the tensor cores: int8 MMA (mma.sync m16n8k32 and
 * m16n8k16, s8 x s8 -> s32) for the integer block sums, then the same float
 * expression per block, in the same block order, as the dp4a kernels of
 * cu_matmul.cu / cu_matmul_kq.cu.  An integer sum is exact whichever unit
 * makes it, so a row's dot has those kernels' bits (and so the CPU's where
 * they have them): the tensor cores change the speed, not the result.
 *
 * Layout: a warp owns 16 output rows x MMA_DENSE_NTT tiles of 8 tokens
 * (CU_MM_NT) in a dense matmul, or MMA_TILE_NTT consecutive tiles of one
 * expert (cu_tile.run), so that its weight fragment, read and unpacked
 * once, serves them all.  The MMA's A operand is the 16 weight rows (row-major int8, straight from the
 * block layout), B the 8 tokens' int8 activations.  Per the PTX fragment
 * layout, lane (g = lane / 4, q = lane % 4) feeds A with rows g and g + 8
 * at sub-block offsets 4q and 16 + 4q, feeds B with token g at the same
 * offsets, and gets back rows g, g + 8 x tokens 2q, 2q + 1 — so each lane
 * owns four (row, token) sums and runs their block loop on its own, with no
 * cross-lane reduction.
 */
#include "cu_common.h"
#include "cu_quant.cuh"

/* 64 rows a block; a dense matmul's warp reads its weights once for
 * MMA_DENSE_NTT tiles of 8 tokens */
#ifndef QW_MMA_DENSE_NTT
#define QW_MMA_DENSE_NTT 2 /* build-time, for measuring 1 / 2 / 4: 2 was fastest on the full-size qwen36-a3b (bench/RESULTS.md) */
#endif
/* An expert's tiles a warp takes: prefill's grouping gives an expert 16
 * assignments on average at 512 tokens, 256 experts top-8 (Qwen3.6-A3B) */
#ifndef QW_MMA_TILE_NTT
#define QW_MMA_TILE_NTT 2
#endif
enum { MMA_WARPS = 4, MMA_DENSE_NTT = QW_MMA_DENSE_NTT, MMA_TILE_NTT = QW_MMA_TILE_NTT };

static int g_mma_mode = CU_MMA_AUTO;
void cu_mma_mode(int mode) { g_mma_mode = mode; }
bool cu_mma_wanted(const cu_tile *tiles, int n_tiles, int n_tok, int xdiv) {
    /* tiles carry n_tok * xdiv assignments: decode's grouping gives each
     * its own tile (so as many tiles), prefill's groups them by expert
     * (cu_group_tiles: at most n/8 + experts, some empty).  A dense matmul
     * of one tile's tokens or fewer (a lanes step's few rows) stays on dp4a:
     * a warp of the MMA kernel owns 16 rows, so a 2048-row matrix gives it
     * 32 blocks, far fewer than the SMs, where dp4a spreads the rows wide
     * (measured on an H100, full-size qwen36-a3b Q4_K: MMA from 2 tokens on
     * took lanes B = 2 / 4 / 8 from 391 / 501 / 572 tok/s to 179 / 305 / 474) */
    bool multi = tiles ? (int64_t)n_tok * xdiv != n_tiles : n_tok > CU_MM_NT;
    if (cu_lanes_group == 2 && tiles && (int64_t)n_tok * xdiv <= 64) multi = false; /* a lanes step's grouped experts */
    return g_mma_mode == CU_MMA_ALWAYS || (g_mma_mode == CU_MMA_AUTO && multi);
}

__device__ __forceinline__ uint32_t ld32(const uint8_t *p) {
    uint32_t w;
    cu_ldw<1>(p, &w);
    return w;
}

/* c (+)= A[16x32] B[32x8] over int8: a0/a2 row g at k 4q / 16+4q, a1/a3 row
 * g+8; b0/b1 token g at k 4q / 16+4q; c0,c1 row g, c2,c3 row g+8 (tokens 2q, 2q+1). */
__device__ __forceinline__ void mma_k32(int *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
/* The same over k = 16: a0 row g, a1 row g+8 at k 4q; b0 token g at k 4q. */
__device__ __forceinline__ void mma_k16(int *c, uint32_t a0, uint32_t a1, uint32_t b0) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0));
}

/* The tokens of a warp's u-th token tile: with tiles, tile blockIdx.y + u
 * when it continues blockIdx.y's run of one expert (a warp whose tile is not
 * the first of NTT in its run has nothing: its run's first warp takes it);
 * dense, rows (blockIdx.y * NTT + u) * CU_MM_NT.. (n <= 0: nothing to do).
 * Token i's activation row is a / xdiv, its output row a; slots past n
 * repeat the first so loads stay in bounds. */
struct mma_toks {
    int n, e;
    const cu_tile *tl;
    int t0;
};
template <int NTT>
__device__ __forceinline__ mma_toks mma_tile(const cu_tile *tiles, int n_tiles, int n_tok, int u) {
    mma_toks t;
    if (tiles) {
        const cu_tile *lead = &tiles[blockIdx.y];
        const int ty = blockIdx.y + u;
        const bool mine = lead->run % NTT == 0 && ty < n_tiles && tiles[ty].run == lead->run + u;
        t.tl = mine ? &tiles[ty] : lead;
        t.n = mine ? t.tl->n : 0, t.e = lead->e, t.t0 = 0;
    } else {
        const int ty = blockIdx.y * NTT + u;
        t.tl = NULL, t.e = 0, t.t0 = ty * CU_MM_NT;
        t.n = min(CU_MM_NT, n_tok - t.t0);
    }
    return t;
}
__device__ __forceinline__ int mma_out_row(const mma_toks &t, int i) {
    if (i >= t.n) i = 0;
    return t.tl ? t.tl->a[i] : t.t0 + i;
}

/* The four outputs a lane owns: rows r, r + 8; tokens 2q, 2q + 1. */
__device__ __forceinline__ void mma_store(const mma_toks &t, int r, int rows, int q, const float *s, float *y, int ldy,
                                          int acc) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int row = r + 8 * (i >> 1), tok = 2 * q + (i & 1);
        if (row >= rows || tok >= t.n) continue;
        float *dst = y + (size_t)mma_out_row(t, tok) * ldy + row;
        *dst = acc ? *dst + s[i] : s[i];
    }
}

/* ---- Q8_0 / Q4_0 weights, Q8_0 activations ------------------------------- */

/* Words of block j at element offsets o and o + 16 (o = 4q) as int8x4, and
 * the block's scale. */
template <int T> __device__ __forceinline__ float q8w(const uint8_t *row, int j, int o, uint32_t *lo, uint32_t *hi);
template <> __device__ __forceinline__ float q8w<QW_TYPE_Q8_0>(const uint8_t *row, int j, int o, uint32_t *lo, uint32_t *hi) {
    const uint8_t *b = row + (size_t)j * 34;
    *lo = ld32(b + 2 + o), *hi = ld32(b + 18 + o);
    return cu_h2f(cu_ld16(b));
}
template <> __device__ __forceinline__ float q8w<QW_TYPE_Q4_0>(const uint8_t *row, int j, int o, uint32_t *lo, uint32_t *hi) {
    const uint8_t *b = row + (size_t)j * 18;
    const uint32_t w = ld32(b + 2 + o); /* elements o.. in the low nibbles, o + 16.. in the high */
    *lo = __vsub4(w & 0x0f0f0f0fu, 0x08080808u), *hi = __vsub4((w >> 4) & 0x0f0f0f0fu, 0x08080808u);
    return cu_h2f(cu_ld16(b));
}

/* One Q8_0 / Q4_0 block of a 16-row x 8-token tile: the MMA's exact integer
 * sums (rows g and g + 8: weights a0..a3, scales da, db; tokens 2q and 2q + 1:
 * b0, b1, scales x0, x1), each added to the lane's four sums s as
 * isum * (d_w * d_x), every operation rounded on its own. */
__device__ __forceinline__ void mma_q8_block(float *s, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                             uint32_t b1, float da, float db, float x0, float x1) {
    int c[4] = {0, 0, 0, 0};
    mma_k32(c, a0, a1, a2, a3, b0, b1);
    s[0] = __fadd_rn(s[0], __fmul_rn((float)c[0], __fmul_rn(da, x0)));
    s[1] = __fadd_rn(s[1], __fmul_rn((float)c[1], __fmul_rn(da, x1)));
    s[2] = __fadd_rn(s[2], __fmul_rn((float)c[2], __fmul_rn(db, x0)));
    s[3] = __fadd_rn(s[3], __fmul_rn((float)c[3], __fmul_rn(db, x1)));
}

/* Per block: p = isum * (d_w * d_x), summed block by block — mm_q8_kernel's
 * expression and order, each operation rounded on its own.  NTT token tiles
 * a warp (dense matmuls: the weight fragment is read once for NTT * 8
 * tokens; expert tiles: MMA_TILE_NTT of one expert's run). */
template <int T, int NTT>
__global__ void mma_q8_kernel(const uint8_t *W, size_t mat_bytes, size_t row_bytes, int rows, int k, const int8_t *xq,
                              const float *xd, int xdiv, const cu_tile *tiles, int n_tiles, int n_tok, float *y, int ldy,
                              int acc) {
    cu_pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int r0 = (blockIdx.x * MMA_WARPS + warp) * 16;
    if (r0 >= rows) return;
    mma_toks t[NTT];
    const int8_t *xb[NTT];
    const float *xd0[NTT], *xd1[NTT];
    const int nsb = k >> 5;
#pragma unroll
    for (int u = 0; u < NTT; u++) {
        t[u] = mma_tile<NTT>(tiles, n_tiles, n_tok, u);
        xb[u] = xq + (size_t)(mma_out_row(t[u], g) / xdiv) * k + 4 * q; /* B: token g */
        xd0[u] = xd + (size_t)(mma_out_row(t[u], 2 * q) / xdiv) * nsb;  /* the lane's tokens' scales */
        xd1[u] = xd + (size_t)(mma_out_row(t[u], 2 * q + 1) / xdiv) * nsb;
    }
    if (t[0].n <= 0) return; /* a tile its run's first warp takes */
    const uint8_t *wa = W + (size_t)t[0].e * mat_bytes + (size_t)min(r0 + g, rows - 1) * row_bytes;
    const uint8_t *wb = W + (size_t)t[0].e * mat_bytes + (size_t)min(r0 + g + 8, rows - 1) * row_bytes;
    float s[NTT][4];
#pragma unroll
    for (int u = 0; u < NTT; u++) s[u][0] = s[u][1] = s[u][2] = s[u][3] = 0.0f;
#pragma unroll 2
    for (int j = 0; j < nsb; j++) {
        uint32_t a0, a1, a2, a3;
        const float da = q8w<T>(wa, j, 4 * q, &a0, &a2), db = q8w<T>(wb, j, 4 * q, &a1, &a3);
#pragma unroll
        for (int u = 0; u < NTT; u++) {
            if (t[u].n <= 0) break; /* warp-uniform */
            const uint32_t b0 = *(const uint32_t *)(xb[u] + (size_t)j * 32);
            const uint32_t b1 = *(const uint32_t *)(xb[u] + (size_t)j * 32 + 16);
            mma_q8_block(s[u], a0, a1, a2, a3, b0, b1, da, db, xd0[u][j], xd1[u][j]);
        }
    }
#pragma unroll
    for (int u = 0; u < NTT; u++)
        if (t[u].n > 0) mma_store(t[u], r0 + g, rows, q, s[u], y, ldy, acc);
}

/* ---- Q8_0 / Q4_0 weights staged in shared memory ------------------------
 * The kernel above has each lane load its fragment words straight from the
 * weight: a 34- or 18-byte block leaves half of them 2-byte aligned, so a
 * block costs a lane a dozen narrow loads, scattered over 16 rows, and the
 * prefill's expert matmuls ran at ~570 GB/s on an H100.  Here each warp
 * copies its 16 rows MMA_CH blocks at a time into shared memory with 16-byte
 * cp.async copies (whole, coalesced, two rounds in flight) and reads its
 * fragments from there; the sums and their order are the kernel above's. */
#ifndef QW_MMA_Q8_SMEM /* 0: the kernel above for every shape (to time against) */
#define QW_MMA_Q8_SMEM 1
#endif
enum { MMA_CH = 8 }; /* blocks of each row a round stages: 272 / 144 bytes, whole 16-byte words */
template <int T> struct mma_q8_shape;
template <> struct mma_q8_shape<QW_TYPE_Q8_0> { enum { BS = 34 }; };
template <> struct mma_q8_shape<QW_TYPE_Q4_0> { enum { BS = 18 }; };

/* The 4 bytes at an even byte offset of staged words (o % 4 is a constant
 * where it is used: the block loop is unrolled and lanes step by 4). */
__device__ __forceinline__ uint32_t st_word(const uint32_t *st, int o) {
    return (o & 3) ? __funnelshift_r(st[o >> 2], st[(o >> 2) + 1], 16) : st[o >> 2];
}
template <int T>
__device__ __forceinline__ float q8w_st(const uint32_t *st, int jj, int o, uint32_t *lo, uint32_t *hi) {
    const int b = jj * mma_q8_shape<T>::BS;
    const float d = cu_h2f((uint16_t)(st[b >> 2] >> (8 * (b & 3))));
    if (T == QW_TYPE_Q8_0) {
        *lo = st_word(st, b + 2 + o), *hi = st_word(st, b + 18 + o);
    } else {
        const uint32_t w = st_word(st, b + 2 + o);
        *lo = __vsub4(w & 0x0f0f0f0fu, 0x08080808u), *hi = __vsub4((w >> 4) & 0x0f0f0f0fu, 0x08080808u);
    }
    return d;
}

/* XSH: the block's tokens staged in shared memory too, with the weights'
 * rounds (their MMA_CH blocks of int8 and scales), for its four warps to read
 * there: the activations' global loads, four a token tile a block a warp,
 * kept the L1 the kernel's bottleneck (81 % busy, DRAM 21 %, H100 ncu). */
#ifndef QW_MMA_Q8_XSH
#define QW_MMA_Q8_XSH 1
#endif
template <int T, int NTT, bool XSH>
__global__ void __launch_bounds__(MMA_WARPS * 32)
    mma_q8s_kernel(const uint8_t *W, size_t mat_bytes, size_t row_bytes, int rows, int k, const int8_t *xq,
                   const float *xd, int xdiv, const cu_tile *tiles, int n_tiles, int n_tok, float *y, int ldy, int acc) {
    enum { BS = mma_q8_shape<T>::BS, RW16 = MMA_CH * BS / 16, RWW = MMA_CH * BS / 4, WW = 16 * RWW };
    /* a staged token's round: MMA_CH * 8 words padded to XW (lanes g, q read
     * words 4g + q + const: no bank conflicts), its scales at a stride of XS
     * floats (16-byte rows for cp.async; tokens 2q, 2q + 1 on distinct banks) */
    enum { NT = NTT * CU_MM_NT, XW = MMA_CH * 8 + 4, XS = 12, XN = XSH ? 2 : 1 };
    /* the token copies below: a token's round is 16 pieces of 16 bytes, and the block's
     * 128 threads take NTT pieces each, tid's m-th of token (tid >> 4) + 8 m */
    static_assert(MMA_CH * 32 == 16 * 16 && MMA_WARPS * 32 == 16 * CU_MM_NT, "token staging layout");
    __shared__ __align__(16) uint32_t stage[MMA_WARPS][2][WW];
    __shared__ __align__(16) uint32_t xst[XN][XSH ? NT * XW : 1];
    __shared__ __align__(16) float xsc[XN][XSH ? NT * XS : 1];
    cu_pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3, tid = threadIdx.x;
    const int r0 = (blockIdx.x * MMA_WARPS + warp) * 16;
    /* a warp past the rows computes the last row's sums and stores nothing (mma_store):
     * with XSH it takes part in the block's barriers */
    if (!XSH && r0 >= rows) return;
    mma_toks t[NTT];
    const int8_t *xb[NTT];
    const float *xd0[NTT], *xd1[NTT];
    const int nsb = k >> 5;
    /* XSH: the token rows this thread copies, NTT 16-byte pieces of the NT
     * tokens' rounds (piece tid + 128 m: token (tid + 128 m) / 16), and with
     * tid < 2 NT half of a token's round of scales */
    struct {
        const int8_t *p[XSH ? NTT : 1];
    } xsrc = {}; /* (a struct, so the lambda below copies it into registers) */
    const float *dsrc = NULL;
#pragma unroll
    for (int u = 0; u < NTT; u++) {
        t[u] = mma_tile<NTT>(tiles, n_tiles, n_tok, u);
        xb[u] = xq + (size_t)(mma_out_row(t[u], g) / xdiv) * k + 4 * q;
        xd0[u] = xd + (size_t)(mma_out_row(t[u], 2 * q) / xdiv) * nsb;
        xd1[u] = xd + (size_t)(mma_out_row(t[u], 2 * q + 1) / xdiv) * nsb;
        if (XSH) {
            /* an empty tile (a dense matmul's last, past n_tok) stages tile 0's first token: in bounds, never read */
            const mma_toks &tu = t[u].n > 0 ? t[u] : t[0];
#pragma unroll
            for (int m = 0; m < NTT; m++) {
                const int tt = (tid + MMA_WARPS * 32 * m) >> 4;
                if (tt >> 3 == u) xsrc.p[m] = xq + (size_t)(mma_out_row(tu, tt & 7) / xdiv) * k + (tid & 15) * 16;
            }
            if (tid < 2 * NT && (tid >> 4) == u)
                dsrc = xd + (size_t)(mma_out_row(tu, (tid >> 1) & 7) / xdiv) * nsb + (tid & 1) * 4;
        }
    }
    if (t[0].n <= 0) return; /* the block's (t[0] is the block's tile) */
    const uint8_t *wm = W + (size_t)t[0].e * mat_bytes;
    uint32_t(*buf)[WW] = stage[warp];
    /* round c of the warp's 16 rows (rows past the end repeat the last) into
     * weight buffer b, with XSH the block's tokens' round into token buffer b */
    auto issue = [&, xsrc, dsrc](int c, int b) {
        for (int i = lane; i < 16 * RW16; i += 32) {
            const int rr = i / RW16, cc = i - rr * RW16;
            cp_async16(buf[b] + rr * RWW + cc * 4,
                       wm + (size_t)min(r0 + rr, rows - 1) * row_bytes + (size_t)c * (MMA_CH * BS) + cc * 16);
        }
        if (XSH) {
#pragma unroll
            for (int m = 0; m < NTT; m++) {
                const int tt = (tid + MMA_WARPS * 32 * m) >> 4;
                cp_async16(&xst[b][tt * XW + (tid & 15) * 4], xsrc.p[m] + (size_t)c * (MMA_CH * 32));
            }
            if (dsrc) cp_async16(&xsc[b][(tid >> 1) * XS + (tid & 1) * 4], dsrc + (size_t)c * MMA_CH);
        }
        cp_async_commit();
    };
    float s[NTT][4];
#pragma unroll
    for (int u = 0; u < NTT; u++) s[u][0] = s[u][1] = s[u][2] = s[u][3] = 0.0f;
    const int nch = nsb / MMA_CH;
    issue(0, 0);
    for (int c = 0; c < nch; c++) {
        if (c + 1 < nch) {
            issue(c + 1, (c + 1) & 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        if (XSH) __syncthreads(); else __syncwarp();
        const uint32_t *sa = buf[c & 1] + g * RWW, *sb = sa + 8 * RWW;
#pragma unroll
        for (int jj = 0; jj < MMA_CH; jj++) {
            const int j = c * MMA_CH + jj;
            uint32_t a0, a1, a2, a3;
            const float da = q8w_st<T>(sa, jj, 4 * q, &a0, &a2), db = q8w_st<T>(sb, jj, 4 * q, &a1, &a3);
#pragma unroll
            for (int u = 0; u < NTT; u++) {
                if (t[u].n <= 0) break; /* warp-uniform */
                uint32_t b0, b1;
                float x0, x1;
                if (XSH) {
                    const uint32_t *xr = &xst[c & 1][(u * CU_MM_NT + g) * XW + jj * 8 + q];
                    b0 = xr[0], b1 = xr[4];
                    x0 = xsc[c & 1][(u * CU_MM_NT + 2 * q) * XS + jj], x1 = xsc[c & 1][(u * CU_MM_NT + 2 * q + 1) * XS + jj];
                } else {
                    b0 = *(const uint32_t *)(xb[u] + (size_t)j * 32);
                    b1 = *(const uint32_t *)(xb[u] + (size_t)j * 32 + 16);
                    x0 = xd0[u][j], x1 = xd1[u][j];
                }
                mma_q8_block(s[u], a0, a1, a2, a3, b0, b1, da, db, x0, x1);
            }
        }
        /* read before the round after next overwrites it */
        if (XSH) __syncthreads(); else __syncwarp();
    }
    if (r0 >= rows) return;
#pragma unroll
    for (int u = 0; u < NTT; u++)
        if (t[u].n > 0) mma_store(t[u], r0 + g, rows, q, s[u], y, ldy, acc);
}

/* The grid: 64 rows a block; a block per expert tile (the warps of all but
 * each run's every MMA_TILE_NTT-th return at once) or per MMA_DENSE_NTT * 8
 * dense tokens. */
static dim3 mma_grid(int rows, const cu_tile *tiles, int n_tiles, int n_tok) {
    const int per = CU_MM_NT * (tiles ? 1 : MMA_DENSE_NTT);
    return dim3((rows + 16 * MMA_WARPS - 1) / (16 * MMA_WARPS), tiles ? n_tiles : (n_tok + per - 1) / per);
}

/* Rows from which a dense matmul of 2..8 tokens takes the staged MMA kernel
 * (0: never).  The dp4a kernel's warp makes a row's sums for each token in
 * turn, so its time grows with the tokens (an LM head of 151936 rows took 317
 * us at 8 tokens against 171 at one, H100); the MMA kernel reads the rows once
 * for them all, but owns 16 rows a warp, so it needs many rows to fill the GPU. */
#ifndef QW_MMA_Q8_FEW_ROWS
#define QW_MMA_Q8_FEW_ROWS 32768
#endif
static bool mma_q8_stageable(const uint8_t *W, size_t mat_bytes, size_t row_bytes, int k) {
    return QW_MMA_Q8_SMEM && (k >> 5) % MMA_CH == 0 && (((uintptr_t)W | mat_bytes | row_bytes) & 15) == 0;
}
bool cu_mma_q8_few(int type, const uint8_t *W, size_t row_bytes, int rows, int k, int n_tok) {
    return QW_MMA_Q8_FEW_ROWS > 0 && g_mma_mode == CU_MMA_AUTO && (type == QW_TYPE_Q8_0 || type == QW_TYPE_Q4_0) &&
           n_tok >= 2 && n_tok <= CU_MM_NT && rows >= QW_MMA_Q8_FEW_ROWS && mma_q8_stageable(W, 0, row_bytes, k);
}

bool cu_matmul_mma_q8(cudaStream_t s, int type, const uint8_t *W, size_t mat_bytes, size_t row_bytes, int rows, int k,
                      const int8_t *xq, const float *xd, int xdiv, const cu_tile *tiles, int n_tiles, int n_tok,
                      float *y, int ldy, bool acc) {
    const dim3 grid = mma_grid(rows, tiles, n_tiles, n_tok);
    /* staged: whole rounds of 16-byte words (k a multiple of 256, aligned rows) */
    const bool staged = mma_q8_stageable(W, mat_bytes, row_bytes, k);
    const int ntt = tiles ? MMA_TILE_NTT : MMA_DENSE_NTT;
    /* the tokens staged too where there are many: a lanes step's few (the LM head of
     * cu_mma_q8_few) measured faster without (H100, A3B-width Q8_0, B = 2: 2748 against 2304-2356 tok/s) */
    const bool xsh = QW_MMA_Q8_XSH && (tiles || n_tok > CU_MM_NT);
#define Q8N(T, N)                                                                                                  \
    if (ntt == N) {                                                                                                \
        if (staged && xsh)                                                                                         \
            cu_launch(mma_q8s_kernel<T, N, true>, grid, MMA_WARPS * 32, 0, s, W, mat_bytes, row_bytes, rows, k, xq, xd, \
                      xdiv, tiles, n_tiles, n_tok, y, ldy, acc);                                                  \
        else if (staged)                                                                                           \
            cu_launch(mma_q8s_kernel<T, N, false>, grid, MMA_WARPS * 32, 0, s, W, mat_bytes, row_bytes, rows, k, xq, xd, \
                      xdiv, tiles, n_tiles, n_tok, y, ldy, acc);                                                  \
        else                                                                                                       \
            cu_launch(mma_q8_kernel<T, N>, grid, MMA_WARPS * 32, 0, s, W, mat_bytes, row_bytes, rows, k, xq, xd,  \
                      xdiv, tiles, n_tiles, n_tok, y, ldy, acc);                                                  \
        return true;                                                                                               \
    }
#define Q8(T)                                                                                                      \
    if (type == T) {                                                                                               \
        Q8N(T, MMA_TILE_NTT)                                                                                       \
        Q8N(T, MMA_DENSE_NTT)                                                                                      \
    }
    Q8(QW_TYPE_Q8_0)
    Q8(QW_TYPE_Q4_0)
#undef Q8
#undef Q8N
    return false;
}

/* ---- K-quant weights, Q8_K activations ----------------------------------- */

/* One K-quant super-block of a row, in integer form: the words of its
 * sub-block sb at element offset o (int8x4), the integer scales and mins of
 * sub-block sb's two 16-groups, and the block's d and dmin.  G16: the two
 * 16-groups have their own scales (Q2_K, Q3_K, Q6_K), so the MMA runs per
 * group; MINS: the type has mins (dmin * summ).  `hdr` is what a lane reads
 * of the block once, before its sub-blocks (load): for most types the block's
 * address, its scales and head read where they are needed. */
template <int T> struct kqb;
struct kq_at {
    const uint8_t *b;
};
#define KQ_HDR_AT                                                                                              \
    typedef kq_at hdr;                                                                                         \
    static __device__ __forceinline__ hdr load(const uint8_t *b) { return kq_at{b}; }

template <> struct kqb<QW_TYPE_Q2_K> {
    KQ_HDR_AT
    enum { ALIGN16 = 0, BYTES = 84, G16 = 1, MINS = 1 };
    static __device__ __forceinline__ uint32_t word(const uint8_t *b, int sb, int o) {
        return (ld32(b + 16 + 32 * (sb >> 2) + o) >> (2 * (sb & 3))) & 0x03030303u;
    }
    static __device__ __forceinline__ void scales(const hdr &h, int sb, int *sc, int *mn) {
        const uint8_t *b = h.b;
        sc[0] = b[2 * sb] & 15, mn[0] = b[2 * sb] >> 4, sc[1] = b[2 * sb + 1] & 15, mn[1] = b[2 * sb + 1] >> 4;
    }
    static __device__ __forceinline__ void head(const hdr &h, float *d, float *dmin) {
        const uint8_t *b = h.b;
        *d = cu_h2f(cu_ld16(b + 80)), *dmin = cu_h2f(cu_ld16(b + 82));
    }
};
template <> struct kqb<QW_TYPE_Q3_K> {
    KQ_HDR_AT
    enum { ALIGN16 = 0, BYTES = 110, G16 = 1, MINS = 0 };
    static __device__ __forceinline__ uint32_t word(const uint8_t *b, int sb, int o) {
        const int h = sb >> 2, s = sb & 3;
        const uint32_t lo = (ld32(b + 32 + 32 * h + o) >> (2 * s)) & 0x03030303u;
        const uint32_t hi = ((ld32(b + o) >> (4 * h + s)) & 0x01010101u) << 2;
        return __vsub4(lo | hi, 0x04040404u);
    }
    static __device__ __forceinline__ void scales(const hdr &h, int sb, int *sc, int *mn) {
        const uint8_t *b = h.b;
        const uint8_t *p = b + 96;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int g = 2 * sb + i;
            const int lo = g < 8 ? (p[g] & 15) : (p[g - 8] >> 4);
            const int hi = (p[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
            sc[i] = (lo | (hi << 4)) - 32, mn[i] = 0;
        }
    }
    static __device__ __forceinline__ void head(const hdr &h, float *d, float *dmin) {
        const uint8_t *b = h.b;
        *d = cu_h2f(cu_ld16(b + 108)), *dmin = 0.0f;
    }
};
/* Q4_K and Q5_K blocks (144 and 176 bytes) sit 16-byte aligned here
 * (cu_matmul_mma_kq checks the weight's start, rows and matrices): a lane's
 * eight elements of a sub-block load as one aligned 8-byte word (pair). */
template <> struct kqb<QW_TYPE_Q4_K> {
    enum { BYTES = 144, G16 = 0, MINS = 1, ALIGN16 = 1 };
    /* the block's first 16 bytes, d, dmin and the 12 packed scale bytes, in
     * one load: per sub-block only shifts follow (a byte load each before) */
    struct hdr {
        uint32_t w[4];
    };
    static __device__ __forceinline__ hdr load(const uint8_t *b) {
        const uint4 v = *(const uint4 *)b;
        return hdr{{v.x, v.y, v.z, v.w}};
    }
    /* elements o .. o + 7 of sub-block sb (o a multiple of 8) in one 8-byte load
     * (these 16-byte aligned types load a lane's words this way only: PAIR below) */
    static __device__ __forceinline__ void pair(const uint8_t *b, int sb, int o, uint32_t *lo, uint32_t *hi) {
        const uint2 v = *(const uint2 *)(b + 16 + 32 * (sb >> 1) + o);
        *lo = (v.x >> (4 * (sb & 1))) & 0x0f0f0f0fu, *hi = (v.y >> (4 * (sb & 1))) & 0x0f0f0f0fu;
    }
    /* byte n of the packed scales (cu_scale_min_k4's s[n]) */
    static __device__ __forceinline__ int sbyte(const hdr &h, int n) { return (int)((h.w[1 + (n >> 2)] >> (8 * (n & 3))) & 255u); }
    /* cu_scale_min_k4's integers (sb is a constant: the sub-block loop is unrolled) */
    static __device__ __forceinline__ void scales(const hdr &h, int sb, int *sc, int *mn) {
        if (sb < 4) {
            sc[0] = sbyte(h, sb) & 63, mn[0] = sbyte(h, sb + 4) & 63;
        } else {
            sc[0] = (sbyte(h, sb + 4) & 15) | ((sbyte(h, sb - 4) >> 6) << 4);
            mn[0] = (sbyte(h, sb + 4) >> 4) | ((sbyte(h, sb) >> 6) << 4);
        }
        sc[1] = sc[0], mn[1] = mn[0];
    }
    static __device__ __forceinline__ void head(const hdr &h, float *d, float *dmin) {
        *d = cu_h2f((uint16_t)(h.w[0] & 0xffffu)), *dmin = cu_h2f((uint16_t)(h.w[0] >> 16));
    }
};
template <> struct kqb<QW_TYPE_Q5_K> {
    enum { BYTES = 176, G16 = 0, MINS = 1, ALIGN16 = 1 };
    typedef kqb<QW_TYPE_Q4_K>::hdr hdr; /* a Q5_K block starts as a Q4_K one */
    static __device__ __forceinline__ hdr load(const uint8_t *b) { return kqb<QW_TYPE_Q4_K>::load(b); }
    static __device__ __forceinline__ void pair(const uint8_t *b, int sb, int o, uint32_t *lo, uint32_t *hi) {
        const uint2 v = *(const uint2 *)(b + 48 + 32 * (sb >> 1) + o), h = *(const uint2 *)(b + 16 + o);
        *lo = ((v.x >> (4 * (sb & 1))) & 0x0f0f0f0fu) | (((h.x >> sb) & 0x01010101u) << 4);
        *hi = ((v.y >> (4 * (sb & 1))) & 0x0f0f0f0fu) | (((h.y >> sb) & 0x01010101u) << 4);
    }
    static __device__ __forceinline__ void scales(const hdr &h, int sb, int *sc, int *mn) {
        kqb<QW_TYPE_Q4_K>::scales(h, sb, sc, mn);
    }
    static __device__ __forceinline__ void head(const hdr &h, float *d, float *dmin) {
        kqb<QW_TYPE_Q4_K>::head(h, d, dmin);
    }
};
template <> struct kqb<QW_TYPE_Q6_K> {
    KQ_HDR_AT
    enum { ALIGN16 = 0, BYTES = 210, G16 = 1, MINS = 0 };
    static __device__ __forceinline__ uint32_t word(const uint8_t *b, int sb, int o) {
        const int h = sb >> 2, k = sb & 3;
        const uint32_t ql = ld32(b + 64 * h + 32 * (k & 1) + o);
        const uint32_t lo = (k < 2 ? ql : ql >> 4) & 0x0f0f0f0fu;
        const uint32_t hi = ((ld32(b + 128 + 32 * h + o) >> (2 * k)) & 0x03030303u) << 4;
        return __vsub4(lo | hi, 0x20202020u);
    }
    static __device__ __forceinline__ void scales(const hdr &h, int sb, int *sc, int *mn) {
        const uint8_t *b = h.b;
        const int8_t *p = (const int8_t *)(b + 192);
        sc[0] = p[2 * sb], sc[1] = p[2 * sb + 1], mn[0] = mn[1] = 0;
    }
    static __device__ __forceinline__ void head(const hdr &h, float *d, float *dmin) {
        const uint8_t *b = h.b;
        *d = cu_h2f(cu_ld16(b + 208)), *dmin = 0.0f;
    }
};

/* Per super-block: sumi = sum_g sc[g] * (q . y)_g and summ = sum_g mn[g] *
 * bsums[g] (exact integers), then yd * (d * sumi - dmin * summ), summed
 * block by block — mm_kq_kernel's expression and order. */
template <int T, int NTT>
__global__ void mma_kq_kernel(const uint8_t *W, size_t mat_bytes, size_t row_bytes, int rows, int k, const int8_t *xq,
                              const int32_t *xbs, const float *xd, int xdiv, const cu_tile *tiles, int n_tiles, int n_tok,
                              float *y, int ldy, int acc) {
    cu_pdl_enter();
    typedef kqb<T> B;
    /* PAIR (the 16-byte aligned types, one scale a sub-block): a lane feeds the
     * MMA elements 8q .. 8q + 7 of a sub-block, weights and tokens alike, in
     * one 8-byte load each, where the fragment layout's own order is 4q .. 4q
     * + 3 and 16 + 4q .. 16 + 4q + 3 in two: the same k permuted on both
     * operands, so the same exact integer sums, with half the load requests */
    enum { PAIR = B::ALIGN16 && !B::G16 };
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int r0 = (blockIdx.x * MMA_WARPS + warp) * 16;
    if (r0 >= rows) return;
    const int nblk = k >> 8;
    mma_toks t[NTT];
    size_t x0[NTT], x1[NTT];
    const int8_t *xb[NTT];
#pragma unroll
    for (int u = 0; u < NTT; u++) {
        t[u] = mma_tile<NTT>(tiles, n_tiles, n_tok, u);
        x0[u] = (size_t)(mma_out_row(t[u], 2 * q) / xdiv), x1[u] = (size_t)(mma_out_row(t[u], 2 * q + 1) / xdiv);
        xb[u] = xq + (size_t)(mma_out_row(t[u], g) / xdiv) * k + (PAIR ? 8 : 4) * q; /* B: token g */
    }
    if (t[0].n <= 0) return; /* a tile its run's first warp takes */
    const uint8_t *wa = W + (size_t)t[0].e * mat_bytes + (size_t)min(r0 + g, rows - 1) * row_bytes;
    const uint8_t *wb = W + (size_t)t[0].e * mat_bytes + (size_t)min(r0 + g + 8, rows - 1) * row_bytes;
    float s[NTT][4];
#pragma unroll
    for (int u = 0; u < NTT; u++) s[u][0] = s[u][1] = s[u][2] = s[u][3] = 0.0f;
    for (int blk = 0; blk < nblk; blk++) {
        const uint8_t *ba = wa + (size_t)blk * B::BYTES, *bb = wb + (size_t)blk * B::BYTES;
        const typename B::hdr ha = B::load(ba), hb = B::load(bb);
        int si[NTT][4], sm[NTT][4];
#pragma unroll
        for (int u = 0; u < NTT; u++)
#pragma unroll
            for (int i = 0; i < 4; i++) si[u][i] = sm[u][i] = 0;
#pragma unroll
        for (int sb = 0; sb < 8; sb++) {
            uint32_t a0, a1, a2, a3;
            if constexpr (PAIR) {
                B::pair(ba, sb, 8 * q, &a0, &a2);
                B::pair(bb, sb, 8 * q, &a1, &a3);
            } else {
                a0 = B::word(ba, sb, 4 * q), a2 = B::word(ba, sb, 16 + 4 * q);
                a1 = B::word(bb, sb, 4 * q), a3 = B::word(bb, sb, 16 + 4 * q);
            }
            int sca[2], mna[2], scb[2], mnb[2];
            B::scales(ha, sb, sca, mna);
            B::scales(hb, sb, scb, mnb);
#pragma unroll
            for (int u = 0; u < NTT; u++) {
                if (t[u].n <= 0) break; /* warp-uniform */
                const int8_t *xs = xb[u] + (size_t)blk * 256 + 32 * sb;
                uint32_t y0, y1;
                if constexpr (PAIR) {
                    const uint2 v = *(const uint2 *)xs;
                    y0 = v.x, y1 = v.y;
                } else {
                    y0 = *(const uint32_t *)xs, y1 = *(const uint32_t *)(xs + 16);
                }
                if (B::G16) {
                    int lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
                    mma_k16(lo, a0, a1, y0);
                    mma_k16(hi, a2, a3, y1);
                    si[u][0] += sca[0] * lo[0] + sca[1] * hi[0];
                    si[u][1] += sca[0] * lo[1] + sca[1] * hi[1];
                    si[u][2] += scb[0] * lo[2] + scb[1] * hi[2];
                    si[u][3] += scb[0] * lo[3] + scb[1] * hi[3];
                } else {
                    int c[4] = {0, 0, 0, 0};
                    mma_k32(c, a0, a1, a2, a3, y0, y1);
                    si[u][0] += sca[0] * c[0], si[u][1] += sca[0] * c[1];
                    si[u][2] += scb[0] * c[2], si[u][3] += scb[0] * c[3];
                }
                if (B::MINS) {
                    const int g0 = blk * 16 + 2 * sb;
                    /* the two 16-groups' sums of each token, one 8-byte load (g0 even: aligned) */
                    const int2 p0 = *(const int2 *)(xbs + x0[u] * (k >> 4) + g0);
                    const int2 p1 = *(const int2 *)(xbs + x1[u] * (k >> 4) + g0);
                    sm[u][0] += mna[0] * p0.x + mna[1] * p0.y, sm[u][1] += mna[0] * p1.x + mna[1] * p1.y;
                    sm[u][2] += mnb[0] * p0.x + mnb[1] * p0.y, sm[u][3] += mnb[0] * p1.x + mnb[1] * p1.y;
                }
            }
        }
        float da, dmina, db, dminb;
        B::head(ha, &da, &dmina);
        B::head(hb, &db, &dminb);
#pragma unroll
        for (int u = 0; u < NTT; u++) {
            if (t[u].n <= 0) break;
            const float yd0 = xd[x0[u] * nblk + blk], yd1 = xd[x1[u] * nblk + blk];
            s[u][0] = __fadd_rn(s[u][0], __fmul_rn(yd0, __fsub_rn(__fmul_rn(da, (float)si[u][0]), __fmul_rn(dmina, (float)sm[u][0]))));
            s[u][1] = __fadd_rn(s[u][1], __fmul_rn(yd1, __fsub_rn(__fmul_rn(da, (float)si[u][1]), __fmul_rn(dmina, (float)sm[u][1]))));
            s[u][2] = __fadd_rn(s[u][2], __fmul_rn(yd0, __fsub_rn(__fmul_rn(db, (float)si[u][2]), __fmul_rn(dminb, (float)sm[u][2]))));
            s[u][3] = __fadd_rn(s[u][3], __fmul_rn(yd1, __fsub_rn(__fmul_rn(db, (float)si[u][3]), __fmul_rn(dminb, (float)sm[u][3]))));
        }
    }
#pragma unroll
    for (int u = 0; u < NTT; u++)
        if (t[u].n > 0) mma_store(t[u], r0 + g, rows, q, s[u], y, ldy, acc);
}

bool cu_matmul_mma_kq(cudaStream_t s, int type, const uint8_t *W, size_t mat_bytes, size_t row_bytes, int rows, int k,
                      const int8_t *xq, const int32_t *xbs, const float *xd, int xdiv, const cu_tile *tiles,
                      int n_tiles, int n_tok, float *y, int ldy, bool acc) {
    const dim3 grid = mma_grid(rows, tiles, n_tiles, n_tok);
    /* (a type whose words load aligned takes 16-byte aligned blocks only: else the dp4a kernel) */
#define KQ(T)                                                                                                         \
    case T:                                                                                                           \
        if (kqb<T>::ALIGN16 && (((uintptr_t)W | mat_bytes | row_bytes) & 15)) return false;                       \
        if (tiles)                                                                                                    \
            cu_launch(mma_kq_kernel<T, MMA_TILE_NTT>, grid, MMA_WARPS * 32, 0, s, W, mat_bytes, row_bytes, rows, k, xq, xbs, \
                                                                          xd, xdiv, tiles, n_tiles, n_tok, y, ldy, acc); \
        else                                                                                                          \
            cu_launch(mma_kq_kernel<T, MMA_DENSE_NTT>, grid, MMA_WARPS * 32, 0, s, W, mat_bytes, row_bytes, rows, k, xq, xbs, \
                                                                           xd, xdiv, tiles, n_tiles, n_tok, y, ldy,   \
                                                                           acc);                                     \
        return true;
    switch (type) {
        KQ(QW_TYPE_Q2_K) KQ(QW_TYPE_Q3_K) KQ(QW_TYPE_Q4_K) KQ(QW_TYPE_Q5_K) KQ(QW_TYPE_Q6_K)
    default: return false;
    }
#undef KQ
}
