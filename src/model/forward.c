/* forward.c — the layer loop and the batch driver: one forward pass over a
 * chunk of tokens, and the two ways callers reach it.
 *
 *   qw_ctx_eval    one sequence: splits n tokens into chunks of the context's
 *                  chunk size (prefill passes many, decode one; the same path);
 *   qw_batch_eval  the lanes path: several sequences' tokens as ONE chunk on a
 *                  workspace context, every weight read once for all of them.
 *
 * A chunk is a list of spans (rows [row0, row0+n) belong to one sequence):
 * embeddings, then per layer an attention (attention.c) or Gated DeltaNet
 * (deltanet.c) block followed by the MoE block (moe.c), then
 * logits = RMSNorm(x) * output_norm Wout for the rows asked for.  Which block
 * a layer runs is the loaded layer's own flag (qw_layer.recurrent), not the
 * architecture's name.  Context and buffers: context.c.
 */
#include "layers.h"
#include "qwisp/backend.h"
#include "qwisp/experts.h"
#include "qwisp/ops.h"
#include "qwisp/options.h"
#include "qwisp/pool.h"

#include <stdio.h>
#include <string.h>

static int output_logits(qw_ctx *c, int32_t n, int32_t first_row, qw_error *err) {
    const qw_model *m = c->m;
    const int32_t E = m->hp.n_embd, V = m->hp.n_vocab;
    const int32_t rows = n - first_row;
    if (rows > c->logits_cap) {
        qw_ctx_logits_drop(c);
        c->logits = qw_pool_alloc((size_t)rows * V * sizeof(float));
        if (!c->logits) {
            c->logits_cap = 0;
            return qw_fail(err, "out of memory for %d rows of logits", rows);
        }
        c->logits_cap = rows;
    }
    qw_rmsnorm(c->tp, c->xn, c->x + (size_t)first_row * E, m->output_norm.data, E, rows, m->hp.rms_eps);
    if (qw_fwd_linear(c, &m->output, c->xn, rows, c->logits, err)) return -1;
    c->logits_rows = rows;
    return 0;
}

/* Runs one workspace chunk: the concatenated tokens of every span (rows in
 * span order), each span appending to its own sequence's KV cache.  Logits:
 * ALL (one span only) keeps every row in c->logits; otherwise each span with
 * want_logits[si] gets its last row's logits in its own ctx->logits. */
static int eval_spans(qw_ctx *c, const int32_t *tokens, const seq_span *spans, int n_spans,
                      const bool *want_logits, qw_logits_mode mode, float *all_logits, bool *stepped,
                      qw_error *err) {
    const qw_model *m = c->m;
    const int32_t E = m->hp.n_embd, V = m->hp.n_vocab;
    int32_t n = 0;
    for (int si = 0; si < n_spans; si++) {
        if (qw_ctx_kv_reserve(spans[si].ctx, spans[si].ctx->n_past + spans[si].n, err)) return -1;
        n += spans[si].n;
    }
    if (c->chunk_cap < n && qw_ctx_alloc_chunk_bufs(c, n > c->chunk ? n : c->chunk))
        return qw_fail(err, "out of memory for a chunk of %d tokens", n);
    const double t_pass = qw_phase_now(c);
    for (int32_t t = 0; t < n; t++)
        qw_dequantize_row(m->tok_embd.type,
                          (const char *)m->tok_embd.data + (size_t)tokens[t] * m->tok_embd.row_bytes,
                          c->x + (size_t)t * E, E);
    qw_phase_lap(c, QW_PHASE_EMBED, t_pass);
    *stepped = true; /* from here a failure may leave recurrent states part-way through this chunk */
    for (int il = 0; il < m->hp.n_layer; il++) {
        const qw_layer *L = &m->layers[il];
        if ((L->recurrent ? qw_deltanet_block(c, L, il, spans, n_spans, n, err)
                          : qw_attention_block(c, L, il, spans, n_spans, n, err)) ||
            qw_moe_block(c, L, n, err))
            return -1;
    }
    const double t_head = qw_phase_now(c);
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
    if (c->phase) {
        const double t = qw_phase_lap(c, QW_PHASE_HEAD, t_head);
        c->phase->total += t - t_pass;
        c->phase->passes++;
        c->phase->tokens += n;
    }
    for (int si = 0; si < n_spans; si++) spans[si].ctx->n_past += spans[si].n;
    return 0;
}

/* c->logits holding at least `rows` rows (the device writes into it),
 * page-locked where the backend can: a decode step's copy of its logits
 * then goes by DMA (backend.h host_pin). */
static int logits_rows_dev(qw_ctx *c, int32_t rows, qw_error *err) {
    if (rows <= c->logits_cap) return 0;
    qw_ctx_logits_drop(c);
    const size_t bytes = (size_t)rows * c->m->hp.n_vocab * sizeof(float);
    c->logits = qw_pool_alloc(bytes);
    if (!c->logits) return qw_fail(err, "out of memory for %d rows of logits", rows);
    c->logits_cap = rows;
    c->logits_pinned = c->m->backend->host_pin && c->m->backend->host_pin(c->logits, bytes) == 0;
    return 0;
}

/* The device path (backend.h): the whole chunk runs on the GPU; only the
 * ids go in and the logits asked for come back into c->logits (or
 * all_logits, the ALL gather buffer of qw_ctx_eval). */
static int eval_chunk_dev(qw_ctx *c, const int32_t *tokens, int32_t n, qw_logits_mode mode,
                          float *all_logits, qw_error *err) {
    const int32_t rows = mode == QW_LOGITS_ALL ? n : mode == QW_LOGITS_LAST ? 1 : 0;
    float *out = NULL;
    if (rows && all_logits) {
        out = all_logits;
    } else if (rows) {
        if (logits_rows_dev(c, rows, err)) return -1;
        out = c->logits;
    }
    if (c->m->backend->eval(c->dev, tokens, n, c->n_past, out, mode == QW_LOGITS_ALL, err)) return -1;
    if (rows && !all_logits) c->logits_rows = rows; /* ALL over chunks: qw_ctx_eval installs the gather */
    c->n_past += n;
    return 0;
}

static int eval_chunk(qw_ctx *c, const int32_t *tokens, int32_t n, qw_logits_mode mode,
                      float *all_logits, bool *stepped, qw_error *err) {
    if (c->dev) {
        *stepped = true; /* the device says only that it failed, not where */
        return eval_chunk_dev(c, tokens, n, mode, all_logits, err);
    }
    const seq_span span = {c, 0, n};
    const bool want = mode != QW_LOGITS_NONE;
    return eval_spans(c, tokens, &span, 1, &want, mode, all_logits, stepped, err);
}

static int check_tokens(const qw_hparams *hp, const int32_t *tokens, int32_t n, qw_error *err) {
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return qw_fail(err, "token id %d at index %d is outside the vocabulary (0..%d)",
                           tokens[i], i, hp->n_vocab - 1);
    return 0;
}

/* After a pass that failed part-way (a streamed expert's disk read, memory,
 * the device): each span's sequence goes back to the n_past it had before
 * the pass (past[i]; KV rows beyond it are unused), except that a recurrent
 * layer's state may already have taken part of the pass and cannot be
 * rewound — such a sequence is emptied (qw_ctx_restart), so no later eval
 * builds on a state that matches no token list, and err says so (callers
 * that keep a token list, like the prefix cache, start over).  stepped: the
 * layers had begun.  Returns -1. */
static int undo_pass(const seq_span *spans, int n_spans, const int32_t *past, bool stepped, qw_error *err) {
    bool emptied = false;
    for (int i = 0; i < n_spans; i++) {
        qw_ctx *c = spans[i].ctx;
        if (stepped && qw_ctx_state_bytes(c)) {
            qw_ctx_restart(c);
            emptied = true;
        } else if (c->n_past > past[i]) {
            c->n_past = past[i];
        }
    }
    if (emptied && err) {
        const size_t used = strlen(err->msg);
        snprintf(err->msg + used, sizeof err->msg - used, " (%s emptied: a recurrent state cannot be rewound)",
                 n_spans > 1 ? "sequences" : "context");
    }
    return -1;
}

int qw_batch_eval(qw_ctx *ws, const qw_batch_seq *seqs, int n_seqs, qw_error *err) {
    enum { MAX_SEQS = QW_BATCH_MAX_SEQS };
    if (n_seqs <= 0 || n_seqs > MAX_SEQS) return qw_fail(err, "batch of %d sequences (1..%d)", n_seqs, MAX_SEQS);
    seq_span spans[MAX_SEQS];
    bool want[MAX_SEQS];
    int32_t past[MAX_SEQS];
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
        past[i] = q->ctx->n_past;
        n += q->n;
    }
    /* one sequence alone takes the single-sequence path below: on the device
     * that is the captured decode graph, which a batched step has not */
    if (ws->dev && ws->m->backend->eval_batch && qw_opt_int(QW_OPT_DEVICE_BATCH) && n_seqs > 1) {
        /* one forward pass on the device for every sequence (docs/cuda.md) */
        qw_backend_seq bs[MAX_SEQS];
        for (int i = 0; i < n_seqs; i++) {
            qw_ctx *c = seqs[i].ctx;
            if (seqs[i].logits && logits_rows_dev(c, 1, err)) return -1;
            bs[i] = (qw_backend_seq){c->dev, seqs[i].tokens, seqs[i].n, c->n_past, seqs[i].logits ? c->logits : NULL};
        }
        if (ws->m->backend->eval_batch(ws->dev, bs, n_seqs, err)) return undo_pass(spans, n_seqs, past, true, err);
        for (int i = 0; i < n_seqs; i++) {
            if (seqs[i].logits) seqs[i].ctx->logits_rows = 1;
            seqs[i].ctx->n_past += seqs[i].n;
        }
        return 0;
    }
    if (ws->dev) {
        /* QWISP_DEVICE_BATCH=0: the lanes' sequences one after another;
         * checked above, so a failure here is the device's own */
        for (int i = 0; i < n_seqs; i++)
            if (eval_chunk_dev(seqs[i].ctx, seqs[i].tokens, seqs[i].n, seqs[i].logits ? QW_LOGITS_LAST : QW_LOGITS_NONE,
                               NULL, err))
                return undo_pass(spans, n_seqs, past, true, err);
        return 0;
    }
    int32_t *tokens = qw_pool_alloc((size_t)n * sizeof(int32_t));
    if (!tokens) return qw_fail(err, "out of memory for a batch of %d tokens", n);
    for (int i = 0; i < n_seqs; i++) memcpy(tokens + spans[i].row0, seqs[i].tokens, (size_t)seqs[i].n * sizeof(int32_t));
    bool stepped = false;
    int rc = eval_spans(ws, tokens, spans, n_seqs, want, QW_LOGITS_LAST, NULL, &stepped, err);
    qw_pool_free(tokens);
    return rc ? undo_pass(spans, n_seqs, past, stepped, err) : 0;
}

static int ctx_eval(qw_ctx *c, const int32_t *tokens, int32_t n, qw_logits_mode mode, qw_error *err);

/* A CPU decode step (one token) with every weight in memory may be a step
 * of the decode-loop trial (kernels/decode_trial.c): timed here, the whole step, as
 * the user sees it.  (A streaming tier's steps wait on expert reads, which
 * would decide the pick.) */
int qw_ctx_eval(qw_ctx *c, const int32_t *tokens, int32_t n, qw_logits_mode mode, qw_error *err) {
    const bool resident = !c->m->experts || qw_experts_tier(c->m->experts) == QW_TIER_RESIDENT;
    const int trial = n == 1 && !c->dev && resident ? qw_decode_trial_begin() : -1;
    if (trial < 0) return ctx_eval(c, tokens, n, mode, err);
    const double t0 = qw_time_s();
    const int rc = ctx_eval(c, tokens, n, mode, err);
    qw_decode_trial_end(trial, qw_time_s() - t0);
    return rc;
}

static int ctx_eval(qw_ctx *c, const int32_t *tokens, int32_t n, qw_logits_mode mode, qw_error *err) {
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
        if (i0 > 0 && c->abort_cb && c->abort_cb(c->abort_user)) {
            qw_pool_free(all);
            return qw_fail(err, "cancelled after %d of %d tokens", i0, n);
        }
        qw_logits_mode cm = mode == QW_LOGITS_ALL ? QW_LOGITS_ALL : (last ? mode : QW_LOGITS_NONE);
        bool stepped = false;
        if (eval_chunk(c, tokens + i0, m, cm, all ? all + (size_t)i0 * hp->n_vocab : NULL, &stepped, err)) {
            const seq_span self = {c, 0, m};
            const int32_t past = c->n_past; /* the chunks before this one stay */
            qw_pool_free(all);
            return undo_pass(&self, 1, &past, stepped, err);
        }
        if (c->chunk_cb) c->chunk_cb(c->chunk_user, c, i0 + m, n);
    }
    if (all) {
        qw_ctx_logits_drop(c);
        c->logits = all;
        c->logits_rows = c->logits_cap = n;
    }
    return 0;
}
