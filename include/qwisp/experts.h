/* experts.h — where the MoE layer gets an expert's weights: the expert source.
 *
 * The forward asks "give me expert e of layer l (gate, up, down)"; a source
 * answers from one of two tiers:
 *
 *   resident   the mmaped *_exps tensors themselves, prefaulted at load
 *              (MADV_WILLNEED + one read per page), mlock'ed with QWISP_MLOCK=1.
 *   streaming  non-expert weights stay mmaped; experts live in a fixed arena
 *              of C slots per layer (the bounded expert cache) and are read on
 *              demand from the GGUF file with pread by reader threads.  An
 *              expert is three contiguous slices, one of each merged tensor.
 *
 * Protocol for one layer of one chunk (moe_block):
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
 */
#ifndef QWISP_EXPERTS_H
#define QWISP_EXPERTS_H

#include "qwisp/base.h"

#include <stddef.h>
#include <stdint.h>

struct qw_model;
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

/* Probes: physical RAM; smallest memory limit of this process's cgroup and
 * its ancestors (v2 memory.max or v1 memory.limit_in_bytes), 0 if none. */
uint64_t qw_ram_physical(void);
uint64_t qw_ram_cgroup_limit(void);
/* Parses a GB amount ("16", "0.25") into bytes; -1 + err naming `what`. */
int qw_parse_gb(const char *what, const char *text, uint64_t *bytes, qw_error *err);

/* ---- the source ---- */

/* Fills *in for model m and a context of n_ctx positions from the knobs and
 * probes (QWISP_RAW_C, QWISP_DEVICE_RAM).  -1 + err on a malformed knob. */
int qw_tier_input_for(const struct qw_model *m, int32_t n_ctx, qw_tier_input *in, qw_error *err);
/* Opens the source the decision names on model m (whose GGUF stays open while
 * the source lives).  Reads QWISP_MLOCK, QWISP_SSD_THROTTLE_GBS,
 * QWISP_EXPERT_READERS, QWISP_FAULT_READ.  NULL + err. */
qw_experts *qw_experts_open(const struct qw_model *m, const qw_tier_decision *d, qw_error *err);
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
/* Unpins every expert of layer il. */
void qw_experts_release(qw_experts *x, int32_t il);

/* Process-wide statistics of the most recently opened source. */
typedef struct qw_experts_stats {
    int tier;               /* qw_tier */
    int32_t c, n_expert;
    uint64_t hits, misses;  /* gets served from the cache / needing a disk read */
    uint64_t bytes_read;    /* bytes read from disk (incl. alignment) */
    uint64_t reads;         /* preads issued (3 per expert) */
    uint64_t read_errors;
    uint64_t read_ns;       /* time inside preads, summed over reader threads */
    uint64_t wait_ns;       /* time the forward waited for reads */
    uint64_t throttle_ns;   /* time readers slept for QWISP_SSD_THROTTLE_GBS */
    uint64_t arena_bytes;   /* the slot arena's size (streaming) */
    uint64_t locked_bytes;  /* mlock'ed (resident, QWISP_MLOCK=1) */
    char line[192];         /* the load-time decision */
} qw_experts_stats;
qw_experts_stats qw_experts_get_stats(void);
/* Adds "experts": {...} to a cJSON object (void * keeps cJSON out of this header). */
void qw_experts_stats_json(void *cjson_object);

#endif
