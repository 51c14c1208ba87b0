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
 * Sums: Q8_0 / Q4_0 take the CPU's int8 activations and the scalar
 * reference's block order (the avx512-amx level's too), so a row's dot has
 * those levels' bits; F32 follows the avx512 levels' dot_f32 (the router);
 * K-quants take Q8_K activations and integer block dots (cu_matmul_kq.cu);
 * F16/BF16 (and K-quants where that path does not apply) sum per lane in sub-block order, then
 * a warp tree, with f32 activations, and agree to rounding (tests/gpu/).
 */
#include "cu_common.h"
#include "cu_w8.cuh"
#include "cu_q8act.cuh"
#include "cu_quant.cuh"

enum { MM_WARPS = CU_MM_WARPS };

/* Q8_0 activations, as the CPU makes them (quant_ref.c): cu_q8act.cuh, a warp a block. */
__global__ void quant_q8_kernel(const float *x, int n_blocks, int8_t *xq, float *xd) {
    cu_pdl_enter();
    const int b = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (b < n_blocks) cu_q8_0_block(x[(size_t)b * 32 + lane], xq + (size_t)b * 32, &xd[b], lane);
}

/* The weight's 32 integer values of sub-block j as int8, four to a word,
 * and its scale (Q8_0, Q4_0: nibble - 8, low nibbles first). */
template <int T> __device__ __forceinline__ float cu_w8(const uint8_t *row, int j, int32_t *w);
template <> __device__ __forceinline__ float cu_w8<QW_TYPE_Q8_0>(const uint8_t *row, int j, int32_t *w) {
    const uint8_t *b = row + (size_t)j * 34;
    cu_ldw<8>(b + 2, (uint32_t *)w);
    return cu_h2f(cu_ld16(b));
}
template <> __device__ __forceinline__ float cu_w8<QW_TYPE_Q4_0>(const uint8_t *row, int j, int32_t *w) {
    const uint8_t *b = row + (size_t)j * 18;
    uint32_t q[4];
    cu_ldw<4>(b + 2, q);
    cu_q4_unpack(q, w);
    return cu_h2f(cu_ld16(b));
}

#ifndef QW_MM_Q8_STAGE /* 0: every lane loads its own block (to time the staging against) */
#define QW_MM_Q8_STAGE 1
#endif
/* 1: a staged row's rounds are copied with cp.async, the next round in flight
 * while this one is summed, so a warp has two rounds of its row on the way
 * instead of one (a one-token expert tile's warp owns one 2 KB row; this
 * kernel was 1265 of 1497 us of an 8-lane step's kernels, bench/RESULTS.md);
 * 0: register loads, one round at a time.  Off until it has been run and
 * timed on a GPU (`make NVDEFS=-DQW_MM_Q8_ASYNC=1`, or NVVAR in
 * scripts/device_job.sh, builds it). */
#ifndef QW_MM_Q8_ASYNC
#define QW_MM_Q8_ASYNC 0
#endif
/* 1: where a row starts on 16 bytes and has a multiple of 8 blocks (every
 * round then a whole number of 16-byte words: k % 256 == 0 with the usual
 * row strides), the staged rounds are copied in 16-byte words, a quarter of
 * the load instructions; 0: 4-byte words always.  The bytes staged and the
 * sums do not change.  Off until it has been run and timed on a GPU. */
#ifndef QW_MM_Q8_V16
#define QW_MM_Q8_V16 0
#endif

/* cu_w8 of block `lane` of a round the warp staged in shared memory (st:
 * the round's bytes from a 4-byte aligned start, as words).  Staging lets
 * the warp read the row with whole, coalesced word loads: a lane reading
 * its own 34- or 18-byte block straight from memory issues 2-byte loads
 * for half the blocks (their words straddle) and each load instruction
 * spans the warp's whole kilobyte, which kept the LM head's GEMV near
 * 1.9 TB/s on an H100. */
template <int T> __device__ __forceinline__ float cu_w8_staged(const uint32_t *st, int lane, int32_t *w) {
    enum { BS = cu_w8_shape<T>::BS, WORDS = cu_w8_shape<T>::WORDS };
    const int b = lane * BS; /* the block's byte offset in its first word: 0 or 2 */
    uint32_t x[WORDS];
#pragma unroll
    for (int i = 0; i < WORDS; i++) x[i] = st[(b >> 2) + i];
    return cu_w8_words<T>(x, 8 * (b & 3), w);
}

/* 1: where a row starts on 16 bytes and has a multiple of 8 blocks, each
 * lane loads the aligned 16-byte words that hold its block and picks the
 * block out in registers (cu_w8_direct), instead of the warp staging the
 * round in shared memory: decode's GEMV (QW_MV_Q8_DIRECT; +18 % decode on
 * an H100, bench/RESULTS.md) and the few-token one (QW_MM_Q8_DIRECT: off
 * until it has been timed on a GPU).  0: staged (to time against). */
#ifndef QW_MV_Q8_DIRECT
#define QW_MV_Q8_DIRECT 1
#endif
#ifndef QW_MM_Q8_DIRECT
#define QW_MM_Q8_DIRECT 0
#endif
/* A staged round's words (32 blocks from block j0, fewer at the row's end)
 * loaded to registers: every load issued before any is used, so a lane has
 * all of its words on the way at once. */
template <int T> struct cu_round {
    enum { BS = cu_w8_shape<T>::BS, RW = 32 * BS / 4, NV = (RW + 31) / 32 }; /* a round's words, a lane's */
    uint32_t v[NV];
    __device__ __forceinline__ void load(const uint8_t *wr, int j0, int nsb, int lane) {
        const uint32_t *src = (const uint32_t *)(wr + (size_t)j0 * BS);
        const int nw = min(32, nsb - j0) * BS / 4;
#pragma unroll
        for (int c = 0; c < NV; c++)
            if (lane + 32 * c < nw) v[c] = src[lane + 32 * c];
    }
    __device__ __forceinline__ void store(uint32_t *st, int j0, int nsb, int lane) const {
        const int nw = min(32, nsb - j0) * BS / 4;
#pragma unroll
        for (int c = 0; c < NV; c++)
            if (lane + 32 * c < nw) st[lane + 32 * c] = v[c];
    }
};

/* The CPU's Q8_0 / Q4_0 dot (quant_ref.c): per block an exact integer sum
 * (dp4a) times (d_w * d_x), each float operation rounded on its own, summed
 * block by block in order. */
template <int T>
__global__ void mm_q8_kernel(const cu_mm_dst D, int k, const int8_t *xq, const float *xd, int xdiv, const cu_tile *tiles,
                             int n_tok) {
    const int lane = threadIdx.x & 31;
    cu_mm_pick P;
    const bool ok = cu_mm_enter(D, tiles, &P);
    if (!ok) return;
    const int r = P.r;
    int nt, a[CU_MM_NT], e;
    cu_tile_tokens(tiles, n_tok, a, &nt, &e);
    if (nt <= 0) return; /* an empty tile (cu_group_tiles) */
    const uint8_t *wr = P.W + (size_t)e * P.mat_bytes + (size_t)r * P.row_bytes;
    const int nsb = k >> 5;
    /* 32 blocks at a time, one per lane: the block products in parallel,
     * then each token's sum in block order by lane i (token i) from shared
     * memory — the scalar reference's serial chain (and the avx512-amx
     * level's), so a row's dot has the CPU's bits there.  (All lanes adding
     * every token's products through shuffles cost a lanes step 32 shuffles
     * a token a round; a launch of one-token tiles goes to mv_q8_kernel.) */
    __shared__ float prod[MM_WARPS][CU_MM_NT][33]; /* 33: lane i reading its row is conflict-free */
    float(*pw)[33] = prod[threadIdx.x >> 5];
    enum { BS = cu_w8_shape<T>::BS, RW = 32 * BS / 4, NBUF = QW_MM_Q8_ASYNC ? 2 : 1 }; /* a round's words */
    __shared__ __align__(16) uint32_t stage[MM_WARPS][NBUF][RW]; /* RW * 4: a multiple of 16 bytes */
    uint32_t(*stw)[RW] = stage[threadIdx.x >> 5];
    /* a row of whole words (an even block count) from a 4-byte aligned start: staged; else each lane loads its block */
    const bool direct = QW_MM_Q8_DIRECT && !QW_MM_Q8_ASYNC && (nsb & 7) == 0 && ((uintptr_t)wr & 15) == 0;
    const bool staged = !direct && QW_MM_Q8_STAGE && (nsb & 1) == 0 && ((uintptr_t)wr & 3) == 0;
    /* ... and in 16-byte words (QW_MM_Q8_V16) */
    const bool v16 = QW_MM_Q8_V16 && staged && (nsb & 7) == 0 && ((uintptr_t)wr & 15) == 0;
    /* the words of the round from block j0 into buffer b (QW_MM_Q8_ASYNC) */
    auto issue = [&](int j0, int b) {
        const uint32_t *src = (const uint32_t *)(wr + (size_t)j0 * BS);
        const int nw = min(32, nsb - j0) * BS / 4;
        if (v16) {
#pragma unroll
            for (int c = 0; c < (RW / 4 + 31) / 32; c++)
                if (4 * (lane + 32 * c) < nw) cp_async16(&stw[b][4 * (lane + 32 * c)], src + 4 * (lane + 32 * c));
        } else {
#pragma unroll
            for (int c = 0; c < (RW + 31) / 32; c++)
                if (lane + 32 * c < nw) cp_async4(&stw[b][lane + 32 * c], src + lane + 32 * c);
        }
        cp_async_commit();
    };
    if (QW_MM_Q8_ASYNC && staged) issue(0, 0);
    float s = 0.0f; /* lane i < nt: token i's sum */
    for (int j0 = 0; j0 < nsb; j0 += 32) {
        const int j = j0 + lane, nb = min(32, nsb - j0);
        int32_t w[8];
        float dw = 0.0f;
        if (staged) {
            uint32_t *st = stw[QW_MM_Q8_ASYNC ? (j0 >> 5) & 1 : 0];
            if (QW_MM_Q8_ASYNC) {
                if (j0 + 32 < nsb) {
                    issue(j0 + 32, ((j0 >> 5) + 1) & 1);
                    cp_async_wait<1>();
                } else {
                    cp_async_wait<0>();
                }
            } else if (v16) {
                const uint4 *src = (const uint4 *)(wr + (size_t)j0 * BS);
                const int nq = nb * BS / 16;
                uint4 v[(RW / 4 + 31) / 32]; /* every load issued before the first store */
#pragma unroll
                for (int c = 0; c < (RW / 4 + 31) / 32; c++)
                    if (lane + 32 * c < nq) v[c] = src[lane + 32 * c];
#pragma unroll
                for (int c = 0; c < (RW / 4 + 31) / 32; c++)
                    if (lane + 32 * c < nq) ((uint4 *)st)[lane + 32 * c] = v[c];
            } else {
                cu_round<T> rd;
                rd.load(wr, j0, nsb, lane);
                rd.store(st, j0, nsb, lane);
            }
            __syncwarp();
            if (j < nsb) dw = cu_w8_staged<T>(st, lane, w);
            __syncwarp(); /* read before a later round stages into it */
        } else if (j < nsb) {
            dw = direct ? cu_w8_direct<T>(wr, j, w) : cu_w8<T>(wr, j, w);
        }
#pragma unroll
        for (int i = 0; i < CU_MM_NT; i++) {
            if (i >= nt) break; /* warp-uniform */
            const size_t xr = (size_t)(a[i] / xdiv);
            const float p = j < nsb ? cu_q8_block_prod(w, dw, xq + xr * k, xd + xr * nsb, j) : 0.0f;
            pw[i][lane] = p;
        }
        __syncwarp();
        if (lane < nt)
#pragma unroll 8 /* eight reads on the way before their adds: the chain waits on the adds alone */
            for (int l = 0; l < nb; l++) s = __fadd_rn(s, pw[lane][l]);
        __syncwarp(); /* read before the next round writes */
    }
    int mine = a[0]; /* lane i's token: a[i] (a register array is not indexed by lane) */
#pragma unroll
    for (int i = 1; i < CU_MM_NT; i++) mine = lane == i ? a[i] : mine;
    if (lane < nt) {
        float *dst = P.y + (size_t)mine * P.ldy + r;
        *dst = D.acc ? *dst + s : s;
    }
}

#ifndef QW_MV_Q8 /* decode's Q8_0 / Q4_0 GEMV: 1 = mv_q8_kernel, 0 = mm_q8_kernel's (to time against) */
#define QW_MV_Q8 1
#endif
/* Decode's Q8_0 / Q4_0 GEMV (cu_mm_one_token): mm_q8_kernel's warp a row and
 * block products, the one token's chain summed from shared memory: each
 * lane stores its block's product and every lane reads the round back as
 * eight 16-byte broadcasts and adds it in block order — nine shared-memory
 * operations and 32 dependent adds a round where mm_q8_kernel waited on 32
 * shuffles one after another.  Rows of whole 16-byte words load each block
 * directly (QW_MV_Q8_DIRECT); others are staged, the next round's words
 * loaded while this one is summed.  A tile of more tokens is
 * served a token at a time.  The same products added in the same order:
 * the same bits. */
template <int T>
__global__ void __launch_bounds__(MM_WARPS * 32, 8) /* 8 blocks an SM: 64 registers a thread (71 unbounded: 7) */
mv_q8_kernel(const cu_mm_dst D, int k, const int8_t *xq, const float *xd, int xdiv, const cu_tile *tiles, int n_tok) {
    const int lane = threadIdx.x & 31;
    cu_mm_pick P;
    const bool ok = cu_mm_enter(D, tiles, &P);
    if (!ok) return;
    int nt, e;
    cu_tile_head(tiles, n_tok, &nt, &e);
    if (nt <= 0) return;
    const uint8_t *wr = P.W + (size_t)e * P.mat_bytes + (size_t)P.r * P.row_bytes;
    const int nsb = k >> 5;
    __shared__ __align__(16) float prod[MM_WARPS][32];
    __shared__ __align__(16) uint32_t stage[MM_WARPS][cu_round<T>::RW];
    float *pw = prod[threadIdx.x >> 5];
    uint32_t *st = stage[threadIdx.x >> 5];
    const bool direct = QW_MV_Q8_DIRECT && (nsb & 7) == 0 && ((uintptr_t)wr & 15) == 0;
    const bool staged = !direct && QW_MM_Q8_STAGE && (nsb & 1) == 0 && ((uintptr_t)wr & 3) == 0; /* as in mm_q8_kernel */
    for (int i = 0; i < nt; i++) {
        const int a = cu_tile_token(tiles, i);
        const size_t xr = (size_t)(a / xdiv);
        cu_round<T> rd;
        if (staged) rd.load(wr, 0, nsb, lane);
        float s = 0.0f;
        for (int j0 = 0; j0 < nsb; j0 += 32) {
            const int j = j0 + lane, nb = min(32, nsb - j0);
            int32_t w[8];
            float dw = 0.0f;
            if (staged) {
                rd.store(st, j0, nsb, lane);
                __syncwarp();
                if (j < nsb) dw = cu_w8_staged<T>(st, lane, w);
                __syncwarp(); /* read before a later round stages into it */
                if (j0 + 32 < nsb) rd.load(wr, j0 + 32, nsb, lane); /* on the way while this round is summed */
            } else if (j < nsb) {
                dw = direct ? cu_w8_direct<T>(wr, j, w) : cu_w8<T>(wr, j, w);
            }
            pw[lane] = j < nsb ? cu_q8_block_prod(w, dw, xq + xr * k, xd + xr * nsb, j) : 0.0f;
            __syncwarp();
            s = cu_chain_round(pw, nb, s);
            __syncwarp(); /* read before the next round writes */
        }
        if (lane == 0) {
            float *dst = P.y + (size_t)a * P.ldy + P.r;
            *dst = D.acc ? *dst + s : s;
        }
    }
}

/* The Q8_0 activation scratch of the thread's current context (cu_forward.cu
 * sizes it before any capture). */
static __thread cu_q8_scratch *t_q8;
void cu_q8_scratch_use(cu_q8_scratch *sc) {
    t_q8 = sc;
    if (sc) sc->held_kind = 0; /* a new step: x buffers hold new values */
}

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
__global__ void mm_kernel(const cu_mm_dst D, int k, const float *x, int ldx, int xdiv, const cu_tile *tiles, int n_tok) {
    const int lane = threadIdx.x & 31;
    cu_mm_pick P;
    const bool ok = cu_mm_enter(D, tiles, &P);
    if (!ok) return;
    const int r = P.r;
    int nt, a[CU_MM_NT], e;
    cu_tile_tokens(tiles, n_tok, a, &nt, &e);
    if (nt <= 0) return; /* an empty tile (cu_group_tiles) */
    const uint8_t *wr = P.W + (size_t)e * P.mat_bytes + (size_t)r * P.row_bytes;
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
            float *dst = P.y + (size_t)a[i] * P.ldy + r;
            *dst = D.acc ? *dst + v : v;
        }
    }
}

/* F32 weights: the avx512 / avx512-amx levels' dot_f32 (quant_avx512.c), so
 * the router's logits have those levels' bits.  Its 64 partial sums (four
 * 16-lane FMA accumulators a0..a3 over 64-element chunks; a 16-element
 * remainder into a0, the last < 16 into a1) live two per lane: lane L holds
 * partial L (a0/a1) and L + 32 (a2/a3).  Then (a0 + a1) + (a2 + a3) and the
 * 16-lane tree 8, 4, 2, 1 of _mm512_reduce_add_ps — xor-shuffles here.
 * Every lane calls it; lane 0's result is the dot. */
__device__ __forceinline__ float dot_f32_warp(const float *w, const float *xr, int k, int lane) {
    const int k64 = k & ~63, k16 = k & ~15;
    float pa = 0.0f, pb = 0.0f;
#pragma unroll 8 /* the loads of eight chunks in flight: decode's router is latency-bound (16 measured slower) */
    for (int c = 0; c < k64; c += 64) {
        pa = __fmaf_rn(w[c + lane], xr[c + lane], pa);
        pb = __fmaf_rn(w[c + 32 + lane], xr[c + 32 + lane], pb);
    }
    for (int c = k64; c < k16; c += 16)
        if (lane < 16) pa = __fmaf_rn(w[c + lane], xr[c + lane], pa);
    if (k16 < k && lane >= 16) {
        const int q = k16 + lane - 16;
        pa = q < k ? __fmaf_rn(w[q], xr[q], pa) : __fmaf_rn(0.0f, 0.0f, pa);
    }
    pa = __fadd_rn(pa, __shfl_xor_sync(0xffffffffu, pa, 16));
    pb = __fadd_rn(pb, __shfl_xor_sync(0xffffffffu, pb, 16));
    float v = __fadd_rn(pa, pb);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__global__ void mm_f32_kernel(const cu_mm_dst D, int k, const float *x, int ldx, int xdiv, const cu_tile *tiles,
                              int n_tok) {
    const int lane = threadIdx.x & 31;
    cu_mm_pick P;
    const bool ok = cu_mm_enter(D, tiles, &P);
    if (!ok) return;
    const int r = P.r;
    int nt, a[CU_MM_NT], e;
    cu_tile_tokens(tiles, n_tok, a, &nt, &e);
    if (nt <= 0) return; /* an empty tile (cu_group_tiles) */
    const float *w = (const float *)(P.W + (size_t)e * P.mat_bytes + (size_t)r * P.row_bytes);
#pragma unroll
    for (int i = 0; i < CU_MM_NT; i++) {
        if (i >= nt) break; /* warp-uniform */
        const float v = dot_f32_warp(w, x + (size_t)(a[i] / xdiv) * ldx, k, lane);
        if (lane == 0) {
            float *dst = P.y + (size_t)a[i] * P.ldy + r;
            *dst = D.acc ? *dst + v : v;
        }
    }
}

#ifndef QW_MV_F32 /* 0: the few-token F32 GEMV by mm_f32_kernel too (to time mv_f32_kernel against) */
#define QW_MV_F32 1
#endif
enum { MV_F32_THREADS = 64, MV_F32_SMEM_MAX = 48 * 1024 };

/* A few dense tokens' F32 GEMV (decode's and the lanes steps' router and
 * gates), a block a row: the block copies the row into shared memory before
 * the wait (a weight is never written while a model runs).  One token: x is
 * copied after it too, every load in flight at once, and warp 0 sums; more
 * (up to CU_MM_NT): warp t sums token t, its x read from global memory.
 * Either way the sum is mm_f32_kernel's (dot_f32_warp: the same bits).
 * mm_f32_kernel's warp a row has eight chunks' loads in flight, four round
 * trips for a 2048-wide row and token, one token after another, and the
 * router has too few rows (128, 256) to hide them: at 8 tokens it took 3x
 * one token's time. */
__global__ void mv_f32_kernel(const cu_mm_dst D, int k, const float *x, int ldx, int n_tok) {
    extern __shared__ float4 mv_f32_sm[]; /* the row, then (one token) x: k floats each */
    float4 *sw = mv_f32_sm, *sx = mv_f32_sm + k / 4;
    cu_mm_pick P;
    const bool ok = cu_mm_row_in(D, 1, 0, &P);
    const int n4 = k / 4;
    if (ok) {
        const float4 *w4 = (const float4 *)(P.W + (size_t)P.r * P.row_bytes);
#pragma unroll 8
        for (int i = threadIdx.x; i < n4; i += blockDim.x) sw[i] = w4[i];
    }
    cu_pdl_enter();
    if (!ok) return; /* the whole block */
    const int t = (int)(threadIdx.x >> 5);
    const float *xt = x + (size_t)t * ldx;
    if (n_tok == 1) {
#pragma unroll 8
        for (int i = threadIdx.x; i < n4; i += blockDim.x) sx[i] = ((const float4 *)x)[i];
        xt = (const float *)sx;
    }
    __syncthreads();
    if (t >= n_tok) return;
    const float v = dot_f32_warp((const float *)sw, xt, k, threadIdx.x & 31);
    if ((threadIdx.x & 31) == 0) {
        float *dst = P.y + (size_t)t * P.ldy + P.r;
        *dst = D.acc ? *dst + v : v;
    }
}

/* mv_f32_kernel serves D: up to CU_MM_NT dense tokens, whole float4s of 16-byte
 * aligned rows (and x, for one token) in shared memory; its block's threads and bytes. */
static bool mv_f32_fits(const cu_mm_dst &D, int k, const float *x, int xdiv, const cu_tile *tiles, int n_tok,
                        int *threads, size_t *smem) {
    *threads = n_tok == 1 ? MV_F32_THREADS : 32 * n_tok;
    *smem = (size_t)k * (n_tok == 1 ? 8 : 4);
    if (!QW_MV_F32 || tiles || xdiv != 1 || n_tok < 1 || n_tok > CU_MM_NT || k % 4 || *smem > MV_F32_SMEM_MAX ||
        (n_tok == 1 && (uintptr_t)x % 16))
        return false;
    for (int i = 0; i < D.n; i++)
        if ((uintptr_t)D.W[i] % 16) return false;
    return true;
}

bool cu_type_ok(int type) {
    switch (type) {
    case QW_TYPE_F32: case QW_TYPE_F16: case QW_TYPE_BF16: case QW_TYPE_Q8_0: case QW_TYPE_Q4_0:
    case QW_TYPE_Q2_K: case QW_TYPE_Q3_K: case QW_TYPE_Q4_K: case QW_TYPE_Q5_K: case QW_TYPE_Q6_K: return true;
    default: return false;
    }
}

void cu_q8_forget(void) {
    if (t_q8) t_q8->held_kind = 0;
}

int cu_q8_plan(const cu_tensor *w, int ldx, int n_tok, cu_q8_scratch **sc) {
    const int k = (int)w->ne0;
    *sc = NULL;
    if (!t_q8 || ldx != k || n_tok <= 0 || (size_t)n_tok * k > t_q8->cap) return 0;
    int kind = 0;
    switch (w->type) {
    case QW_TYPE_Q8_0: case QW_TYPE_Q4_0: kind = CU_Q8_0; break;
    case QW_TYPE_Q2_K: case QW_TYPE_Q3_K: case QW_TYPE_Q4_K: case QW_TYPE_Q5_K: case QW_TYPE_Q6_K:
        kind = k % 256 ? 0 : CU_Q8_K;
        break;
    default: break;
    }
    if (kind) *sc = t_q8;
    return kind;
}

/* One launch for D's weights (of w's type and width; more than one only
 * where the tensor cores are not wanted: cu_matmul_set sees to it). */
static void matmul_dst(cudaStream_t s, const cu_tensor *w, const cu_mm_dst &D, const float *x, int ldx, int xdiv,
                       const cu_tile *tiles, int n_tiles, int n_tok, bool reuse) {
    const int k = (int)w->ne0;
    dim3 grid(D.blk_end[D.n - 1], tiles ? n_tiles : (n_tok + CU_MM_NT - 1) / CU_MM_NT);
    if (grid.y == 0 || grid.x == 0) return;
    cu_q8_scratch *sc;
    const int kind = cu_q8_plan(w, ldx, n_tok, &sc);
    /* Q8_0 / Q4_0 weights: the CPU's Q8_0 activations and integer block dots
     * (x rows: n_tok, for tiles too) */
    if (kind == CU_Q8_0) {
        const int nb = n_tok * (k / 32);
        if (!cu_q8_held(sc, reuse, x, (size_t)n_tok * k, CU_Q8_0))
            cu_launch(quant_q8_kernel, (nb + 3) / 4, 128, 0, s, x, nb, (int8_t *)sc->xq, sc->xd);
        if (D.n == 1 &&
            (cu_mma_wanted(tiles, n_tiles, n_tok, xdiv) ||
             (!tiles && cu_mma_q8_few(w->type, D.W[0], D.row_bytes[0], D.rows[0], k, n_tok))) &&
            cu_matmul_mma_q8(s, w->type, D.W[0], D.mat_bytes[0], D.row_bytes[0], D.rows[0], k, (const int8_t *)sc->xq,
                             sc->xd, xdiv, tiles, n_tiles, n_tok, D.y[0], D.ldy[0], D.acc))
            return;
        if (QW_MV_Q8 && cu_mm_one_token(tiles, n_tiles, n_tok, xdiv)) {
            if (w->type == QW_TYPE_Q8_0)
                cu_launch(mv_q8_kernel<QW_TYPE_Q8_0>, grid, MM_WARPS * 32, 0, s, D, k, (const int8_t *)sc->xq, sc->xd, xdiv,
                          tiles, n_tok);
            else
                cu_launch(mv_q8_kernel<QW_TYPE_Q4_0>, grid, MM_WARPS * 32, 0, s, D, k, (const int8_t *)sc->xq, sc->xd, xdiv,
                          tiles, n_tok);
            return;
        }
        if (w->type == QW_TYPE_Q8_0)
            cu_launch(mm_q8_kernel<QW_TYPE_Q8_0>, grid, MM_WARPS * 32, 0, s, D, k, (const int8_t *)sc->xq, sc->xd, xdiv, tiles,
                                                                     n_tok);
        else
            cu_launch(mm_q8_kernel<QW_TYPE_Q4_0>, grid, MM_WARPS * 32, 0, s, D, k, (const int8_t *)sc->xq, sc->xd, xdiv, tiles,
                                                                     n_tok);
        return;
    }
    if (kind == CU_Q8_K) {
        cu_matmul_kq(s, w->type, k, &D, x, xdiv, tiles, n_tiles, n_tok, sc, reuse);
        return;
    }
    if (w->type == QW_TYPE_F32) {
        int threads;
        size_t smem;
        if (mv_f32_fits(D, k, x, xdiv, tiles, n_tok, &threads, &smem)) { /* the grid counted in blocks of one row */
            cu_mm_dst Dv = D;
            for (int i = 0; i < Dv.n; i++) Dv.blk_end[i] = (i ? Dv.blk_end[i - 1] : 0) + Dv.rows[i];
            cu_launch(mv_f32_kernel, Dv.blk_end[Dv.n - 1], threads, smem, s, Dv, k, x, ldx, n_tok);
        } else {
            cu_launch(mm_f32_kernel, grid, MM_WARPS * 32, 0, s, D, k, x, ldx, xdiv, tiles, n_tok);
        }
        return;
    }
#define MM(T)                                                                                  \
    case T: cu_launch(mm_kernel<T>, grid, MM_WARPS * 32, 0, s, D, k, x, ldx, xdiv, tiles, n_tok); break;
    switch (w->type) {
        MM(QW_TYPE_F16) MM(QW_TYPE_BF16) MM(QW_TYPE_Q8_0) MM(QW_TYPE_Q4_0) MM(QW_TYPE_Q2_K)
        MM(QW_TYPE_Q3_K) MM(QW_TYPE_Q4_K) MM(QW_TYPE_Q5_K) MM(QW_TYPE_Q6_K)
    default: break; /* refused at upload (cu_type_ok) */
    }
#undef MM
}

static void dst_add(cu_mm_dst *D, const cu_tensor *w, const uint8_t *wbase, float *y, int ldy) {
    const int i = D->n++;
    D->W[i] = wbase ? wbase : w->data;
    D->mat_bytes[i] = w->matrix_bytes;
    D->row_bytes[i] = w->row_bytes;
    D->rows[i] = (int)w->ne1;
    D->y[i] = y;
    D->ldy[i] = ldy;
    D->blk_end[i] = (i ? D->blk_end[i - 1] : 0) + (D->rows[i] + MM_WARPS - 1) / MM_WARPS;
}

static void matmul(cudaStream_t s, const cu_tensor *w, const uint8_t *wbase, const float *x, int ldx, int xdiv,
                   const cu_tile *tiles, int n_tiles, int n_tok, float *y, int ldy, bool acc, bool reuse) {
    cu_mm_dst D = {};
    D.acc = acc;
    dst_add(&D, w, wbase, y, ldy);
    matmul_dst(s, w, D, x, ldx, xdiv, tiles, n_tiles, n_tok, reuse);
}

void cu_matmul(cudaStream_t s, const cu_tensor *w, const uint8_t *wbase, const float *x, int ldx, int xdiv,
               const cu_tile *tiles, int n_tiles, int n_tok, float *y, int ldy, bool acc) {
    matmul(s, w, wbase, x, ldx, xdiv, tiles, n_tiles, n_tok, y, ldy, acc, false);
}

void cu_matmul_again(cudaStream_t s, const cu_tensor *w, const uint8_t *wbase, const float *x, int ldx, int xdiv,
                     const cu_tile *tiles, int n_tiles, int n_tok, float *y, int ldy, bool acc) {
    matmul(s, w, wbase, x, ldx, xdiv, tiles, n_tiles, n_tok, y, ldy, acc, true);
}

/* Groups the outputs by (type, width) in order of first appearance; a group
 * is one launch unless the tensor cores want these tokens (one a weight).
 * Every row's dot is computed as a lone matmul computes it. */
void cu_matmul_set(cudaStream_t s, const cu_mm_out *outs, int n, const float *x, int ldx, int xdiv,
                   const cu_tile *tiles, int n_tiles, int n_tok, bool again) {
    if (n > CU_MM_OUTS_MAX) { /* in slices (the callers pass a layer's siblings: at most 4) */
        cu_matmul_set(s, outs, CU_MM_OUTS_MAX, x, ldx, xdiv, tiles, n_tiles, n_tok, again);
        cu_matmul_set(s, outs + CU_MM_OUTS_MAX, n - CU_MM_OUTS_MAX, x, ldx, xdiv, tiles, n_tiles, n_tok, true);
        return;
    }
    const bool one_each = cu_mma_wanted(tiles, n_tiles, n_tok, xdiv);
    bool done[CU_MM_OUTS_MAX] = {false};
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        cu_mm_dst D = {};
        for (int j = i; j < n; j++) {
            if (done[j] || outs[j].w->type != outs[i].w->type || outs[j].w->ne0 != outs[i].w->ne0) continue;
            if (D.n == CU_MM_SET || (one_each && D.n == 1)) continue;
            dst_add(&D, outs[j].w, outs[j].wbase, outs[j].y, outs[j].ldy);
            done[j] = true;
        }
        matmul_dst(s, outs[i].w, D, x, ldx, xdiv, tiles, n_tiles, n_tok, again || i > 0);
    }
}

template <int T> __global__ void get_rows_kernel(const uint8_t *W, size_t row_bytes, int k, const int32_t *tok, float *out) {
    cu_pdl_enter();
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
    case T: cu_launch(get_rows_kernel<T>, n, 64, 0, s, w->data, w->row_bytes, k, tokens, out); break;
    switch (w->type) {
        GR(QW_TYPE_F32) GR(QW_TYPE_F16) GR(QW_TYPE_BF16) GR(QW_TYPE_Q8_0) GR(QW_TYPE_Q4_0) GR(QW_TYPE_Q2_K)
        GR(QW_TYPE_Q3_K) GR(QW_TYPE_Q4_K) GR(QW_TYPE_Q5_K) GR(QW_TYPE_Q6_K)
    default: break;
    }
#undef GR
}
