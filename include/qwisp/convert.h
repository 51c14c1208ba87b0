/* convert.h — Hugging Face checkpoint -> GGUF: Qwen3MoeForCausalLM -> qwen3moe,
 * Qwen3_5MoeForCausalLM / Qwen3_5MoeForConditionalGeneration -> qwen35moe.
 *
 * Reads a checkpoint directory (config.json, tokenizer.json,
 * tokenizer_config.json, model.safetensors or shards + index) and writes a
 * GGUF with the tensor names, shapes and metadata llama.cpp's
 * convert_hf_to_gguf.py produces, so qwisp and llama.cpp both load it:
 * per-expert HF matrices are stacked into the merged 3-D blk.N.ffn_*_exps
 * tensors, norms and the router stay F32, the other matrices take the
 * requested type.  The vocabulary is padded to config.json's vocab_size with
 * "[PAD<id>]" tokens, as llama.cpp does.
 *
 *     qw_convert_opts o = {.hf_dir = "ckpt", .out_path = "m.gguf", .type = QW_TYPE_Q8_0};
 *     if (qw_convert_hf(&o, &err) != 0) fprintf(stderr, "%s\n", err.msg);
 */
#ifndef QWISP_CONVERT_H
#define QWISP_CONVERT_H

#include "qwisp/base.h"

#define QW_CONVERT_TYPE_AUTO 0xFFFFFFFFu /* F16/BF16/F32 after the checkpoint's own dtype */

typedef struct qw_convert_opts {
    const char *hf_dir;
    const char *out_path;
    uint32_t type;     /* qw_type of the matrices, or QW_CONVERT_TYPE_AUTO */
    const char *name;  /* general.name; NULL = the directory's base name */
} qw_convert_opts;

/* Converts; -1 + err naming the file/tensor/key on any problem (an
 * unsupported architecture or dtype, a missing or misshapen tensor, a tensor
 * the mapping does not know).  The output is written via a temporary file, so
 * a failure leaves nothing at out_path. */
int qw_convert_hf(const qw_convert_opts *o, qw_error *err);

#endif
