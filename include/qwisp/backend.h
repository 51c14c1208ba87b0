/* backend.h — the whole-forward-pass backend seam: where a GPU takes over.
 *
 * ops.h is per kernel with host pointers; a GPU wants the whole forward pass
 * on the device, with the weights, the KV cache and the recurrent state in
 * device memory, and only token ids in and logits out crossing the bus.  So a
 * backend plugs in one level up, at the model: it uploads a loaded qw_model,
 * makes a device context per qw_ctx, and evaluates a chunk of tokens into
 * host logits.  model/ calls it from qw_ctx_eval / qw_batch_eval /
 * qw_ctx_truncate when the context has a device side; otherwise the CPU path
 * runs, unchanged.
 *
 *     qw_place_experts(m, n_ctx, &err);   // runtime/: also qw_backend_attach
 *     qw_ctx *c = qw_ctx_new(m, ...);     // device context when m->dev
 *     qw_ctx_eval(c, ids, n, QW_LOGITS_LAST, &err);   // runs on the device
 *
 * The CUDA backend (src/cuda/, docs/cuda.md) is a shared object the binary
 * dlopen()s only when it is chosen (QWISP_BACKEND=cpu|cuda|auto), so a
 * CPU-only user never loads the CUDA runtime.  The object exports one symbol,
 * QW_BACKEND_ENTRY, returning its ops table; abi must equal QW_BACKEND_ABI.
 * Errors are written into a qw_error (the object fills msg itself: it links
 * nothing of libqwisp).
 */
#ifndef QWISP_BACKEND_H
#define QWISP_BACKEND_H

#include "qwisp/model.h"

#define QW_BACKEND_ABI 15
#define QW_BACKEND_ENTRY "qw_backend_cuda_ops"
/* qw_backend_cfg.lanes_group when QWISP_DEVICE_LANES_GROUP is unset */
#define QW_LANES_GROUP_AUTO 3

/* What the host tells the backend when it uploads a model: the policy knobs
 * (already parsed from the options table) and the host pool's size-class
 * rule, so the device pool fits requests exactly as the host pool does. */
typedef struct qw_backend_cfg {
    uint64_t vram_limit;         /* QWISP_DEVICE_VRAM in bytes (0 = the device's free memory) */
    int64_t expert_slots;        /* QWISP_DEVICE_SLOTS (-1 = choose) */
    uint64_t cache_limit;        /* device pool cache limit in bytes (0 = unbounded) at upload */
    uint64_t (*get_cache_limit)(void); /* the host pool's current limit (qw_pool_get_cache_limit):
                                        * the path's limit, set after upload, applies to the device too */
    int fit_exact;               /* QWISP_POOL_FIT=exact */
    size_t (*class_size)(size_t n); /* the host pool's size classes (qw_pool_class_size) */
    int kv_f32;                  /* QWISP_KV_TYPE=f32 */
    int64_t kv_positions;        /* positions over all contexts, for the tier decision */
    int pin_host;                /* QWISP_DEVICE_PIN: 0 off, 1 auto, 2 on: page-lock the mmaped experts (streaming tier) */
    int mma;                     /* QWISP_DEVICE_MMA: 0 off, 1 auto, 2 always */
    int32_t chunk;               /* QWISP_CHUNK: tokens per prefill chunk (the activations the tier reserves) */
    uint64_t stage_bytes;        /* QWISP_DEVICE_STAGE_MB in bytes: page-locked staging for pageable expert copies (0 = the driver's) */
    int pdl;                     /* QWISP_DEVICE_PDL: 1 = programmatic dependent launch where the device has it */
    int lanes_group;             /* QWISP_DEVICE_LANES_GROUP: 0 a tile per pick, 1 grouped (tensor cores), 2 grouped (dp4a), QW_LANES_GROUP_AUTO (unset) grouped (tensor cores) from 8 tokens */
    /* QWISP_DEVICE_HOST_EXPERTS: up to host_experts of a layer's experts that
     * miss the VRAM cache computed by host_run(host, ...) (qw_host_experts_run:
     * out[i] = expert[i]'s FFN of row tok[i] of xn) instead of copied; 0 = none */
    int host_experts;
    /* QWISP_DEVICE_MISSES=host: in those steps every pick whose expert is not in
     * a fixed VRAM set (loaded once) goes to host_run; prefill chunks still copy */
    int host_misses;
    /* with host_misses: [n_layer][n_expert], each layer's experts in the order
     * they earn a fixed slot (QWISP_DEVICE_FIXED's profile); NULL = index order */
    const int32_t *fixed_order;
    int (*host_run)(void *host, int il, const float *xn, int n_tok, const int32_t *tok, const int32_t *expert, int n,
                    float *out, qw_error *err);
    void *host;
} qw_backend_cfg;

/* Device memory and tier counters (one X-macro list, stats.h rows in backend.c). */
#define QW_DEVICE_STATS(X, D)                                                                              \
    X(active_bytes, CURRENT, BYTES, "active", "device_pool_active_bytes", "device bytes handed out")      \
    X(cache_bytes, CURRENT, BYTES, "cache", "device_pool_cache_bytes", "device bytes held free for reuse") \
    X(peak_bytes, PEAK, BYTES, "peak", "device_pool_peak_bytes", "max active device bytes")               \
    X(cache_peak_bytes, PEAK, BYTES, "cache_peak", "device_pool_cache_peak_bytes", "max device bytes held free for reuse") \
    X(held_peak_bytes, PEAK, BYTES, "peak_held", "device_pool_held_peak_bytes", "max device bytes the pool held from cudaMalloc (active + cache): its footprint") \
    X(evicted_bytes, TOTAL, BYTES, "evicted_bytes", "device_pool_evicted_bytes_total", "cached device bytes the limit gave back") \
    X(cache_limit, CURRENT, BYTES, "limit", "device_pool_cache_limit_bytes", "device cache limit (0 = unbounded)") \
    X(hits, TOTAL, COUNT, "hits", "device_pool_hits_total", "device requests served from the cache")      \
    X(misses, TOTAL, COUNT, "misses", "device_pool_misses_total", "device requests that went to cudaMalloc") \
    X(weight_bytes, CURRENT, BYTES, "weights", "device_weight_bytes", "weights resident in device memory") \
    X(expert_slot_bytes, CURRENT, BYTES, "expert_cache", "device_expert_cache_bytes", "streaming tier: VRAM expert cache") \
    X(expert_copies, TOTAL, COUNT, "expert_copies", "device_expert_copies_total", "streaming tier: experts copied host -> device") \
    X(expert_copy_bytes, TOTAL, BYTES, "expert_copy_bytes", "device_expert_copy_bytes_total", "streaming tier: bytes copied host -> device") \
    X(expert_pinned_bytes, CURRENT, BYTES, "expert_pinned", "device_expert_pinned_bytes", "streaming tier: host expert bytes page-locked for DMA") \
    X(host_expert_rows, TOTAL, COUNT, "host_experts", "device_host_expert_rows_total", "streaming tier: expert outputs the host computed (QWISP_DEVICE_HOST_EXPERTS)")

#define QW_DEVICE_STATS_FIELD(f, ...) uint64_t f;
typedef struct qw_device_stats {
    QW_DEVICE_STATS(QW_DEVICE_STATS_FIELD, QW_DEVICE_STATS_FIELD)
} qw_device_stats;
#undef QW_DEVICE_STATS_FIELD

/* The VRAM tier, decided from sizes only (pure: the CUDA object calls it at
 * upload, tests/gpu checks it without a GPU).
 *   budget     device bytes to use (free memory, or QWISP_DEVICE_VRAM)
 *   reserve    KV cache + recurrent state + one chunk of activations
 *   dense      non-expert weights;  experts: all routed-expert weights
 *   one        one expert's gate+up+down summed over the layers (a slot a layer)
 *   forced     QWISP_DEVICE_SLOTS (-1 = choose; 0 = resident)
 * slots = 0: resident (everything fits, or forced); else C slots per layer
 * (n_expert_used <= C < n_expert).  fits = false when not even
 * n_expert_used slots fit next to the non-expert weights. */
typedef struct qw_device_tier {
    int64_t slots;
    bool fits;
} qw_device_tier;

static inline qw_device_tier qw_device_tier_decide(uint64_t budget, uint64_t reserve, uint64_t dense,
                                                   uint64_t experts, uint64_t one, int n_expert, int n_used,
                                                   int64_t forced) {
    qw_device_tier t = {0, true};
    const uint64_t avail = budget > reserve ? budget - reserve : 0;
    if (forced >= 0) {
        t.slots = forced >= n_expert ? 0 : forced;
        t.fits = t.slots == 0 || t.slots >= n_used;
        return t;
    }
    if (dense + experts <= avail) return t;
    t.slots = avail > dense && one ? (int64_t)((avail - dense) / one) : 0;
    if (t.slots >= n_expert) t.slots = 0; /* rounding: every expert fits after all */
    else if (t.slots < n_used) t.fits = false;
    return t;
}

/* One sequence of a batched step (eval_batch): its tokens go at its own
 * positions, against its own KV cache and recurrent state. */
typedef struct qw_backend_seq {
    void *dc;              /* the sequence's device context */
    const int32_t *tokens; /* appended at positions n_past.. */
    int32_t n, n_past;
    float *logits;         /* NULL, or [n_vocab]: the logits of its last token */
} qw_backend_seq;

typedef struct qw_backend_ops {
    int abi;          /* QW_BACKEND_ABI */
    const char *name; /* "cuda" */
    /* 0 when a device is usable (its name in dev, n bytes); -1 + err saying why not. */
    int (*probe)(char *dev, size_t n, qw_error *err);
    /* Uploads m (weights to device memory, or the non-expert part + an expert
     * cache when they do not fit).  NULL + err. */
    void *(*model_new)(const qw_model *m, const qw_backend_cfg *cfg, qw_error *err);
    void (*model_free)(void *dm);
    /* One line: device, tier, bytes (for the log and `qwisp run`). */
    const char *(*model_describe)(void *dm);
    void (*model_stats)(void *dm, qw_device_stats *out);
    /* A device context of n_ctx positions.  NULL + err. */
    void *(*ctx_new)(void *dm, int32_t n_ctx, qw_error *err);
    void (*ctx_free)(void *dc);
    /* Runs tokens[n] at positions n_past.. (appended to the device KV cache /
     * state).  logits: NULL (none), or [1][n_vocab] of the last token
     * (all = 0), or [n][n_vocab] (all = 1).  0, or -1 + err. */
    int (*eval)(void *dc, const int32_t *tokens, int32_t n, int32_t n_past, float *logits, int all,
                qw_error *err);
    /* Zeroes the recurrent state (the context starts over). */
    void (*ctx_reset)(void *dc);
    /* Device bytes this context holds (KV + state + activations). */
    uint64_t (*ctx_bytes)(void *dc);
    /* The recurrent state, host buf <-> device (to_device = 1: load), in
     * qw_ctx_state_save's layout: conv then delta of each recurrent layer, in
     * layer order (the device keeps the CPU's layouts, so the bytes are the
     * CPU path's).  0, or -1 + err. */
    int (*ctx_state_io)(void *dc, void *buf, int to_device, qw_error *err);
    /* Attention layer il's first n K (kv = 0) or V (kv = 1) rows, host buf <->
     * device, rows as the CPU's KV cache holds them; loading grows the device
     * KV to n positions first.  0, or -1 + err. */
    int (*ctx_kv_io)(void *dc, int il, int kv, int32_t n, void *buf, int to_device, qw_error *err);
    /* dst's KV holds src's first n positions (same model), copied on the device. */
    int (*ctx_kv_copy)(void *dst, void *src, int32_t n, qw_error *err);
    /* A copy of the recurrent state kept in device memory (from the device
     * pool): what a mark holds, so rewinding never crosses the bus.  snap_new:
     * a snapshot sized for dc's state, NULL + err.  snap_copy: save = 1 copies
     * dc's state into snap, 0 copies snap back into dc (device to device, on
     * dc's stream).  0, or -1 + err. */
    void *(*snap_new)(void *dc, qw_error *err);
    int (*snap_copy)(void *dc, void *snap, int save, qw_error *err);
    void (*snap_free)(void *snap);
    /* The lanes path's step: the sequences' tokens, rows packed in order, in
     * ONE forward pass on workspace ws's activations (ws: any context of the
     * model, one of the sequences or not), so every weight is read once for
     * all of them; attention and the recurrent state per sequence.  Each row's
     * logits are the bits eval gives the same sequence alone.  The contexts
     * must be distinct.  0, or -1 + err. */
    int (*eval_batch)(void *ws, const qw_backend_seq *seqs, int n_seqs, qw_error *err);
    /* Page-locks host buffer p[n], one that eval / eval_batch write logits
     * into, so their copies go by DMA (into pageable memory the driver copies
     * through its own staging, the host waiting).  0, or -1 when it cannot
     * (copies then stay pageable).  host_unpin undoes it; it must run before
     * p goes back to the pool.  Either may be NULL. */
    int (*host_pin)(void *p, size_t n);
    void (*host_unpin)(void *p);
} qw_backend_ops;

typedef enum { QW_BACKEND_CPU = 0, QW_BACKEND_CUDA = 1, QW_BACKEND_AUTO = 2 } qw_backend_kind;

/* Parses QWISP_BACKEND's word ("cpu" | "cuda" | "auto"); -1 if unknown. */
int qw_backend_parse(const char *word);

/* Loads the CUDA backend's shared object (QWISP_CUDA_LIB, else
 * libqwisp_cuda.so next to the executable or in ../lib/qwisp/) and probes a
 * device.  The ops table, or NULL + err naming why (no driver, no device, no
 * object, wrong ABI).  The result is cached for the process. */
const qw_backend_ops *qw_backend_cuda(qw_error *err);

/* Chooses the backend for m by QWISP_BACKEND and, for CUDA, uploads the model
 * (m->backend, m->dev).  auto: CUDA when a device is usable, else the CPU
 * (logged at info); cuda: -1 + err naming why when it is not.  kv_positions
 * sizes the tier decision.  0 when m stays on the CPU or is on the device. */
int qw_backend_attach(qw_model *m, int64_t kv_positions, qw_error *err);

/* Drops m's device side (qw_model_free calls it). */
void qw_backend_detach(qw_model *m);

/* Device counters of m (zeros on the CPU) and the stats.h group they print as. */
qw_device_stats qw_backend_stats(const qw_model *m);
/* The same for the model most recently put on the device (the process's one
 * model in `run` / `serve`), for --json, /metrics and the MEMDBG lines; false
 * (zeros) when nothing is on a device. */
bool qw_backend_active_stats(qw_device_stats *s);
/* " dev_active=MB dev_cache=MB …" for a MEMDBG line (nothing on the CPU). */
void qw_backend_stats_line(FILE *f);
struct qw_stat_group;
extern const struct qw_stat_group qw_device_stat_group;

#endif
