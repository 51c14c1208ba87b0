/* qwen35moe.h — private (work in progress): the qwen35moe architecture
 * (hybrid Gated DeltaNet + gated full attention + MoE with a shared expert),
 * see docs/qwen35moe.md.  Not reachable from the public model API yet: the
 * loader in model.c still refuses qwen35moe files until parity holds.
 *
 *     qw35_model *m = qw35_model_load("m.gguf", &err);
 *     qw35_ctx *c = qw35_ctx_new(m, 512, 2, &err);
 *     qw35_eval(c, ids, n, all_logits_or_NULL, &err);   // tokens one at a time
 *     const float *l = qw35_logits(c);                  // last token's [n_vocab]
 */
#ifndef QWISP_QWEN35MOE_H
#define QWISP_QWEN35MOE_H

#include "qwisp/model.h"

typedef struct qw35_hparams {
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_rot;
    int32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp, n_ctx_train;
    int32_t d_conv, ssm_state, ssm_groups, ssm_vheads, ssm_inner, full_attn_interval;
    float rope_base, rms_eps, expert_weights_scale;
} qw35_hparams;

typedef struct qw35_layer {
    bool recurrent;             /* Gated DeltaNet (true) or full attention */
    qw_tensor attn_norm, post_norm;
    /* full attention */
    qw_tensor wq, wk, wv, wo, q_norm, k_norm;
    /* Gated DeltaNet */
    qw_tensor wqkv, wgate, conv1d, dt_bias, ssm_a, w_beta, w_alpha, ssm_norm, ssm_out;
    /* MoE + shared expert */
    qw_tensor gate_inp, gate_exps, up_exps, down_exps;
    qw_tensor shexp_gate_inp, gate_shexp, up_shexp, down_shexp;
} qw35_layer;

typedef struct qw35_model {
    qw_gguf *gguf;
    qw35_hparams hp;
    qw_tensor tok_embd, output_norm, output;
    qw35_layer *layers;
} qw35_model;

qw35_model *qw35_model_load(const char *path, qw_error *err);
void qw35_model_free(qw35_model *m);

typedef struct qw35_ctx qw35_ctx;
qw35_ctx *qw35_ctx_new(const qw35_model *m, int32_t n_ctx, int n_threads, qw_error *err);
void qw35_ctx_free(qw35_ctx *c);
int32_t qw35_ctx_n_past(const qw35_ctx *c);
/* Runs tokens[n] one at a time (recurrent form).  all_logits: NULL, or
 * [n][n_vocab] filled for every token.  The last token's logits stay in
 * qw35_logits. */
int qw35_eval(qw35_ctx *c, const int32_t *tokens, int32_t n, float *all_logits, qw_error *err);
const float *qw35_logits(const qw35_ctx *c);

/* Synthetic qwen35moe GGUF (qwen35moe_gen.c).  The tokenizer.* keys are
 * copied from tok_src (any GGUF with a tokenizer, e.g. a gen-model file). */
typedef struct qw35_gen_params {
    uint32_t type;      /* big matrices */
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_rot;
    int n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int d_conv, ssm_state, ssm_groups, ssm_vheads, full_attn_interval;
    int n_ctx;
    float rope_base, rms_eps;
    bool tied;
    uint64_t seed;
} qw35_gen_params;
void qw35_gen_defaults(qw35_gen_params *p);
int qw35_gen_write(const qw35_gen_params *p, const char *tok_src, const char *path, qw_error *err);

#endif
