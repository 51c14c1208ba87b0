/* gguf_meta.h — the metadata a qwen3moe (and a qwen35moe) GGUF carries,
 * written once (src/offline/gguf_meta.c).
 *
 * Both writers of qwen3moe files — the synthetic model generator
 * (gen_model.c) and the Hugging Face converter (convert_qwen3moe.c) — describe the
 * model with the same hyper-parameters and a tokenizer spec, and this layer
 * turns them into exactly the keys llama.cpp's converter writes
 * ("qwen3moe.embedding_length", "tokenizer.ggml.tokens", …), so the two
 * cannot drift apart.
 *
 *     qw_qwen3moe_hparams hp = {.name = "my-model", .file_type = qw_gguf_file_type(QW_TYPE_Q8_0), …};
 *     qw_qwen3moe_set_metadata(w, &hp);
 *     qw_gguf_set_tokenizer(w, spec);
 */
#ifndef QWISP_GGUF_META_H
#define QWISP_GGUF_META_H

#include "qwisp/gguf.h"
#include "qwisp/tokenizer.h"

typedef struct qw_qwen3moe_hparams {
    const char *name;      /* general.name */
    uint32_t file_type;    /* general.file_type (llama_ftype), see qw_gguf_file_type */
    int n_ctx;             /* context_length (HF max_position_embeddings) */
    int n_embd;
    int n_layer;
    int n_ff;              /* feed_forward_length (HF intermediate_size) */
    int n_head, n_head_kv, head_dim;
    int n_expert, n_expert_used, n_ff_exp;
    float rope_base, rms_eps;
} qw_qwen3moe_hparams;

/* qwen35moe (Qwen3.5/3.6-MoE): the same written-once rule for its writers
 * (gen_model_qwen35.c, convert_qwen35.c).  n_ctx, n_ff < 0: key left out. */
typedef struct qw_qwen35moe_hparams {
    const char *name;
    uint32_t file_type;
    int n_ctx, n_embd, n_layer, n_ff;
    int n_head, n_head_kv, head_dim, n_rot;
    int n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int ssm_d_conv, ssm_state, ssm_groups, ssm_vheads, full_attn_interval;
    int32_t rope_sections[4]; /* M-RoPE sections (llama.cpp requires the key) */
    float rope_base, rms_eps;
} qw_qwen35moe_hparams;

/* general.* and qwen35moe.* keys. */
void qw_qwen35moe_set_metadata(qw_gguf_writer *w, const qw_qwen35moe_hparams *hp);

/* llama.cpp's general.file_type for a file whose big matrices are `type`
 * (F32 0, F16 1, Q4_0 2, Q8_0 7, BF16 32). */
uint32_t qw_gguf_file_type(uint32_t type);

/* general.* and qwen3moe.* keys. */
void qw_qwen3moe_set_metadata(qw_gguf_writer *w, const qw_qwen3moe_hparams *hp);

/* tokenizer.ggml.* keys (+ tokenizer.chat_template when set) from a spec:
 * model/pre default to "gpt2"/"qwen2"; special ids < 0 are left out. */
void qw_gguf_set_tokenizer(qw_gguf_writer *w, const qw_tokenizer_spec *s);

#endif
