/* cu_model.h — private to src/cuda: the model on the device (cu_model.cu
 * owns it) and the device context (cu_forward.cu owns it).
 *
 * Tiers (decided once at upload, cu_model.cu):
 *   resident   every weight in one device arena;
 *   streaming  the non-expert weights in the arena, the routed experts left
 *              in host memory (the mmaped file) and copied on demand into
 *              `slots` expert slots per layer (gate, up and down of one
 *              expert a slot), least recently used first out.  The matmuls
 *              read a slot exactly as they read the resident expert, so the
 *              two tiers give the same bits.
 */
#ifndef QWISP_CU_MODEL_H
#define QWISP_CU_MODEL_H

#include "cu_common.h"

typedef struct cu_layer {
    bool recurrent, gated;
    cu_tensor attn_norm, wq, wk, wv, wo, q_norm, k_norm, ffn_norm;
    cu_tensor wqkv, wz, w_beta, w_alpha, conv1d, dt_bias, ssm_a, ssm_norm, ssm_out;
    cu_tensor shexp_gate, gate_shexp, up_shexp, down_shexp;
    cu_tensor gate_inp, gate_exps, up_exps, down_exps; /* experts: data NULL when streaming */
    /* streaming tier: slots [slots] matrices of each of gate / up / down */
    uint8_t *slot_g, *slot_u, *slot_d;
    int32_t *slot_of;   /* [n_expert] host: slot holding expert e, -1 = none */
    int32_t *who;       /* [slots] host: expert in slot s, -1 = empty */
    uint64_t *stamp;    /* [slots] host: last use (LRU) */
} cu_layer;

typedef struct cu_stager cu_stager; /* cu_stage.cu */

typedef struct cu_model {
    const qw_model *m;
    qw_hparams hp;
    cu_tensor tok_embd, output_norm, output;
    cu_layer *layers;
    void *arena;
    size_t arena_bytes;
    bool streaming;
    int slots;
    uint64_t clock;
    int kv_f32;
    uint64_t slot_bytes, copies, copy_bytes;
    /* streaming tier, QWISP_DEVICE_PIN=auto: page-locked spans of the mmaped file */
    void **pinned;
    int n_pinned;
    uint64_t pinned_bytes;
    char pin_why[160]; /* why not, when the driver refused */
    cu_stager *stager;  /* not page-locked: copies staged through page-locked buffers (NULL = the driver's) */
    /* streaming tier, QWISP_DEVICE_HOST_EXPERTS: each token's last host_experts
     * top-k picks computed by the host (qw_backend_cfg's host_run) */
    int host_experts;
    /* QWISP_DEVICE_MISSES=host: slots [0, n_fixed) of every layer hold n_fixed
     * experts for good (QWISP_DEVICE_FIXED's most used, else 0 .. n_fixed-1;
     * loaded at attach, never evicted); in decode and lanes steps the GPU runs
     * the picks they hold and the host the others, and prefill copies through
     * the other slots */
    int host_misses, n_fixed;
    bool fixed_profile; /* the fixed set from QWISP_DEVICE_FIXED's profile, not experts 0 .. n_fixed-1 */
    uint64_t host_rows; /* expert outputs the host computed */
    int (*host_run)(void *host, int il, const float *xn, int n_tok, const int32_t *tok, const int32_t *expert, int n,
                    float *out, qw_error *err);
    void *host;
    char desc[1024];
} cu_model;

/* Whether layer L's expert e sits in one of the fixed slots (QWISP_DEVICE_MISSES=host). */
static inline bool cu_fixed(const cu_model *dm, const cu_layer *L, int e) {
    return L->slot_of[e] >= 0 && L->slot_of[e] < dm->n_fixed;
}

/* ---- cu_model.cu ---- */
/* Makes the expert slots of layer L hold every expert of `experts[n]` (n <=
 * slots, distinct), copying the missing ones from host memory on stream s.
 * 0 / -1 + err. */
int cu_model_load_experts(cu_model *dm, int il, const int32_t *experts, int n, cudaStream_t s, qw_error *err);

/* ---- cu_stage.cu ---- */
/* Page-locked staging buffers of `bytes` in all and their filling threads;
 * NULL with why on failure. */
cu_stager *cu_stager_new(size_t bytes, char *why, size_t why_n);
void cu_stager_free(cu_stager *st);
int cu_stager_threads(const cu_stager *st);
size_t cu_stager_bytes(const cu_stager *st);
/* Queues a copy of n bytes from pageable host memory to the device on
 * stream s; the bytes are read from src by the next flush (at the latest),
 * so src must stay mapped until then.  0 / -1 + err. */
int cu_stager_put(cu_stager *st, void *dst, const void *src, size_t n, cudaStream_t s, qw_error *err);
/* Copies what was put into the current buffer and queues its DMAs. */
int cu_stager_flush(cu_stager *st, cudaStream_t s, qw_error *err);

#endif
