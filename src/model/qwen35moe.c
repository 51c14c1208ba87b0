/* qwen35moe.c — loader and forward pass of the qwen35moe architecture (work in
 * progress; math in docs/qwen35moe.md).  The simplest correct form: every
 * token, prefill included, runs alone through the recurrent form of the gated
 * delta rule; full-attention layers keep an f16 KV cache.  Per sequence and
 * DeltaNet layer the context owns a conv state [(d_conv-1)][C] and a delta
 * state [Hv][S][S] (row j of a head's block is column j of M, so the
 * per-output dot products run over contiguous memory), all from the pool.
 */
#include "qwen35moe.h"

#include "qwisp/ops.h"
#include "qwisp/pool.h"
#include "qwisp/threadpool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- load ---- */

static int key_u32(const qw_gguf *g, const char *suffix, int32_t *out, bool required, qw_error *err) {
    char key[160];
    snprintf(key, sizeof key, "qwen35moe.%s", suffix);
    uint32_t v;
    if (qw_gguf_get_u32(g, key, &v) != 0) {
        if (!required) return 0;
        return qw_fail(err, "%s: missing metadata key '%s'", qw_gguf_path(g), key);
    }
    *out = (int32_t)v;
    return 0;
}

static int key_f32(const qw_gguf *g, const char *suffix, float *out, bool required, qw_error *err) {
    char key[160];
    snprintf(key, sizeof key, "qwen35moe.%s", suffix);
    if (qw_gguf_get_f32(g, key, out) != 0) {
        if (!required) return 0;
        return qw_fail(err, "%s: missing metadata key '%s'", qw_gguf_path(g), key);
    }
    return 0;
}

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

static int bind_layer(const qw_gguf *g, const qw35_hparams *hp, int il, qw35_layer *L, qw_error *err) {
    char nm[96];
    const int64_t E = hp->n_embd, D = hp->head_dim, H = hp->n_head, HKV = hp->n_head_kv;
    const int64_t X = hp->n_expert, F = hp->n_ff_exp, FS = hp->n_ff_shexp, S = hp->ssm_state;
    const int64_t KD = S * hp->ssm_groups, VD = S * hp->ssm_vheads, C = 2 * KD + VD, HV = hp->ssm_vheads;
#define B(field, suffix, nd, dims, f32)                                        \
    do {                                                                       \
        snprintf(nm, sizeof nm, "blk.%d.%s", il, suffix);                      \
        if (qw_model_bind_tensor(g, &L->field, nm, nd, dims, f32, err)) return -1;             \
    } while (0)
    L->recurrent = (il + 1) % hp->full_attn_interval != 0;
    B(attn_norm, "attn_norm.weight", 1, DIMS(E), true);
    B(post_norm, "post_attention_norm.weight", 1, DIMS(E), true);
    if (!L->recurrent) {
        B(wq, "attn_q.weight", 2, DIMS(E, 2 * H * D), false);
        B(wk, "attn_k.weight", 2, DIMS(E, HKV * D), false);
        B(wv, "attn_v.weight", 2, DIMS(E, HKV * D), false);
        B(wo, "attn_output.weight", 2, DIMS(H * D, E), false);
        B(q_norm, "attn_q_norm.weight", 1, DIMS(D), true);
        B(k_norm, "attn_k_norm.weight", 1, DIMS(D), true);
    } else {
        B(wqkv, "attn_qkv.weight", 2, DIMS(E, C), false);
        B(wgate, "attn_gate.weight", 2, DIMS(E, VD), false);
        B(conv1d, "ssm_conv1d.weight", 2, DIMS(hp->d_conv, C), true);
        B(dt_bias, "ssm_dt.bias", 1, DIMS(HV), true);
        B(ssm_a, "ssm_a", 1, DIMS(HV), true);
        B(w_beta, "ssm_beta.weight", 2, DIMS(E, HV), false);
        B(w_alpha, "ssm_alpha.weight", 2, DIMS(E, HV), false);
        B(ssm_norm, "ssm_norm.weight", 1, DIMS(S), true);
        B(ssm_out, "ssm_out.weight", 2, DIMS(VD, E), false);
    }
    B(gate_inp, "ffn_gate_inp.weight", 2, DIMS(E, X), false);
    B(gate_exps, "ffn_gate_exps.weight", 3, DIMS(E, F, X), false);
    B(up_exps, "ffn_up_exps.weight", 3, DIMS(E, F, X), false);
    B(down_exps, "ffn_down_exps.weight", 3, DIMS(F, E, X), false);
    B(shexp_gate_inp, "ffn_gate_inp_shexp.weight", 1, DIMS(E), false);
    B(gate_shexp, "ffn_gate_shexp.weight", 2, DIMS(E, FS), false);
    B(up_shexp, "ffn_up_shexp.weight", 2, DIMS(E, FS), false);
    B(down_shexp, "ffn_down_shexp.weight", 2, DIMS(FS, E), false);
#undef B
    return 0;
}

qw35_model *qw35_model_load(const char *path, qw_error *err) {
    qw_gguf *g = qw_gguf_open(path, err);
    if (!g) return NULL;
    qw35_model *m = qw_xcalloc(1, sizeof *m);
    m->gguf = g;
    qw35_hparams *hp = &m->hp;
    const char *arch;
    size_t alen;
    if (qw_gguf_get_str(g, "general.architecture", &arch, &alen) != 0 || strcmp(arch, "qwen35moe") != 0) {
        qw_fail(err, "%s: not a qwen35moe file", path);
        goto fail;
    }
    hp->n_ctx_train = 4096;
    hp->rope_base = 10000.0f;
    hp->full_attn_interval = 4;
    if (key_u32(g, "embedding_length", &hp->n_embd, true, err) ||
        key_u32(g, "block_count", &hp->n_layer, true, err) ||
        key_u32(g, "attention.head_count", &hp->n_head, true, err) ||
        key_u32(g, "attention.head_count_kv", &hp->n_head_kv, true, err) ||
        key_u32(g, "attention.key_length", &hp->head_dim, true, err) ||
        key_u32(g, "expert_count", &hp->n_expert, true, err) ||
        key_u32(g, "expert_used_count", &hp->n_expert_used, true, err) ||
        key_u32(g, "expert_feed_forward_length", &hp->n_ff_exp, true, err) ||
        key_u32(g, "expert_shared_feed_forward_length", &hp->n_ff_shexp, true, err) ||
        key_u32(g, "ssm.conv_kernel", &hp->d_conv, true, err) ||
        key_u32(g, "ssm.state_size", &hp->ssm_state, true, err) ||
        key_u32(g, "ssm.group_count", &hp->ssm_groups, true, err) ||
        key_u32(g, "ssm.time_step_rank", &hp->ssm_vheads, true, err) ||
        key_u32(g, "ssm.inner_size", &hp->ssm_inner, true, err) ||
        key_u32(g, "context_length", &hp->n_ctx_train, false, err) ||
        key_u32(g, "full_attention_interval", &hp->full_attn_interval, false, err) ||
        key_f32(g, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, err) ||
        key_f32(g, "rope.freq_base", &hp->rope_base, false, err) ||
        key_f32(g, "expert_weights_scale", &hp->expert_weights_scale, false, err))
        goto fail;
    hp->n_rot = hp->head_dim;
    if (key_u32(g, "rope.dimension_count", &hp->n_rot, false, err)) goto fail;
    if (qw_gguf_find_key(g, "qwen35moe.attention.recurrent_layers") >= 0) {
        qw_fail(err, "%s: qwen35moe.attention.recurrent_layers is not supported yet", path);
        goto fail;
    }
    if (hp->n_layer <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv ||
        hp->head_dim <= 0 || hp->head_dim > 1024 || hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2 ||
        hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert || hp->n_expert_used > 64 ||
        hp->ssm_groups <= 0 || hp->ssm_vheads % hp->ssm_groups || hp->ssm_inner != hp->ssm_state * hp->ssm_vheads ||
        hp->d_conv < 1 || hp->full_attn_interval < 1) {
        qw_fail(err, "%s: unsupported qwen35moe shape", path);
        goto fail;
    }
    const qw_gguf_tensor *te = qw_gguf_find_tensor(g, "token_embd.weight");
    if (!te) {
        qw_fail(err, "%s: missing tensor 'token_embd.weight'", path);
        goto fail;
    }
    hp->n_vocab = (int32_t)te->ne[1];
    if (qw_model_bind_tensor(g, &m->tok_embd, "token_embd.weight", 2, DIMS(hp->n_embd, hp->n_vocab), false, err) ||
        qw_model_bind_tensor(g, &m->output_norm, "output_norm.weight", 1, DIMS(hp->n_embd), true, err))
        goto fail;
    if (qw_gguf_find_tensor(g, "output.weight")) {
        if (qw_model_bind_tensor(g, &m->output, "output.weight", 2, DIMS(hp->n_embd, hp->n_vocab), false, err)) goto fail;
    } else {
        m->output = m->tok_embd;
    }
    m->layers = qw_xcalloc((size_t)hp->n_layer, sizeof *m->layers);
    for (int il = 0; il < hp->n_layer; il++)
        if (bind_layer(g, hp, il, &m->layers[il], err)) goto fail;
    return m;
fail:
    qw35_model_free(m);
    return NULL;
}

void qw35_model_free(qw35_model *m) {
    if (!m) return;
    free(m->layers);
    qw_gguf_close(m->gguf);
    free(m);
}

/* ---- context ---- */

struct qw35_ctx {
    const qw35_model *m;
    qw_threadpool *tp;
    int n_threads;
    int32_t n_ctx, n_past;
    uint16_t **kc, **vc;     /* per attention layer [n_ctx][Hkv*D] f16; NULL for DeltaNet layers */
    float **conv, **delta;   /* per DeltaNet layer: [(d_conv-1)][C], [Hv][S][S] */
    /* one token's activations */
    float *x, *xn, *qg, *q, *k, *v, *attn, *proj, *mix, *z, *beta, *alpha, *cv, *o;
    float *router, *eg, *eu, *ed, *moe, *sg, *su, *sd, *logits;
    void *xq;
    size_t xq_cap;
    void *attn_scratch;
    size_t attn_scratch_cap;
};

static int grow(void **p, size_t *cap, size_t need, qw_error *err) {
    if (need <= *cap) return 0;
    void *q = qw_pool_realloc(*p, need);
    if (!q) return qw_fail(err, "out of memory growing a buffer to %zu bytes", need);
    *p = q;
    *cap = need;
    return 0;
}

qw35_ctx *qw35_ctx_new(const qw35_model *m, int32_t n_ctx, int n_threads, qw_error *err) {
    const qw35_hparams *hp = &m->hp;
    if (n_ctx <= 0) n_ctx = hp->n_ctx_train > 0 ? hp->n_ctx_train : 4096;
    qw35_ctx *c = qw_xcalloc(1, sizeof *c);
    c->m = m;
    c->n_ctx = n_ctx;
    c->n_threads = n_threads < 1 ? 1 : n_threads;
    c->tp = qw_threadpool_new(c->n_threads);
    const int64_t E = hp->n_embd, D = hp->head_dim, H = hp->n_head, HKV = hp->n_head_kv, S = hp->ssm_state;
    const int64_t KD = S * hp->ssm_groups, VD = S * hp->ssm_vheads, C = 2 * KD + VD, HV = hp->ssm_vheads;
    const int64_t F = hp->n_ff_exp, FS = hp->n_ff_shexp;
    c->kc = qw_xcalloc((size_t)hp->n_layer, sizeof *c->kc);
    c->vc = qw_xcalloc((size_t)hp->n_layer, sizeof *c->vc);
    c->conv = qw_xcalloc((size_t)hp->n_layer, sizeof *c->conv);
    c->delta = qw_xcalloc((size_t)hp->n_layer, sizeof *c->delta);
    bool bad = false;
    for (int il = 0; il < hp->n_layer; il++) {
        if (m->layers[il].recurrent) {
            c->conv[il] = qw_pool_calloc((size_t)(hp->d_conv > 1 ? hp->d_conv - 1 : 1) * C * sizeof(float));
            c->delta[il] = qw_pool_calloc((size_t)HV * S * S * sizeof(float));
            bad |= !c->conv[il] || !c->delta[il];
        } else {
            c->kc[il] = qw_pool_alloc((size_t)n_ctx * HKV * D * sizeof(uint16_t));
            c->vc[il] = qw_pool_alloc((size_t)n_ctx * HKV * D * sizeof(uint16_t));
            bad |= !c->kc[il] || !c->vc[il];
        }
    }
    float **bufs[] = {&c->x, &c->xn, &c->qg, &c->q, &c->k, &c->v, &c->attn, &c->proj, &c->mix, &c->z,
                      &c->beta, &c->alpha, &c->cv, &c->o, &c->router, &c->eg, &c->eu, &c->ed, &c->moe,
                      &c->sg, &c->su, &c->sd, &c->logits};
    const int64_t lens[] = {E, E, 2 * H * D, H * D, HKV * D, HKV * D, H * D, E, C, VD,
                            HV, HV, C, VD, hp->n_expert, F, F, E, E, FS, FS, E, hp->n_vocab};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        *bufs[i] = qw_pool_calloc((size_t)lens[i] * sizeof(float));
        bad |= !*bufs[i];
    }
    if (bad) {
        qw_fail(err, "out of memory creating a qwen35moe context");
        qw35_ctx_free(c);
        return NULL;
    }
    return c;
}

void qw35_ctx_free(qw35_ctx *c) {
    if (!c) return;
    for (int il = 0; il < c->m->hp.n_layer; il++) {
        qw_pool_free(c->kc[il]);
        qw_pool_free(c->vc[il]);
        qw_pool_free(c->conv[il]);
        qw_pool_free(c->delta[il]);
    }
    free(c->kc);
    free(c->vc);
    free(c->conv);
    free(c->delta);
    float *bufs[] = {c->x,      c->xn, c->qg, c->q,  c->k,  c->v,   c->attn, c->proj,
                     c->mix,    c->z,  c->beta, c->alpha, c->cv, c->o, c->router, c->eg,
                     c->eu,     c->ed, c->moe, c->sg, c->su, c->sd, c->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) qw_pool_free(bufs[i]);
    qw_pool_free(c->xq);
    qw_pool_free(c->attn_scratch);
    qw_threadpool_free(c->tp);
    free(c);
}

int32_t qw35_ctx_n_past(const qw35_ctx *c) { return c->n_past; }
const float *qw35_logits(const qw35_ctx *c) { return c->logits; }

/* ---- forward (one token) ---- */

/* y[rows] = W x for a matrix of `rows` rows of k (data may be one expert's slice). */
static int matvec(qw35_ctx *c, qw_type t, const void *w, size_t row_bytes, int64_t rows, int64_t k,
                  const float *x, float *y, qw_error *err) {
    if (grow(&c->xq, &c->xq_cap, qw_act_bytes(t, k, 1), err)) return -1;
    qw_act_convert(c->tp, t, x, k, k, 1, c->xq);
    qw_matmul_q(c->tp, t, w, row_bytes, rows, k, c->xq, NULL, 1, y, rows);
    return 0;
}
static int linear(qw35_ctx *c, const qw_tensor *w, const float *x, float *y, qw_error *err) {
    return matvec(c, w->type, w->data, w->row_bytes, w->ne[1], w->ne[0], x, y, err);
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
static float siluf(float x) { return x / (1.0f + expf(-x)); }
static float softplusf(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* x / sqrt(sum(x^2) + eps), the way llama.cpp composes it (rms norm with eps/n, then 1/sqrt(n)). */
static void l2norm(float *x, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * x[i];
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps / (float)n);
    const float post = 1.0f / sqrtf((float)n);
    for (int64_t i = 0; i < n; i++) x[i] = (x[i] * scale) * post;
}

/* IMRoPE for a text token (all M-RoPE components = pos, the 4th = 0) over the
 * first n_rot dims of each head: NeoX pairs (i, i + n_rot/2). */
static int attn_layer(qw35_ctx *c, const qw35_layer *L, int il, qw_error *err) {
    const qw35_hparams *hp = &c->m->hp;
    const int64_t D = hp->head_dim, H = hp->n_head, HKV = hp->n_head_kv;
    if (linear(c, &L->wq, c->xn, c->qg, err) || linear(c, &L->wk, c->xn, c->k, err) ||
        linear(c, &L->wv, c->xn, c->v, err))
        return -1;
    for (int64_t h = 0; h < H; h++) memcpy(c->q + h * D, c->qg + h * 2 * D, (size_t)D * sizeof(float));
    qw_rmsnorm(c->q, c->q, L->q_norm.data, D, H, hp->rms_eps);
    qw_rmsnorm(c->k, c->k, L->k_norm.data, D, HKV, hp->rms_eps);
    qw_rope_neox_partial(c->q, H, hp->head_dim, hp->n_rot, c->n_past, hp->rope_base);
    qw_rope_neox_partial(c->k, HKV, hp->head_dim, hp->n_rot, c->n_past, hp->rope_base);
    const size_t row = (size_t)HKV * D;
    qw_quantize_row(QW_TYPE_F16, c->k, c->kc[il] + (size_t)c->n_past * row, (int64_t)row);
    qw_quantize_row(QW_TYPE_F16, c->v, c->vc[il] + (size_t)c->n_past * row, (int64_t)row);
    if (grow(&c->attn_scratch, &c->attn_scratch_cap, qw_attention_scratch_bytes(c->n_threads, c->n_past + 1, D), err))
        return -1;
    qw_attention(c->tp, c->q, c->kc[il], c->vc[il], QW_TYPE_F16, c->attn, 1, c->n_past, H, HKV, D,
                 1.0f / sqrtf((float)D), c->attn_scratch);
    for (int64_t h = 0; h < H; h++)
        for (int64_t d = 0; d < D; d++) c->attn[h * D + d] *= sigmoidf(c->qg[h * 2 * D + D + d]);
    return linear(c, &L->wo, c->attn, c->proj, err);
}

static int deltanet_layer(qw35_ctx *c, const qw35_layer *L, int il, qw_error *err) {
    const qw35_hparams *hp = &c->m->hp;
    const int64_t S = hp->ssm_state, HK = hp->ssm_groups, HV = hp->ssm_vheads, KD = S * HK, VD = S * HV;
    const int64_t C = 2 * KD + VD, K = hp->d_conv;
    if (linear(c, &L->wqkv, c->xn, c->mix, err) || linear(c, &L->wgate, c->xn, c->z, err) ||
        linear(c, &L->w_beta, c->xn, c->beta, err) || linear(c, &L->w_alpha, c->xn, c->alpha, err))
        return -1;
    const float *dt = L->dt_bias.data, *A = L->ssm_a.data;
    for (int64_t h = 0; h < HV; h++) {
        c->beta[h] = sigmoidf(c->beta[h]);
        c->alpha[h] = softplusf(c->alpha[h] + dt[h]) * A[h]; /* g = log decay */
    }
    /* causal conv over [state (K-1 oldest first), current], then silu; shift the state */
    float *st = c->conv[il];
    const float *w = L->conv1d.data;
    for (int64_t ch = 0; ch < C; ch++) {
        float sum = 0.0f;
        for (int64_t j = 0; j < K - 1; j++) sum += st[j * C + ch] * w[ch * K + j];
        sum += c->mix[ch] * w[ch * K + K - 1];
        c->cv[ch] = siluf(sum);
    }
    if (K > 1) {
        memmove(st, st + C, (size_t)(K - 2) * C * sizeof(float));
        memcpy(st + (K - 2) * C, c->mix, (size_t)C * sizeof(float));
    }
    float *q = c->cv, *k = c->cv + KD, *v = c->cv + 2 * KD;
    for (int64_t h = 0; h < HK; h++) {
        l2norm(q + h * S, S, hp->rms_eps);
        l2norm(k + h * S, S, hp->rms_eps);
    }
    const float scale = 1.0f / sqrtf((float)S);
    for (int64_t h = 0; h < HV; h++) {
        float *M = c->delta[il] + h * S * S; /* M[j*S + i] = state[i][j] */
        const float *qh = q + (h % HK) * S, *kh = k + (h % HK) * S, *vh = v + h * S;
        const float decay = expf(c->alpha[h]), b = c->beta[h];
        float *oh = c->o + h * S;
        for (int64_t i = 0; i < S * S; i++) M[i] *= decay;
        for (int64_t j = 0; j < S; j++) {
            float *row = M + j * S;
            float s = 0.0f;
            for (int64_t i = 0; i < S; i++) s += row[i] * kh[i];
            const float d = (vh[j] - s) * b;
            for (int64_t i = 0; i < S; i++) row[i] += kh[i] * d;
            float o = 0.0f;
            for (int64_t i = 0; i < S; i++) o += row[i] * qh[i];
            oh[j] = o * scale;
        }
    }
    /* gated RMS norm per value head, then the output projection */
    qw_rmsnorm(c->o, c->o, L->ssm_norm.data, S, HV, hp->rms_eps);
    for (int64_t i = 0; i < VD; i++) c->o[i] *= siluf(c->z[i]);
    return linear(c, &L->ssm_out, c->o, c->proj, err);
}

static void top_k(const float *p, int n, int k, int32_t *sel) {
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            bool taken = false;
            for (int u = 0; u < s; u++) taken |= sel[u] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[s] = best;
    }
}

static int moe_layer(qw35_ctx *c, const qw35_layer *L, qw_error *err) {
    const qw35_hparams *hp = &c->m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff_exp, FS = hp->n_ff_shexp;
    const int X = hp->n_expert, K = hp->n_expert_used;
    if (linear(c, &L->gate_inp, c->xn, c->router, err)) return -1;
    qw_softmax(c->router, X);
    int32_t sel[64];
    float wsel[64], sum = 0.0f;
    top_k(c->router, X, K, sel);
    for (int s = 0; s < K; s++) sum += (wsel[s] = c->router[sel[s]]);
    if (sum < 6.103515625e-5f) sum = 6.103515625e-5f;
    for (int s = 0; s < K; s++) wsel[s] /= sum;
    if (hp->expert_weights_scale != 0.0f && hp->expert_weights_scale != 1.0f)
        for (int s = 0; s < K; s++) wsel[s] *= hp->expert_weights_scale;
    for (int s = 0; s < K; s++) {
        const int e = sel[s];
        const char *wg = (const char *)L->gate_exps.data + (size_t)e * L->gate_exps.matrix_bytes;
        const char *wu = (const char *)L->up_exps.data + (size_t)e * L->up_exps.matrix_bytes;
        const char *wd = (const char *)L->down_exps.data + (size_t)e * L->down_exps.matrix_bytes;
        if (matvec(c, L->gate_exps.type, wg, L->gate_exps.row_bytes, F, E, c->xn, c->eg, err) ||
            matvec(c, L->up_exps.type, wu, L->up_exps.row_bytes, F, E, c->xn, c->eu, err))
            return -1;
        qw_swiglu(c->eg, c->eg, c->eu, F);
        if (matvec(c, L->down_exps.type, wd, L->down_exps.row_bytes, E, F, c->eg, c->ed, err)) return -1;
        for (int64_t d = 0; d < E; d++) c->moe[d] = s == 0 ? c->ed[d] * wsel[s] : c->moe[d] + c->ed[d] * wsel[s];
    }
    /* shared expert, gated by sigmoid(xn . g_sh) */
    float gsh;
    if (linear(c, &L->gate_shexp, c->xn, c->sg, err) || linear(c, &L->up_shexp, c->xn, c->su, err)) return -1;
    qw_swiglu(c->sg, c->sg, c->su, FS);
    if (linear(c, &L->down_shexp, c->sg, c->sd, err) || linear(c, &L->shexp_gate_inp, c->xn, &gsh, err)) return -1;
    gsh = sigmoidf(gsh);
    for (int64_t d = 0; d < E; d++) c->x[d] += c->moe[d] + c->sd[d] * gsh;
    return 0;
}

static int eval_token(qw35_ctx *c, int32_t tok, float *logits, qw_error *err) {
    const qw35_model *m = c->m;
    const qw35_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    qw_dequantize_row(m->tok_embd.type, (const char *)m->tok_embd.data + (size_t)tok * m->tok_embd.row_bytes, c->x, E);
    for (int il = 0; il < hp->n_layer; il++) {
        const qw35_layer *L = &m->layers[il];
        qw_rmsnorm(c->xn, c->x, L->attn_norm.data, E, 1, hp->rms_eps);
        if ((L->recurrent ? deltanet_layer(c, L, il, err) : attn_layer(c, L, il, err))) return -1;
        for (int64_t d = 0; d < E; d++) c->x[d] += c->proj[d];
        qw_rmsnorm(c->xn, c->x, L->post_norm.data, E, 1, hp->rms_eps);
        if (moe_layer(c, L, err)) return -1;
    }
    qw_rmsnorm(c->xn, c->x, m->output_norm.data, E, 1, hp->rms_eps);
    if (linear(c, &m->output, c->xn, logits, err)) return -1;
    c->n_past++;
    return 0;
}

int qw35_eval(qw35_ctx *c, const int32_t *tokens, int32_t n, float *all_logits, qw_error *err) {
    const qw35_hparams *hp = &c->m->hp;
    if (n <= 0) return qw_fail(err, "nothing to evaluate (0 tokens)");
    if (c->n_past + n > c->n_ctx)
        return qw_fail(err, "context full: %d tokens in cache + %d new > n_ctx %d", c->n_past, n, c->n_ctx);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return qw_fail(err, "token id %d at index %d is outside the vocabulary", tokens[i], i);
    for (int32_t i = 0; i < n; i++) {
        if (eval_token(c, tokens[i], c->logits, err)) return -1;
        if (all_logits) memcpy(all_logits + (size_t)i * hp->n_vocab, c->logits, (size_t)hp->n_vocab * sizeof(float));
    }
    return 0;
}
