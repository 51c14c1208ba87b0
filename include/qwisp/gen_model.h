/* gen_model.h — deterministic synthetic qwen3moe GGUF files.
 *
 * qwisp needs models to test against llama.cpp and to benchmark with, of any
 * shape, without downloading anything.  This layer writes a GGUF that
 * llama.cpp's qwen3moe loader accepts unchanged: the same metadata keys, the
 * same tensor names and dims, norms and the router kept in F32 like real
 * quantized files, and a byte-level BPE vocabulary (a small learned one, or a
 * real Hugging Face tokenizer such as Qwen3's).
 *
 * The weights are seeded random numbers whose scales are chosen so the model
 * is *discriminating*: greedy continuations depend on the prompt, do not
 * collapse into one repeated token, and the top-1/top-2 logit margin is
 * usually well above float rounding noise (so two engines agree on argmax).
 * gen_model.c documents the scales and how they were measured.
 *
 *     qw_gen_model_params p;
 *     qw_gen_model_preset("tiny", &p);
 *     p.type = QW_TYPE_Q8_0;
 *     if (qw_gen_model_validate(&p, &err) != 0 ||
 *         qw_gen_model_write(&p, "tiny.gguf", &err) != 0) ...
 *
 * The same params and seed always give a byte-identical file.
 */
#ifndef QWISP_GEN_MODEL_H
#define QWISP_GEN_MODEL_H

#include "qwisp/base.h"

typedef enum qw_gen_tokenizer {
    QW_GEN_TOK_BYTES = 0, /* 256 byte tokens + merges learned from a built-in text + ChatML specials */
    QW_GEN_TOK_HF = 1,    /* tokenizer.json + tokenizer_config.json from hf_tokenizer_dir */
} qw_gen_tokenizer;

typedef enum qw_gen_arch {
    QW_GEN_QWEN3MOE = 0,  /* attention + routed experts */
    QW_GEN_QWEN35MOE = 1, /* Gated DeltaNet / gated attention + routed + shared expert */
} qw_gen_arch;

typedef struct qw_gen_model_params {
    qw_gen_arch arch;
    const char *name;             /* general.name */
    qw_gen_tokenizer tokenizer;
    const char *hf_tokenizer_dir; /* QW_GEN_TOK_HF: dir holding tokenizer.json (+ _config.json) */
    uint32_t type;                /* qw_type of the big matrices (attn, experts) */
    uint32_t embd_type;           /* qw_type of token_embd and output */
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;
    int head_dim;
    int n_expert;
    int n_expert_used;
    int n_ff_exp;
    int n_ctx;
    float rope_base;
    float rms_eps;
    bool tied;                    /* no output.weight: llama.cpp reuses token_embd */
    uint64_t seed;
    /* Each matrix's rows are drawn from a pool of 64 generated rows: a valid
     * model written at disk speed (no per-row quantisation), for speed and
     * memory benchmarks of full-size shapes; not for parity tests. */
    bool fast_weights;
    /* qwen35moe only; 0 = derived from the shape above by
     * qw_gen_model_fill_qwen35 (n_rot head_dim/4, shared ff = n_ff_exp,
     * conv 4, state head_dim, key heads n_head_kv, value heads 2x, interval 4) */
    int n_rot;                    /* rotated dims per head (partial RoPE) */
    int n_ff_shexp;               /* shared expert FFN */
    int ssm_d_conv, ssm_state, ssm_groups, ssm_vheads;
    int full_attn_interval;       /* every n-th layer is full attention */
} qw_gen_model_params;

/* Fills *p with a named preset: "tiny" (bytes tokenizer, a few hundred KB),
 * "small", "default" (the model `make models/default.gguf` writes), "bench"
 * (~0.5 GB, a stand-in for real MoE decode cost) or "qwen36-a3b" (qwen35moe
 * with Qwen3.6-35B-A3B's published shape; ~20 GB in q4_K).  -1 for an
 * unknown name. */
int qw_gen_model_preset(const char *name, qw_gen_model_params *p);
/* Sets the qwen35moe fields left 0 from the rest of the shape (see above). */
void qw_gen_model_fill_qwen35(qw_gen_model_params *p);

/* Checks shapes and types; on failure err names the CLI flag and the value,
 * e.g. "--n-embd 100: must be a multiple of 32 for type q8_0". */
int qw_gen_model_validate(const qw_gen_model_params *p, qw_error *err);

/* Writes the model to path (validated first; via a temporary file, so a
 * failure leaves nothing at path).  Memory stays bounded by the largest
 * tensor: weights are generated row by row inside the writer's callback. */
int qw_gen_model_write(const qw_gen_model_params *p, const char *path, qw_error *err);

#endif
