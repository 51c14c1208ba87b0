/* model.h — a loaded model (weights mmaped from GGUF + hyper-parameters) and
 * an inference context (KV cache, scratch, threads) that runs the forward pass.
 *
 * One code path runs a chunk of tokens: prefill passes many, decode passes one.
 *
 *     qw_model *m = qw_model_load("m.gguf", &err);    // mechanism: bind + check
 *     qw_place_experts(m, 4096, &err);                  // the caller's tier (place.h)
 *     qw_ctx *c = qw_ctx_new(m, 4096, 2, &err);
 *     float *logits = qw_ctx_logits(c);                 // [n_vocab] of the last token
 *     qw_ctx_eval(c, ids, n, QW_LOGITS_LAST, &err);     // appends to the KV cache
 *     qw_ctx_free(c); qw_model_free(m);
 */
#ifndef QWISP_MODEL_H
#define QWISP_MODEL_H

#include "qwisp/base.h"
#include "qwisp/experts.h"
#include "qwisp/gguf.h"
#include "qwisp/ops.h" /* the kernels seam: qw_type and the math the forward pass uses */

/* A view of one weight tensor in the mapping.  ne[0] is the row length. */
typedef struct qw_tensor {
    const char *name;
    const void *data;
    qw_type type;
    int64_t ne[4];
    size_t row_bytes;    /* bytes of one row of ne[0] elements */
    size_t matrix_bytes; /* bytes of one ne[0]×ne[1] matrix (3-D expert tensors) */
} qw_tensor;

/* Architectures one forward pass runs (src/model/forward.c: a layer's flags, not
 * this id, pick its blocks). */
typedef enum {
    QW_ARCH_QWEN3MOE = 0,  /* attention + routed MoE, every layer */
    QW_ARCH_QWEN35MOE = 1, /* Gated DeltaNet / gated attention + routed MoE + shared expert */
} qw_arch;

/* The most experts a token may use (expert_used_count): the loader refuses
 * more, so the MoE code can keep a token's picks in fixed arrays. */
enum { QW_EXPERT_USED_MAX = 64 };

typedef struct qw_hparams {
    char arch[32];
    qw_arch arch_id;
    int32_t n_vocab;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;      /* key_length == value_length */
    int32_t n_expert;
    int32_t n_expert_used;
    int32_t n_ff_exp;
    int32_t n_ctx_train;
    float rope_base;
    float rms_eps;
    float expert_weights_scale; /* 0 or 1 = none */
    bool norm_topk;             /* renormalise the top-k weights (Qwen3: true) */
    int32_t n_rot;              /* rotated dims per head (partial RoPE); head_dim = full */
    int32_t n_ff_shexp;         /* shared expert FFN (0 = none) */
    /* Gated DeltaNet (qwen35moe; 0 for qwen3moe) */
    int32_t ssm_d_conv;         /* causal conv width */
    int32_t ssm_state;          /* S: key/value head dim */
    int32_t ssm_groups;         /* key heads */
    int32_t ssm_vheads;         /* value heads (a multiple of ssm_groups) */
    int32_t full_attn_interval; /* layer il is attention when (il+1) % interval == 0 */
} qw_hparams;

typedef struct qw_layer {
    bool recurrent;      /* Gated DeltaNet layer (qwen35moe) instead of attention */
    bool gated_attn;     /* wq also yields a per-head output gate (qwen35moe) */
    qw_tensor attn_norm; /* [n_embd] f32 */
    qw_tensor wq;        /* [n_embd] -> [n_head*head_dim] (gated: [n_head][q | gate]) */
    qw_tensor wk;        /* [n_embd] -> [n_head_kv*head_dim] */
    qw_tensor wv;        /* [n_embd] -> [n_head_kv*head_dim] */
    qw_tensor wo;        /* [n_head*head_dim] -> [n_embd] */
    qw_tensor q_norm;    /* [head_dim] f32 */
    qw_tensor k_norm;    /* [head_dim] f32 */
    qw_tensor ffn_norm;  /* [n_embd] f32 (qwen35moe: post_attention_norm) */
    /* Gated DeltaNet (recurrent layers); C = 2*groups*S + vheads*S */
    qw_tensor wqkv;      /* [n_embd] -> [C]: q, k (groups*S each), v (vheads*S) */
    qw_tensor wz;        /* [n_embd] -> [vheads*S] output gate */
    qw_tensor w_beta;    /* [n_embd] -> [vheads] */
    qw_tensor w_alpha;   /* [n_embd] -> [vheads] */
    qw_tensor conv1d;    /* [d_conv][C] f32 */
    qw_tensor dt_bias;   /* [vheads] f32 */
    qw_tensor ssm_a;     /* [vheads] f32 (-exp(A_log)) */
    qw_tensor ssm_norm;  /* [S] f32 */
    qw_tensor ssm_out;   /* [vheads*S] -> [n_embd] */
    /* shared expert (qwen35moe): always on, scaled by sigmoid(xn . shexp_gate) */
    qw_tensor shexp_gate; /* [n_embd] -> [1] */
    qw_tensor gate_shexp, up_shexp; /* [n_embd] -> [n_ff_shexp] */
    qw_tensor down_shexp;           /* [n_ff_shexp] -> [n_embd] */
    qw_tensor gate_inp;  /* router [n_embd] -> [n_expert] */
    qw_tensor gate_exps; /* [n_expert][n_ff_exp][n_embd] */
    qw_tensor up_exps;   /* [n_expert][n_ff_exp][n_embd] */
    qw_tensor down_exps; /* [n_expert][n_embd][n_ff_exp] */
} qw_layer;

typedef struct qw_model {
    qw_gguf *gguf;
    qw_hparams hp;
    qw_tensor tok_embd;    /* [n_vocab][n_embd] */
    qw_tensor output_norm; /* [n_embd] f32 */
    qw_tensor output;      /* [n_vocab][n_embd]; == tok_embd when tied */
    bool tied_output;
    qw_layer *layers;      /* [n_layer] */
    uint64_t weight_bytes; /* all tensors */
    /* how experts/ sees this model (qw_model_expert_layout), built at load */
    qw_expert_part (*expert_parts)[3]; /* [n_layer][gate, up, down] */
    qw_mapped_range *weight_ranges;    /* [n_weight_ranges] every tensor's bytes */
    size_t n_weight_ranges;
    /* where the MoE layer gets experts (experts.h); NULL until the caller
     * places them (qw_model_set_experts / qw_place_experts), owned after */
    struct qw_experts *experts;
    /* the device side (backend.h): NULL = the CPU runs this model; set by
     * qw_backend_attach, owned after (freed with the model) */
    const struct qw_backend_ops *backend;
    void *dev;
    /* the host's expert runner the device side calls (QWISP_DEVICE_HOST_EXPERTS
     * > 0: host_experts.h); NULL when off; owned like dev */
    struct qw_host_experts *host_experts;
} qw_model;

/* Binds weight tensor `name` of g into *t after checking its type (computable;
 * f32 when float_only) and its shape against want[0..n_dims) (innermost first,
 * missing dims must be 1).  -1 + err naming the file, tensor and mismatch.
 * Shared by every architecture's loader. */
int qw_model_bind_tensor(const qw_gguf *g, qw_tensor *t, const char *name, int n_dims,
                         const int64_t *want, bool float_only, qw_error *err);

/* Loads and validates (architecture, hyper-parameters, every tensor's presence,
 * type and shape).  Mechanism only: no policy is applied and no expert source
 * is opened — the caller decides the tier once it knows the real context
 * (qw_place_experts in place.h, or qw_experts_open + qw_model_set_experts).
 * NULL + err naming the file and what is wrong. */
qw_model *qw_model_load(const char *path, qw_error *err);
void qw_model_free(qw_model *m);
/* The layout experts/ opens a source on (points into m; valid while m lives). */
qw_expert_layout qw_model_expert_layout(const qw_model *m);
/* The model's side of the tier decision: expert, non-expert, KV (for
 * kv_positions positions over all contexts; <= 0 = the trained context) and
 * slot bytes, and the expert counts.  The RAM and knob fields are left 0 / -1
 * for the caller. */
void qw_model_tier_sizes(const qw_model *m, int64_t kv_positions, qw_tier_input *in);
/* Hands m the expert source x (m closes it; a previous one is closed). */
void qw_model_set_experts(qw_model *m, qw_experts *x);
/* One Gated DeltaNet layer's recurrent state for one sequence (qwen35moe):
 * the last d_conv-1 conv inputs and the vheads x S x S delta state. */
size_t qw_model_conv_state_bytes(const qw_hparams *hp);
size_t qw_model_delta_state_bytes(const qw_hparams *hp);
/* All recurrent layers' state for one sequence (0 for qwen3moe). */
uint64_t qw_model_state_bytes(const qw_model *m);
/* Bytes of weights one decode token reads (non-expert + n_expert_used experts). */
uint64_t qw_model_active_bytes(const qw_model *m);

typedef struct qw_ctx qw_ctx;

typedef enum {
    QW_LOGITS_NONE = 0, /* prefill of a prompt prefix */
    QW_LOGITS_LAST = 1, /* logits of the last token only */
    QW_LOGITS_ALL = 2,  /* logits of every token of the chunk (teacher forcing) */
} qw_logits_mode;

/* n_ctx: maximum tokens in the KV cache (0 = the model's training context).
 * n_threads >= 1. */
qw_ctx *qw_ctx_new(const qw_model *m, int32_t n_ctx, int n_threads, qw_error *err);
void qw_ctx_free(qw_ctx *c);
/* Replaces c's compute threads with n_threads (>= 1) new ones, between
 * evaluations (`qwisp ab-worker` prefills with all CPUs, then decodes its
 * paired tokens on fewer).  Scratch sized per thread is regrown on demand. */
void qw_ctx_set_threads(qw_ctx *c, int n_threads);
int32_t qw_ctx_n_ctx(const qw_ctx *c);
int32_t qw_ctx_n_past(const qw_ctx *c); /* tokens in the KV cache */
/* Drops the KV cache back to n_past tokens (0 = empty).  A model with
 * recurrent layers cannot rewind its state to an earlier position, so there
 * any n_past below the current one empties the context.  Returns the tokens
 * kept: the caller re-evaluates from there. */
int32_t qw_ctx_truncate(qw_ctx *c, int32_t n_past);
/* A saved position: n_past and a copy of the recurrent states (malloc'd, not
 * from the pool, so saving does not change what the pool holds; on the GPU
 * backend a device buffer outside the device pool, so a rewind never crosses
 * the bus).  Restoring rewinds the context to exactly that point — attention
 * KV past n_past is simply overwritten — so one prompt prefix can be re-run
 * many times (`qwisp ab`'s in-process trials).  save: NULL on OOM or a failed
 * device copy.  update re-saves mk at c's current position (no allocation).
 * update / restore: 0, or -1 (a device copy failed, or mk is another
 * context's; a failed restore leaves c emptied, never half-loaded). */
typedef struct qw_ctx_mark qw_ctx_mark;
qw_ctx_mark *qw_ctx_mark_save(const qw_ctx *c);
int qw_ctx_mark_update(const qw_ctx *c, qw_ctx_mark *mk);
int qw_ctx_mark_restore(qw_ctx *c, const qw_ctx_mark *mk);
void qw_ctx_mark_free(qw_ctx_mark *mk);
/* Gives the buffers that grow with the context (activation conversion,
 * attention scratch, and the KV cache itself when n_past is 0) back to the
 * pool, so the next evaluation grows them again as a new context would —
 * the same requests reach the pool as in a fresh process. */
void qw_ctx_release_growth(qw_ctx *c);
/* Recurrent state bytes (conv + delta states of a qwen35moe context; 0 otherwise). */
uint64_t qw_ctx_state_bytes(const qw_ctx *c);
/* Prefix sharing (the prefix cache, src/runtime/prefix_cache.c).
 * qw_ctx_state_save copies c's recurrent state (qw_ctx_state_bytes bytes) to
 * dst: the state after exactly qw_ctx_n_past(c) tokens; 0, or -1 when a
 * device context's copy failed (logged; dst then holds nothing usable).
 * qw_ctx_state_load rewinds c to n_past (<= its n_past) with a state saved
 * at that position: the KV keeps its first n_past rows.  Returns the tokens
 * kept (c's n_past unchanged if n_past is out of range; 0 — the context
 * started over — when a device context's copy failed).
 * On the GPU backend these, the KV copies and the marks move the device's
 * bytes (backend.h): a device context has no host KV or state.
 * qw_ctx_copy_prefix makes dst hold the first n tokens of src (same model,
 * n <= src's n_past): KV rows copied, dst's recurrent state zeroed — a model
 * with recurrent layers needs qw_ctx_state_load(dst, state at n, n) after.
 * 0, or -1 + err (out of memory: dst emptied).
 * qw_ctx_kv_fit shrinks c's KV allocation to its n_past (at least the
 * initial 256 positions): what qw_ctx_kv_bytes counts after a truncation. */
int qw_ctx_state_save(const qw_ctx *c, void *dst);
int32_t qw_ctx_state_load(qw_ctx *c, const void *src, int32_t n_past);
int qw_ctx_copy_prefix(qw_ctx *dst, const qw_ctx *src, int32_t n, qw_error *err);
void qw_ctx_kv_fit(qw_ctx *c);
/* Persisting a prefix (the prefix cache's disk files): export calls fn on
 * c's KV rows [0, n) (n <= n_past), every attention layer's K then V, in
 * layer order; import empties c, reserves n positions and calls fn on the
 * same buffers in the same order for it to fill, then holds n tokens
 * (recurrent state zeroed: load it after).  fn returns 0 to go on; a
 * nonzero return stops the walk and is returned (import: c emptied).
 * import: -1 + err when n does not fit or memory runs out. */
typedef int (*qw_kv_fn)(void *user, void *rows, size_t bytes);
int qw_ctx_kv_export(const qw_ctx *c, int32_t n, qw_kv_fn fn, void *user);
int qw_ctx_kv_import(qw_ctx *c, int32_t n, qw_kv_fn fn, void *user, qw_error *err);

/* Runs tokens[n] at positions n_past.. and appends them to the KV cache.
 * Internally splits into chunks of at most the context's chunk size.
 * Returns 0, or -1 + err (context full, invalid token id: c unchanged).  A
 * chunk that fails part-way (a streamed expert's disk read, memory) keeps
 * the chunks before it; a model with recurrent layers is emptied instead
 * (n_past 0, state zeroed, err says so), since its state may have taken part
 * of the failed chunk and cannot be rewound. */
int qw_ctx_eval(qw_ctx *c, const int32_t *tokens, int32_t n, qw_logits_mode mode, qw_error *err);
/* Called by qw_ctx_eval after each chunk it runs: n_done of n_total tokens of
 * this eval are in the KV cache (n_past includes them).  Instruments (memory
 * breakdowns, progress) hook here; fn = NULL removes the hook. */
typedef void (*qw_chunk_cb)(void *user, const qw_ctx *c, int32_t n_done, int32_t n_total);
void qw_ctx_set_chunk_cb(qw_ctx *c, qw_chunk_cb fn, void *user);
/* Asked by qw_ctx_eval before each chunk after the first: true stops the eval
 * there with -1 and err "cancelled after N of M tokens" (the N tokens stay in
 * the KV cache), so a request abandoned during a long prefill stops within one
 * chunk.  fn = NULL removes it. */
typedef bool (*qw_abort_cb)(void *user);
void qw_ctx_set_abort(qw_ctx *c, qw_abort_cb fn, void *user);
/* KV cache bytes currently allocated (grows on demand). */
uint64_t qw_ctx_kv_bytes(const qw_ctx *c);
/* Where a context's CPU forward passes spend their time, by phase
 * (QWISP_PROFILE=1, read when the context is made; docs/bench.md): wall
 * seconds on the calling thread, each phase's parallel passes included.
 * total is the wall time of the passes themselves; what no phase names
 * (total minus their sum) is bookkeeping between them. */
typedef enum {
    QW_PHASE_EMBED,       /* token embedding rows */
    QW_PHASE_ATTN_PROJ,   /* norm, activation conversion, q/k/v matmuls */
    QW_PHASE_ATTN_CORE,   /* q/k norms, RoPE, KV append, attention, output gate */
    QW_PHASE_ATTN_OUT,    /* output projection, residual */
    QW_PHASE_DELTA_PROJ,  /* DeltaNet: norm, its four projections, beta/decay */
    QW_PHASE_DELTA_CORE,  /* conv, q/k L2 norms, the delta rule, gated norm */
    QW_PHASE_DELTA_OUT,   /* output projection, residual */
    QW_PHASE_MOE_ROUTE,   /* norm, router matmul, top-k, look-ahead, grouping */
    QW_PHASE_MOE_GATE_UP, /* activation conversion, the experts' gate/up matmuls */
    QW_PHASE_MOE_ACT,     /* SwiGLU, conversion for the down matmuls */
    QW_PHASE_MOE_DOWN,    /* the experts' down matmuls */
    QW_PHASE_MOE_SHARED,  /* the shared expert (qwen35moe) */
    QW_PHASE_MOE_OUT,     /* weighting, the top-k sum, residual */
    QW_PHASE_HEAD,        /* output norm, LM head */
    QW_PHASE_COUNT
} qw_phase;
typedef struct qw_phase_times {
    double seconds[QW_PHASE_COUNT];
    double total;
    int64_t passes, tokens; /* forward passes (chunks) timed, their tokens */
} qw_phase_times;
/* Short name of a phase ("moe.gate_up"), for reports. */
const char *qw_phase_name(qw_phase p);
/* Copies c's times since the last reset into *out; false (and *out zeroed)
 * when c is not profiling (QWISP_PROFILE unset, or a device backend runs it). */
bool qw_ctx_phase_times(const qw_ctx *c, qw_phase_times *out);
void qw_ctx_phase_times_reset(qw_ctx *c);

/* Tokens per prefill chunk (default 512). */
void qw_ctx_set_chunk_size(qw_ctx *c, int32_t chunk);

/* One sequence's part of a batched step (the lanes path). */
typedef struct qw_batch_seq {
    qw_ctx *ctx;           /* the sequence: its KV cache and n_past */
    const int32_t *tokens; /* appended at ctx's next positions */
    int32_t n;
    bool logits;           /* store the last token's logits in ctx (qw_ctx_logits) */
} qw_batch_seq;

/* Runs several sequences' tokens in ONE forward pass on workspace ws: every
 * weight is read once for all of them and MoE tokens are grouped by expert
 * across sequences; each sequence ropes at its own positions and attends over
 * its own KV cache.  Per-token results equal qw_ctx_eval's on each sequence
 * alone (rows are computed independently).  The total tokens should fit ws's
 * chunk size (larger batches grow its buffers).  Contexts must be distinct
 * and of ws's model; ws may be one of them.  0, or -1 + err with nothing
 * appended to any sequence; when the pass itself failed part-way, sequences
 * with recurrent state are emptied instead (as in qw_ctx_eval). */
int qw_batch_eval(qw_ctx *ws, const qw_batch_seq *seqs, int n_seqs, qw_error *err);
/* The most sequences one qw_batch_eval takes (the backends' eval_batch too). */
enum { QW_BATCH_MAX_SEQS = 256 };

/* Logits from the last eval: LAST -> [n_vocab]; ALL -> [n][n_vocab]. */
const float *qw_ctx_logits(const qw_ctx *c);

#endif
