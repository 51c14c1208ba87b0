/* gen_model_plan.h — private to src/offline: the tensor plan gen_model.c
 * writes from (one entry per tensor: name, type, dims, distribution) and the
 * per-architecture pieces that fill it (gen_model_qwen35.c for qwen35moe).
 */
#ifndef QWISP_GEN_MODEL_PLAN_H
#define QWISP_GEN_MODEL_PLAN_H

#include "qwisp/gen_model.h"
#include "qwisp/gguf.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { INIT_UNIFORM, INIT_NORMAL } gen_init;

typedef struct gen_tensor {
    char name[64];
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[3];
    gen_init init;
    float a, b;      /* UNIFORM: [a, b]; NORMAL: mean a, std b */
    float row_sigma; /* NORMAL: each row scaled by exp(row_sigma*z - row_sigma^2), E[scale^2] = 1 */
} gen_tensor;

typedef struct gen_ctx {
    gen_tensor *t;
    size_t n;
    uint64_t seed;
    float *row; /* ne[0] floats of the widest row */
    bool fast;  /* fast_weights: rows copied from a pool of POOL_ROWS */
} gen_ctx;

void qw_gen_plan_add(gen_ctx *c, const char *name, uint32_t type, uint32_t n_dims, uint64_t ne0, uint64_t ne1,
                     uint64_t ne2, gen_init init, float a, float b);
bool qw_gen_is_block_type(uint32_t t); /* q8_0, q4_0: rows of 32 */
bool qw_gen_is_kquant(uint32_t t);     /* q2_K..q6_K: rows of 256 */
const char *qw_gen_type_name(uint32_t t);

/* qwen35moe (gen_model_qwen35.c); p has its qwen35 fields filled. */
int qw_gen_validate_qwen35(const qw_gen_model_params *p, qw_error *err);
void qw_gen_plan_qwen35(gen_ctx *c, const qw_gen_model_params *p, uint64_t n_vocab);
void qw_gen_meta_qwen35(qw_gguf_writer *w, const qw_gen_model_params *p);

#endif
