/* tune.h — the machine-dependent parameters of the matmul kernels, their
 * calibration and the cache file that keeps it.
 *
 * What a parameter is: a number the kernels read at run time whose best value
 * depends on the CPU and its memory (how many cache misses one core keeps in
 * flight, how large L2 is), never on the model: the bytes of weights one
 * decode work item streams, how far ahead the decode row loops prefetch, the
 * rows of one prefill work item.  Every value gives the SAME result bits: a
 * row's dot does not depend on which item or thread computes it, or on what
 * was prefetched (the tile contract in quant.h), so calibration can only
 * change speed.
 *
 * Where a value comes from, in this order (the last one that applies wins):
 *   default     built in, safe on every CPU (the numbers tuned on a Zen 5);
 *   calibrated  measured by `qwisp tune` on this machine and read back from
 *               the cache file, keyed by the CPU's model string and the
 *               binary's build id — a cache written by another CPU or
 *               another build is ignored;
 *   knob        QWISP_DECODE_ITEM_BYTES / QWISP_DECODE_AHEAD_BYTES /
 *               QWISP_DECODE_PREFETCH_L2 / QWISP_DECODE_ROWS / QWISP_PREFILL_ROWS
 *               (options.h).
 *
 *     qw_error err = {0};
 *     int rc = qw_tune_load(path, threads, &err);  // 0 loaded, 1 absent, 2 stale, -1 unusable
 *     if (rc < 0) fprintf(stderr, "%s\n", err.msg); // defaults stay in place
 *     int64_t ahead = qw_tune_get(QW_TUNE_DECODE_AHEAD);
 *
 * Setting values is not synchronized with kernels running on other threads:
 * set them before starting work (start-up, test set-up), like qw_simd_force.
 */
#ifndef QWISP_TUNE_H
#define QWISP_TUNE_H

#include "qwisp/base.h"
#include "qwisp/threadpool.h"

#include <stdio.h>

/* X(id, cache-file key, default, min, max, help) */
#define QW_TUNE_PARAMS(X)                                                                                   \
    X(DECODE_ITEM, "decode_item_bytes", 256 << 10, 16 << 10, 64 << 20,                                      \
      "weight bytes per decode work item (every item starts a new DRAM stream)")                            \
    X(DECODE_AHEAD, "decode_ahead_bytes", 8 << 10, 1 << 10, 1 << 20,                                        \
      "bytes the decode row loops prefetch ahead of the row being read")                                    \
    X(DECODE_PREFETCH_L2, "decode_prefetch_l2", 0, 0, 1,                                                  \
      "1: decode prefetches into L2 (prefetcht1: the L2's miss queue, more misses in flight), 0: into L1")  \
    X(DECODE_ROWS, "decode_rows", 2, 2, 8,                                                                \
      "far-apart rows the AVX-512 Q8_0/Q4_0 decode row loops read at once (2, 4 or 8: streams in flight)") \
    X(PREFILL_ROWS, "prefill_rows", 32, 4, 512, "rows per prefill work item (re-read from L2 per token group)") \
    X(DECODE_GEMV, "decode_gemv", 1, 0, 1,                                                                \
      "1: one-token Q8_0/Q4_0 matmuls run the level's multi-row GEMV loop, 0: one row dot at a time "      \
      "(the same bits by the tile contract; which is faster depends on the core)")

typedef enum {
#define QW_TUNE_ENUM_ID(id, ...) QW_TUNE_##id,
    QW_TUNE_PARAMS(QW_TUNE_ENUM_ID)
#undef QW_TUNE_ENUM_ID
        QW_TUNE_COUNT
} qw_tune_id;

/* MEASURED: decode_gemv chosen by timing the running model's first decode
 * tokens with each loop (src/kernels/decode_trial.c) */
typedef enum { QW_TUNE_SRC_DEFAULT = 0, QW_TUNE_SRC_CALIBRATED, QW_TUNE_SRC_KNOB, QW_TUNE_SRC_MEASURED } qw_tune_src;

/* The value in force (hot path: one load). */
extern int64_t qw_tune_vals[QW_TUNE_COUNT];
static inline int64_t qw_tune_get(qw_tune_id id) { return qw_tune_vals[id]; }

/* The value the kernels use: qw_tune_get, except that a DEFAULT prefill_rows
 * is QW_TUNE_AMX_PREFILL_ROWS at a level with a wide (AMX) tile — its tiles
 * prepare all of a call's tokens (up to 64) once per call, which more rows
 * amortize (measured on a Xeon with AMX: the tune probe's prefill ran 2.1x
 * faster with 128 rows a work item than with 32; an A3B-width pp512 at 2
 * threads 2-5 % faster with 256 than with 128, 1-2 % more with 512). */
enum { QW_TUNE_AMX_PREFILL_ROWS = 256 };
int64_t qw_tune_effective(qw_tune_id id);

const char *qw_tune_key_name(qw_tune_id id); /* "decode_item_bytes", … */
const char *qw_tune_help(qw_tune_id id);
int64_t qw_tune_default(qw_tune_id id);
qw_tune_src qw_tune_source(qw_tune_id id);
const char *qw_tune_src_name(qw_tune_src src); /* "default", "calibrated", "knob" */

/* Sets one value from `src`; the value is clamped into the parameter's range
 * and PREFILL_ROWS rounded up to a multiple of 4.  Returns the value set. */
int64_t qw_tune_set(qw_tune_id id, int64_t v, qw_tune_src src);
/* Every value back to its default. */
void qw_tune_reset(void);

/* The cache key of this process: "<CPU model string> | <SIMD level> | <build
 * id>", the build id being the executable's GNU build-id note in hex (or, where the binary has
 * none, its size and modification time). */
const char *qw_tune_machine_key(void);

/* The cache file for $XDG_CACHE_HOME (or NULL/"" to use `home`/.cache) and a
 * SIMD level: "<dir>/qwisp/tune-<level>.txt" — one file per level, so running
 * with QWISP_SIMD set does not overwrite the other level's calibration.
 * -1 + err when neither folder is set. */
int qw_tune_default_path(const char *xdg_cache_home, const char *home, const char *level, char *buf, size_t n,
                         qw_error *err);

/* Reads the cache file: 0 = values set as "calibrated"; 1 = no such file;
 * 2 = stale: well formed but written for another CPU, SIMD level or binary,
 * or measured with another thread count than `threads` (> 0; 0 = any) — the
 * work-item sizes that suit 2 threads do not suit 16 (err says which); -1 =
 * unusable (unreadable, corrupt, a bad checksum, a value out of range: err
 * says which).  No value is changed unless 0, so a bad or stale file leaves
 * the defaults in place. */
int qw_tune_load(const char *path, int threads, qw_error *err);
/* Writes `vals` (and the threads they were measured with) atomically, under
 * this process's key, creating the directory.  -1 + err on failure. */
int qw_tune_save(const char *path, const int64_t vals[QW_TUNE_COUNT], int threads, qw_error *err);

/* ---- calibration (tune_measure.c) ---- */

typedef struct {
    int64_t mb;     /* weight bytes the decode probe streams through, MiB (>> LLC) */
    int passes;     /* timed rounds per candidate; the best counts */
    FILE *log;      /* one line per candidate, or NULL */
} qw_tune_opts;

typedef struct {
    int64_t vals[QW_TUNE_COUNT];  /* the best value of each parameter */
    double decode_gbs[2];         /* decode probe GB/s with the defaults / with vals */
    double prefill_gops[2];       /* prefill probe GMAC/s with the defaults / with vals */
} qw_tune_result;

/* Measures the parameters on this machine with `tp`'s threads: synthetic Q8_0
 * matrices shaped like MoE experts, decode (one token, streamed from DRAM)
 * and prefill (64 tokens, from cache), one parameter at a time over a list of
 * candidates.  Leaves the values in force as they were.  -1 + err when the
 * buffers cannot be allocated. */
int qw_tune_measure(qw_threadpool *tp, const qw_tune_opts *opts, qw_tune_result *out, qw_error *err);

/* ---- the decode-loop trial (src/kernels/decode_trial.c; its steps are
 * qw_decode_trial_begin / _end in ops.h, which the forward pass calls) ----- */
/* One line on the finished trial ("" while none has finished). */
void qw_decode_trial_report(char *buf, size_t n);
/* Back to no trial run (tests). */
void qw_decode_trial_reset(void);

#endif
