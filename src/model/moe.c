/* moe.c — the MoE step of both architectures, for a chunk of n rows:
 *   xn = RMSNorm(x) * ffn_norm
 *   p = softmax(xn Wr) over experts; pick top-k; w = p_sel / sum(p_sel)
 *   x += sum_{s<k} w_s * Down_e( silu(Gate_e xn) * Up_e xn ),  e = sel_s
 *   (+ qwen35moe: an always-on shared expert scaled by sigmoid(xn . shexp_gate))
 *
 * The chunk's tokens are grouped by expert, so each chosen expert's weights
 * are read once per chunk (and, streaming, pinned in the expert cache only
 * while its group runs: experts.h).  Expert outputs are summed in top-k order,
 * as llama.cpp does, so float rounding matches.
 */
#include "layers.h"
#include "qwisp/experts.h"
#include "qwisp/ops.h"

#include <math.h>
#include <string.h>

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

/* Look-ahead (streaming): while this layer's experts are read and run, guess
 * the next layer's by applying its router to this layer's post-attention
 * residual, normed with its ffn_norm (the residual changes little across one
 * layer), and hand the guess to the source, which starts reads into free
 * slots.  Scratch: proj (consumed before the MoE step), router (this layer's
 * probabilities are in selw by now), tok_of / count (filled after this).
 * Results never depend on it: it only warms the cache. */
static int look_ahead(qw_ctx *c, const qw_layer *L, int32_t n, int32_t top, qw_error *err) {
    const qw_hparams *hp = &c->m->hp;
    const int32_t X = hp->n_expert, K = hp->n_expert_used, il = (int32_t)(L - c->m->layers);
    if (il + 1 >= hp->n_layer || n > c->chunk_cap) return 0;
    const qw_layer *N = L + 1;
    if (top > K) top = K; /* tok_of holds n * K */
    qw_rmsnorm(c->tp, c->proj, c->x, N->ffn_norm.data, hp->n_embd, n, hp->rms_eps);
    if (qw_fwd_linear(c, &N->gate_inp, c->proj, n, c->router, err)) return -1;
    int32_t *pred = c->tok_of, np = 0, sel[QW_EXPERT_USED_MAX]; /* top <= K (model.c) */
    memset(c->count, 0, (size_t)X * sizeof(int32_t));
    for (int32_t t = 0; t < n; t++) {
        top_k(c->router + (size_t)t * X, X, top, sel); /* softmax keeps the order */
        for (int32_t s = 0; s < top; s++)
            if (!c->count[sel[s]]++) pred[np++] = sel[s];
    }
    qw_experts_ahead(c->m->experts, il + 1, pred, np);
    return 0;
}

/* Near-lossless routing (QWISP_NEAR_LOSSLESS=R, streaming tier only, off by
 * default): a chosen expert that is not in the cache is replaced by the best
 * cached one among the router's ranks k+1..R (experts.h); *mass rescales the
 * new selection's probabilities to the original top-k's total, so the
 * weights sum as before (norm_topk renormalises anyway).  Not bit-exact with
 * the resident tier by design: bench/RESULTS.md measures what it costs. */
static int near_lossless(qw_ctx *c, const qw_layer *L, const float *p, int32_t *sel, float *mass) {
    const int X = c->m->hp.n_expert, K = c->m->hp.n_expert_used;
    const int32_t R = qw_experts_near_lossless(c->m->experts);
    int32_t ranked[256]; /* R <= 256 (options.h) */
    const int32_t r = R < X ? R : X;
    top_k(p, X, r, ranked);
    float before = 0.0f, after = 0.0f;
    for (int s = 0; s < K; s++) before += p[sel[s]];
    if (!qw_experts_substitute(c->m->experts, (int32_t)(L - c->m->layers), sel, K, ranked, r)) return 0;
    for (int s = 0; s < K; s++) after += p[sel[s]];
    *mass = after > 0.0f ? before / after : 1.0f;
    return 0;
}

/* Token t's routing weights w[K] from its probabilities p over the chosen
 * experts sel (mass: near_lossless's rescale, else 1). */
static void route_weights(const qw_hparams *hp, const float *p, const int32_t *sel, float mass, float *w) {
    const int K = hp->n_expert_used;
    float sum = 0.0f;
    for (int s = 0; s < K; s++) {
        w[s] = p[sel[s]] * mass;
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

/* Softmax, top-k and weights of tokens [t0, t1) (each token alone). */
static void route_rows(void *arg, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    qw_ctx *c = arg;
    const qw_hparams *hp = &c->m->hp;
    const int X = hp->n_expert, K = hp->n_expert_used;
    for (int64_t t = t0; t < t1; t++) {
        float *p = c->router + (size_t)t * X;
        qw_softmax(p, X);
        top_k(p, X, K, c->sel + (size_t)t * K);
        route_weights(hp, p, c->sel + (size_t)t * K, 1.0f, c->selw + (size_t)t * K);
    }
}

static int route(qw_ctx *c, const qw_layer *L, int32_t n, qw_error *err) {
    const qw_hparams *hp = &c->m->hp;
    const int X = hp->n_expert, K = hp->n_expert_used;
    const int32_t near = qw_experts_near_lossless(c->m->experts);
    if (near && near <= K)
        return qw_fail(err, "QWISP_NEAR_LOSSLESS=%d: must be 0 (off) or more than the model's top-k (%d): it is the "
                            "furthest router rank a substitute may come from", near, K);
    if (qw_fwd_linear(c, &L->gate_inp, c->xn, n, c->router, err)) return -1;
    if (!near) {
        qw_parallel_for(c->tp, n, 16, route_rows, c);
        return 0;
    }
    /* near-lossless asks the expert cache token by token, in order */
    for (int32_t t = 0; t < n; t++) {
        float *p = c->router + (size_t)t * X;
        qw_softmax(p, X);
        int32_t *sel = c->sel + (size_t)t * K;
        top_k(p, X, K, sel);
        float mass = 1.0f; /* substitutes keep the top-k's probability mass */
        if (near_lossless(c, L, p, sel, &mass)) return -1;
        route_weights(hp, p, sel, mass, c->selw + (size_t)t * K);
    }
    return 0;
}

/* The per-row steps after the expert matmuls, spread over the pool's
 * threads (each row alone, so the bits do not depend on the split):
 * SwiGLU of a group's rows, and the weighted sum of each token's expert
 * outputs.  Grains of ROW_GRAIN rows keep decode's few rows on the calling
 * thread (a dispatch costs more than they do). */
enum { ROW_GRAIN = 16 };

typedef struct {
    qw_ctx *c;
    const qw_layer *L;
} rows_job;

static void swiglu_rows(void *p, int64_t i0, int64_t i1, int ith) {
    (void)ith;
    const rows_job *j = p;
    const int32_t F = j->c->m->hp.n_ff_exp;
    for (int64_t i = i0; i < i1; i++)
        qw_swiglu(j->c->gate + (size_t)i * F, j->c->gate + (size_t)i * F, j->c->up + (size_t)i * F, F);
}

/* gate = silu(gate) * up over the first `rows` expert rows. */
static void swiglu_expert_rows(qw_ctx *c, int32_t rows) {
    rows_job j = {c, NULL};
    qw_parallel_for(c->tp, rows, ROW_GRAIN, swiglu_rows, &j);
}

/* Each expert output weighted by its routing weight (one rounding: the
 * product), summed in top-k order, the gated shared expert (if any) added,
 * then added to the residual: token rows [i0, i1).  The outputs are read
 * where the down matmuls left them (pos_of), so no weighted copy is written
 * first (that copy, a [chunk][k][n_embd] buffer, was 32 MiB written and read
 * again per layer in a 512-token prefill at Qwen3-30B-A3B's width). */
static void combine_rows(void *p, int64_t i0, int64_t i1, int ith) {
    (void)ith;
    const rows_job *j = p;
    qw_ctx *c = j->c;
    const int32_t E = c->m->hp.n_embd, K = c->m->hp.n_expert_used;
    const bool shexp = j->L->gate_shexp.data != NULL;
    const float *eo[QW_EXPERT_USED_MAX];
    for (int64_t t = i0; t < i1; t++) {
        float *x = c->x + (size_t)t * E;
        const float *w = c->selw + (size_t)t * K;
        for (int32_t s = 0; s < K; s++) eo[s] = c->down + (size_t)c->pos_of[t * K + s] * E;
        const float *sd = shexp ? c->sd + (size_t)t * E : NULL;
        for (int32_t d = 0; d < E; d++) {
            float acc = eo[0][d] * w[0];
            for (int32_t s = 1; s < K; s++) acc += eo[s][d] * w[s];
            x[d] += sd ? acc + sd[d] * c->sgate[t] : acc;
        }
    }
}

/* Mixed gate/up types (rare): one expert at a time, each with its own
 * conversion; its m outputs go to down's rows from row0 (its place in tok_of). */
static int moe_expert_mixed(qw_ctx *c, const qw_layer *L, int32_t n, int32_t e, int32_t m, int32_t row0,
                            qw_error *err) {
    const int32_t *tok = c->tok_of + row0;
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
    swiglu_expert_rows(c, m);
    qw_act_convert(c->tp, dt, c->gate, F, F, m, hq);
    qw_matmul_q(c->tp, dt, wd, L->down_exps.row_bytes, E, F, hq, NULL, m, c->down + (size_t)row0 * E, E);
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
int qw_moe_block(qw_ctx *c, const qw_layer *L, int32_t n, qw_error *err) {
    const qw_hparams *hp = &c->m->hp;
    const int32_t E = hp->n_embd, F = hp->n_ff_exp, X = hp->n_expert, K = hp->n_expert_used;
    double t = qw_phase_now(c);
    qw_rmsnorm(c->tp, c->xn, c->x, L->ffn_norm.data, E, n, hp->rms_eps);
    if (route(c, L, n, err)) return -1;
    qw_experts *xs = c->m->experts; /* streaming: starts reads of the chunk's missing experts */
    const int32_t il = (int32_t)(L - c->m->layers), max_pin = qw_experts_max_pinned(xs);
    qw_experts_need(xs, il, c->sel, n * K);
    const int32_t ahead = qw_experts_ahead_n(xs, K);
    if (ahead > 0 && look_ahead(c, L, n, ahead, err)) return -1;

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
            c->pos_of[t * K + s] = at;
        }
#define END(e) c->count[e]
#define START(e) ((e) > 0 ? c->count[(e) - 1] : 0)

    const qw_type gt = L->gate_exps.type, dt = L->down_exps.type;
    t = qw_phase_lap(c, QW_PHASE_MOE_ROUTE, t);
    if (L->up_exps.type != gt) {
        for (int32_t e = 0; e < X; e++)
            if (END(e) > START(e) &&
                moe_expert_mixed(c, L, n, e, END(e) - START(e), START(e), err))
                return -1;
    } else {
        const int32_t cap = c->chunk_cap; /* rows of gate/up (down holds all n * k outputs) */
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
                    if (!qw_experts_ready(xs, il, e_end)) qw_threadpool_nap(c->tp); /* a disk wait */
                    if (qw_experts_get(xs, il, e_end, &wg, &wu, &wd, err)) return -1;
                    const int32_t *tok = c->tok_of + START(e_end);
                    gu[2 * nt] = (qw_mm_task){wg, L->gate_exps.row_bytes, F, xq, tok, m, c->gate + (size_t)r * F, F};
                    gu[2 * nt + 1] = (qw_mm_task){wu, L->up_exps.row_bytes, F, xq, tok, m, c->up + (size_t)r * F, F};
                    dn[nt] = (qw_mm_task){wd, L->down_exps.row_bytes, E, hq + (size_t)r * hq_row, NULL, m,
                                          c->down + (size_t)START(e_end) * E, E};
                    nt++;
                }
                e_end++;
            }
            const int32_t rows = END(e_end - 1) - row0;
            if (nt) {
                qw_matmul_batch(c->tp, gt, E, gu, 2 * nt);
                t = qw_phase_lap(c, QW_PHASE_MOE_GATE_UP, t);
                swiglu_expert_rows(c, rows);
                qw_act_convert(c->tp, dt, c->gate, F, F, rows, hq);
                t = qw_phase_lap(c, QW_PHASE_MOE_ACT, t);
                qw_matmul_batch(c->tp, dt, F, dn, nt);
                t = qw_phase_lap(c, QW_PHASE_MOE_DOWN, t);
                qw_experts_release(xs, il);
            }
            e = e_end;
        }
    }
#undef END
#undef START
    t = qw_phase_lap(c, QW_PHASE_MOE_GATE_UP, t); /* the mixed-type path, or a group's waits */
    if (L->gate_shexp.data) {
        if (shared_expert(c, L, n, err)) return -1;
        t = qw_phase_lap(c, QW_PHASE_MOE_SHARED, t);
    }
    rows_job cj = {c, L};
    qw_parallel_for(c->tp, n, ROW_GRAIN, combine_rows, &cj);
    qw_phase_lap(c, QW_PHASE_MOE_OUT, t);
    return 0;
}
