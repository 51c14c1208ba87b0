/* gguf_meta.c — writes the hyper-parameter and tokenizer keys of the GGUF
 * files qwisp writes (qwen3moe and qwen35moe; the file type id).
 *
 * One place for the key names and their types (u32 counts, f32 rope base and
 * epsilon), shared by the writers (gen_model*.c, convert_*.c).  The key set is the one
 * llama.cpp's convert_hf_to_gguf.py writes for Qwen3MoeForCausalLM: context,
 * embedding, block count, feed-forward length, head counts, key/value length,
 * rope base, RMS epsilon, expert count / used count / expert feed-forward
 * length; the tokenizer as gpt2-style BPE with the qwen2 pre-tokenizer.
 */
#include "qwisp/gguf_meta.h"

#include "qwisp/quant.h"

#include <stdio.h>

uint32_t qw_gguf_file_type(uint32_t type) {
    switch (type) {
    case QW_TYPE_F16: return 1;
    case QW_TYPE_Q4_0: return 2;
    case QW_TYPE_Q8_0: return 7;
    case QW_TYPE_Q2_K: return 10; /* LLAMA_FTYPE_MOSTLY_Q2_K */
    case QW_TYPE_Q3_K: return 11; /* ..._Q3_K_S: every matrix q3_K */
    case QW_TYPE_Q4_K: return 14; /* ..._Q4_K_S */
    case QW_TYPE_Q5_K: return 16; /* ..._Q5_K_S */
    case QW_TYPE_Q6_K: return 18; /* ..._Q6_K */
    case QW_TYPE_BF16: return 32;
    default: return 0;
    }
}

void qw_qwen3moe_set_metadata(qw_gguf_writer *w, const qw_qwen3moe_hparams *p) {
    qw_gguf_set_str(w, "general.architecture", "qwen3moe");
    qw_gguf_set_str(w, "general.name", p->name ? p->name : "qwen3moe");
    qw_gguf_set_u32(w, "general.file_type", p->file_type);
    qw_gguf_set_u32(w, "general.quantization_version", 2);

    qw_gguf_set_u32(w, "qwen3moe.context_length", (uint32_t)p->n_ctx);
    qw_gguf_set_u32(w, "qwen3moe.embedding_length", (uint32_t)p->n_embd);
    qw_gguf_set_u32(w, "qwen3moe.block_count", (uint32_t)p->n_layer);
    qw_gguf_set_u32(w, "qwen3moe.feed_forward_length", (uint32_t)p->n_ff);
    qw_gguf_set_u32(w, "qwen3moe.attention.head_count", (uint32_t)p->n_head);
    qw_gguf_set_u32(w, "qwen3moe.attention.head_count_kv", (uint32_t)p->n_head_kv);
    qw_gguf_set_u32(w, "qwen3moe.attention.key_length", (uint32_t)p->head_dim);
    qw_gguf_set_u32(w, "qwen3moe.attention.value_length", (uint32_t)p->head_dim);
    qw_gguf_set_f32(w, "qwen3moe.rope.freq_base", p->rope_base);
    qw_gguf_set_f32(w, "qwen3moe.attention.layer_norm_rms_epsilon", p->rms_eps);
    qw_gguf_set_u32(w, "qwen3moe.expert_count", (uint32_t)p->n_expert);
    qw_gguf_set_u32(w, "qwen3moe.expert_used_count", (uint32_t)p->n_expert_used);
    qw_gguf_set_u32(w, "qwen3moe.expert_feed_forward_length", (uint32_t)p->n_ff_exp);
}

void qw_qwen35moe_set_metadata(qw_gguf_writer *w, const qw_qwen35moe_hparams *p) {
    char key[96];
#define U32(s, v) (snprintf(key, sizeof key, "qwen35moe." s), qw_gguf_set_u32(w, key, (uint32_t)(v)))
#define F32(s, v) (snprintf(key, sizeof key, "qwen35moe." s), qw_gguf_set_f32(w, key, (v)))
    qw_gguf_set_str(w, "general.architecture", "qwen35moe");
    qw_gguf_set_str(w, "general.name", p->name ? p->name : "qwen35moe");
    qw_gguf_set_u32(w, "general.file_type", p->file_type);
    qw_gguf_set_u32(w, "general.quantization_version", 2);
    if (p->n_ctx >= 0) U32("context_length", p->n_ctx);
    U32("embedding_length", p->n_embd);
    U32("block_count", p->n_layer);
    if (p->n_ff >= 0) U32("feed_forward_length", p->n_ff);
    U32("attention.head_count", p->n_head);
    U32("attention.head_count_kv", p->n_head_kv);
    U32("attention.key_length", p->head_dim);
    U32("attention.value_length", p->head_dim);
    U32("rope.dimension_count", p->n_rot);
    qw_gguf_set_arr(w, "qwen35moe.rope.dimension_sections", QW_GGUF_INT32, p->rope_sections, 4);
    F32("rope.freq_base", p->rope_base);
    F32("attention.layer_norm_rms_epsilon", p->rms_eps);
    U32("expert_count", p->n_expert);
    U32("expert_used_count", p->n_expert_used);
    U32("expert_feed_forward_length", p->n_ff_exp);
    U32("expert_shared_feed_forward_length", p->n_ff_shexp);
    U32("ssm.conv_kernel", p->ssm_d_conv);
    U32("ssm.state_size", p->ssm_state);
    U32("ssm.group_count", p->ssm_groups);
    U32("ssm.time_step_rank", p->ssm_vheads);
    U32("ssm.inner_size", p->ssm_state * p->ssm_vheads);
    U32("full_attention_interval", p->full_attn_interval);
#undef U32
#undef F32
}

void qw_gguf_set_tokenizer(qw_gguf_writer *w, const qw_tokenizer_spec *s) {
    qw_gguf_set_str(w, "tokenizer.ggml.model", s->model ? s->model : "gpt2");
    qw_gguf_set_str(w, "tokenizer.ggml.pre", s->pre ? s->pre : "qwen2");
    qw_gguf_set_arr_str(w, "tokenizer.ggml.tokens", s->tokens, (uint64_t)s->n_tokens);
    if (s->token_types)
        qw_gguf_set_arr(w, "tokenizer.ggml.token_type", QW_GGUF_INT32, s->token_types, (uint64_t)s->n_tokens);
    qw_gguf_set_arr_str(w, "tokenizer.ggml.merges", s->merges, (uint64_t)s->n_merges);
    if (s->bos_id >= 0) qw_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)s->bos_id);
    if (s->eos_id >= 0) qw_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)s->eos_id);
    if (s->pad_id >= 0) qw_gguf_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)s->pad_id);
    qw_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", s->add_bos);
    if (s->chat_template) qw_gguf_set_str(w, "tokenizer.chat_template", s->chat_template);
}
