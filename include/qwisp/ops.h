/* ops.h — the math the model reaches through: matmuls by weight type,
 * attention over an f16 KV cache, norms, RoPE, softmax, activations, the
 * gated-delta step.
 *
 * This is the backend seam of DESIGN.md: src/model/ includes no other
 * kernels header (tests/arch/t_include_direction.sh checks it).  What model/
 * uses is the functions below, plus what this header brings in with it: from
 * quant.h the type table (qw_row_bytes, qw_vec_dot_type) and the row
 * conversions qw_quantize_row / qw_dequantize_row (KV append, embedding
 * lookup), and the thread pool (threadpool.h) the blocks parallelize over.
 * A GPU backend provides this set; model/ does not change.
 *
 * Matmul convention: W is [n_rows][k] (one row per output), activations are
 * f32 [n_tok][k]; y = x W^T is [n_tok][ldy].  Activations are first converted
 * to qw_vec_dot_type(W) (qw_act_convert), then dotted with each row, exactly
 * like llama.cpp's CPU backend, so the two agree to rounding.
 */
#ifndef QWISP_OPS_H
#define QWISP_OPS_H

#include "qwisp/quant.h"
#include "qwisp/threadpool.h"

/* Bytes needed to hold n_tok activation rows of length k converted for wtype. */
size_t qw_act_bytes(qw_type wtype, int64_t k, int64_t n_tok);
/* x [n_tok][ldx] f32 -> xq (n_tok rows of qw_row_bytes(vec_dot_type, k)). */
void qw_act_convert(qw_threadpool *tp, qw_type wtype, const float *x, int64_t ldx, int64_t k,
                    int64_t n_tok, void *xq);

/* y[j][r] = dot(W[r], xq[idx ? idx[j] : j]) for j < n_tok, r < n_rows. */
void qw_matmul_q(qw_threadpool *tp, qw_type wtype, const void *w, size_t w_row_bytes, int64_t n_rows,
                 int64_t k, const void *xq, const int32_t *idx, int64_t n_tok, float *y, int64_t ldy);

/* Several matmuls over one weight type and row length k, run as ONE parallel
 * pass (one barrier): e.g. wq/wk/wv of a layer, or gate+up (then down) of all
 * the experts a decode token chose.  Each task is y[j][r] = dot(w[r],
 * xq[idx ? idx[j] : j]) for j < n_tok, r < n_rows, exactly as qw_matmul_q.
 * Any n_tasks works (run QW_MM_MAX_TASKS per pass). */
#define QW_MM_MAX_TASKS 64
typedef struct qw_mm_task {
    const void *w;       /* [n_rows] rows of w_row_bytes */
    size_t w_row_bytes;
    int64_t n_rows;
    const void *xq;      /* converted activations (qw_act_convert) */
    const int32_t *idx;  /* NULL = row j of xq for token j */
    int64_t n_tok;
    float *y;            /* [n_tok][ldy] */
    int64_t ldy;
} qw_mm_task;
void qw_matmul_batch(qw_threadpool *tp, qw_type wtype, int64_t k, const qw_mm_task *tasks, int n_tasks);

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i], for n_rows rows of n (out
 * may be x); the rows spread over tp's threads (NULL: the caller's alone). */
void qw_rmsnorm(qw_threadpool *tp, float *out, const float *x, const float *w, int64_t n, int64_t n_rows, float eps);

/* NeoX-style RoPE in place on x [n_heads][head_dim] at position pos, over the
 * first n_rot dims of each head (n_rot = head_dim: all of it; the rest pass
 * through): pairs (i, i + n_rot/2) rotated by pos * base^(-2i/n_rot). */
void qw_rope_neox_partial(float *x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int32_t pos,
                          float base);

/* One token of the gated delta rule for one head (kernels/delta.c): M is
 * the S x S state stored transposed (row j = column j of the state).
 *   M *= decay;  per row j: d = (v[j] - M_j . k) * beta;  M_j += d * k;
 *   o[j] = (M_j . q) * scale.
 * AVX-512 where present (summed in ggml's order), else the scalar form. */
void qw_delta_step(float *M, const float *q, const float *k, const float *v, float decay, float beta, float scale,
                   int64_t S, float *o);
void qw_delta_step_scalar(float *M, const float *q, const float *k, const float *v, float decay, float beta,
                          float scale, int64_t S, float *o);

/* In-place softmax of x[n]. */
void qw_softmax(float *x, int64_t n);

/* out[i] = silu(g[i]) * u[i]. */
void qw_swiglu(float *out, const float *g, const float *u, int64_t n);

/* Causal attention for n_tok query tokens at positions pos0.. over an f16 KV
 * cache holding pos0 + n_tok positions.
 *   q:   [n_tok][n_head][head_dim] f32 (already normed + roped)
 *   k,v: [n_pos][n_head_kv][head_dim] of kv_type, f16 or f32 (cache, positions 0..pos0+n_tok-1)
 *   out: [n_tok][n_head][head_dim] f32
 * scratch: per-thread buffers sized by qw_attention_scratch_bytes. */
size_t qw_attention_scratch_bytes(int n_threads, int64_t n_pos, int64_t head_dim);
void qw_attention(qw_threadpool *tp, const float *q, const void *k, const void *v, qw_type kv_type,
                  float *out, int64_t n_tok, int32_t pos0, int64_t n_head, int64_t n_head_kv,
                  int64_t head_dim, float scale, void *scratch);

/* The decode-loop trial (src/kernels/decode_trial.c): decode_gemv chosen on
 * the running model's first CPU decode tokens.  Around one CPU one-token
 * eval: begin returns a trial step's number (>= 0) after setting the loop for
 * it, or -1 (no trial now: finished, pinned by QWISP_DECODE_GEMV or
 * QWISP_TUNE=off, or another thread's step in flight); end records that
 * step's seconds, and after the last step keeps the faster loop. */
int qw_decode_trial_begin(void);
void qw_decode_trial_end(int step, double seconds);

#endif
