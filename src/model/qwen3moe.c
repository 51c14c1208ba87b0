/* qwen3moe.c — the forward pass of the qwen3moe architecture (as llama.cpp
 * defines it) and the inference context that owns its state; qwen35moe runs
 * through the same loop (see the end of this comment).
 *
 * Per layer, for a chunk of n tokens at positions n_past..n_past+n-1:
 *   xn = RMSNorm(x) * attn_norm
 *   q, k, v = xn Wq, xn Wk, xn Wv; q, k get a per-head RMSNorm (q_norm, k_norm)
 *   and NeoX RoPE; k, v are appended to the layer's f16 KV cache
 *   x += Attention(q, K, V) Wo                         (GQA, causal, 1/sqrt(d))
 *   xn = RMSNorm(x) * ffn_norm
 *   p = softmax(xn Wr) over experts; pick top-k; w = p_sel / sum(p_sel)
 *   x += sum_{s<k} w_s * Down_e( silu(Gate_e xn) * Up_e xn ),  e = sel_s
 * then logits = RMSNorm(x) * output_norm Wout for the rows asked for.
 *
 * Prefill and decode share this path.  In the MoE step the chunk's tokens are
 * grouped by expert, so each chosen expert's weights are read once per chunk.
 * Expert outputs are summed in top-k order, as llama.cpp does, so float
 * rounding matches.
 *
 * Memory: every dynamic buffer (KV cache, activations sized by chunk, attention
 * scratch sized by context) comes from the pool.  The KV cache starts small
 * and doubles on demand up to n_ctx instead of reserving the worst case.
 *
 * qwen35moe (docs/qwen35moe.md): a layer is either a Gated DeltaNet layer
 * (deltanet.c, recurrent state in the context instead of a KV cache) or an
 * attention layer whose Wq also yields a per-head gate (the output is
 * multiplied by sigmoid(gate)) with RoPE on the first n_rot dims; its MoE adds
 * an always-on shared expert scaled by sigmoid(xn . shexp_gate) to the routed
 * sum.  Layout of the context: forward.h.
 */
#include "forward.h"
#include "qwisp/experts.h"
#include "qwisp/ops.h"
#include "qwisp/options.h"
#include "qwisp/pool.h"
#include "qwisp/threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers ---- */

int qw_fwd_grow(void **p, size_t *cap, size_t need, qw_error *err) {
    if (need <= *cap) return 0;
    void *q = qw_pool_realloc(*p, need);
    if (!q) return qw_fail(err, "out of memory growing a buffer to %zu bytes", need);
    *p = q;
    *cap = need;
    return 0;
}

static void *chunk_buf(int32_t chunk, size_t row_bytes) { return qw_pool_alloc((size_t)chunk * row_bytes); }

static int kv_reserve(qw_ctx *c, int32_t need, qw_error *err) {
    if (need <= c->kv_cap) return 0;
    int32_t cap = c->kv_cap ? c->kv_cap : KV_INITIAL;
    while (cap < need) cap = cap > c->n_ctx / 2 ? c->n_ctx : cap * 2;
    if (cap > c->n_ctx) cap = c->n_ctx;
    const qw_hparams *hp = &c->m->hp;
    const size_t row = (size_t)hp->n_head_kv * hp->head_dim * c->kv_elt;
    for (int il = 0; il < hp->n_layer; il++) {
        if (c->m->layers[il].recurrent) continue;
        void *nk = qw_pool_realloc(c->k[il], (size_t)cap * row);
        if (!nk) return qw_fail(err, "out of memory growing the KV cache to %d positions", cap);
        c->k[il] = nk;
        void *nv = qw_pool_realloc(c->v[il], (size_t)cap * row);
        if (!nv) return qw_fail(err, "out of memory growing the KV cache to %d positions", cap);
        c->v[il] = nv;
    }
    c->kv_cap = cap;
    return 0;
}

/* (Re)allocates every buffer whose size is proportional to the chunk. */
static int alloc_chunk_bufs(qw_ctx *c, int32_t C) {
    const qw_hparams *hp = &c->m->hp;
    const int32_t E = hp->n_embd, QD = hp->n_head * hp->head_dim;
    const int32_t KD = hp->n_head_kv * hp->head_dim, K = hp->n_expert_used;
    const bool q35 = hp->arch_id == QW_ARCH_QWEN35MOE;
    /* qwen35moe only: gated q, DeltaNet and shared-expert rows (0 = none) */
    const size_t S = (size_t)hp->ssm_state, CH = 2 * S * hp->ssm_groups + S * hp->ssm_vheads;
    const size_t VD = S * hp->ssm_vheads, HV = (size_t)hp->ssm_vheads, FS = (size_t)hp->n_ff_shexp;
    void **bufs[] = {(void **)&c->x,      (void **)&c->xn,     (void **)&c->q,    (void **)&c->kc,
                     (void **)&c->vc,     (void **)&c->attn,   (void **)&c->proj, (void **)&c->router,
                     (void **)&c->sel,    (void **)&c->selw,   (void **)&c->eout, (void **)&c->gate,
                     (void **)&c->up,     (void **)&c->down,   (void **)&c->tok_of,
                     (void **)&c->slot_of,
                     (void **)&c->qg,     (void **)&c->mix,    (void **)&c->cv,   (void **)&c->z,
                     (void **)&c->beta,   (void **)&c->alpha,  (void **)&c->o,    (void **)&c->sg,
                     (void **)&c->su,     (void **)&c->sd,     (void **)&c->sgate};
    const size_t row_bytes[] = {E * 4,  E * 4, QD * 4, KD * 4, KD * 4, QD * 4, E * 4,
                                hp->n_expert * 4, K * 4, K * 4, (size_t)K * E * 4,
                                hp->n_ff_exp * 4, hp->n_ff_exp * 4, E * 4, K * 4, K * 4,
                                q35 ? 2 * (size_t)QD * 4 : 0, CH * 4, CH * 4, VD * 4,
                                HV * 4, HV * 4, VD * 4, FS * 4,
                                FS * 4, q35 ? (size_t)E * 4 : 0, q35 ? 4 : 0};
    int bad = 0;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        qw_pool_free(*bufs[i]);
        *bufs[i] = row_bytes[i] ? chunk_buf(C, row_bytes[i]) : NULL;
        bad |= row_bytes[i] && *bufs[i] == NULL;
    }
    if (!c->count) c->count = qw_pool_alloc((size_t)hp->n_expert * 4);
    c->chunk_cap = C;
    return bad || !c->count ? -1 : 0;
}

void qw_ctx_set_chunk_size(qw_ctx *c, int32_t chunk) {
    /* Buffers follow on the next eval (eval_spans grows them when needed). */
    c->chunk = chunk < 1 ? 1 : chunk;
}

qw_ctx *qw_ctx_new(const qw_model *m, int32_t n_ctx, int n_threads, qw_error *err) {
    const qw_hparams *hp = &m->hp;
    if (n_ctx <= 0) n_ctx = hp->n_ctx_train;
    if (n_ctx <= 0) n_ctx = 4096;
    if (hp->head_dim > 1024) {
        qw_fail(err, "head_dim %d exceeds the supported 1024", hp->head_dim);
        return NULL;
    }
    qw_ctx *c = qw_xcalloc(1, sizeof *c);
    c->m = m;
    c->n_ctx = n_ctx;
    c->n_threads = n_threads < 1 ? 1 : n_threads;
    c->tp = qw_threadpool_new(c->n_threads);
    c->chunk = DEFAULT_CHUNK < n_ctx ? DEFAULT_CHUNK : n_ctx;
    const char *kvt = qw_opt_str(QW_OPT_KV_TYPE);
    c->kv_type = kvt && !strcmp(kvt, "f32") ? QW_TYPE_F32 : QW_TYPE_F16;
    c->kv_elt = c->kv_type == QW_TYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    c->k = qw_xcalloc((size_t)hp->n_layer, sizeof(void *));
    c->v = qw_xcalloc((size_t)hp->n_layer, sizeof(void *));
    c->conv = qw_xcalloc((size_t)hp->n_layer, sizeof(float *));
    c->delta = qw_xcalloc((size_t)hp->n_layer, sizeof(float *));
    for (int il = 0; il < hp->n_layer; il++) {
        if (!m->layers[il].recurrent) continue;
        c->conv[il] = qw_pool_calloc(qw_model_conv_state_bytes(hp));
        c->delta[il] = qw_pool_calloc(qw_model_delta_state_bytes(hp));
        if (!c->conv[il] || !c->delta[il]) {
            qw_fail(err, "out of memory for the recurrent state of layer %d", il);
            qw_ctx_free(c);
            return NULL;
        }
    }

    /* Chunk buffers are allocated on first use: a lane's context that only
     * ever runs through a workspace (qw_batch_eval) never needs them. */
    if (kv_reserve(c, 1, err)) {
        if (!err || !err->msg[0]) qw_fail(err, "out of memory creating the context");
        qw_ctx_free(c);
        return NULL;
    }
    return c;
}

void qw_ctx_free(qw_ctx *c) {
    if (!c) return;
    if (c->k)
        for (int il = 0; il < c->m->hp.n_layer; il++) {
            qw_pool_free(c->k[il]);
            qw_pool_free(c->v[il]);
        }
    if (c->conv)
        for (int il = 0; il < c->m->hp.n_layer; il++) {
            qw_pool_free(c->conv[il]);
            qw_pool_free(c->delta[il]);
        }
    free(c->k);
    free(c->v);
    free(c->conv);
    free(c->delta);
    void *bufs[] = {c->x,    c->xn,   c->q,    c->kc,     c->vc,      c->attn,  c->proj,
                    c->router, c->sel, c->selw, c->eout,  c->gate,    c->up,    c->down,
                    c->tok_of, c->slot_of, c->count, c->xq, c->attn_scratch, c->logits,
                    c->qg,   c->mix,  c->cv,   c->z,      c->beta,    c->alpha, c->o,
                    c->sg,   c->su,   c->sd,   c->sgate};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) qw_pool_free(bufs[i]);
    qw_threadpool_free(c->tp);
    free(c);
}

int32_t qw_ctx_n_ctx(const qw_ctx *c) { return c->n_ctx; }

void qw_ctx_set_chunk_cb(qw_ctx *c, qw_chunk_cb fn, void *user) {
    c->chunk_cb = fn;
    c->chunk_user = user;
}

uint64_t qw_ctx_kv_bytes(const qw_ctx *c) {
    const qw_hparams *hp = &c->m->hp;
    int n_attn = 0;
    for (int il = 0; il < hp->n_layer; il++) n_attn += !c->m->layers[il].recurrent;
    return 2ull * n_attn * (uint64_t)c->kv_cap * hp->n_head_kv * hp->head_dim * c->kv_elt;
}

uint64_t qw_ctx_state_bytes(const qw_ctx *c) { return qw_model_state_bytes(c->m); }
int32_t qw_ctx_n_past(const qw_ctx *c) { return c->n_past; }
const float *qw_ctx_logits(const qw_ctx *c) { return c->logits; }

int32_t qw_ctx_truncate(qw_ctx *c, int32_t n_past) {
    if (n_past < 0 || n_past >= c->n_past) return c->n_past;
    const qw_hparams *hp = &c->m->hp;
    bool recurrent = false;
    for (int il = 0; il < hp->n_layer; il++) {
        if (!c->m->layers[il].recurrent) continue;
        /* a recurrent state holds every token seen: it can only start over */
        recurrent = true;
        memset(c->conv[il], 0, qw_model_conv_state_bytes(hp));
        memset(c->delta[il], 0, qw_model_delta_state_bytes(hp));
    }
    c->n_past = recurrent ? 0 : n_past;
    return c->n_past;
}

/* ---- forward ---- */

int qw_fwd_linear(qw_ctx *c, const qw_tensor *w, const float *x, int32_t n, float *y, qw_error *err) {
    const int64_t k = w->ne[0], rows = w->ne[1];
    if (qw_fwd_grow(&c->xq, &c->xq_cap, qw_act_bytes(w->type, k, n), err)) return -1;
    qw_act_convert(c->tp, w->type, x, k, k, n, c->xq);
    qw_matmul_q(c->tp, w->type, w->data, w->row_bytes, rows, k, c->xq, NULL, n, y, rows);
    return 0;
}

static int attention_block(qw_ctx *c, const qw_layer *L, int il, const seq_span *spans, int n_spans,
                           int32_t n, qw_error *err) {
    const qw_hparams *hp = &c->m->hp;
    const int32_t E = hp->n_embd, D = hp->head_dim, H = hp->n_head, HKV = hp->n_head_kv;
    qw_rmsnorm(c->xn, c->x, L->attn_norm.data, E, n, hp->rms_eps);
    /* gated (qwen35moe): wq yields [head][q | gate] rows into qg */
    float *qout = L->gated_attn ? c->qg : c->q;
    if (L->wk.type == L->wq.type && L->wv.type == L->wq.type) {
        /* q, k, v share the converted activations and one parallel pass. */
        const qw_type t = L->wq.type;
        if (qw_fwd_grow(&c->xq, &c->xq_cap, qw_act_bytes(t, E, n), err)) return -1;
        qw_act_convert(c->tp, t, c->xn, E, E, n, c->xq);
        const qw_mm_task tasks[3] = {
            {L->wq.data, L->wq.row_bytes, L->wq.ne[1], c->xq, NULL, n, qout, L->wq.ne[1]},
            {L->wk.data, L->wk.row_bytes, L->wk.ne[1], c->xq, NULL, n, c->kc, L->wk.ne[1]},
            {L->wv.data, L->wv.row_bytes, L->wv.ne[1], c->xq, NULL, n, c->vc, L->wv.ne[1]}};
        qw_matmul_batch(c->tp, t, E, tasks, 3);
    } else if (qw_fwd_linear(c, &L->wq, c->xn, n, qout, err) || qw_fwd_linear(c, &L->wk, c->xn, n, c->kc, err) ||
               qw_fwd_linear(c, &L->wv, c->xn, n, c->vc, err)) {
        return -1;
    }
    if (L->gated_attn)
        for (int32_t r = 0; r < n; r++)
            for (int32_t h = 0; h < H; h++)
                memcpy(c->q + ((size_t)r * H + h) * D, c->qg + ((size_t)r * H + h) * 2 * D, (size_t)D * sizeof(float));
    qw_rmsnorm(c->q, c->q, L->q_norm.data, D, (int64_t)n * H, hp->rms_eps);
    qw_rmsnorm(c->kc, c->kc, L->k_norm.data, D, (int64_t)n * HKV, hp->rms_eps);
    const size_t kv_row = (size_t)HKV * D;
    for (int si = 0; si < n_spans; si++) {
        /* Each sequence ropes at its own positions, appends to its own KV
         * cache and attends over it; the workspace only lends scratch. */
        qw_ctx *sq = spans[si].ctx;
        const int32_t r0 = spans[si].row0, ns = spans[si].n;
        for (int32_t t = 0; t < ns; t++) {
            const int32_t pos = sq->n_past + t;
            const size_t r = (size_t)(r0 + t);
            qw_rope_neox_partial(c->q + r * H * D, H, D, hp->n_rot, pos, hp->rope_base);
            qw_rope_neox_partial(c->kc + r * kv_row, HKV, D, hp->n_rot, pos, hp->rope_base);
            const size_t at = (size_t)pos * kv_row * sq->kv_elt;
            qw_quantize_row(sq->kv_type, c->kc + r * kv_row, (char *)sq->k[il] + at, (int64_t)kv_row);
            qw_quantize_row(sq->kv_type, c->vc + r * kv_row, (char *)sq->v[il] + at, (int64_t)kv_row);
        }
        size_t need = qw_attention_scratch_bytes(c->n_threads, sq->n_past + ns, D);
        if (qw_fwd_grow(&c->attn_scratch, &c->attn_scratch_cap, need, err)) return -1;
        qw_attention(c->tp, c->q + (size_t)r0 * H * D, sq->k[il], sq->v[il], sq->kv_type, c->attn + (size_t)r0 * H * D,
                     ns, sq->n_past, H, HKV, D, 1.0f / sqrtf((float)D), c->attn_scratch);
    }
    if (L->gated_attn)
        for (int32_t r = 0; r < n; r++)
            for (int32_t h = 0; h < H; h++) {
                float *a = c->attn + ((size_t)r * H + h) * D;
                const float *g = c->qg + ((size_t)r * H + h) * 2 * D + D;
                for (int32_t d = 0; d < D; d++) a[d] *= 1.0f / (1.0f + expf(-g[d]));
            }
    if (qw_fwd_linear(c, &L->wo, c->attn, n, c->proj, err)) return -1;
    for (size_t i = 0; i < (size_t)n * E; i++) c->x[i] += c->proj[i];
    return 0;
}

/* Top-k of probs[n_expert] by descending probability (lower index wins ties). */
static void top_k(const float *probs, int n_expert, int k, int32_t *sel) {
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int e = 0; e < n_expert; e++) {
            bool taken = false;
            for (int u = 0; u < s; u++) taken |= sel[u] == e;
            if (!taken && (best < 0 || probs[e] > probs[best])) best = e;
        }
        sel[s] = best;
    }
}

static int route(qw_ctx *c, const qw_layer *L, int32_t n, qw_error *err) {
    const qw_hparams *hp = &c->m->hp;
    const int X = hp->n_expert, K = hp->n_expert_used;
    if (qw_fwd_linear(c, &L->gate_inp, c->xn, n, c->router, err)) return -1;
    for (int32_t t = 0; t < n; t++) {
        float *p = c->router + (size_t)t * X;
        qw_softmax(p, X);
        int32_t *sel = c->sel + (size_t)t * K;
        float *w = c->selw + (size_t)t * K;
        top_k(p, X, K, sel);
        float sum = 0.0f;
        for (int s = 0; s < K; s++) {
            w[s] = p[sel[s]];
            sum += w[s];
        }
        if (hp->norm_topk) {
            /* llama.cpp clamps the sum to the smallest normal f16 before dividing. */
            if (sum < 6.103515625e-5f) sum = 6.103515625e-5f;
            for (int s = 0; s < K; s++) w[s] /= sum;
        }
        if (hp->expert_weights_scale != 0.0f && hp->expert_weights_scale != 1.0f)
            for (int s = 0; s < K; s++) w[s] *= hp->expert_weights_scale;
    }
    return 0;
}

/* Scales expert output rows down[i] by their routing weight into eout. */
static void scatter_expert_rows(qw_ctx *c, const float *down, const int32_t *tok, const int32_t *slot,
                                int32_t m) {
    const int32_t E = c->m->hp.n_embd, K = c->m->hp.n_expert_used;
    for (int32_t i = 0; i < m; i++) {
        const int32_t t = tok[i], s = slot[i];
        const float w = c->selw[t * K + s];
        float *dst = c->eout + ((size_t)t * K + s) * E;
        const float *src = down + (size_t)i * E;
        for (int32_t d = 0; d < E; d++) dst[d] = src[d] * w;
    }
}

/* Mixed gate/up types (rare): one expert at a time, each with its own conversion. */
static int moe_expert_mixed(qw_ctx *c, const qw_layer *L, int32_t n, int32_t e, int32_t m,
                            const int32_t *tok, const int32_t *slot, qw_error *err) {
    const qw_hparams *hp = &c->m->hp;
    const int32_t E = hp->n_embd, F = hp->n_ff_exp;
    const qw_type gt = L->gate_exps.type, ut = L->up_exps.type, dt = L->down_exps.type;
    const size_t gb = qw_act_bytes(gt, E, n), ub = qw_act_bytes(ut, E, n), db = qw_act_bytes(dt, F, m);
    if (qw_fwd_grow(&c->xq, &c->xq_cap, gb + ub + db, err)) return -1;
    char *gq = c->xq, *uq = gq + gb, *hq = uq + ub;
    qw_act_convert(c->tp, gt, c->xn, E, E, n, gq);
    qw_act_convert(c->tp, ut, c->xn, E, E, n, uq);
    const char *wg, *wu, *wd; /* expert source (experts.h): pinned until released below */
    if (qw_experts_get(c->m->experts, (int32_t)(L - c->m->layers), e, &wg, &wu, &wd, err)) return -1;
    qw_matmul_q(c->tp, gt, wg, L->gate_exps.row_bytes, F, E, gq, tok, m, c->gate, F);
    qw_matmul_q(c->tp, ut, wu, L->up_exps.row_bytes, F, E, uq, tok, m, c->up, F);
    for (int32_t i = 0; i < m; i++)
        qw_swiglu(c->gate + (size_t)i * F, c->gate + (size_t)i * F, c->up + (size_t)i * F, F);
    qw_act_convert(c->tp, dt, c->gate, F, F, m, hq);
    qw_matmul_q(c->tp, dt, wd, L->down_exps.row_bytes, E, F, hq, NULL, m, c->down, E);
    scatter_expert_rows(c, c->down, tok, slot, m);
    qw_experts_release(c->m->experts, (int32_t)(L - c->m->layers));
    return 0;
}

/* The shared expert (qwen35moe): sd = Down(silu(Gate xn) * Up xn) on every
 * row, and its gate sgate = sigmoid(xn . shexp_gate). */
static int shared_expert(qw_ctx *c, const qw_layer *L, int32_t n, qw_error *err) {
    const int32_t FS = c->m->hp.n_ff_shexp;
    if (qw_fwd_linear(c, &L->gate_shexp, c->xn, n, c->sg, err) ||
        qw_fwd_linear(c, &L->up_shexp, c->xn, n, c->su, err))
        return -1;
    for (int32_t i = 0; i < n; i++)
        qw_swiglu(c->sg + (size_t)i * FS, c->sg + (size_t)i * FS, c->su + (size_t)i * FS, FS);
    if (qw_fwd_linear(c, &L->down_shexp, c->sg, n, c->sd, err) ||
        qw_fwd_linear(c, &L->shexp_gate, c->xn, n, c->sgate, err))
        return -1;
    for (int32_t i = 0; i < n; i++) c->sgate[i] = 1.0f / (1.0f + expf(-c->sgate[i]));
    return 0;
}

/* The MoE step.  (token, slot) assignments are sorted by expert (counting
 * sort, tokens ascending within an expert); then consecutive experts are
 * packed into groups of at most chunk_cap assignments (the rows the gate/up/
 * down buffers hold), and each group runs as two parallel passes: gate+up of
 * all its experts, then down of all its experts.  Decode (k assignments) is
 * one group: 2 barriers per layer instead of 2k.  Each dot is computed exactly
 * as before, so results do not change. */
static int moe_block(qw_ctx *c, const qw_layer *L, int32_t n, qw_error *err) {
    const qw_hparams *hp = &c->m->hp;
    const int32_t E = hp->n_embd, F = hp->n_ff_exp, X = hp->n_expert, K = hp->n_expert_used;
    qw_rmsnorm(c->xn, c->x, L->ffn_norm.data, E, n, hp->rms_eps);
    if (route(c, L, n, err)) return -1;
    qw_experts *xs = c->m->experts; /* streaming: starts reads of the chunk's missing experts */
    const int32_t il = (int32_t)(L - c->m->layers), max_pin = qw_experts_max_pinned(xs);
    qw_experts_need(xs, il, c->sel, n * K);

    /* Counting sort of the n*K assignments by expert.  Afterwards count[e] is
     * the end of expert e's run, so its start is END(e - 1). */
    memset(c->count, 0, (size_t)X * sizeof(int32_t));
    for (int32_t i = 0; i < n * K; i++) c->count[c->sel[i]]++;
    for (int32_t e = 0, acc = 0; e < X; e++) {
        const int32_t m = c->count[e];
        c->count[e] = acc; /* fill cursor = start */
        acc += m;
    }
    for (int32_t t = 0; t < n; t++)
        for (int32_t s = 0; s < K; s++) {
            const int32_t at = c->count[c->sel[t * K + s]]++;
            c->tok_of[at] = t;
            c->slot_of[at] = s;
        }
#define END(e) c->count[e]
#define START(e) ((e) > 0 ? c->count[(e) - 1] : 0)

    const qw_type gt = L->gate_exps.type, dt = L->down_exps.type;
    if (L->up_exps.type != gt) {
        for (int32_t e = 0; e < X; e++)
            if (END(e) > START(e) &&
                moe_expert_mixed(c, L, n, e, END(e) - START(e), c->tok_of + START(e),
                                 c->slot_of + START(e), err))
                return -1;
    } else {
        const int32_t cap = c->chunk_cap; /* rows of gate/up/down */
        const size_t gate_act_bytes = qw_act_bytes(gt, E, n);
        if (qw_fwd_grow(&c->xq, &c->xq_cap, gate_act_bytes + qw_act_bytes(dt, F, cap), err)) return -1;
        char *xq = c->xq, *hq = (char *)c->xq + gate_act_bytes;
        qw_act_convert(c->tp, gt, c->xn, E, E, n, xq);
        const size_t hq_row = qw_row_bytes(qw_vec_dot_type(dt), F);
        qw_mm_task gu[QW_MM_MAX_TASKS], dn[QW_MM_MAX_TASKS / 2];
        int32_t e = 0;
        while (e < X) {
            /* pack experts [e, e_end) into one group of <= cap rows */
            int32_t e_end = e, nt = 0;
            const int32_t row0 = START(e);
            /* an expert has at most n <= cap rows, so each group takes at least one */
            while (e_end < X && nt < QW_MM_MAX_TASKS / 2 && nt < max_pin && (e_end == e || END(e_end) - row0 <= cap)) {
                const int32_t m = END(e_end) - START(e_end);
                if (m) {
                    const int32_t r = START(e_end) - row0;
                    const char *wg, *wu, *wd; /* pinned until the group's release */
                    if (qw_experts_get(xs, il, e_end, &wg, &wu, &wd, err)) return -1;
                    const int32_t *tok = c->tok_of + START(e_end);
                    gu[2 * nt] = (qw_mm_task){wg, L->gate_exps.row_bytes, F, xq, tok, m, c->gate + (size_t)r * F, F};
                    gu[2 * nt + 1] = (qw_mm_task){wu, L->up_exps.row_bytes, F, xq, tok, m, c->up + (size_t)r * F, F};
                    dn[nt] = (qw_mm_task){wd, L->down_exps.row_bytes, E, hq + (size_t)r * hq_row, NULL, m,
                                          c->down + (size_t)r * E, E};
                    nt++;
                }
                e_end++;
            }
            const int32_t rows = END(e_end - 1) - row0;
            if (nt) {
                qw_matmul_batch(c->tp, gt, E, gu, 2 * nt);
                for (int32_t i = 0; i < rows; i++)
                    qw_swiglu(c->gate + (size_t)i * F, c->gate + (size_t)i * F, c->up + (size_t)i * F, F);
                qw_act_convert(c->tp, dt, c->gate, F, F, rows, hq);
                qw_matmul_batch(c->tp, dt, F, dn, nt);
                qw_experts_release(xs, il);
                scatter_expert_rows(c, c->down, c->tok_of + row0, c->slot_of + row0, rows);
            }
            e = e_end;
        }
    }
#undef END
#undef START
    if (L->gate_shexp.data && shared_expert(c, L, n, err)) return -1;
    /* Sum expert outputs in top-k order, add the gated shared expert (if
     * any), then add to the residual. */
    for (int32_t t = 0; t < n; t++) {
        float *x = c->x + (size_t)t * E;
        const float *eo = c->eout + (size_t)t * K * E;
        const float *sd = L->gate_shexp.data ? c->sd + (size_t)t * E : NULL;
        for (int32_t d = 0; d < E; d++) {
            float acc = eo[d];
            for (int32_t s = 1; s < K; s++) acc += eo[(size_t)s * E + d];
            x[d] += sd ? acc + sd[d] * c->sgate[t] : acc;
        }
    }
    return 0;
}

static int output_logits(qw_ctx *c, int32_t n, int32_t first_row, qw_error *err) {
    const qw_model *m = c->m;
    const int32_t E = m->hp.n_embd, V = m->hp.n_vocab;
    const int32_t rows = n - first_row;
    if (rows > c->logits_cap) {
        qw_pool_free(c->logits);
        c->logits = qw_pool_alloc((size_t)rows * V * sizeof(float));
        if (!c->logits) {
            c->logits_cap = 0;
            return qw_fail(err, "out of memory for %d rows of logits", rows);
        }
        c->logits_cap = rows;
    }
    qw_rmsnorm(c->xn, c->x + (size_t)first_row * E, m->output_norm.data, E, rows, m->hp.rms_eps);
    if (qw_fwd_linear(c, &m->output, c->xn, rows, c->logits, err)) return -1;
    c->logits_rows = rows;
    return 0;
}

/* Runs one workspace chunk: the concatenated tokens of every span (rows in
 * span order), each span appending to its own sequence's KV cache.  Logits:
 * ALL (one span only) keeps every row in c->logits; otherwise each span with
 * want_logits[si] gets its last row's logits in its own ctx->logits. */
static int eval_spans(qw_ctx *c, const int32_t *tokens, const seq_span *spans, int n_spans,
                      const bool *want_logits, qw_logits_mode mode, float *all_logits, qw_error *err) {
    const qw_model *m = c->m;
    const int32_t E = m->hp.n_embd, V = m->hp.n_vocab;
    int32_t n = 0;
    for (int si = 0; si < n_spans; si++) {
        if (kv_reserve(spans[si].ctx, spans[si].ctx->n_past + spans[si].n, err)) return -1;
        n += spans[si].n;
    }
    if (c->chunk_cap < n && alloc_chunk_bufs(c, n > c->chunk ? n : c->chunk))
        return qw_fail(err, "out of memory for a chunk of %d tokens", n);
    for (int32_t t = 0; t < n; t++)
        qw_dequantize_row(m->tok_embd.type,
                          (const char *)m->tok_embd.data + (size_t)tokens[t] * m->tok_embd.row_bytes,
                          c->x + (size_t)t * E, E);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const qw_layer *L = &m->layers[il];
        if ((L->recurrent ? qw_deltanet_block(c, L, il, spans, n_spans, n, err)
                          : attention_block(c, L, il, spans, n_spans, n, err)) ||
            moe_block(c, L, n, err))
            return -1;
    }
    if (mode == QW_LOGITS_ALL) {
        if (output_logits(c, n, 0, err)) return -1;
        if (all_logits) memcpy(all_logits, c->logits, (size_t)c->logits_rows * V * sizeof(float));
    } else if (mode == QW_LOGITS_LAST) {
        /* Gather each wanting span's last row, run the head once for all. */
        int32_t rows = 0;
        for (int si = 0; si < n_spans; si++)
            if (want_logits[si])
                memmove(c->x + (size_t)rows++ * E, c->x + (size_t)(spans[si].row0 + spans[si].n - 1) * E,
                        (size_t)E * sizeof(float));
        if (rows && output_logits(c, rows, 0, err)) return -1;
        for (int si = 0, r = 0; si < n_spans; si++) {
            if (!want_logits[si]) continue;
            qw_ctx *sq = spans[si].ctx;
            if (sq != c) {
                if (sq->logits_cap < 1) {
                    sq->logits = qw_pool_alloc((size_t)V * sizeof(float));
                    if (!sq->logits) return qw_fail(err, "out of memory for a row of logits");
                    sq->logits_cap = 1;
                }
                memcpy(sq->logits, c->logits + (size_t)r * V, (size_t)V * sizeof(float));
                sq->logits_rows = 1;
            } else if (r != 0) {
                memmove(c->logits, c->logits + (size_t)r * V, (size_t)V * sizeof(float));
            }
            r++;
        }
    }
    for (int si = 0; si < n_spans; si++) spans[si].ctx->n_past += spans[si].n;
    return 0;
}

static int eval_chunk(qw_ctx *c, const int32_t *tokens, int32_t n, qw_logits_mode mode,
                      float *all_logits, qw_error *err) {
    const seq_span span = {c, 0, n};
    const bool want = mode != QW_LOGITS_NONE;
    return eval_spans(c, tokens, &span, 1, &want, mode, all_logits, err);
}

static int check_tokens(const qw_hparams *hp, const int32_t *tokens, int32_t n, qw_error *err) {
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return qw_fail(err, "token id %d at index %d is outside the vocabulary (0..%d)",
                           tokens[i], i, hp->n_vocab - 1);
    return 0;
}

int qw_batch_eval(qw_ctx *ws, const qw_batch_seq *seqs, int n_seqs, qw_error *err) {
    enum { MAX_SEQS = 256 };
    if (n_seqs <= 0 || n_seqs > MAX_SEQS) return qw_fail(err, "batch of %d sequences (1..%d)", n_seqs, MAX_SEQS);
    seq_span spans[MAX_SEQS];
    bool want[MAX_SEQS];
    int32_t n = 0;
    for (int i = 0; i < n_seqs; i++) {
        const qw_batch_seq *q = &seqs[i];
        if (q->ctx->m != ws->m) return qw_fail(err, "batch sequence %d belongs to another model", i);
        if (q->n <= 0) return qw_fail(err, "batch sequence %d has no tokens", i);
        if (q->ctx->n_past + q->n > q->ctx->n_ctx)
            return qw_fail(err, "context full: sequence %d has %d tokens in cache + %d new > n_ctx %d", i,
                           q->ctx->n_past, q->n, q->ctx->n_ctx);
        if (check_tokens(&ws->m->hp, q->tokens, q->n, err)) return -1;
        for (int j = 0; j < i; j++)
            if (seqs[j].ctx == q->ctx) return qw_fail(err, "batch sequences %d and %d share a context", j, i);
        spans[i] = (seq_span){q->ctx, n, q->n};
        want[i] = q->logits;
        n += q->n;
    }
    int32_t *tokens = qw_pool_alloc((size_t)n * sizeof(int32_t));
    if (!tokens) return qw_fail(err, "out of memory for a batch of %d tokens", n);
    for (int i = 0; i < n_seqs; i++) memcpy(tokens + spans[i].row0, seqs[i].tokens, (size_t)seqs[i].n * sizeof(int32_t));
    int rc = eval_spans(ws, tokens, spans, n_seqs, want, QW_LOGITS_LAST, NULL, err);
    qw_pool_free(tokens);
    return rc;
}

int qw_ctx_eval(qw_ctx *c, const int32_t *tokens, int32_t n, qw_logits_mode mode, qw_error *err) {
    const qw_hparams *hp = &c->m->hp;
    if (n <= 0) return qw_fail(err, "nothing to evaluate (0 tokens)");
    if (c->n_past + n > c->n_ctx)
        return qw_fail(err, "context full: %d tokens in cache + %d new > n_ctx %d", c->n_past, n,
                       c->n_ctx);
    if (check_tokens(hp, tokens, n, err)) return -1;

    /* ALL needs every chunk's rows kept; gather them into one buffer. */
    float *all = NULL;
    if (mode == QW_LOGITS_ALL && n > c->chunk) {
        all = qw_pool_alloc((size_t)n * hp->n_vocab * sizeof(float));
        if (!all) return qw_fail(err, "out of memory for %d rows of logits", n);
    }
    for (int32_t i0 = 0; i0 < n; i0 += c->chunk) {
        int32_t m = n - i0 < c->chunk ? n - i0 : c->chunk;
        bool last = i0 + m == n;
        qw_logits_mode cm = mode == QW_LOGITS_ALL ? QW_LOGITS_ALL : (last ? mode : QW_LOGITS_NONE);
        if (eval_chunk(c, tokens + i0, m, cm, all ? all + (size_t)i0 * hp->n_vocab : NULL, err)) {
            qw_pool_free(all);
            return -1;
        }
        if (c->chunk_cb) c->chunk_cb(c->chunk_user, c, i0 + m, n);
    }
    if (all) {
        qw_pool_free(c->logits);
        c->logits = all;
        c->logits_rows = c->logits_cap = n;
    }
    return 0;
}
