/* context.h — private to src/model: the inference context's layout (owned
 * by context.c) and the helpers every block of the forward pass shares.
 *
 * Dependency order inside model/ (no file calls one above it):
 *   forward.c (layer loop, batch driver)
 *     -> attention.c, moe.c, deltanet.c (the blocks; layers.h)
 *       -> context.c (buffers, KV cache, recurrent state; this header)
 */
#ifndef QWISP_MODEL_CONTEXT_H
#define QWISP_MODEL_CONTEXT_H

#include "qwisp/model.h"
#include "qwisp/ops.h"

enum { KV_INITIAL = 256 };

struct qw_ctx {
    const qw_model *m;
    qw_threadpool *tp;
    int n_threads;
    int32_t n_ctx, n_past, chunk;
    int32_t chunk_cap; /* rows the chunk buffers hold */

    /* KV cache: per attention layer [kv_cap][n_head_kv*head_dim] of kv_type
     * (f16, or f32 with QWISP_KV_TYPE=f32), kv_elt bytes an element; NULL
     * for recurrent layers */
    void **k, **v;
    qw_type kv_type;
    size_t kv_elt;
    int32_t kv_cap;

    /* recurrent state per Gated DeltaNet layer (NULL elsewhere): the last
     * d_conv-1 conv inputs [(d_conv-1)][C], oldest first, and the delta
     * state [vheads][S][S] (row j of a head's block is column j of the state
     * matrix, so each output's dot products run over contiguous memory) */
    float **conv, **delta;

    /* chunk-sized activations (pool), rows = chunk */
    float *x;        /* [chunk][n_embd] residual stream */
    float *xn;       /* [chunk][n_embd] normed */
    float *q;        /* [chunk][n_head*head_dim] */
    float *qg;       /* [chunk][n_head][q | gate] gated attention's projection */
    float *kc, *vc;  /* [chunk][n_head_kv*head_dim] */
    float *attn;     /* [chunk][n_head*head_dim] */
    float *proj;     /* [chunk][n_embd] attention output projection */
    float *router;   /* [chunk][n_expert] */
    int32_t *sel;    /* [chunk][k] chosen experts */
    float *selw;     /* [chunk][k] their weights */
    float *gate, *up;/* [chunk][n_ff_exp] for one expert's tokens */
    float *down;     /* [chunk*k][n_embd] expert outputs, row = the assignment's place in tok_of */
    int32_t *tok_of; /* [chunk*k] tokens routed to the current expert */
    int32_t *pos_of; /* [chunk][k] where (token, slot)'s expert output is in down */
    /* Gated DeltaNet (C = conv channels, VD = vheads*S, HV = vheads) */
    float *mix;      /* [chunk][C] q|k|v projection, conv input */
    float *cv;       /* [chunk][C] conv output */
    float *z;        /* [chunk][VD] output gate */
    float *beta;     /* [chunk][HV] */
    float *alpha;    /* [chunk][HV] log decay after the transform */
    float *o;        /* [chunk][VD] delta-rule output */
    /* shared expert */
    float *sg, *su;  /* [chunk][n_ff_shexp] */
    float *sd;       /* [chunk][n_embd] */
    float *sgate;    /* [chunk] */
    int32_t *count;  /* [n_expert] */
    void *xq;        /* converted activations */
    size_t xq_cap;
    void *attn_scratch;
    size_t attn_scratch_cap;

    float *logits;   /* [rows][n_vocab] */
    int32_t logits_rows, logits_cap;
    bool logits_pinned; /* page-locked by the backend (backend.h host_pin) */

    qw_chunk_cb chunk_cb;
    void *chunk_user;
    qw_abort_cb abort_cb;
    void *abort_user;

    /* the device side (backend.h) when the model runs on a GPU: its KV
     * cache, state and activations live there, and the host buffers above
     * stay unallocated except logits */
    void *dev;

    qw_phase_times *phase; /* QWISP_PROFILE=1 on the CPU path, else NULL */
};

/* Rows [row0, row0+n) of a workspace chunk belong to sequence ctx, whose next
 * position is ctx->n_past.  A plain eval is one span; a lanes step has one
 * span per lane. */
typedef struct {
    qw_ctx *ctx;
    int32_t row0, n;
} seq_span;

/* Phase timing (QWISP_PROFILE=1): t = qw_phase_now(c) starts a span, and
 * t = qw_phase_lap(c, P, t) adds the time since t to phase P and starts the
 * next.  Both cost nothing but a branch when c is not profiling. */
static inline double qw_phase_now(const qw_ctx *c) { return c->phase ? qw_time_s() : 0.0; }
static inline double qw_phase_lap(qw_ctx *c, qw_phase p, double t0) {
    if (!c->phase) return 0.0;
    const double t = qw_time_s();
    c->phase->seconds[p] += t - t0;
    return t;
}

/* Gives c->logits back to the pool (unpinned first where the backend pinned
 * it), leaving no rows. */
void qw_ctx_logits_drop(qw_ctx *c);
/* Grows a pool buffer to at least need bytes (contents kept). */
int qw_fwd_grow(void **p, size_t *cap, size_t need, qw_error *err);
/* y[n][rows] = x[n][k] W^T for a 2-D weight, through c's activation buffer. */
int qw_fwd_linear(qw_ctx *c, const qw_tensor *w, const float *x, int32_t n, float *y, qw_error *err);
/* Grows c's KV cache (attention layers) to hold at least need positions
 * (doubling, capped at n_ctx).  0, or -1 + err. */
int qw_ctx_kv_reserve(qw_ctx *c, int32_t need, qw_error *err);
/* Empties c: n_past 0 and every recurrent state zeroed (on the device too). */
void qw_ctx_restart(qw_ctx *c);
/* (Re)allocates c's chunk buffers for chunks of `rows` rows.  0, or -1. */
int qw_ctx_alloc_chunk_bufs(qw_ctx *c, int32_t rows);

#endif
