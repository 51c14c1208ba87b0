/* deltanet.c — the Gated DeltaNet layer of qwen35moe (linear attention with a
 * recurrent state; math and llama.cpp's definitions in docs/qwen35moe.md).
 *
 * For a chunk of n rows (one or more sequences, see seq_span):
 *   xn = RMSNorm(x) * attn_norm
 *   mix = xn Wqkv  [q | k | v],  z = xn Wz,  beta = sigmoid(xn Wb),
 *   g = softplus(xn Wa + dt_bias) * ssm_a          (log of the decay)
 *   c = silu(causal_conv1d(mix))   over [conv state ; this chunk's rows]
 *   q, k = L2-normalised per key head; value head h reads key head h % groups
 *   per token, per value head (state M: S x S):
 *       M *= exp(g);  for each column j:  d = (v_j - M_j . k) * beta
 *                                         M_j += d * k;  o_j = M_j . q / sqrt(S)
 *   o = RMSNorm_S(o) * ssm_norm * silu(z);   x += o Wout
 *
 * Prefill runs the projections as matmuls over the whole chunk; only the
 * recurrence walks the tokens, in order, one value head per task.  The state
 * after a chunk is the state after its last token, so the result does not
 * depend on how a prompt is cut into chunks.
 */
#include "layers.h"
#include "qwisp/ops.h"

#include <math.h>
#include <string.h>

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
static float siluf(float x) { return x / (1.0f + expf(-x)); }
static float softplusf(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* x / sqrt(sum(x^2) + eps) composed the way llama.cpp does it (an RMS norm
 * with eps/n, then 1/sqrt(n)), so roundings agree. */
static void l2norm(float *x, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * x[i];
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps / (float)n);
    const float post = 1.0f / sqrtf((float)n);
    for (int64_t i = 0; i < n; i++) x[i] = (x[i] * scale) * post;
}

/* One sequence's rows of the chunk: activations live in the workspace c,
 * the recurrent state in the sequence's own context. */
typedef struct {
    const qw_ctx *c;
    const qw_layer *L;
    float *conv, *delta; /* the sequence's state for this layer */
    int32_t row0, n;
} span_job;

/* Causal conv + silu for channels [ch0, ch1) over the span's tokens.  The
 * K-1 inputs before token t are the span's rows t-K+1..t-1 where t-K+1+s >= 0
 * and the conv state's rows otherwise (row s of the state is the input s
 * steps after the oldest), so the tokens are walked with the channels
 * innermost: every row is read contiguously (a channel at a time over the
 * tokens strode a whole row per token).  Each channel's sum is the same
 * expression as before, oldest input first, then this token's.  The state
 * then takes the span's last K-1 inputs. */
static void conv_range(void *arg, int64_t ch0, int64_t ch1, int ith) {
    (void)ith;
    const span_job *j = arg;
    const qw_hparams *hp = &j->c->m->hp;
    const int64_t K = hp->ssm_d_conv, C = j->L->conv1d.ne[1];
    float *st = j->conv;
    const float *w = j->L->conv1d.data, *mix = j->c->mix + (size_t)j->row0 * C;
    float *cv = j->c->cv + (size_t)j->row0 * C;
    enum { CB = 64 }; /* channels a pass: their sums stay in L1 */
    for (int64_t c0 = ch0; c0 < ch1; c0 += CB) {
        const int64_t nc = ch1 - c0 < CB ? ch1 - c0 : CB;
        float sum[CB];
        for (int32_t t = 0; t < j->n; t++) {
            for (int64_t c = 0; c < nc; c++) sum[c] = 0.0f;
            for (int64_t s = 0; s < K - 1; s++) {
                const int64_t tau = t - (K - 1) + s; /* the input's token, < 0: in the state */
                const float *src = (tau >= 0 ? mix + (size_t)tau * C : st + (size_t)(tau + K - 1) * C) + c0;
                for (int64_t c = 0; c < nc; c++) sum[c] += src[c] * w[(c0 + c) * K + s];
            }
            const float *in = mix + (size_t)t * C + c0;
            float *out = cv + (size_t)t * C + c0;
            for (int64_t c = 0; c < nc; c++) out[c] = siluf(sum[c] + in[c] * w[(c0 + c) * K + K - 1]);
        }
        /* state row q = the input at token n-(K-1)+q: a row of the span, or an
         * older state row q+n (read before row q+n is written: q rises) */
        for (int64_t q = 0; q < K - 1; q++) {
            const int64_t tau = j->n - (K - 1) + q;
            const float *src = (tau >= 0 ? mix + (size_t)tau * C : st + (size_t)(q + j->n) * C) + c0;
            memmove(st + (size_t)q * C + c0, src, (size_t)nc * sizeof(float));
        }
    }
}

/* The output gate o *= silu(z) over elements [i0, i1) of the chunk (one
 * expf each: split over the threads, not left to the caller alone). */
static void gate_range(void *arg, int64_t i0, int64_t i1, int ith) {
    (void)ith;
    const qw_ctx *c = arg;
    for (int64_t i = i0; i < i1; i++) c->o[i] *= siluf(c->z[i]);
}

/* L2 norm of every key head's q and k in rows [r0, r1) of the chunk. */
static void qk_norm_rows(void *arg, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const qw_ctx *c = arg;
    const qw_hparams *hp = &c->m->hp;
    const int64_t S = hp->ssm_state, KD = S * hp->ssm_groups, C = 2 * KD + S * hp->ssm_vheads;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t i = 0; i < 2 * KD; i += S) l2norm(c->cv + r * C + i, S, hp->rms_eps);
}

/* The delta rule for value heads [h0, h1), every token of the span in order. */
static void delta_heads(void *arg, int64_t h0, int64_t h1, int ith) {
    (void)ith;
    const span_job *j = arg;
    const qw_ctx *c = j->c;
    const qw_hparams *hp = &c->m->hp;
    const int64_t S = hp->ssm_state, HK = hp->ssm_groups, HV = hp->ssm_vheads;
    const int64_t KD = S * HK, VD = S * HV, C = 2 * KD + VD;
    const float scale = 1.0f / sqrtf((float)S);
    for (int64_t h = h0; h < h1; h++) {
        float *M = j->delta + h * S * S; /* M[col*S + i] = state[i][col] */
        for (int32_t t = 0; t < j->n; t++) {
            const size_t r = (size_t)(j->row0 + t);
            const float *row_cv = c->cv + r * C;
            const float *q = row_cv + (h % HK) * S, *k = row_cv + KD + (h % HK) * S, *v = row_cv + 2 * KD + h * S;
            float *o = c->o + r * VD + h * S;
            qw_delta_step(M, q, k, v, expf(c->alpha[r * HV + h]), c->beta[r * HV + h], scale, S, o);
        }
    }
}

/* mix, z, beta, alpha = xn times their weights; one conversion and one
 * parallel pass when the four share a type (the usual case). */
static int project(qw_ctx *c, const qw_layer *L, int32_t n, qw_error *err) {
    const int64_t E = c->m->hp.n_embd;
    const qw_type t = L->wqkv.type;
    const qw_tensor *w[4] = {&L->wqkv, &L->wz, &L->w_beta, &L->w_alpha};
    float *y[4] = {c->mix, c->z, c->beta, c->alpha};
    if (L->wz.type != t || L->w_beta.type != t || L->w_alpha.type != t) {
        for (int i = 0; i < 4; i++)
            if (qw_fwd_linear(c, w[i], c->xn, n, y[i], err)) return -1;
        return 0;
    }
    if (qw_fwd_grow(&c->xq, &c->xq_cap, qw_act_bytes(t, E, n), err)) return -1;
    qw_act_convert(c->tp, t, c->xn, E, E, n, c->xq);
    qw_mm_task tasks[4];
    for (int i = 0; i < 4; i++)
        tasks[i] = (qw_mm_task){w[i]->data, w[i]->row_bytes, w[i]->ne[1], c->xq, NULL, n, y[i], w[i]->ne[1]};
    qw_matmul_batch(c->tp, t, E, tasks, 4);
    return 0;
}

int qw_deltanet_block(qw_ctx *c, const qw_layer *L, int il, const seq_span *spans, int n_spans, int32_t n,
                      qw_error *err) {
    const qw_hparams *hp = &c->m->hp;
    const int64_t E = hp->n_embd, S = hp->ssm_state, HV = hp->ssm_vheads, VD = S * HV;
    const int64_t C = L->conv1d.ne[1];
    double t = qw_phase_now(c);
    qw_rmsnorm(c->tp, c->xn, c->x, L->attn_norm.data, E, n, hp->rms_eps);
    if (project(c, L, n, err)) return -1;
    const float *dt = L->dt_bias.data, *A = L->ssm_a.data;
    for (int32_t r = 0; r < n; r++)
        for (int64_t h = 0; h < HV; h++) {
            float *b = c->beta + (size_t)r * HV + h, *a = c->alpha + (size_t)r * HV + h;
            *b = sigmoidf(*b);
            *a = softplusf(*a + dt[h]) * A[h];
        }
    t = qw_phase_lap(c, QW_PHASE_DELTA_PROJ, t);
    for (int si = 0; si < n_spans; si++) {
        /* each sequence convolves over and updates its own state */
        const qw_ctx *sq = spans[si].ctx;
        span_job j = {c, L, sq->conv[il], sq->delta[il], spans[si].row0, spans[si].n};
        qw_parallel_for(c->tp, C, 256, conv_range, &j);
    }
    qw_parallel_for(c->tp, n, 16, qk_norm_rows, c);
    for (int si = 0; si < n_spans; si++) {
        const qw_ctx *sq = spans[si].ctx;
        span_job j = {c, L, sq->conv[il], sq->delta[il], spans[si].row0, spans[si].n};
        qw_parallel_for(c->tp, HV, 1, delta_heads, &j);
    }
    /* gated RMS norm per value head, then the output projection */
    qw_rmsnorm(c->tp, c->o, c->o, L->ssm_norm.data, S, (int64_t)n * HV, hp->rms_eps);
    qw_parallel_for(c->tp, (int64_t)n * VD, 1024, gate_range, c);
    t = qw_phase_lap(c, QW_PHASE_DELTA_CORE, t);
    if (qw_fwd_linear(c, &L->ssm_out, c->o, n, c->proj, err)) return -1;
    for (size_t i = 0; i < (size_t)n * E; i++) c->x[i] += c->proj[i];
    qw_phase_lap(c, QW_PHASE_DELTA_OUT, t);
    return 0;
}
