/* cu_common.h — private to src/cuda: what every file of the CUDA backend
 * shares: the error check, the device tensor view, the kernel launchers each
 * .cu file defines (one job a file), and the device pool.
 *
 *   cu_quant.cuh    dequantizing a 32-element sub-block of any weight type
 *   cu_matmul.cu    y = x W^T: dense rows and expert tiles (prefill + decode)
 *   cu_ops.cu       norms, RoPE, routing, SwiGLU, residual / MoE combine
 *   cu_q8act.cuh    activations to int8 blocks (the converters and fused steps)
 *   cu_attn.cu      causal attention over the device KV cache
 *   cu_delta.cu     Gated DeltaNet: gates, causal conv, L2 norm, delta rule
 *   cu_pool.cu      the device buffer pool (size classes, cache limit, stats)
 *   cu_model.cu     upload + the VRAM tier (resident / expert cache)
 *   cu_stage.cu     pageable expert copies staged through page-locked buffers
 *   cu_forward.cu   contexts and the forward pass (the backend.h ops table)
 */
#ifndef QWISP_CU_COMMON_H
#define QWISP_CU_COMMON_H

#include "qwisp/backend.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

/* The CPU calls libm's expf/logf/sinf/cosf (glibc's are correctly rounded
 * but for rare inputs); the device's single-precision ones are off by up to
 * 2 ulp.  Evaluated in double and rounded once, these give the correctly
 * rounded value, so the two sides agree except in those rare cases. */
#ifdef __CUDACC__
__device__ __forceinline__ float cu_expf(float x) { return (float)exp((double)x); }
__device__ __forceinline__ float cu_logf(float x) { return (float)log((double)x); }
__device__ __forceinline__ float cu_sinf(float x) { return (float)sin((double)x); }
__device__ __forceinline__ float cu_cosf(float x) { return (float)cos((double)x); }
#endif

/* Kernel launches.  Decode runs ~700 small kernels a token, most of them a
 * few microseconds long, so the gap between one kernel's end and the next
 * one's start is a large share of a token.  With programmatic dependent
 * launch (compute capability 9.0+, QWISP_DEVICE_PDL=1) each kernel is
 * launched while its predecessor still runs: its blocks get resident and
 * wait at cu_pdl_enter() until the predecessor has finished and its writes
 * are visible, so no kernel touches memory early and the bits are those of
 * a plain launch.  Every kernel therefore starts with cu_pdl_enter() (a
 * no-op when launched without the attribute or built for older GPUs). */
extern int cu_pdl_on; /* cu_model.cu sets it from the knob and the device */
#ifdef __CUDACC__
__device__ __forceinline__ void cu_pdl_enter(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    /* let the next kernel's launch start now: its blocks wait as this one did */
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#ifndef QW_PREFETCH_ROWS /* 0: no weight prefetch before the wait (to time it against) */
#define QW_PREFETCH_ROWS 1
#endif
/* Called before cu_pdl_enter() by a GEMV of a dense weight (no expert tiles,
 * so the row is known from the launch alone, and no weight is written while
 * a model runs): the n lanes that share the row ask for its 128-byte lines
 * in L2 while the predecessor kernel still runs.  A hint only: what is read
 * after the wait, and so every bit, is unchanged.  Decode's GEMVs of a few
 * megabytes spend most of their time waiting for their first loads. */
__device__ __forceinline__ void cu_prefetch_row(const void *tiles, const uint8_t *row, size_t bytes, int l, int n) {
#if QW_PREFETCH_ROWS && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (tiles || blockIdx.y) return; /* expert rows are known only after the wait; grid.y's tiles share one row */
    for (size_t o = (size_t)l * 128; o < bytes; o += (size_t)n * 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + o));
#endif
}
/* Copies global -> shared memory that bypass the registers (sm_80+): issued
 * now, waited for by group (commit / wait: at most N groups still pending). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
template <typename... KArgs, typename... Args>
static inline void cu_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                             Args &&...args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = s;
    cfg.attrs = attr, cfg.numAttrs = cu_pdl_on ? 1 : 0;
    /* a failed launch leaves its error for cudaGetLastError / the next sync, as <<< >>> does */
    (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<Args &&>(args)...);
}
#endif

/* Formats a failure into err (may be NULL) and returns -1. */
int cu_fail(qw_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define CU_TRY(call, err)                                                                        \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess)                                                                   \
            return cu_fail(err, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)

/* A weight on the device.  For expert tensors, matrix_bytes separates the
 * experts; data == NULL means "not resident" (streaming tier: slots). */
typedef struct cu_tensor {
    const uint8_t *data;
    int type; /* qw_type */
    int64_t ne0, ne1;
    size_t row_bytes, matrix_bytes;
} cu_tensor;

/* Recurrent state bytes of one DeltaNet layer (the object links nothing of
 * libqwisp, so model.c's qw_model_*_state_bytes are recomputed here). */
static inline size_t cu_conv_state_bytes(const qw_hparams *hp) {
    const size_t C = 2 * (size_t)hp->ssm_state * hp->ssm_groups + (size_t)hp->ssm_state * hp->ssm_vheads;
    return (size_t)(hp->ssm_d_conv > 1 ? hp->ssm_d_conv - 1 : 1) * C * sizeof(float);
}
static inline size_t cu_delta_state_bytes(const qw_hparams *hp) {
    return (size_t)hp->ssm_vheads * hp->ssm_state * hp->ssm_state * sizeof(float);
}

/* ---- cu_pool.cu ---- */
void cu_pool_config(const qw_backend_cfg *cfg);
void *cu_pool_alloc(size_t n);   /* NULL on failure */
/* exact: no class rounding (the weight arena and expert slots: allocated
 * once, never re-requested, where 12.5% of a 20 GB arena would be waste). */
void *cu_pool_alloc_fit(size_t n, bool exact);
void cu_pool_free(void *p);
void cu_pool_stats(qw_device_stats *s);
void cu_pool_trim(void);         /* releases the whole cache */
/* Grows a device buffer to need bytes (contents dropped).  0 / -1 + err. */
int cu_grow(void **p, size_t *cap, size_t need, qw_error *err);

/* ---- cu_matmul.cu ---- */
enum { CU_MM_NT = 8 }; /* tokens one tile carries */
/* Rows a tile of the expert matmul reads: expert e, n <= CU_MM_NT
 * assignments a[i] (x row a/xdiv, y row a); run: the tile's index among its
 * expert's consecutive tiles (the tensor-core kernel gives one warp tiles
 * run 2i and 2i + 1, so the expert's weights are unpacked once for both). */
typedef struct cu_tile {
    int32_t e, n, run;
    int32_t a[CU_MM_NT];
} cu_tile;
bool cu_type_ok(int type);
/* Scratch for int8 activations: Q8_0 (xq's bytes, one scale per 32 in xd)
 * or Q8_K (xq's bytes, then the 16-sums; one scale per 256 in xd); cap = the
 * most x elements one matmul converts. */
typedef struct cu_q8_scratch {
    float *xq, *xd;
    size_t cap;
    /* what the scratch holds now: the x it was made from, its size and
     * kind (CU_Q8_0 / CU_Q8_K; 0 = nothing), for cu_matmul_again */
    const float *held_x;
    size_t held_n;
    int held_kind;
} cu_q8_scratch;
enum { CU_Q8_0 = 1, CU_Q8_K = 2 };
void cu_q8_scratch_use(cu_q8_scratch *sc);
/* ---- cu_matmul_mma.cu ---- */
/* QWISP_DEVICE_MMA: off = the dp4a kernels everywhere; auto = int8 tensor
 * cores for multi-token matmuls (prefill); always = for decode too. */
enum { CU_MMA_OFF = 0, CU_MMA_AUTO = 1, CU_MMA_ALWAYS = 2 };
void cu_mma_mode(int mode);
bool cu_mma_wanted(const cu_tile *tiles, int n_tiles, int n_tok, int xdiv);
/* A dense Q8_0/Q4_0 matmul of a few tokens (2..8: a lanes step) over so many
 * rows (an LM head) that the staged MMA kernel's warps fill the GPU; auto mode. */
bool cu_mma_q8_few(int type, const uint8_t *W, size_t row_bytes, int rows, int k, int n_tok);
/* The tensor-core forms of mm_q8_kernel / mm_kq_kernel, same bits; false
 * (nothing launched) for other types. */
bool cu_matmul_mma_q8(cudaStream_t s, int type, const uint8_t *W, size_t mat_bytes, size_t row_bytes, int rows, int k,
                      const int8_t *xq, const float *xd, int xdiv, const cu_tile *tiles, int n_tiles, int n_tok,
                      float *y, int ldy, bool acc);
bool cu_matmul_mma_kq(cudaStream_t s, int type, const uint8_t *W, size_t mat_bytes, size_t row_bytes, int rows, int k,
                      const int8_t *xq, const int32_t *xbs, const float *xd, int xdiv, const cu_tile *tiles,
                      int n_tiles, int n_tok, float *y, int ldy, bool acc);

/* The outputs of one GEMV launch: up to CU_MM_SET weights of one type and
 * width that read the same x (wq/wk/wv, gate/up, …), each with its own y.
 * Blocks [blk_end[i-1], blk_end[i]) of the grid's x dimension serve weight
 * i, CU_MM_WARPS rows a block, a warp a row — so siblings cost one launch. */
enum { CU_MM_SET = 4, CU_MM_WARPS = 4 };
typedef struct cu_mm_dst {
    int n, acc;
    int blk_end[CU_MM_SET];
    int rows[CU_MM_SET];
    int ldy[CU_MM_SET];
    const uint8_t *W[CU_MM_SET];
    size_t mat_bytes[CU_MM_SET], row_bytes[CU_MM_SET];
    float *y[CU_MM_SET];
} cu_mm_dst;
#ifdef __CUDACC__
/* This warp's weight, row and output: false when the row is past the
 * weight's last (the grid's blocks are rounded up).  Selected by unrolled
 * compares: indexing a parameter array by a variable would copy it out. */
struct cu_mm_pick {
    const uint8_t *W;
    size_t mat_bytes, row_bytes;
    float *y;
    int ldy, r;
};
/* This row's weight, row and output in a grid of per_block rows a block
 * (D.blk_end counted so), row idx of this block: false past the weight's
 * last row, with p then naming its last row (a warp that shares its
 * shuffles with valid rows computes it and stores nothing), or past every
 * weight (p->r < 0: nothing to compute). */
__device__ __forceinline__ bool cu_mm_row_in(const cu_mm_dst &D, int per_block, int idx, cu_mm_pick *p) {
    int b0 = 0;
    bool ok = false;
    p->r = -1;
#pragma unroll
    for (int i = 0; i < CU_MM_SET; i++) {
        if (i < D.n && p->r < 0 && (int)blockIdx.x < D.blk_end[i]) {
            p->r = ((int)blockIdx.x - b0) * per_block + idx;
            ok = p->r < D.rows[i];
            if (!ok) p->r = D.rows[i] - 1;
            p->W = D.W[i], p->mat_bytes = D.mat_bytes[i], p->row_bytes = D.row_bytes[i];
            p->y = D.y[i], p->ldy = D.ldy[i];
        }
        if (i < D.n) b0 = D.blk_end[i];
    }
    return ok;
}
/* A warp a row (blocks of CU_MM_WARPS rows): false when the warp has no row. */
__device__ __forceinline__ bool cu_mm_row(const cu_mm_dst &D, cu_mm_pick *p) {
    return cu_mm_row_in(D, CU_MM_WARPS, (int)(threadIdx.x >> 5), p);
}
/* A warp-a-row kernel's start: its row (cu_mm_row), that row's L2 prefetch
 * while the predecessor still runs, then the PDL wait; false: no row. */
__device__ __forceinline__ bool cu_mm_enter(const cu_mm_dst &D, const cu_tile *tiles, cu_mm_pick *p) {
    const bool ok = cu_mm_row(D, p);
    if (ok) cu_prefetch_row(tiles, p->W + (size_t)p->r * p->row_bytes, p->row_bytes, (int)(threadIdx.x & 31), 32);
    cu_pdl_enter();
    return ok;
}
#endif

/* K-quant weights with Q8_K activations and the CPU's integer block dots
 * (cu_matmul_kq.cu), for D's weights (one type, width k, blocks D.blk_end
 * [D.n - 1]), where cu_q8_plan said CU_Q8_K (a K-quant, packed rows, k %
 * 256 == 0, the scratch large enough; else the f32 path runs).  The tensor
 * cores take a one-weight D only. */
void cu_matmul_kq(cudaStream_t s, int type, int k, const cu_mm_dst *D, const float *x, int xdiv, const cu_tile *tiles,
                  int n_tiles, int n_tok, cu_q8_scratch *sc, bool reuse);
/* The Q8_K scratch's 16-element sums: after the int8 values (cap bytes,
 * rounded to 16). */
static inline int32_t *cu_q8k_bsums(const cu_q8_scratch *sc) {
    return (int32_t *)((int8_t *)sc->xq + ((sc->cap + 15) & ~(size_t)15));
}
/* Which int8 form (CU_Q8_0 / CU_Q8_K, 0 = none: f32 activations) a matmul
 * of w over n_tok packed rows (ldx) takes from the thread's scratch; its
 * scratch, or NULL when 0.  The matmuls and the steps that convert their
 * output ahead (cu_ops.cu) ask the same question here. */
int cu_q8_plan(const cu_tensor *w, int ldx, int n_tok, cu_q8_scratch **sc);
/* Drops the scratch's record of what it holds (its x is being rewritten). */
void cu_q8_forget(void);
/* Whether the scratch already holds x's int8 form of this kind and size
 * (reuse: the caller vouches x is unchanged since it was made); records
 * what the caller is about to make otherwise. */
static inline bool cu_q8_held(cu_q8_scratch *sc, bool reuse, const float *x, size_t n, int kind) {
    if (reuse && sc->held_kind == kind && sc->held_x == x && sc->held_n == n) return true;
    sc->held_x = x, sc->held_n = n, sc->held_kind = kind;
    return false;
}
#ifdef __CUDACC__
/* The tokens a matmul block serves: tile blockIdx.y's assignments (and its
 * expert e), or dense rows blockIdx.y * CU_MM_NT.. (e = 0); unused slots
 * repeat a valid row so loads stay in bounds. */
__device__ __forceinline__ void cu_tile_tokens(const cu_tile *tiles, int n_tok, int *a, int *nt, int *e) {
    if (tiles) {
        const cu_tile *tl = &tiles[blockIdx.y];
        *e = tl->e;
        *nt = tl->n;
#pragma unroll
        for (int i = 0; i < CU_MM_NT; i++) a[i] = i < *nt ? tl->a[i] : 0;
    } else {
        const int t0 = blockIdx.y * CU_MM_NT;
        *e = 0;
        *nt = min(CU_MM_NT, n_tok - t0);
#pragma unroll
        for (int i = 0; i < CU_MM_NT; i++) a[i] = t0 + (i < *nt ? i : 0);
    }
}
/* A tile's size and expert, or the dense rows' (tile blockIdx.y), and its
 * i-th token (i < its size): the per-token form of cu_tile_tokens. */
__device__ __forceinline__ void cu_tile_head(const cu_tile *tiles, int n_tok, int *nt, int *e) {
    if (tiles) {
        *nt = tiles[blockIdx.y].n, *e = tiles[blockIdx.y].e;
    } else {
        *nt = min(CU_MM_NT, n_tok - (int)blockIdx.y * CU_MM_NT), *e = 0;
    }
}
__device__ __forceinline__ int cu_tile_token(const cu_tile *tiles, int i) {
    return tiles ? tiles[blockIdx.y].a[i] : (int)blockIdx.y * CU_MM_NT + i;
}
#endif
/* Whether a matmul's tiles (or dense rows) carry about one token each:
 * decode's one token, or its routing's one tile per assignment (n_tok *
 * xdiv assignments).  The GEMV kernels then keep one token's sums a warp
 * (a speed choice: every row's dot is the same arithmetic either way). */
static inline bool cu_mm_one_token(const cu_tile *tiles, int n_tiles, int n_tok, int xdiv) {
    return tiles ? (int64_t)n_tiles >= (int64_t)n_tok * xdiv : n_tok == 1;
}
/* y[t][r] (+)= dot(W[r], x[t]) for t < n_tok (dense, tiles == NULL), or for
 * the tiles' assignments with W's expert e (x row a/xdiv; n_tok = x's rows).
 * acc: add to y. */
void cu_matmul(cudaStream_t s, const cu_tensor *w, const uint8_t *wbase, const float *x, int ldx, int xdiv,
               const cu_tile *tiles, int n_tiles, int n_tok, float *y, int ldy, bool acc);
/* cu_matmul on the x of an earlier call, unchanged since (wk after wq, up
 * after gate, …): the int8 activations it made are used again where the
 * scratch still holds them — one conversion kernel fewer, the same bits. */
void cu_matmul_again(cudaStream_t s, const cu_tensor *w, const uint8_t *wbase, const float *x, int ldx, int xdiv,
                     const cu_tile *tiles, int n_tiles, int n_tok, float *y, int ldy, bool acc);
/* Sibling matmuls of one x (none accumulating): y_i = x W_i^T for the n
 * outputs, those of one type and width in one launch where the dp4a / f32
 * kernels serve them (the tensor cores take one weight a launch).  again:
 * x is unchanged since an earlier matmul or conversion (cu_matmul_again). */
typedef struct cu_mm_out {
    const cu_tensor *w;
    const uint8_t *wbase; /* NULL: w->data (else the streaming tier's slots) */
    float *y;
    int ldy;
} cu_mm_out;
enum { CU_MM_OUTS_MAX = 8 };
void cu_matmul_set(cudaStream_t s, const cu_mm_out *outs, int n, const float *x, int ldx, int xdiv,
                   const cu_tile *tiles, int n_tiles, int n_tok, bool again);
/* rows tokens[t] of an embedding table into out [n][n_embd] f32. */
void cu_get_rows(cudaStream_t s, const cu_tensor *w, const int32_t *tokens, int n, float *out);

/* ---- cu_ops.cu ---- */
/* tiles (may be NULL): also one expert tile per assignment (decode's grouping). */
void cu_route(cudaStream_t s, const float *logits, int n_tok, int n_expert, int k, bool norm, float scale,
              int32_t *sel, float *selw, cu_tile *tiles);
/* QWISP_DEVICE_LANES_GROUP (cu_model.cu sets it): how a batched step of
 * 2..CU_MM_NT tokens (lanes) gives the experts their tokens.  0: a tile per
 * (token, pick), made by the routing, so an expert several tokens picked is
 * read once for each of them; 1: grouped by expert on the device
 * (cu_group_tiles), each expert read once, the matmul's usual kernel choice
 * (the tensor cores, as in prefill); 2: grouped, the dp4a kernels for sets
 * of at most 64 assignments (8 tokens at top-8); QW_LANES_GROUP_AUTO (the knob unset): 1 for
 * steps of CU_LANES_GROUP_MIN tokens or more, 0 below.  Every dot is
 * computed alone whatever its tile, so all give the same bits.
 * Measured on an H200, A3B-width Q8_0 (bench/RESULTS.md, 2026-12-07): 1
 * against 0 took lanes B = 2 / 4 / 8 from 3370 / 4695 / 5871 tok/s to 2808
 * / 4572 / 6942; 2 was slower than 0 at every B. */
extern int cu_lanes_group;
enum { CU_LANES_GROUP_MIN = 8 };
/* Whether a lanes step of n tokens groups its picks by expert (above). */
static inline bool cu_lanes_grouped(int n) {
    return cu_lanes_group == QW_LANES_GROUP_AUTO ? n >= CU_LANES_GROUP_MIN : cu_lanes_group != 0;
}
/* The grouping on the device (prefill's, and lanes steps' under
 * QWISP_DEVICE_LANES_GROUP): the n_assign assignments of sel sorted by
 * expert into tiles of <= CU_MM_NT (each expert's run of tiles in expert
 * order, cu_tile.run numbered), tiles[cu_group_bound(..)] written, those
 * past the last with n = 0.  work: cu_group_work_ints ints of device memory.
 * Within an expert the assignments' order is the atomics' (each output row
 * is computed alone: the order changes no bits). */
static inline int cu_group_bound(int n_assign, int n_expert) { return n_assign / CU_MM_NT + n_expert; }
static inline size_t cu_group_work_ints(int n_expert) { return 3 * (size_t)n_expert; }
void cu_group_tiles(cudaStream_t s, const int32_t *sel, int n_assign, int n_expert, int32_t *work, cu_tile *tiles);
void cu_swiglu(cudaStream_t s, float *g, const float *u, size_t n);
/* g[a] = silu(g[a]) * u[a] for the rows a of the tiles (rows of f). */
void cu_swiglu_tiles(cudaStream_t s, float *g, const float *u, const cu_tile *tiles, int n_tiles, int f);
void cu_sigmoid_mul(cudaStream_t s, float *a, const float *g, int n_tok, int n_head, int d, int g_stride);
/* down[idx[i]] = rows[i] (rows of E floats), i < n: the host's expert rows into their places. */
void cu_scatter_rows(cudaStream_t s, float *down, const float *rows, const int32_t *idx, int n, int E);
/* x[t] += sum_s down[t*k+s]*selw[t*k+s] (top-k order) [+ sd[t]*sigmoid(sgate[t])]. */
void cu_moe_combine(cudaStream_t s, float *x, const float *down, const float *selw, const float *sd,
                    const float *sgate, int n_tok, int k, int n_embd);

/* Steps that also convert their output to the int8 form the next matmul
 * (of `next`) takes, so that it skips its converter: the converter's bytes
 * (cu_q8act.cuh), recorded as held in the scratch.  Where next takes no
 * int8 form, the plain step runs. */
/* RMSNorm over rows of n (packed: ld n; sums in double, scale before the
 * weight), then out's int8 form for next. */
void cu_rmsnorm_q8(cudaStream_t s, float *out, const float *x, const float *w, int n, int rows, float eps,
                   const cu_tensor *next);
/* g = silu(g) * u over rows x f packed, then g's int8 form. */
void cu_swiglu_q8(cudaStream_t s, float *g, const float *u, int rows, int f, const cu_tensor *next);

/* Between the q/k/v projections and the scores, one kernel: q out of the
 * gated [q | gate] layout, QK RMSNorm, NeoX RoPE of both, and k and v
 * appended to the layer's KV cache at the position (pos_dev: the decode
 * graph's device position, or NULL = pos0). */
void cu_attn_prep(cudaStream_t s, const float *qg, float *q, float *k, const float *v, const float *q_norm,
                  const float *k_norm, void *kc, void *vc, bool f32, int n_tok, int H, int HKV, int D, int n_rot,
                  int pos0, const int32_t *pos_dev, float base, float eps, bool gated);

/* ---- cu_attn.cu ---- */
/* split (may be NULL): scratch of cu_attention_split_floats(n_head, max_pos)
 * floats, max_pos >= the positions attended (the KV capacity under the decode
 * graph): a one-token call then spreads its work over the positions (the same
 * bits as the one-block-per-head kernel; cu_attn.cu says how). */
void cu_attention(cudaStream_t s, const float *q, const void *k, const void *v, bool f32, float *out, int n_tok,
                  int pos0, const int32_t *pos_dev, int n_head, int n_head_kv, int head_dim, float scale,
                  float *split, int max_pos);
size_t cu_attention_split_floats(int n_head, int max_pos);
bool cu_attention_split_ok(int head_dim); /* whether the split form takes this head size */

/* ---- a lanes step's sequences in one launch ----
 * A batched step of one token a sequence runs each per-sequence kernel
 * (conv and DeltaNet states, attention over its KV cache) once for all the
 * sequences, blockIdx.z = sequence z = activation row z, with each one's
 * state and position passed by value (a graph captures them as they are).
 * Each sequence's numbers are the one-sequence kernel's, bit for bit. */
enum { CU_SEQS_MAX = CU_MM_NT };
typedef struct cu_seqs {
    int n;
    void *a[CU_SEQS_MAX];                /* conv state, DeltaNet state, or K cache */
    void *b[CU_SEQS_MAX];                /* V cache (attention) */
    int pos0[CU_SEQS_MAX];               /* its position */
    const int32_t *pos_dev[CU_SEQS_MAX]; /* or where a graph reads it on the device (NULL: pos0) */
} cu_seqs;
/* cu_attn_prep, then cu_attention, of one token a sequence (the split form:
 * split holds n * cu_attention_split_floats(n_head, max_pos) floats). */
void cu_attn_prep_seqs(cudaStream_t s, const float *qg, float *q, float *k, const float *v, const float *q_norm,
                       const float *k_norm, const cu_seqs *sq, bool f32, int H, int HKV, int D, int n_rot, float base,
                       float eps, bool gated);
void cu_attention_seqs(cudaStream_t s, const float *q, const cu_seqs *sq, bool f32, float *out, int n_head,
                       int n_head_kv, int head_dim, float scale, float *split, int max_pos);
/* cu_conv_l2norm and cu_delta of one token a sequence (sq->a: its conv or DeltaNet state). */
void cu_conv_l2norm_seqs(cudaStream_t s, const float *mix, float *cv, const cu_seqs *sq, const float *w, int C, int K,
                         int n_norm, int S, float eps);
void cu_delta_seqs(cudaStream_t s, const cu_seqs *sq, const float *cv, const float *beta, const float *alpha,
                   const float *dt, const float *A, float *o, int S, int HK, int HV);

/* ---- cu_delta.cu ---- */
bool cu_delta_supported(int S);
/* The causal conv + SiLU of n_tok tokens (state moved on), then the L2 norm
 * of the vectors of S (dividing 128) in channels [0, n_norm): q and k. */
void cu_conv_l2norm(cudaStream_t s, const float *mix, float *cv, float *state, const float *w, int n_tok, int C, int K,
                    int n_norm, int S, float eps);
/* beta, alpha: the raw projections (the gates are made from them with dt, A). */
void cu_delta(cudaStream_t s, float *state, const float *cv, const float *beta, const float *alpha, const float *dt,
              const float *A, float *o, int n_tok, int S, int HK, int HV);
void cu_gated_norm(cudaStream_t s, float *o, const float *z, const float *w, int n_tok, int HV, int S, float eps);

#endif
