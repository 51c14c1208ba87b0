/* attention.c — the attention layer of both architectures, for a chunk of n
 * rows (one or more sequences, see seq_span) at each sequence's positions:
 *   xn = RMSNorm(x) * attn_norm
 *   q, k, v = xn Wq, xn Wk, xn Wv; q, k get a per-head RMSNorm (q_norm, k_norm)
 *   and NeoX RoPE (on the first n_rot dims of a head: all of it in qwen3moe);
 *   k, v are appended to the sequence's KV cache
 *   x += Attention(q, K, V) Wo                         (GQA, causal, 1/sqrt(d))
 * Gated (qwen35moe): Wq also yields a per-head gate, [head][q | gate], and the
 * attention output is multiplied by sigmoid(gate) before Wo.
 * Each sequence ropes, appends and attends over its own cache; the workspace
 * context only lends the activation and scratch buffers.
 */
#include "layers.h"
#include "qwisp/ops.h"

#include <math.h>
#include <string.h>

/* The output gate of gated attention (qwen35moe) for (row, head) items
 * [i0, i1): attn *= sigmoid(gate), the gate being the second half of the
 * head's row in qg.  One expf an element: split over the threads. */
static void gate_heads(void *arg, int64_t i0, int64_t i1, int ith) {
    (void)ith;
    const qw_ctx *c = arg;
    const int64_t D = c->m->hp.head_dim;
    for (int64_t i = i0; i < i1; i++) {
        float *a = c->attn + (size_t)i * D;
        const float *g = c->qg + (size_t)i * 2 * D + D;
        for (int64_t d = 0; d < D; d++) a[d] *= 1.0f / (1.0f + expf(-g[d]));
    }
}

/* RoPE at each token's position, then k and v appended to the sequence's
 * KV cache: tokens [t0, t1) of one span (each token alone, so any split
 * gives the same cache). */
typedef struct {
    qw_ctx *c, *sq;
    int il;
    int32_t row0;
} rope_job;

static void rope_append(void *arg, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const rope_job *j = arg;
    qw_ctx *c = j->c, *sq = j->sq;
    const qw_hparams *hp = &c->m->hp;
    const int32_t D = hp->head_dim, H = hp->n_head, HKV = hp->n_head_kv;
    const size_t kv_row = (size_t)HKV * D;
    for (int64_t t = t0; t < t1; t++) {
        const int32_t pos = sq->n_past + (int32_t)t;
        const size_t r = (size_t)(j->row0 + t);
        qw_rope_neox_partial(c->q + r * H * D, H, D, hp->n_rot, pos, hp->rope_base);
        qw_rope_neox_partial(c->kc + r * kv_row, HKV, D, hp->n_rot, pos, hp->rope_base);
        const size_t at = (size_t)pos * kv_row * sq->kv_elt;
        qw_quantize_row(sq->kv_type, c->kc + r * kv_row, (char *)sq->k[j->il] + at, (int64_t)kv_row);
        qw_quantize_row(sq->kv_type, c->vc + r * kv_row, (char *)sq->v[j->il] + at, (int64_t)kv_row);
    }
}

int qw_attention_block(qw_ctx *c, const qw_layer *L, int il, const seq_span *spans, int n_spans, int32_t n,
                       qw_error *err) {
    const qw_hparams *hp = &c->m->hp;
    const int32_t E = hp->n_embd, D = hp->head_dim, H = hp->n_head, HKV = hp->n_head_kv;
    double t = qw_phase_now(c);
    qw_rmsnorm(c->tp, c->xn, c->x, L->attn_norm.data, E, n, hp->rms_eps);
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
    t = qw_phase_lap(c, QW_PHASE_ATTN_PROJ, t);
    if (L->gated_attn)
        for (int32_t r = 0; r < n; r++)
            for (int32_t h = 0; h < H; h++)
                memcpy(c->q + ((size_t)r * H + h) * D, c->qg + ((size_t)r * H + h) * 2 * D, (size_t)D * sizeof(float));
    qw_rmsnorm(c->tp, c->q, c->q, L->q_norm.data, D, (int64_t)n * H, hp->rms_eps);
    qw_rmsnorm(c->tp, c->kc, c->kc, L->k_norm.data, D, (int64_t)n * HKV, hp->rms_eps);
    for (int si = 0; si < n_spans; si++) {
        /* Each sequence ropes at its own positions, appends to its own KV
         * cache and attends over it; the workspace only lends scratch. */
        qw_ctx *sq = spans[si].ctx;
        const int32_t r0 = spans[si].row0, ns = spans[si].n;
        rope_job rj = {c, sq, il, r0};
        qw_parallel_for(c->tp, ns, 8, rope_append, &rj);
        size_t need = qw_attention_scratch_bytes(c->n_threads, sq->n_past + ns, D);
        if (qw_fwd_grow(&c->attn_scratch, &c->attn_scratch_cap, need, err)) return -1;
        qw_attention(c->tp, c->q + (size_t)r0 * H * D, sq->k[il], sq->v[il], sq->kv_type, c->attn + (size_t)r0 * H * D,
                     ns, sq->n_past, H, HKV, D, 1.0f / sqrtf((float)D), c->attn_scratch);
    }
    if (L->gated_attn) qw_parallel_for(c->tp, (int64_t)n * H, 4, gate_heads, c);
    t = qw_phase_lap(c, QW_PHASE_ATTN_CORE, t);
    if (qw_fwd_linear(c, &L->wo, c->attn, n, c->proj, err)) return -1;
    for (size_t i = 0; i < (size_t)n * E; i++) c->x[i] += c->proj[i];
    qw_phase_lap(c, QW_PHASE_ATTN_OUT, t);
    return 0;
}
