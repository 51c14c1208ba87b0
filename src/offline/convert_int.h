/* convert_int.h — private interface of the Hugging Face converter (not
 * installed; included by convert*.c only).
 *
 * convert.c owns the machinery every architecture shares: config.json
 * helpers, the conversion plan (each GGUF tensor is a list of pieces — a
 * source safetensors tensor and its first row — each contributing
 * rows_per_src rows, optionally with a column permutation and an
 * element-wise transform), the expert stacking, the "every checkpoint tensor
 * was used" check, and the final step (tokenizer, metadata, write).  One file
 * per architecture turns a config.json into a plan and a metadata callback:
 * convert_qwen3moe.c (Qwen3MoeForCausalLM), convert_qwen35.c
 * (Qwen3_5MoeForCausalLM / Qwen3_5MoeForConditionalGeneration).
 */
#ifndef QWISP_CONVERT_INT_H
#define QWISP_CONVERT_INT_H

#include "qwisp/convert.h"
#include "qwisp/gguf.h"
#include "qwisp/safetensors.h"

#include <cjson/cJSON.h>

typedef struct qw_cv_src {
    const qw_st_tensor *t;
    int64_t row0;
} qw_cv_src;

typedef enum qw_cv_xform {
    QW_CV_X_NONE,
    QW_CV_X_PLUS_ONE, /* w + 1: zero-centred RMSNorm weights (HF computes x·(1 + w)) */
    QW_CV_X_NEG_EXP,  /* -exp(w): A_log -> A */
} qw_cv_xform;

typedef struct qw_cv_tensor {
    char name[64];
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[3];
    int n_src;
    qw_cv_src *src;
    int64_t rows_per_src;
    qw_cv_xform xform;
    int32_t *col_perm; /* NULL, or ne[0] entries: out[j] = in[col_perm[j]] (owned) */
} qw_cv_tensor;

typedef struct qw_cv_ctx {
    const char *dir;
    const char *arch; /* the HF architecture, for messages */
    qw_safetensors *st;
    bool *used; /* per safetensors tensor */
    qw_cv_tensor *t;
    size_t n, cap;
    float *row, *row2;
} qw_cv_ctx;

/* ---- config.json ---- */
char *qw_cv_path_in(const char *dir, const char *name);
/* An integer value of c[key]; def < 0 means required (cpath names the file in messages). */
int qw_cv_cfg_int(const cJSON *c, const char *cpath, const char *key, long def, long *out, qw_error *err);
const cJSON *qw_cv_cfg_get(const cJSON *c, const char *key); /* NULL when absent or null */
/* Parses dir/config.json; *cpath receives the path (caller frees both). */
cJSON *qw_cv_read_config(const char *dir, char **cpath, qw_error *err);

/* ---- plan ---- */
/* Finds hf name with PyTorch shape dims[0..nd) and an F32/F16/BF16 dtype, and marks it used. */
const qw_st_tensor *qw_cv_need(qw_cv_ctx *c, const char *name, int nd, const int64_t *dims, qw_error *err);
void qw_cv_mark_used(qw_cv_ctx *c, const qw_st_tensor *t);
qw_cv_tensor *qw_cv_plan_add(qw_cv_ctx *c, const char *name, uint32_t type, uint32_t n_dims, uint64_t ne0,
                             uint64_t ne1, uint64_t ne2, int n_src, int64_t rows_per_src);
/* A 1-D (ne1 == 0) or 2-D GGUF tensor [ne0, ne1] copied from HF tensor hname [ne1, ne0]. */
qw_cv_tensor *qw_cv_add_plain(qw_cv_ctx *c, const char *gname, const char *hname, uint32_t type, int64_t ne0,
                              int64_t ne1, qw_error *err);
/* blk.L.ffn_{gate,up,down}_exps from per-expert (lp + "mlp.experts.x.{gate,up,down}_proj.weight") or
 * merged (lp + "mlp.experts.gate_up_proj" [X, 2F, E], "mlp.experts.down_proj" [X, E, F]) tensors;
 * lp is the layer's HF prefix ("model.layers.3."). */
int qw_cv_add_experts(qw_cv_ctx *c, const char *lp, int l, int64_t E, int64_t F, int64_t X, uint32_t type,
                      qw_error *err);
/* Fails on a checkpoint tensor the plan did not use, unless skip(name) says it is known to be
 * left out (rotary inv_freq buffers are always skipped); then on a row length the type cannot hold. */
int qw_cv_check_plan(qw_cv_ctx *c, bool (*skip)(const char *name), qw_error *err);

/* ---- write ---- */
typedef void (*qw_cv_meta_fn)(qw_gguf_writer *w, const void *arg, const char *name, uint32_t file_type);
/* Tokenizer (padded to vocab; bos/eos from config.json when tokenizer_config.json has none),
 * general.name, metadata via meta(arg), the planned tensors; writes o->out_path. */
int qw_cv_finish(qw_cv_ctx *c, const qw_convert_opts *o, uint32_t type, long vocab, long bos, long eos,
                 qw_cv_meta_fn meta, const void *arg, qw_error *err);
/* F16, or BF16 when the tensor is BF16 (the default output type). */
uint32_t qw_cv_auto_type(const qw_safetensors *st, const char *embd_name);
void qw_cv_ctx_free(qw_cv_ctx *c);

/* ---- architectures ---- */
int qw_cv_qwen3moe(const char *dir, const cJSON *cfg, const char *cpath, const qw_convert_opts *o, qw_error *err);
int qw_cv_qwen35moe(const char *dir, const cJSON *cfg, const char *cpath, const qw_convert_opts *o,
                    qw_error *err);

#endif
