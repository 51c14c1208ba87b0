/* model_load.h — private to src/model: the pieces of the GGUF loader that
 * each architecture's key and tensor reader shares (model.c owns them;
 * qwen35moe_load.c uses them).
 */
#ifndef QWISP_MODEL_LOAD_H
#define QWISP_MODEL_LOAD_H

#include "qwisp/model.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

/* "<arch>.<suffix>" as an int32 / float.  0 found; 1 absent and optional;
 * -1 + err when required and absent or out of range. */
int qw_model_key_u32(const qw_gguf *g, const char *arch, const char *suffix, int32_t *out, bool required,
                     qw_error *err);
int qw_model_key_f32(const qw_gguf *g, const char *arch, const char *suffix, float *out, bool required,
                     qw_error *err);

/* qwen35moe: the keys beyond the ones every MoE shares (called by read_hparams
 * after the common ones) and one layer's tensors. */
int qw_qwen35moe_read_hparams(const qw_gguf *g, qw_hparams *hp, qw_error *err);
int qw_qwen35moe_bind_layer(const qw_gguf *g, const qw_hparams *hp, int il, qw_layer *L, qw_error *err);

#endif
