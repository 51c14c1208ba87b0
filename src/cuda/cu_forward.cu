/* cu_forward.cu — the device context and the forward pass on the GPU: the
 * same layer loop as model/forward.c (attention or Gated DeltaNet, then MoE;
 * the loaded layer's flag decides), every step a kernel on the context's
 * stream, token ids in and the asked-for logits out.
 *
 * The context owns (all from the device pool): the KV cache per attention
 * layer, growing by doubling up to n_ctx as on the CPU; the recurrent state
 * per DeltaNet layer (zeroed on reset); the activation buffers of the
 * largest chunk seen.
 *
 * MoE: single-token steps on the resident tier (and a batched step's few
 * tokens) build one tile per (token, slot) on the device and never wait for
 * the host.  Longer chunks, and every
 * step of the streaming tier, read the routing back, group the assignments
 * by expert (counting sort, tokens ascending) into tiles of <= CU_MM_NT, and
 * run gate/up, SwiGLU and down tile by tile — on the streaming tier in
 * groups of at most `slots` experts, each group's experts copied into the
 * layer's slots first.  A tile computes each dot the same way whatever its
 * neighbours, so every path gives the same bits.
 *
 * Batched steps (cu_eval_batch, the lanes path): several sequences' tokens
 * are rows of one chunk on a workspace context's activations; attention and
 * the recurrent step run per sequence (cu_span) on that sequence's own KV
 * and state, everything else once over all rows.
 */
#include "cu_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

#ifdef QW_HX_TIMING /* measuring (make NVDEFS=-DQW_HX_TIMING): where a streaming layer's host time goes */
static double hx_t[5]; /* routing wait, sort+load queue, host run, final wait, layers */
static double hx_now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }
#define HX_MARK(i) do { const double t_ = hx_now(); hx_t[i] += t_ - hx_last; hx_last = t_; } while (0)
#else
#define HX_MARK(i) do { } while (0)
#endif

typedef struct dbuf {
    void *p;
    size_t cap;
} dbuf;

/* Sequences a batched step's graph takes: a step of at most CU_MM_NT tokens
 * routes on the device (no host round trip), which a graph needs. */
enum { CU_BGRAPH_MAX = CU_MM_NT };

typedef struct cu_ctx {
    cu_model *dm;
    cudaStream_t s;
    int32_t n_ctx, kv_cap;
    dbuf *k, *v;         /* [n_layer] KV cache (empty: recurrent layer) */
    dbuf *conv, *delta;  /* [n_layer] recurrent state */
    /* activations, grown to the largest chunk */
    dbuf tok, x, xn, q, qg, kc, vc, att, router, sel, selw, gate, up, down, tiles;
    dbuf mix, cv, z, beta, alpha, o, sg, su, sd, sgate, logits;
    dbuf q8x, q8d;      /* Q8_0 activations of the largest matmul input */
    dbuf asc;           /* one-token attention's scores, sized for kv_cap (cu_attention; a lanes step: for each sequence) */
    cu_q8_scratch q8;
    /* decode graph (resident tier, one token with logits): captured once per
     * buffer layout, replayed each step; the position is read from pos */
    dbuf pos;
    int32_t *h_pos;     /* pinned: the position the graph reads */
    cudaGraphExec_t graph;
    uint64_t gen, graph_gen; /* gen: bumped whenever a device buffer moves */
    bool graph_off;          /* capture failed once: run without */
    uint64_t uid;            /* this context's number, never reused (a batched graph's key) */
    /* batched step graph (cu_eval_batch as the workspace: one token a
     * sequence, resident tier): captured for one list of sequence contexts
     * and their buffer layouts, replayed while they stay; each sequence's
     * position is read from bpos[i] */
    dbuf bpos;
    int32_t *h_bpos;           /* pinned: CU_BGRAPH_MAX positions */
    cudaGraphExec_t bgraph;
    int bgraph_n;              /* sequences it was captured for */
    uint64_t bgraph_key[2 * CU_BGRAPH_MAX + 1]; /* each sequence's context uid and gen, then this context's gen */
    bool bgraph_off;           /* capture failed once: run without */
    /* host side of the grouped MoE path */
    int32_t *h_sel, *h_order, *h_count;
    cu_tile *h_tiles;
    size_t h_cap, h_tiles_cap;
    /* host experts (stream_experts): the step's xn, the host's assignments
     * (token, expert, place in `down`) and their output rows */
    float *hx_xn, *hx_out; /* hx_out: the rows, then their places in `down` (hx_asg), one page-locked block */
    int32_t *hx_tok, *hx_exp, *hx_asg;
    size_t hx_cap; /* assignments they hold */
    dbuf hxd;      /* the device's copy of hx_out's block, scattered into `down` */
} cu_ctx;

#define P(b) ((float *)(b).p)

/* One sequence's rows of a chunk: rows [row0, row0 + n) of the activations
 * are its tokens at positions pos0.., attending over kv's cache and stepping
 * kv's recurrent state.  A single-sequence chunk is one span of the context
 * itself; a batched step (cu_eval_batch) one span a sequence, the
 * activations the workspace's.  Everything but attention and the recurrent
 * step is per row, so it runs once over all rows. */
typedef struct cu_span {
    cu_ctx *kv;
    int row0, n, pos0;
    const int32_t *pos_dev; /* in a graph: pos0 is read here, on the device (NULL: pos0) */
} cu_span;

static int grow_gen(cu_ctx *c, dbuf *b, size_t need, qw_error *err) {
    void *old = b->p;
    const int rc = cu_grow(&b->p, &b->cap, need, err);
    if (b->p != old) c->gen++;
    return rc;
}
#define grow(b, need, err) grow_gen(c, (b), (need), (err))

/* Bytes of one position's K (or V) row in the device cache: the CPU's row. */
static size_t kv_row_bytes(const cu_ctx *c) {
    const qw_hparams *hp = &c->dm->hp;
    return (size_t)hp->n_head_kv * hp->head_dim * (c->dm->kv_f32 ? 4 : 2);
}

static int kv_reserve(cu_ctx *c, int32_t need, qw_error *err) {
    if (need <= c->kv_cap) return 0;
    int32_t cap = c->kv_cap ? c->kv_cap : 256;
    while (cap < need) cap = cap > c->n_ctx / 2 ? c->n_ctx : cap * 2;
    if (cap > c->n_ctx) cap = c->n_ctx;
    const qw_hparams *hp = &c->dm->hp;
    const size_t row = kv_row_bytes(c);
    for (int il = 0; il < hp->n_layer; il++) {
        if (c->dm->layers[il].recurrent) continue;
        dbuf *kv[2] = {&c->k[il], &c->v[il]};
        for (int i = 0; i < 2; i++) {
            void *np = cu_pool_alloc((size_t)cap * row);
            if (!np) return cu_fail(err, "out of device memory growing the KV cache to %d positions", cap);
            if (kv[i]->p) CU_TRY(cudaMemcpyAsync(np, kv[i]->p, (size_t)c->kv_cap * row, cudaMemcpyDeviceToDevice, c->s), err);
            CU_TRY(cudaStreamSynchronize(c->s), err);
            cu_pool_free(kv[i]->p);
            kv[i]->p = np;
            c->gen++;
            kv[i]->cap = (size_t)cap * row;
        }
    }
    c->kv_cap = cap;
    return grow(&c->asc, cu_attention_split_floats(hp->n_head, cap) * sizeof(float), err);
}

/* Activation buffers for chunks of n rows. */
static int reserve_rows(cu_ctx *c, int32_t n, qw_error *err) {
    const qw_hparams *hp = &c->dm->hp;
    const size_t E = hp->n_embd, QD = (size_t)hp->n_head * hp->head_dim, KD = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t K = hp->n_expert_used, F = hp->n_ff_exp, S = hp->ssm_state;
    const size_t C = 2 * S * hp->ssm_groups + S * hp->ssm_vheads, VD = S * hp->ssm_vheads, HV = hp->ssm_vheads;
    const size_t FS = hp->n_ff_shexp, R = (size_t)n;
    const size_t f = sizeof(float);
    if (grow(&c->tok, R * 4, err) || grow(&c->x, R * E * f, err) || grow(&c->xn, R * E * f, err) ||
        grow(&c->q, R * QD * f, err) || grow(&c->kc, R * KD * f, err) || grow(&c->vc, R * KD * f, err) ||
        grow(&c->att, R * QD * f, err) || grow(&c->router, R * hp->n_expert * f, err) ||
        grow(&c->sel, R * K * 4, err) || grow(&c->selw, R * K * f, err) || grow(&c->gate, R * K * F * f, err) ||
        grow(&c->up, R * K * F * f, err) || grow(&c->down, R * K * E * f, err) ||
        grow(&c->tiles, (R * K + hp->n_expert) * sizeof(cu_tile) + cu_group_work_ints(hp->n_expert) * 4, err))
        return -1;
    if (hp->arch_id == QW_ARCH_QWEN35MOE &&
        (grow(&c->qg, R * 2 * QD * f, err) || grow(&c->mix, R * C * f, err) || grow(&c->cv, R * C * f, err) ||
         grow(&c->z, R * VD * f, err) || grow(&c->beta, R * HV * f, err) || grow(&c->alpha, R * HV * f, err) ||
         grow(&c->o, R * VD * f, err) || grow(&c->sg, R * (FS ? FS : 1) * f, err) ||
         grow(&c->su, R * (FS ? FS : 1) * f, err) || grow(&c->sd, R * E * f, err) || grow(&c->sgate, R * f, err)))
        return -1;
    {
        size_t mx = E;
        const size_t ins[] = {QD, K * F, VD, FS, C};
        for (size_t i = 0; i < sizeof ins / sizeof *ins; i++) mx = ins[i] > mx ? ins[i] : mx;
        if (grow(&c->q8x, R * mx * f, err) || grow(&c->q8d, (R * mx / 32 + 1) * f, err)) return -1;
        c->q8 = (cu_q8_scratch){P(c->q8x), P(c->q8d), R * mx};
    }
    if (R * K > c->h_cap) {
        free(c->h_sel);
        free(c->h_order);
        c->h_sel = (int32_t *)malloc(R * K * 4);
        c->h_order = (int32_t *)malloc(R * K * 4);
        c->h_cap = c->h_sel && c->h_order ? R * K : 0;
        if (!c->h_cap) return cu_fail(err, "out of host memory for the routing tables of %zu rows", R);
    }
    if (!c->h_count && !(c->h_count = (int32_t *)malloc(((size_t)hp->n_expert + 1) * 4)))
        return cu_fail(err, "out of host memory for the expert counts");
    if (R * K + hp->n_expert > c->h_tiles_cap) {
        free(c->h_tiles);
        c->h_tiles = (cu_tile *)malloc((R * K + hp->n_expert) * sizeof(cu_tile));
        c->h_tiles_cap = c->h_tiles ? R * K + hp->n_expert : 0;
        if (!c->h_tiles) return cu_fail(err, "out of host memory for the expert tiles of %zu rows", R);
    }
    return 0;
}

/* The context's activation buffers (not KV or state): out[] gets them, the count is returned. */
enum { CTX_ACT_BUFS = 30 };
static int act_bufs(cu_ctx *c, dbuf **out) {
    dbuf *all[CTX_ACT_BUFS] = {&c->tok,  &c->x,     &c->xn,  &c->q,  &c->qg,    &c->kc,     &c->vc,  &c->att,
                               &c->router, &c->sel, &c->selw, &c->gate, &c->up, &c->down,  &c->tiles, &c->mix,
                               &c->cv,   &c->z,     &c->beta, &c->alpha, &c->o, &c->sg,    &c->su,    &c->sd,
                               &c->sgate, &c->logits, &c->q8x, &c->q8d, &c->asc, &c->hxd};
    memcpy(out, all, sizeof all);
    return CTX_ACT_BUFS;
}

/* The host experts' scratch (stream_experts), page-locked in part. */
static void host_scratch_free(cu_ctx *c) {
    if (c->hx_xn) cudaFreeHost(c->hx_xn);
    if (c->hx_out) cudaFreeHost(c->hx_out);
    free(c->hx_tok), free(c->hx_exp);
    c->hx_xn = c->hx_out = NULL, c->hx_tok = c->hx_exp = c->hx_asg = NULL, c->hx_cap = 0;
}

static void ctx_release(cu_ctx *c) {
    dbuf *all[CTX_ACT_BUFS];
    for (int i = 0, n = act_bufs(c, all); i < n; i++) cu_pool_free(all[i]->p);
    for (int il = 0; c->k && il < c->dm->hp.n_layer; il++) {
        cu_pool_free(c->k[il].p);
        cu_pool_free(c->v[il].p);
        cu_pool_free(c->conv[il].p);
        cu_pool_free(c->delta[il].p);
    }
}

void cu_ctx_free(void *p) {
    cu_ctx *c = (cu_ctx *)p;
    if (!c) return;
    cudaStreamSynchronize(c->s);
#ifdef QW_HX_TIMING
    if (hx_t[4] > 0)
        fprintf(stderr, "hx timing: %.0f layers; us a layer: routing wait %.1f, sort+copies queued %.1f, host run %.1f, final wait %.1f\n",
                hx_t[4], 1e6 * hx_t[0] / hx_t[4], 1e6 * hx_t[1] / hx_t[4], 1e6 * hx_t[2] / hx_t[4], 1e6 * hx_t[3] / hx_t[4]);
#endif
    if (c->graph) cudaGraphExecDestroy(c->graph);
    if (c->h_pos) cudaFreeHost(c->h_pos);
    cu_pool_free(c->pos.p);
    if (c->bgraph) cudaGraphExecDestroy(c->bgraph);
    if (c->h_bpos) cudaFreeHost(c->h_bpos);
    cu_pool_free(c->bpos.p);
    ctx_release(c);
    free(c->k);
    free(c->v);
    free(c->conv);
    free(c->delta);
    free(c->h_sel);
    free(c->h_order);
    free(c->h_count);
    free(c->h_tiles);
    host_scratch_free(c);
    cudaStreamDestroy(c->s);
    free(c);
}

void cu_ctx_reset(void *p) {
    cu_ctx *c = (cu_ctx *)p;
    for (int il = 0; il < c->dm->hp.n_layer; il++) {
        if (c->conv[il].p) cudaMemsetAsync(c->conv[il].p, 0, c->conv[il].cap, c->s);
        if (c->delta[il].p) cudaMemsetAsync(c->delta[il].p, 0, c->delta[il].cap, c->s);
    }
    cudaStreamSynchronize(c->s);
}

void *cu_ctx_new(void *p, int32_t n_ctx, qw_error *err) {
    cu_model *dm = (cu_model *)p;
    const qw_hparams *hp = &dm->hp;
    cu_ctx *c = (cu_ctx *)calloc(1, sizeof *c);
    if (!c) {
        cu_fail(err, "out of host memory for a device context");
        return NULL;
    }
    static uint64_t next_uid;
    c->uid = __atomic_add_fetch(&next_uid, 1, __ATOMIC_RELAXED);
    c->dm = dm;
    c->n_ctx = n_ctx;
    c->k = (dbuf *)calloc((size_t)hp->n_layer, sizeof(dbuf));
    c->v = (dbuf *)calloc((size_t)hp->n_layer, sizeof(dbuf));
    c->conv = (dbuf *)calloc((size_t)hp->n_layer, sizeof(dbuf));
    c->delta = (dbuf *)calloc((size_t)hp->n_layer, sizeof(dbuf));
    if (!c->k || !c->v || !c->conv || !c->delta) {
        cu_fail(err, "out of host memory for a device context's %d layers", hp->n_layer);
        free(c->k), free(c->v), free(c->conv), free(c->delta), free(c);
        return NULL;
    }
    if (cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking) != cudaSuccess) {
        cu_fail(err, "cudaStreamCreate: %s", cudaGetErrorString(cudaGetLastError()));
        free(c->k), free(c->v), free(c->conv), free(c->delta), free(c);
        return NULL;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        if (!dm->layers[il].recurrent) continue;
        if (grow(&c->conv[il], cu_conv_state_bytes(hp), err) ||
            grow(&c->delta[il], cu_delta_state_bytes(hp), err)) {
            cu_ctx_free(c);
            return NULL;
        }
    }
    cu_ctx_reset(c);
    if (kv_reserve(c, 1, err)) {
        cu_ctx_free(c);
        return NULL;
    }
    return c;
}

/* ---- state and KV in and out: the prefix cache, `qwisp ab`'s rewinds and
 * the KV files work on a device context through these (backend.h) ---- */

/* The recurrent state between the context and one flat buffer, conv then
 * delta of each recurrent layer in layer order (qw_ctx_state_save's layout):
 * into_ctx or out of it; the buffer in host memory or (a mark's snapshot) on
 * the device.  Queued on c->s. */
static int state_copy(cu_ctx *c, char *b, bool into_ctx, bool buf_on_device, qw_error *err) {
    const qw_hparams *hp = &c->dm->hp;
    const size_t cb = cu_conv_state_bytes(hp), db = cu_delta_state_bytes(hp);
    const cudaMemcpyKind kind = buf_on_device ? cudaMemcpyDeviceToDevice
                                : into_ctx    ? cudaMemcpyHostToDevice
                                              : cudaMemcpyDeviceToHost;
    for (int il = 0; il < hp->n_layer; il++) {
        if (!c->dm->layers[il].recurrent) continue;
        void *dev[2] = {c->conv[il].p, c->delta[il].p};
        const size_t n[2] = {cb, db};
        for (int i = 0; i < 2; i++) {
            void *dst = into_ctx ? dev[i] : (void *)b, *src = into_ctx ? (void *)b : dev[i];
            CU_TRY(cudaMemcpyAsync(dst, src, n[i], kind, c->s), err);
            b += n[i];
        }
    }
    return 0;
}

int cu_ctx_state_io(void *p, void *buf, int to_device, qw_error *err) {
    cu_ctx *c = (cu_ctx *)p;
    if (state_copy(c, (char *)buf, to_device, false, err)) return -1;
    CU_TRY(cudaStreamSynchronize(c->s), err); /* the host buffer is read or written by now */
    return 0;
}

/* Device-side snapshots (a mark's state): one buffer holding the state in
 * cu_ctx_state_io's layout, copied device to device — 63 MB of qwen36-a3b
 * state take microseconds here, against tens of milliseconds over the bus for
 * every rewind of `qwisp ab`'s token-paired decode.  Like the host's marks
 * (malloc'd, model.h) the buffer is outside the pool: a mark is the
 * instrument's, and must not change what the pool of the arm it measures
 * holds, hits or evicts. */
static size_t state_bytes(const cu_ctx *c) {
    const qw_hparams *hp = &c->dm->hp;
    size_t n = 0;
    for (int il = 0; il < hp->n_layer; il++)
        if (c->dm->layers[il].recurrent) n += cu_conv_state_bytes(hp) + cu_delta_state_bytes(hp);
    return n;
}

void *cu_snap_new(void *p, qw_error *err) {
    const size_t n = state_bytes((cu_ctx *)p);
    void *s = NULL;
    const cudaError_t e = cudaMalloc(&s, n ? n : 1);
    if (e != cudaSuccess) {
        cu_fail(err, "a %zu-byte state snapshot: %s", n, cudaGetErrorString(e));
        return NULL;
    }
    return s;
}

/* later work on c->s sees the copies; nothing else reads them: no sync */
int cu_snap_copy(void *p, void *snap, int save, qw_error *err) {
    return state_copy((cu_ctx *)p, (char *)snap, !save, true, err);
}

void cu_snap_free(void *snap) { cudaFree(snap); /* waits for the copies that read it */ }

int cu_ctx_kv_io(void *p, int il, int kv, int32_t n, void *buf, int to_device, qw_error *err) {
    cu_ctx *c = (cu_ctx *)p;
    if (il < 0 || il >= c->dm->hp.n_layer || c->dm->layers[il].recurrent || n < 0 || n > c->n_ctx)
        return cu_fail(err, "kv_io: layer %d, %d positions: not an attention layer of this context", il, n);
    if (to_device && kv_reserve(c, n, err)) return -1;
    if (n > c->kv_cap) return cu_fail(err, "kv_io: %d positions, the device KV holds %d", n, c->kv_cap);
    void *d = kv ? c->v[il].p : c->k[il].p;
    const size_t bytes = (size_t)n * kv_row_bytes(c);
    if (to_device) CU_TRY(cudaMemcpyAsync(d, buf, bytes, cudaMemcpyHostToDevice, c->s), err);
    else CU_TRY(cudaMemcpyAsync(buf, d, bytes, cudaMemcpyDeviceToHost, c->s), err);
    CU_TRY(cudaStreamSynchronize(c->s), err);
    return 0;
}

int cu_ctx_kv_copy(void *pd, void *ps, int32_t n, qw_error *err) {
    cu_ctx *dst = (cu_ctx *)pd, *src = (cu_ctx *)ps;
    if (dst->dm != src->dm || n < 0 || n > src->kv_cap || n > dst->n_ctx)
        return cu_fail(err, "kv_copy: %d positions from a context holding %d (other model?)", n, src->kv_cap);
    if (kv_reserve(dst, n, err)) return -1;
    CU_TRY(cudaStreamSynchronize(src->s), err); /* src's last writes are on its own stream */
    const size_t bytes = (size_t)n * kv_row_bytes(dst);
    for (int il = 0; il < dst->dm->hp.n_layer; il++) {
        if (dst->dm->layers[il].recurrent) continue;
        CU_TRY(cudaMemcpyAsync(dst->k[il].p, src->k[il].p, bytes, cudaMemcpyDeviceToDevice, dst->s), err);
        CU_TRY(cudaMemcpyAsync(dst->v[il].p, src->v[il].p, bytes, cudaMemcpyDeviceToDevice, dst->s), err);
    }
    CU_TRY(cudaStreamSynchronize(dst->s), err);
    return 0;
}

uint64_t cu_ctx_bytes(void *p) {
    cu_ctx *c = (cu_ctx *)p;
    uint64_t n = 0;
    for (int il = 0; il < c->dm->hp.n_layer; il++) n += c->k[il].cap + c->v[il].cap + c->conv[il].cap + c->delta[il].cap;
    dbuf *all[CTX_ACT_BUFS];
    for (int i = 0, k = act_bufs(c, all); i < k; i++) n += all[i]->cap;
    return n;
}

/* ---- the blocks ---------------------------------------------------------- */

/* Whether the spans are a lanes step of one token a sequence (several of
 * them, at most CU_SEQS_MAX: sequence i is row i), run by the kernels'
 * all-sequence forms; sq gets their count and positions (the caller adds
 * the states). */
static bool one_token_seqs(const cu_span *spans, int n_spans, cu_seqs *sq) {
    if (n_spans < 2 || n_spans > CU_SEQS_MAX) return false;
    for (int i = 0; i < n_spans; i++)
        if (spans[i].n != 1 || spans[i].row0 != i) return false;
    memset(sq, 0, sizeof *sq);
    sq->n = n_spans;
    for (int i = 0; i < n_spans; i++) sq->pos0[i] = spans[i].pos0, sq->pos_dev[i] = spans[i].pos_dev;
    return true;
}

static void attention_block(cu_ctx *c, const cu_layer *L, int il, int n, const cu_span *spans, int n_spans) {
    const qw_hparams *hp = &c->dm->hp;
    const int E = hp->n_embd, D = hp->head_dim, H = hp->n_head, HKV = hp->n_head_kv;
    const size_t QD = (size_t)H * D, KD = (size_t)HKV * D;
    cudaStream_t s = c->s;
    cu_rmsnorm_q8(s, P(c->xn), P(c->x), (const float *)L->attn_norm.data, E, n, hp->rms_eps, &L->wq);
    float *qout = L->gated ? P(c->qg) : P(c->q);
    const cu_mm_out qkv[] = {{&L->wq, NULL, qout, (int)L->wq.ne1},
                             {&L->wk, NULL, P(c->kc), (int)L->wk.ne1},
                             {&L->wv, NULL, P(c->vc), (int)L->wv.ne1}};
    cu_matmul_set(s, qkv, 3, P(c->xn), E, 1, NULL, 0, n, true);
    cu_seqs sq;
    if (one_token_seqs(spans, n_spans, &sq) && cu_attention_split_ok(D)) {
        int max_pos = 0; /* the split scratch's positions: a graph's, each cache's capacity */
        for (int i = 0; i < n_spans; i++) {
            const int m = spans[i].pos_dev ? spans[i].kv->kv_cap : spans[i].pos0 + 1;
            max_pos = m > max_pos ? m : max_pos;
        }
        for (int i = 0; i < n_spans; i++) sq.a[i] = spans[i].kv->k[il].p, sq.b[i] = spans[i].kv->v[il].p;
        cu_attn_prep_seqs(s, P(c->qg), P(c->q), P(c->kc), P(c->vc), (const float *)L->q_norm.data,
                          (const float *)L->k_norm.data, &sq, c->dm->kv_f32, H, HKV, D, hp->n_rot, hp->rope_base,
                          hp->rms_eps, L->gated);
        cu_attention_seqs(s, P(c->q), &sq, c->dm->kv_f32, P(c->att), H, HKV, D, 1.0f / sqrtf((float)D), P(c->asc),
                          max_pos);
    } else {
        for (int i = 0; i < n_spans; i++) {
            const cu_span *sp = &spans[i];
            const size_t r = (size_t)sp->row0;
            const int32_t *pos_dev = sp->pos_dev;
            cu_attn_prep(s, L->gated ? P(c->qg) + r * 2 * QD : P(c->qg), P(c->q) + r * QD, P(c->kc) + r * KD,
                         P(c->vc) + r * KD, (const float *)L->q_norm.data, (const float *)L->k_norm.data, sp->kv->k[il].p,
                         sp->kv->v[il].p, c->dm->kv_f32, sp->n, H, HKV, D, hp->n_rot, sp->pos0, pos_dev, hp->rope_base,
                         hp->rms_eps, L->gated);
            cu_attention(s, P(c->q) + r * QD, sp->kv->k[il].p, sp->kv->v[il].p, c->dm->kv_f32, P(c->att) + r * QD, sp->n,
                         sp->pos0, pos_dev, H, HKV, D, 1.0f / sqrtf((float)D), P(c->asc),
                         pos_dev ? sp->kv->kv_cap : sp->pos0 + sp->n);
        }
    }
    if (L->gated) cu_sigmoid_mul(s, P(c->att), P(c->qg) + D, n, H, D, 2 * D);
    cu_matmul(s, &L->wo, NULL, P(c->att), H * D, 1, NULL, 0, n, P(c->x), E, true);
}

static void deltanet_block(cu_ctx *c, const cu_layer *L, int il, int n, const cu_span *spans, int n_spans) {
    const qw_hparams *hp = &c->dm->hp;
    const int E = hp->n_embd, S = hp->ssm_state, HK = hp->ssm_groups, HV = hp->ssm_vheads;
    const int VD = S * HV, C = (int)L->conv1d.ne1, KC = (int)L->conv1d.ne0;
    cudaStream_t s = c->s;
    cu_rmsnorm_q8(s, P(c->xn), P(c->x), (const float *)L->attn_norm.data, E, n, hp->rms_eps, &L->wqkv);
    const cu_mm_out in[] = {{&L->wqkv, NULL, P(c->mix), (int)L->wqkv.ne1},
                            {&L->wz, NULL, P(c->z), (int)L->wz.ne1},
                            {&L->w_beta, NULL, P(c->beta), (int)L->w_beta.ne1},
                            {&L->w_alpha, NULL, P(c->alpha), (int)L->w_alpha.ne1}};
    cu_matmul_set(s, in, 4, P(c->xn), E, 1, NULL, 0, n, true);
    cu_seqs sq;
    if (one_token_seqs(spans, n_spans, &sq)) {
        for (int i = 0; i < n_spans; i++) sq.a[i] = spans[i].kv->conv[il].p;
        cu_conv_l2norm_seqs(s, P(c->mix), P(c->cv), &sq, (const float *)L->conv1d.data, C, KC, 2 * HK * S, S,
                            hp->rms_eps);
        for (int i = 0; i < n_spans; i++) sq.a[i] = spans[i].kv->delta[il].p;
        cu_delta_seqs(s, &sq, P(c->cv), P(c->beta), P(c->alpha), (const float *)L->dt_bias.data,
                      (const float *)L->ssm_a.data, P(c->o), S, HK, HV);
    } else {
        for (int i = 0; i < n_spans; i++) {
            const size_t r = (size_t)spans[i].row0;
            cu_conv_l2norm(s, P(c->mix) + r * C, P(c->cv) + r * C, P(spans[i].kv->conv[il]),
                           (const float *)L->conv1d.data, spans[i].n, C, KC, 2 * HK * S, S, hp->rms_eps);
        }
        for (int i = 0; i < n_spans; i++) {
            const size_t r = (size_t)spans[i].row0;
            cu_delta(s, P(spans[i].kv->delta[il]), P(c->cv) + r * C, P(c->beta) + r * HV, P(c->alpha) + r * HV,
                     (const float *)L->dt_bias.data, (const float *)L->ssm_a.data, P(c->o) + r * VD, spans[i].n, S,
                     HK, HV);
        }
    }
    cu_gated_norm(s, P(c->o), P(c->z), (const float *)L->ssm_norm.data, n, HV, S, hp->rms_eps);
    cu_matmul(s, &L->ssm_out, NULL, P(c->o), VD, 1, NULL, 0, n, P(c->x), E, true);
}

/* The shared expert: gate/up of xn (its gate's f32 dot, if any, runs with
 * the router), then SwiGLU and down.  Split so that gate/up can run while
 * the scratch holds xn's int8 form. */
static void shexp_gate_up(cu_ctx *c, const cu_layer *L, int n) {
    const int E = c->dm->hp.n_embd, FS = c->dm->hp.n_ff_shexp;
    const cu_mm_out gu[] = {{&L->gate_shexp, NULL, P(c->sg), FS}, {&L->up_shexp, NULL, P(c->su), FS}};
    cu_matmul_set(c->s, gu, 2, P(c->xn), E, 1, NULL, 0, n, true);
}

static void shexp_down(cu_ctx *c, const cu_layer *L, int n) {
    const int E = c->dm->hp.n_embd, FS = c->dm->hp.n_ff_shexp;
    cu_swiglu_q8(c->s, P(c->sg), P(c->su), n, FS, &L->down_shexp);
    cu_matmul_again(c->s, &L->down_shexp, NULL, P(c->sg), FS, 1, NULL, 0, n, P(c->sd), E, false);
}

/* gate/up -> SwiGLU -> down over n_tiles tiles (weights at the expert tensors
 * or, streaming, at the layer's slots).  all_rows: the tiles hold every
 * assignment (resident), so SwiGLU runs over the rows in one pass that
 * also converts them for down.  shexp: the shared expert's gate/up, run
 * between, while the scratch still holds xn's int8 form. */
static void expert_tiles(cu_ctx *c, const cu_layer *L, const cu_tile *tiles, int n_tiles, bool slots, int n,
                         bool all_rows, bool shexp) {
    const qw_hparams *hp = &c->dm->hp;
    const int E = hp->n_embd, F = hp->n_ff_exp, K = hp->n_expert_used;
    cudaStream_t s = c->s;
    const cu_mm_out gu[] = {{&L->gate_exps, slots ? L->slot_g : NULL, P(c->gate), F},
                            {&L->up_exps, slots ? L->slot_u : NULL, P(c->up), F}};
    cu_matmul_set(s, gu, 2, P(c->xn), E, K, tiles, n_tiles, n, true);
    if (shexp) shexp_gate_up(c, L, n);
    const uint8_t *wd = slots ? L->slot_d : NULL;
    if (all_rows) {
        cu_swiglu_q8(s, P(c->gate), P(c->up), n * K, F, &L->down_exps);
        cu_matmul_again(s, &L->down_exps, wd, P(c->gate), F, 1, tiles, n_tiles, n * K, P(c->down), E, false);
    } else {
        cu_swiglu_tiles(s, P(c->gate), P(c->up), tiles, n_tiles, F);
        cu_matmul(s, &L->down_exps, wd, P(c->gate), F, 1, tiles, n_tiles, n * K, P(c->down), E, false);
    }
}

/* Host grouping: assignments sorted by expert, tiles of <= CU_MM_NT of one
 * expert; experts [e0, e1) only.  Tile e = expert (or its slot). */
static int build_tiles(cu_ctx *c, int e0, int e1, const int32_t *slot_of) {
    int nt = 0;
    for (int e = e0; e < e1; e++) {
        const int a0 = e ? c->h_count[e - 1] : 0, a1 = c->h_count[e];
        for (int a = a0; a < a1; a += CU_MM_NT) {
            cu_tile *t = &c->h_tiles[nt++];
            t->e = slot_of ? slot_of[e] : e;
            t->n = a1 - a < CU_MM_NT ? a1 - a : CU_MM_NT;
            t->run = (a - a0) / CU_MM_NT;
            for (int i = 0; i < CU_MM_NT; i++) t->a[i] = i < t->n ? c->h_order[a + i] : 0;
        }
    }
    return nt;
}

/* Host experts: in a step of at most HOST_MAX_TOK tokens some picks are
 * computed by the host from the mapped file while the GPU copies and runs the
 * others (QWISP_DEVICE_HOST_EXPERTS = H: each token's last H top-k picks;
 * QWISP_DEVICE_MISSES=host: every pick whose expert is not in a fixed slot);
 * their output rows are copied up into `down`, where cu_moe_combine sums
 * every row in top-k order as before.  Which picks go to the host depends on
 * the routing alone, never on what the copied slots hold, so a run's bits do
 * not depend on its history.  A prefill chunk's many tokens per expert are
 * the GPU's. */
enum { HOST_MAX_TOK = 8 };

/* Host rows for n tokens' assignments: 0, or -1 + err. */
static int host_scratch(cu_ctx *c, int n, qw_error *err) {
    const size_t E = c->dm->hp.n_embd, nk = (size_t)n * c->dm->hp.n_expert_used, block = nk * (E * sizeof(float) + 4);
    if (nk <= c->hx_cap) return 0;
    host_scratch_free(c);
    /* xn and the rows page-locked: the copies down and up are then real DMA,
     * queued without the driver staging them through its own buffers */
    if (cudaMallocHost((void **)&c->hx_xn, (size_t)n * E * sizeof(float)) != cudaSuccess) c->hx_xn = NULL;
    if (cudaMallocHost((void **)&c->hx_out, block) != cudaSuccess) c->hx_out = NULL;
    c->hx_tok = (int32_t *)malloc(nk * 4), c->hx_exp = (int32_t *)malloc(nk * 4);
    c->hx_cap = c->hx_xn && c->hx_out && c->hx_tok && c->hx_exp ? nk : 0;
    if (!c->hx_cap) return cu_fail(err, "out of host memory for %zu host-expert rows", nk);
    c->hx_asg = (int32_t *)(c->hx_out + nk * E);
    return grow(&c->hxd, block, err);
}

/* Runs the host's assignments (c->hx_*, nh of them: token, expert and place
 * in `down`) and queues their rows into `down` on s, one copy of the block
 * and a scatter (the step's GPU work, already queued, runs meanwhile); the
 * block is rewritten only after the next layer's stream sync. */
static int host_experts(cu_ctx *c, int il, int n, int nh, qw_error *err) {
    cu_model *dm = c->dm;
    const size_t E = dm->hp.n_embd;
    if (dm->host_run(dm->host, il, c->hx_xn, n, c->hx_tok, c->hx_exp, nh, c->hx_out, err)) return -1;
    dm->host_rows += (uint64_t)nh;
    const size_t rows = (size_t)nh * E * sizeof(float);
    float *d_rows = P(c->hxd);
    int32_t *d_asg = (int32_t *)((uint8_t *)c->hxd.p + c->hx_cap * E * sizeof(float));
    CU_TRY(cudaMemcpyAsync(d_rows, c->hx_out, rows, cudaMemcpyHostToDevice, c->s), err);
    CU_TRY(cudaMemcpyAsync(d_asg, c->hx_asg, (size_t)nh * 4, cudaMemcpyHostToDevice, c->s), err);
    cu_scatter_rows(c->s, P(c->down), d_rows, d_asg, nh, (int)E);
    return 0;
}

/* Whether assignment a (expert e) of a step the host takes part in is the host's. */
static bool host_pick(const cu_model *dm, const cu_layer *L, int a, int32_t e) {
    if (dm->host_misses) return !cu_fixed(dm, L, e);
    const int K = dm->hp.n_expert_used;
    return a % K >= K - dm->host_experts;
}

/* Streaming tier: the routing read back, the assignments counting-sorted by
 * expert on the host, then the used experts in groups of at most `slots`:
 * each group copied into the slots (cu_model_load_experts), its tiles sent
 * up and computed before the next group reuses the slots.  The host's
 * assignments (above) leave the sort and run beside the first group. */
static int stream_experts(cu_ctx *c, const cu_layer *L, int il, int n, qw_error *err) {
    cu_model *dm = c->dm;
    const int X = dm->hp.n_expert, K = dm->hp.n_expert_used, nk = n * K;
    const bool host = n <= HOST_MAX_TOK && dm->host_run && (dm->host_misses || dm->host_experts);
    const int scratch = dm->slots - dm->n_fixed; /* slots a group may copy into */
    cudaStream_t s = c->s;
    cu_tile *d_tiles = (cu_tile *)c->tiles.p;
#ifdef QW_HX_TIMING
    double hx_last = hx_now();
    hx_t[4] += 1;
#endif
    CU_TRY(cudaMemcpyAsync(c->h_sel, c->sel.p, (size_t)nk * 4, cudaMemcpyDeviceToHost, s), err);
    if (host) {
        if (host_scratch(c, n, err)) return -1;
        CU_TRY(cudaMemcpyAsync(c->hx_xn, P(c->xn), (size_t)n * dm->hp.n_embd * sizeof(float), cudaMemcpyDeviceToHost,
                               s),
               err);
    }
    CU_TRY(cudaStreamSynchronize(s), err);
    HX_MARK(0);
    /* the host's assignments out; a counting sort of the GPU's by expert
     * (afterwards h_count[e] = end of e's run; h_sel[a] = -1 marks the host's) */
    int nh = 0;
    memset(c->h_count, 0, (size_t)X * 4);
    for (int a = 0; a < nk; a++) {
        const int32_t e = c->h_sel[a];
        if (host && host_pick(dm, L, a, e)) {
            c->hx_tok[nh] = a / K, c->hx_exp[nh] = e, c->hx_asg[nh++] = a;
            c->h_sel[a] = -1;
        } else {
            c->h_count[e]++;
        }
    }
    for (int e = 0, acc = 0; e < X; e++) {
        const int m = c->h_count[e];
        c->h_count[e] = acc;
        acc += m;
    }
    for (int a = 0; a < nk; a++)
        if (c->h_sel[a] >= 0) c->h_order[c->h_count[c->h_sel[a]]++] = a;
    /* groups of used experts: a fixed slot's expert always fits, the others
     * take one of the `scratch` slots the group may copy into */
    for (int e = 0; e < X;) {
        int32_t used[4096];
        int nu = 0, ns = 0, e1 = e;
        for (; e1 < X && nu < 4096; e1++) {
            if (c->h_count[e1] == (e1 ? c->h_count[e1 - 1] : 0)) continue;
            const bool fixed = cu_fixed(dm, L, e1);
            if (!fixed && ns == scratch) break;
            used[nu++] = e1, ns += !fixed;
        }
        if (!nu && e1 < X) return cu_fail(err, "layer %d: no expert slot left to copy into", il);
        if (nu) {
            if (cu_model_load_experts(dm, il, used, nu, s, err)) return -1;
            const int nt = build_tiles(c, e, e1, L->slot_of);
            CU_TRY(cudaMemcpyAsync(d_tiles, c->h_tiles, (size_t)nt * sizeof(cu_tile), cudaMemcpyHostToDevice, s), err);
            expert_tiles(c, L, d_tiles, nt, true, n, false, false);
            HX_MARK(1);
            if (nh && host_experts(c, il, n, nh, err)) return -1; /* while the GPU copies and computes */
            HX_MARK(2);
            nh = 0;
            CU_TRY(cudaStreamSynchronize(s), err);
            HX_MARK(3);
        }
        e = e1;
    }
    if (nh && host_experts(c, il, n, nh, err)) return -1; /* every pick was the host's */
    HX_MARK(2);
    return 0;
}

/* route_dev: the routing builds one tile per assignment on the device and
 * is never read back (the decode graph's path; a batched step's few tokens);
 * otherwise the host groups the assignments by expert.  Tiles compute each
 * dot the same way whatever their neighbours: a speed choice, not a bits one. */
static int moe_block(cu_ctx *c, const cu_layer *L, int il, int n, bool route_dev, qw_error *err) {
    cu_model *dm = c->dm;
    const qw_hparams *hp = &dm->hp;
    const int E = hp->n_embd, X = hp->n_expert, K = hp->n_expert_used, nk = n * K;
    cudaStream_t s = c->s;
    const bool shexp = L->gate_shexp.data != NULL;
    bool shexp_done = false; /* its gate/up, run with the routed experts' */
    cu_rmsnorm_q8(s, P(c->xn), P(c->x), (const float *)L->ffn_norm.data, E, n, hp->rms_eps, &L->gate_exps);
    /* the router's logits, and the shared expert's gate dot beside them (both f32 in the usual files) */
    const cu_mm_out rt[] = {{&L->gate_inp, NULL, P(c->router), X}, {&L->shexp_gate, NULL, P(c->sgate), 1}};
    cu_matmul_set(s, rt, shexp ? 2 : 1, P(c->xn), E, 1, NULL, 0, n, true);
    cu_tile *d_tiles = (cu_tile *)c->tiles.p;
    const bool on_device = route_dev && !dm->streaming;
    cu_route(s, P(c->router), n, X, K, hp->norm_topk, hp->expert_weights_scale, (int32_t *)c->sel.p, P(c->selw),
             on_device ? d_tiles : NULL);
    if (on_device) {
        expert_tiles(c, L, d_tiles, nk, false, n, true, shexp);
        shexp_done = shexp;
    } else if (!dm->streaming) {
        /* resident prefill: grouped on the device, so the host never waits
         * on the routing (tiles past the last are empty: the matmuls skip them) */
        const int bound = cu_group_bound(nk, X);
        cu_group_tiles(s, (const int32_t *)c->sel.p, nk, X, (int32_t *)(d_tiles + (size_t)nk + X), d_tiles);
        expert_tiles(c, L, d_tiles, bound, false, n, true, shexp);
        shexp_done = shexp;
    } else if (stream_experts(c, L, il, n, err)) {
        return -1;
    }
    const float *sd = NULL;
    if (shexp) {
        if (!shexp_done) shexp_gate_up(c, L, n);
        shexp_down(c, L, n);
        sd = P(c->sd);
    }
    cu_moe_combine(s, P(c->x), P(c->down), P(c->selw), sd, sd ? P(c->sgate) : NULL, n, K, E);
    return 0;
}

/* The layers and the head, enqueued on c's stream (captured into a graph,
 * or run directly).  A span's pos_dev: its position on the device (graph) or NULL. */
/* Rows of logits one pass of the output matmul makes: all-row logits of a
 * longer chunk go out in blocks, so the buffer (and the tier's reserve,
 * cu_model.cu) does not grow with the chunk.  Rows are independent, so the
 * blocks give the same bits as one pass. */
enum { CU_LOGIT_ROWS = 512 };

/* The embedding and the layers of n rows (c->tok) on c's stream, c's
 * activations; the spans say whose KV and state each row's sequence uses. */
static int enqueue_layers(cu_ctx *c, int n, const cu_span *spans, int n_spans, bool route_dev, qw_error *err) {
    cu_model *dm = c->dm;
    const qw_hparams *hp = &dm->hp;
    cu_get_rows(c->s, &dm->tok_embd, (const int32_t *)c->tok.p, n, P(c->x));
    for (int il = 0; il < hp->n_layer; il++) {
        const cu_layer *L = &dm->layers[il];
        if (L->recurrent)
            deltanet_block(c, L, il, n, spans, n_spans);
        else
            attention_block(c, L, il, n, spans, n_spans);
        if (moe_block(c, L, il, n, route_dev, err)) return -1;
    }
    return 0;
}

/* Enqueues the forward pass of n tokens of c's own sequence; with logits,
 * the last row's (or every row's, `all`) into c->logits, and, where host is
 * given, copied there block by block (host = NULL: the caller copies the one
 * block). */
static int enqueue(cu_ctx *c, int n, int n_past, const int32_t *pos_dev, bool logits, bool all, float *host,
                   qw_error *err) {
    cu_model *dm = c->dm;
    const qw_hparams *hp = &dm->hp;
    const int E = hp->n_embd, V = hp->n_vocab;
    cudaStream_t s = c->s;
    const cu_span self = {c, 0, n, n_past, pos_dev};
    if (enqueue_layers(c, n, &self, 1, n == 1, err)) return -1;
    if (logits) {
        const int rows = all ? n : 1;
        for (int r0 = 0; r0 < rows; r0 += CU_LOGIT_ROWS) {
            const int nr = rows - r0 < CU_LOGIT_ROWS ? rows - r0 : CU_LOGIT_ROWS;
            const float *xin = P(c->x) + (size_t)(all ? r0 : n - 1) * E;
            cu_rmsnorm_q8(s, P(c->xn), xin, (const float *)dm->output_norm.data, E, nr, hp->rms_eps, &dm->output);
            cu_matmul_again(s, &dm->output, NULL, P(c->xn), E, 1, NULL, 0, nr, P(c->logits), V, false);
            if (host)
                CU_TRY(cudaMemcpyAsync(host + (size_t)r0 * V, c->logits.p, (size_t)nr * V * sizeof(float),
                                       cudaMemcpyDeviceToHost, s), err);
        }
    }
    return 0;
}

/* Graph capture on c's stream: begin, then end with what the enqueue
 * returned (rc).  The graph instantiated into *exec, or false with *off set
 * (the error cleared: the caller runs the step directly). */
static bool capture_begin(cu_ctx *c, cudaGraphExec_t *exec) {
    if (*exec) cudaGraphExecDestroy(*exec);
    *exec = NULL;
    return cudaStreamBeginCapture(c->s, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
}
static bool capture_end(cu_ctx *c, bool begun, int rc, cudaGraphExec_t *exec, bool *off, qw_error *err) {
    cudaGraph_t g = NULL;
    if (begun && cudaStreamEndCapture(c->s, &g) == cudaSuccess && !rc && cudaGraphInstantiate(exec, g, 0) == cudaSuccess) {
        cudaGraphDestroy(g);
        return true;
    }
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    *exec = NULL;
    *off = true;
    if (err) err->msg[0] = 0;
    return false;
}

/* Captures the one-token step into c->graph. */
static bool capture(cu_ctx *c, qw_error *err) {
    const bool begun = capture_begin(c, &c->graph);
    const int rc = begun ? enqueue(c, 1, 0, (const int32_t *)c->pos.p, true, false, NULL, err) : 0;
    if (!capture_end(c, begun, rc, &c->graph, &c->graph_off, err)) return false;
    c->graph_gen = c->gen;
    return true;
}

int cu_eval(void *p, const int32_t *tokens, int32_t n, int32_t n_past, float *logits, int all, qw_error *err) {
    cu_ctx *c = (cu_ctx *)p;
    cu_model *dm = c->dm;
    const qw_hparams *hp = &dm->hp;
    const int V = hp->n_vocab;
    if (n_past + n > c->n_ctx) return cu_fail(err, "context full: %d + %d > n_ctx %d", n_past, n, c->n_ctx);
    if (kv_reserve(c, n_past + n, err) || reserve_rows(c, n, err)) return -1;
    cu_q8_scratch_use(&c->q8);
    const int rows = logits ? (all ? n : 1) : 0;
    if (rows && grow(&c->logits, (size_t)(rows < CU_LOGIT_ROWS ? rows : CU_LOGIT_ROWS) * V * sizeof(float), err))
        return -1;
    cudaStream_t s = c->s;
    CU_TRY(cudaMemcpyAsync(c->tok.p, tokens, (size_t)n * 4, cudaMemcpyHostToDevice, s), err);
    const bool graphable = n == 1 && rows == 1 && !dm->streaming && !c->graph_off;
    bool ran = false;
    if (graphable) {
        if (!c->pos.p && grow(&c->pos, sizeof(int32_t), err)) return -1;
        if (!c->h_pos && cudaMallocHost((void **)&c->h_pos, sizeof(int32_t)) != cudaSuccess) {
            cudaGetLastError();
            c->graph_off = true;
        } else {
            *c->h_pos = n_past;
            CU_TRY(cudaMemcpyAsync(c->pos.p, c->h_pos, sizeof(int32_t), cudaMemcpyHostToDevice, s), err);
            if (c->graph && c->graph_gen == c->gen) ran = true;
            else ran = capture(c, err);
            if (ran) CU_TRY(cudaGraphLaunch(c->graph, s), err);
        }
    }
    if (!ran && enqueue(c, n, n_past, NULL, rows > 0, all, logits, err)) return -1;
    if (ran) CU_TRY(cudaMemcpyAsync(logits, c->logits.p, (size_t)V * sizeof(float), cudaMemcpyDeviceToHost, s), err);
    CU_TRY(cudaStreamSynchronize(s), err);
    CU_TRY(cudaGetLastError(), err);
    return 0;
}

/* ---- the lanes path's step: several sequences in one forward pass ---- */

/* The batched graph's key for these spans: each sequence's context (its uid,
 * never reused, and gen, bumped when one of its buffers moves), then the
 * workspace's gen.  Writes 2 n + 1 words. */
static void bgraph_key_of(const cu_ctx *c, const cu_span *spans, int n_spans, uint64_t *key) {
    for (int i = 0; i < n_spans; i++) key[2 * i] = spans[i].kv->uid, key[2 * i + 1] = spans[i].kv->gen;
    key[2 * n_spans] = c->gen;
}

/* Captures a batched step of one token a sequence (spans read their
 * positions from bpos) into c->bgraph. */
static bool capture_batch(cu_ctx *c, const cu_span *spans, int n_spans, qw_error *err) {
    const bool begun = capture_begin(c, &c->bgraph);
    const int rc = begun ? enqueue_layers(c, n_spans, spans, n_spans, n_spans == 1 || !cu_lanes_grouped(n_spans), err) : 0;
    if (!capture_end(c, begun, rc, &c->bgraph, &c->bgraph_off, err)) return false;
    c->bgraph_n = n_spans;
    bgraph_key_of(c, spans, n_spans, c->bgraph_key);
    return true;
}

/* The layers of a batched step through the graph where it can be used (every
 * sequence one token, the resident tier, at most CU_BGRAPH_MAX sequences):
 * the positions written to bpos, the graph captured when the sequences or a
 * buffer changed, else replayed.  0 with *ran false: run the step directly. */
static int batch_graph(cu_ctx *c, cu_span *spans, int n_spans, int n, bool *ran, qw_error *err) {
    *ran = false;
    if (c->bgraph_off || c->dm->streaming || n != n_spans || n_spans > CU_BGRAPH_MAX) return 0;
    int32_t cap = 0;
    for (int i = 0; i < n_spans; i++) cap = spans[i].kv->kv_cap > cap ? spans[i].kv->kv_cap : cap;
    /* the buffers first: a grow bumps gen, which the key holds */
    if ((!c->bpos.p && grow(&c->bpos, CU_BGRAPH_MAX * sizeof(int32_t), err)) ||
        grow(&c->asc, n_spans * cu_attention_split_floats(c->dm->hp.n_head, cap) * sizeof(float), err))
        return -1;
    if (!c->h_bpos && cudaMallocHost((void **)&c->h_bpos, CU_BGRAPH_MAX * sizeof(int32_t)) != cudaSuccess) {
        cudaGetLastError();
        c->bgraph_off = true;
        return 0;
    }
    for (int i = 0; i < n_spans; i++) {
        c->h_bpos[i] = spans[i].pos0;
        spans[i].pos_dev = (const int32_t *)c->bpos.p + i;
    }
    CU_TRY(cudaMemcpyAsync(c->bpos.p, c->h_bpos, (size_t)n_spans * sizeof(int32_t), cudaMemcpyHostToDevice, c->s), err);
    uint64_t key[2 * CU_BGRAPH_MAX + 1];
    bgraph_key_of(c, spans, n_spans, key);
    if (c->bgraph && c->bgraph_n == n_spans && !memcmp(key, c->bgraph_key, (2 * (size_t)n_spans + 1) * sizeof key[0]))
        *ran = true;
    else
        *ran = capture_batch(c, spans, n_spans, err);
    if (*ran) CU_TRY(cudaGraphLaunch(c->bgraph, c->s), err);
    else
        for (int i = 0; i < n_spans; i++) spans[i].pos_dev = NULL; /* the direct run reads pos0 */
    return 0;
}

int cu_eval_batch(void *p, const qw_backend_seq *seqs, int n_seqs, qw_error *err) {
    cu_ctx *c = (cu_ctx *)p; /* the workspace: its activations, its stream */
    cu_model *dm = c->dm;
    const qw_hparams *hp = &dm->hp;
    const int E = hp->n_embd, V = hp->n_vocab;
    if (n_seqs < 1 || n_seqs > QW_BATCH_MAX_SEQS)
        return cu_fail(err, "a batch of %d sequences (1..%d)", n_seqs, (int)QW_BATCH_MAX_SEQS);
    cu_span spans[QW_BATCH_MAX_SEQS];
    int n = 0, n_logits = 0, max_pos = 0;
    for (int i = 0; i < n_seqs; i++) {
        const qw_backend_seq *q = &seqs[i];
        cu_ctx *sc = (cu_ctx *)q->dc;
        if (!sc || sc->dm != dm) return cu_fail(err, "batch sequence %d: a context of another model", i);
        if (q->n < 1 || q->n_past < 0 || q->n_past + q->n > sc->n_ctx)
            return cu_fail(err, "batch sequence %d: %d tokens at %d: outside n_ctx %d", i, q->n, q->n_past, sc->n_ctx);
        for (int j = 0; j < i; j++)
            if (seqs[j].dc == q->dc) return cu_fail(err, "batch sequences %d and %d share a context", j, i);
        if (kv_reserve(sc, q->n_past + q->n, err)) return -1; /* synchronous: sc's stream is idle after */
        spans[i] = (cu_span){sc, n, q->n, q->n_past, NULL};
        n += q->n;
        n_logits += q->logits != NULL;
        max_pos = q->n_past + q->n > max_pos ? q->n_past + q->n : max_pos;
    }
    if (reserve_rows(c, n, err) ||
        grow(&c->asc, n_seqs * cu_attention_split_floats(hp->n_head, max_pos) * sizeof(float), err) ||
        (n_logits && grow(&c->logits, (size_t)n_logits * V * sizeof(float), err)))
        return -1;
    cu_q8_scratch_use(&c->q8);
    int32_t *ids = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    if (!ids) return cu_fail(err, "out of host memory for a batch of %d tokens", n);
    for (int i = 0; i < n_seqs; i++) memcpy(ids + spans[i].row0, seqs[i].tokens, (size_t)seqs[i].n * sizeof(int32_t));
    cudaStream_t s = c->s;
    int rc = -1;
    if (cudaMemcpyAsync(c->tok.p, ids, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice, s) != cudaSuccess) {
        cu_fail(err, "copying %d batch tokens: %s", n, cudaGetErrorString(cudaGetLastError()));
        goto out;
    }
    /* a few decode tokens: routing on the device, no host round trip a layer;
     * one token a sequence, through the batched graph where it applies */
    {
        bool ran = false;
        if (n <= CU_MM_NT && batch_graph(c, spans, n_seqs, n, &ran, err)) goto out;
        if (!ran && enqueue_layers(c, n, spans, n_seqs, n == 1 || (!cu_lanes_grouped(n) && n <= CU_MM_NT), err)) goto out;
    }
    if (n_logits) {
        /* each wanted sequence's last row gathered (into `down`, free after the
         * last layer and >= n rows of E), then the head over those rows */
        float *g = P(c->down);
        for (int i = 0, j = 0; i < n_seqs; i++) {
            if (!seqs[i].logits) continue;
            const float *row = P(c->x) + (size_t)(spans[i].row0 + spans[i].n - 1) * E;
            if (cudaMemcpyAsync(g + (size_t)j++ * E, row, (size_t)E * sizeof(float), cudaMemcpyDeviceToDevice, s) !=
                cudaSuccess) {
                cu_fail(err, "gathering batch rows: %s", cudaGetErrorString(cudaGetLastError()));
                goto out;
            }
        }
        cu_rmsnorm_q8(s, P(c->xn), g, (const float *)dm->output_norm.data, E, n_logits, hp->rms_eps, &dm->output);
        cu_matmul_again(s, &dm->output, NULL, P(c->xn), E, 1, NULL, 0, n_logits, P(c->logits), V, false);
        for (int i = 0, j = 0; i < n_seqs; i++) {
            if (!seqs[i].logits) continue;
            if (cudaMemcpyAsync(seqs[i].logits, P(c->logits) + (size_t)j++ * V, (size_t)V * sizeof(float),
                                cudaMemcpyDeviceToHost, s) != cudaSuccess) {
                cu_fail(err, "copying batch logits: %s", cudaGetErrorString(cudaGetLastError()));
                goto out;
            }
        }
    }
    if (cudaStreamSynchronize(s) != cudaSuccess || cudaGetLastError() != cudaSuccess) {
        cu_fail(err, "batched step: %s", cudaGetErrorString(cudaGetLastError()));
        goto out;
    }
    rc = 0;
out:
    free(ids);
    return rc;
}
