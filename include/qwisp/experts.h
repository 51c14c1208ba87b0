/* experts.h — where the MoE layer gets an expert's weights: the expert source.
 *
 * The forward asks "give me expert e of layer l (gate, up, down)"; a source
 * answers from one of two tiers:
 *
 *   resident   the mmaped *_exps tensors themselves, prefaulted at load
 *              (MADV_WILLNEED + one read per page), mlock'ed with QWISP_MLOCK=1.
 *   streaming  non-expert weights stay mmaped; experts live in a fixed arena
 *              of C slots per layer (the bounded expert cache) and are read on
 *              demand from the GGUF file (io_uring, else pread threads); the
 *              next layer's likely experts are read ahead (qw_experts_ahead).  An
 *              expert is three contiguous slices, one of each merged tensor.
 *
 * Protocol for one layer of one chunk (qw_moe_block, src/model/moe.c):
 *
 *     qw_experts_need(x, il, sel, n * k);     // hint: the chunk's chosen experts
 *     for each group of <= qw_experts_max_pinned(x) experts (ascending id):
 *         qw_experts_get(x, il, e, &wg, &wu, &wd, &err);   // pins e
 *         ... matmuls ...
 *         qw_experts_release(x, il);                        // unpins the group
 *
 * A pinned expert is never evicted, so every expert of a group is resident at
 * once; streaming needs C >= the group size, hence max_pinned == C (minimum C
 * = n_expert_used, one token's experts).  need() lets the source start reads
 * for the chunk's missing experts before the forward waits on the first one.
 *
 * Errors (EIO, short read, file truncated under us) fail the get with a
 * message naming the file, layer, expert and offset; the failing layer's pins
 * are dropped and the source stays usable for the next request.
 *
 * One forward at a time per source (the runtime's paths guarantee it).
 *
 * What a source knows of the model is a layout (qw_expert_layout): the file,
 * and per layer where each of the three merged expert tensors starts (in the
 * mapping and in the file) and the bytes of one expert's matrix.  The model
 * describes itself (qw_model_expert_layout, model.h); experts/ never sees a
 * qw_model.  Who decides the tier: the caller that knows the real context
 * (runtime/place.c), from qw_tier_decide below.
 */
#ifndef QWISP_EXPERTS_H
#define QWISP_EXPERTS_H

#include "qwisp/base.h"
#include "qwisp/stats.h"

#include <stddef.h>
#include <stdint.h>

typedef struct qw_experts qw_experts;

typedef enum { QW_TIER_RESIDENT = 0, QW_TIER_STREAMING = 1 } qw_tier;

/* ---- the tier decision (pure; tier.c) ---- */

typedef struct qw_tier_input {
    uint64_t ram_phys;        /* physical RAM (0 = unknown) */
    uint64_t ram_cgroup;      /* smallest cgroup limit on the path (0 = none) */
    uint64_t ram_device;      /* QWISP_DEVICE_RAM in bytes (0 = unset) */
    int64_t raw_c;            /* QWISP_RAW_C; -1 = unset */
    uint64_t expert_bytes;    /* all experts of all layers as stored in the file */
    uint64_t nonexpert_bytes; /* every other tensor */
    uint64_t kv_bytes;        /* KV cache for the requested context */
    uint64_t slot_bytes;      /* one slot: one expert's gate+up+down incl. read alignment */
    int32_t n_layer, n_expert, n_expert_used;
} qw_tier_input;

typedef struct qw_tier_decision {
    qw_tier tier;
    int32_t c;           /* slots per layer (streaming); n_expert when resident */
    uint64_t ram;        /* RAM the decision assumed (0 = unknown) */
    uint64_t headroom;   /* bytes kept free for activations, pool, stacks */
    uint64_t budget;     /* bytes left for experts */
    char line[192];      /* "tier=streaming C=48/128 (RAM 16.0 GB, experts 14.2 GB)" */
} qw_tier_decision;

/* Headroom kept beside weights and KV: 32 MiB + RAM/16. */
uint64_t qw_tier_headroom(uint64_t ram);
/* Decides tier and C.  RAM = min of the known limits; explicit raw_c wins
 * (0 = resident, n clamped to [n_expert_used, n_expert]); otherwise resident
 * if all experts fit in RAM - non-expert - KV - headroom, else streaming with
 * as many slots per layer as fit (at least n_expert_used).  Never fails. */
void qw_tier_decide(const qw_tier_input *in, qw_tier_decision *out);

/* ---- the layout a source is opened on ---- */

/* One merged expert tensor of one layer (gate, up or down): expert e's matrix
 * is data + e * matrix_bytes in the mapping, file_off + e * matrix_bytes in
 * the file. */
typedef struct qw_expert_part {
    const char *name;    /* the tensor's name, for errors */
    const void *data;    /* expert 0 in the mapping */
    uint64_t file_off;   /* expert 0 in the file */
    size_t matrix_bytes; /* one expert's matrix */
} qw_expert_part;

/* A byte range of the mapping (the resident tier prefaults / mlocks them). */
typedef struct qw_mapped_range {
    const void *p;
    size_t n;
} qw_mapped_range;

typedef struct qw_expert_layout {
    const char *path;                 /* the file streamed experts are read from */
    int32_t n_layer, n_expert;
    const qw_expert_part (*parts)[3]; /* [n_layer][gate, up, down] */
    const qw_mapped_range *weights;   /* every weight tensor in the mapping */
    size_t n_weights;
} qw_expert_layout;

/* ---- the source ---- */

/* Opens the source the decision names on layout l (whose mapping and file
 * must outlive the source; the layout itself is copied).  Reads QWISP_MLOCK,
 * QWISP_SSD_THROTTLE_GBS, QWISP_EXPERT_READERS, QWISP_STREAM_IO, QWISP_STREAM_QD,
 * QWISP_LOOKAHEAD, QWISP_FAULT_READ.  NULL + err. */
qw_experts *qw_experts_open(const qw_expert_layout *l, const qw_tier_decision *d, qw_error *err);
void qw_experts_close(qw_experts *x);

qw_tier qw_experts_tier(const qw_experts *x);
/* Most experts of one layer that may be pinned at once (C; INT32_MAX resident). */
int32_t qw_experts_max_pinned(const qw_experts *x);
/* Hint: the chunk's routed experts for layer il (sel[n], duplicates allowed). */
void qw_experts_need(qw_experts *x, int32_t il, const int32_t *sel, int32_t n);
/* Pins expert e of layer il and returns its three matrices.  0, or -1 + err
 * (every pin of layer il dropped). */
int qw_experts_get(qw_experts *x, int32_t il, int32_t e, const char **gate, const char **up,
                   const char **down, qw_error *err);
/* Whether get(il, e) would return without waiting for a read (always true
 * resident).  A hint: the answer may change before the get. */
bool qw_experts_ready(qw_experts *x, int32_t il, int32_t e);
/* Unpins every expert of layer il. */
void qw_experts_release(qw_experts *x, int32_t il);
/* Look-ahead hint (streaming; a no-op resident): layer il will probably need
 * sel[n] (best first); reads start into free slots only.  Never fails and
 * never changes results. */
void qw_experts_ahead(qw_experts *x, int32_t il, const int32_t *sel, int32_t n);
/* Near-lossless routing (QWISP_NEAR_LOSSLESS=R, streaming only; resident or
 * R = 0: returns 0 and changes nothing).  sel[k] is one token's top-k for
 * layer il and ranked[r] its router ranking (best first, r <= R); each sel[i]
 * neither cached nor loading is replaced by the best-ranked expert of
 * ranked[k..r) that is, and is not in sel already.  Returns the number
 * replaced (counted in "substituted"); the caller renormalises the weights. */
int32_t qw_experts_substitute(qw_experts *x, int32_t il, int32_t *sel, int32_t k, const int32_t *ranked, int32_t r);
/* QWISP_NEAR_LOSSLESS's R for this source: 0 = off (always 0 resident). */
int32_t qw_experts_near_lossless(const qw_experts *x);
/* Top-N experts to predict per token for the next layer, given the model's
 * top-k (QWISP_LOOKAHEAD; -1 = k): 0 = no look-ahead (resident tier, or
 * QWISP_LOOKAHEAD=0). */
int32_t qw_experts_ahead_n(const qw_experts *x, int32_t k);

/* The expert source's counters, declared once (stats.h says how the list is
 * read): the struct below, `qwisp run --json`'s "experts" object (between
 * "tier" and "decision"), /metrics' qwisp_expert_* and the MEMDBG lines
 * ("expert_" + key) come from this list, in this order.  Keys "hits",
 * "misses", "bytes_read" are read by `qwisp ab` (ab_trial.c): rename none.
 * Process-wide, of the most recently opened source. */
#define QW_EXPERTS_STATS(X, D)                                                                             \
    X(c, CURRENT, COUNT, "c", "expert_cache_slots", "slots per layer (C; n_expert when resident)")        \
    X(n_expert, CURRENT, COUNT, "n_expert", "expert_n_expert", "routed experts per layer")                \
    X(hits, TOTAL, COUNT, "hits", "expert_cache_hits_total",                                              \
      "gets served from the cache (resident: every get)")                                                  \
    X(misses, TOTAL, COUNT, "misses", "expert_cache_misses_total", "gets that read the expert from disk") \
    D(hit_rate, CURRENT, RATIO, "hit_rate", "expert_cache_hit_ratio",                                     \
      "hits / (hits + misses) since start; 1 with resident experts, 0 before any",                        \
      s->hits + s->misses ? (double)s->hits / (double)(s->hits + s->misses) : 0)                           \
    X(bytes_read, TOTAL, BYTES, "bytes_read", "expert_read_bytes_total",                                  \
      "bytes read from disk (incl. alignment)")                                                            \
    X(reads, TOTAL, COUNT, "reads", "expert_reads_total", "reads issued (3 per expert)")                  \
    X(read_errors, TOTAL, COUNT, "read_errors", "expert_read_errors_total", "reads that failed")          \
    X(read_ns, TOTAL, NS, "read_ms", "expert_read_seconds_total",                                         \
      "time reads were in flight (queued included), summed over reads")                                  \
    X(wait_ns, TOTAL, NS, "wait_ms", "expert_wait_seconds_total", "time the forward waited for reads")    \
    X(throttle_ns, TOTAL, NS, "throttle_ms", "expert_throttle_seconds_total",                             \
      "time readers slept for QWISP_SSD_THROTTLE_GBS")                                                    \
    X(uring, CURRENT, COUNT, "uring", "expert_io_uring", "1: expert reads go through io_uring; 0: pread threads") \
    X(ahead_predicted, TOTAL, COUNT, "ahead_predicted", "expert_ahead_predicted_total",                  \
      "experts the look-ahead predicted for the next layer (scored predictions)")                         \
    X(ahead_correct, TOTAL, COUNT, "ahead_correct", "expert_ahead_correct_total",                        \
      "predicted experts the next layer did choose")                                                      \
    X(ahead_needed, TOTAL, COUNT, "ahead_needed", "expert_ahead_needed_total",                           \
      "experts chosen by layers that had a prediction")                                                   \
    D(ahead_precision, CURRENT, RATIO, "ahead_precision", "expert_ahead_precision_ratio",                \
      "look-ahead: correct / predicted", s->ahead_predicted ? (double)s->ahead_correct / (double)s->ahead_predicted : 0) \
    D(ahead_recall, CURRENT, RATIO, "ahead_recall", "expert_ahead_recall_ratio",                         \
      "look-ahead: correct / needed", s->ahead_needed ? (double)s->ahead_correct / (double)s->ahead_needed : 0) \
    X(ahead_reads, TOTAL, COUNT, "ahead_reads", "expert_ahead_reads_total", "experts read by look-ahead") \
    X(ahead_used, TOTAL, COUNT, "ahead_used", "expert_ahead_used_total",                                 \
      "look-ahead reads a get then used (each also counts as a miss)")                                    \
    X(ahead_hidden_ns, TOTAL, NS, "ahead_hidden_ms", "expert_ahead_hidden_seconds_total",                \
      "read time of used look-ahead loads the forward did not wait for")                                  \
    X(substituted, TOTAL, COUNT, "substituted", "expert_substituted_total",                              \
      "near-lossless: chosen experts replaced by a cached lower-ranked one (0 unless QWISP_NEAR_LOSSLESS)") \
    X(arena_bytes, CURRENT, BYTES, "arena_bytes", "expert_arena_bytes", "the slot arena's size (streaming)") \
    X(locked_bytes, CURRENT, BYTES, "locked_bytes", "expert_locked_bytes",                                \
      "mlock'ed weights (resident, QWISP_MLOCK=1)")                                                        \
    X(copied_bytes, CURRENT, BYTES, "copied_bytes", "expert_copied_bytes",                                \
      "weights copied into anonymous memory (resident, QWISP_WEIGHTS_COPY=1)")

typedef struct qw_experts_stats {
    int tier;       /* qw_tier ("tier" in --json) */
    char line[192]; /* the load-time decision ("decision" in --json) */
    QW_EXPERTS_STATS(QW_STAT_FIELD, QW_STAT_NONE)
} qw_experts_stats;

/* The list as a table (experts.c), for the outputs. */
extern const qw_stat_group qw_experts_stat_group;
qw_experts_stats qw_experts_get_stats(void);
/* Adds "experts": {...} to a cJSON object (void * keeps cJSON out of this header). */
void qw_experts_stats_json(void *cjson_object);
/* Adds key: {...} with the counters since the snapshot `since` (gauges as
 * they are; ratios from the differences): e.g. the decode phase alone. */
void qw_experts_stats_json_since(void *cjson_object, const char *key, const qw_experts_stats *since);
/* Writes the list as " expert_KEY=VALUE" fields (a MEMDBG line's tail). */
void qw_experts_stats_line(FILE *f);

#endif
