/* pool.h — the buffer pool every dynamic engine buffer comes from.
 *
 * A thread-safe free-buffer pool: 64-byte aligned buffers; a freed buffer goes
 * to the pool's free lists (the *cache*) and is reused by a later request that
 * fits; buffers of QW_POOL_MMAP_MIN bytes or more come from and go back to the
 * OS with mmap/munmap.  A cache limit in bytes (0 = unbounded) is enforced
 * after every release by giving the least recently freed buffers back to the
 * OS.  The fit rule (size classes or MLX-like near-exact) is selectable;
 * pool.c's header explains both and why classes are the default.
 *
 *     float *x = qw_pool_alloc(n * sizeof(float));
 *     ...
 *     qw_pool_free(x);                       // back to the cache, not the OS
 *     qw_pool_set_cache_limit(512u << 20);   // trims the cache to 512 MiB now
 *     qw_pool_clear_cache();                 // everything cached back to the OS
 *
 * Each execution path applies its own limit when it starts: see pool_path.c
 * (qw_pool_apply_path) and docs/memory.md.
 */
#ifndef QWISP_POOL_H
#define QWISP_POOL_H

#include "qwisp/base.h"
#include "qwisp/stats.h"

#include <stddef.h>
#include <stdint.h>

#define QW_POOL_ALIGN 64
/* Buffers whose capacity reaches this many bytes are mmap'ed. */
#define QW_POOL_MMAP_MIN ((size_t)256 << 10)

/* Aligned, uninitialised; NULL on OOM (size 0 returns a valid unique pointer). */
void *qw_pool_alloc(size_t size);
/* Aligned and zeroed. */
void *qw_pool_calloc(size_t size);
/* Grows (or shrinks) a pool buffer, preserving min(old, new) bytes.  May
 * return p itself (the buffer's capacity already fits) or move it (large
 * buffers are grown with mremap in the classes rule).  NULL on OOM, p intact. */
void *qw_pool_realloc(void *p, size_t size);
void qw_pool_free(void *p);
/* The size last requested for a pool buffer (what alloc/realloc was asked). */
size_t qw_pool_size_of(const void *p);

typedef enum qw_pool_fit {
    QW_POOL_FIT_CLASSES = 0, /* size classes, 8 per power of two; mremap growth (default) */
    QW_POOL_FIT_EXACT = 1,   /* MLX's rule: reuse only within ~2 pages of the request */
} qw_pool_fit;

/* Sets the fit rule for later requests (cached buffers stay usable). */
void qw_pool_set_fit(qw_pool_fit fit);
qw_pool_fit qw_pool_get_fit(void);
/* Capacity the classes rule gives a request of n bytes (before page rounding
 * of mmap'ed buffers).  For tests and docs. */
size_t qw_pool_class_size(size_t n);

/* Cache limit in bytes, 0 = unbounded.  Setting it trims the cache to it at
 * once (least recently freed first); afterwards every free keeps cache <= limit. */
void qw_pool_set_cache_limit(uint64_t bytes);
/* Age limit: cached buffers unused for longer than ms go back to the OS at the
 * next alloc or free (0 = off, the default).  QWISP_POOL_DECAY_MS. */
void qw_pool_set_decay_ms(uint32_t ms);
uint64_t qw_pool_get_cache_limit(void);
/* Returns every cached buffer to the OS. */
void qw_pool_clear_cache(void);

/* The pool's counters, declared once (stats.h says how the list is read):
 * X(field, kind, unit, key, prom, help); D(name, …, expr) is derived.  The
 * struct below, `qwisp run --json`'s "pool" object, /metrics' qwisp_pool_*
 * and the MEMDBG lines all come from this list, in this order.  The first
 * QW_POOL_STATS_LINE_HEAD rows open a MEMDBG line ahead of its footprint
 * fields (memdbg.h: tests read "cache=… peak=… footprint=…"): keep them first.
 * Keys "active", "peak_held", "os_calls"… are read by `qwisp ab`
 * (ab_trial.c) and tests: rename none. */
#define QW_POOL_STATS(X, D)                                                                               \
    X(active_bytes, CURRENT, BYTES, "active", "pool_active_bytes", "bytes handed out")                 \
    X(cache_bytes, CURRENT, BYTES, "cache", "pool_cache_bytes", "bytes held free for reuse")           \
    X(peak_bytes, PEAK, BYTES, "peak", "pool_peak_bytes", "max active bytes")                          \
    X(hits, TOTAL, COUNT, "hits", "pool_hits_total", "requests served from the cache")                 \
    X(misses, TOTAL, COUNT, "misses", "pool_misses_total", "requests that went to the OS")             \
    X(peak_held_bytes, PEAK, BYTES, "peak_held", "pool_peak_held_bytes", "max active + cache bytes")   \
    X(cache_limit, CURRENT, BYTES, "limit", "pool_cache_limit_bytes", "cache limit (0 = unbounded)")  \
    X(os_alloc_bytes, TOTAL, BYTES, "os_bytes", "pool_os_alloc_bytes_total",                           \
      "bytes asked of the OS (mmap/mremap/aligned_alloc)")                                              \
    X(os_alloc_calls, TOTAL, COUNT, "os_calls", "pool_os_alloc_calls_total",                           \
      "calls to the OS allocator (mmap/mremap/aligned_alloc)")                                          \
    X(os_free_bytes, TOTAL, BYTES, "os_free_bytes", "pool_os_free_bytes_total",                        \
      "bytes given back to the OS (munmap/free)")                                                       \
    D(os_ns, TOTAL, NS, "os_ms", "pool_os_seconds_total", "time inside OS alloc + free calls",          \
      s->os_alloc_ns + s->os_free_ns)                                                                   \
    X(touch_ns, TOTAL, NS, "touch_ms", "pool_touch_seconds_total",                                     \
      "first touch of fresh mmaped pages (prefaulted by the pool)")                                     \
    X(os_free_calls, TOTAL, COUNT, "os_free_calls", "pool_os_free_calls_total",                        \
      "calls to munmap/free")                                                                           \
    X(os_alloc_ns, TOTAL, NS, "os_alloc_ms", "pool_os_alloc_seconds_total", "time inside OS allocs")   \
    X(os_free_ns, TOTAL, NS, "os_free_ms", "pool_os_free_seconds_total", "time inside OS frees")       \
    X(n_alloc, TOTAL, COUNT, "allocs", "pool_allocs_total",                                            \
      "calls to alloc/calloc (+ realloc that allocates)")                                               \
    X(n_free, TOTAL, COUNT, "frees", "pool_frees_total", "calls to free (+ realloc that releases)")    \
    X(cache_buffers, CURRENT, COUNT, "cache_buffers", "pool_cache_buffers", "buffers held free")       \
    X(requested_bytes, CURRENT, BYTES, "requested", "pool_requested_bytes",                            \
      "sum of requested sizes of active buffers (<= active)")                                           \
    X(realloc_in_place, TOTAL, COUNT, "realloc_in_place", "pool_realloc_in_place_total",               \
      "reallocs served by the buffer's own capacity")                                                   \
    X(realloc_remap, TOTAL, COUNT, "realloc_remap", "pool_realloc_remap_total",                        \
      "reallocs grown with mremap (no copy, nothing cached)")                                           \
    X(evicted_buffers, TOTAL, COUNT, "evicted_buffers", "pool_evicted_buffers_total",                  \
      "cached buffers released to honour the limit or a clear")                                         \
    X(evicted_bytes, TOTAL, BYTES, "evicted_bytes", "pool_evicted_bytes_total",                        \
      "cached bytes released to honour the limit or a clear")
#define QW_POOL_STATS_LINE_HEAD 3

/* Byte gauges are buffer capacities; peaks are since the last reset. */
typedef struct qw_pool_stats {
    QW_POOL_STATS(QW_STAT_FIELD, QW_STAT_NONE)
} qw_pool_stats;

/* The list as a table (pool.c), for the outputs. */
extern const qw_stat_group qw_pool_stat_group;

qw_pool_stats qw_pool_get_stats(void);
/* peak := active, peak_held := active + cache. */
void qw_pool_reset_peak(void);
/* Zeroes the event counters (hits … touch_ns); the byte gauges stay. */
void qw_pool_reset_counters(void);

/* ---- per-path limits (pool_path.c; reads the knob table) ---- */

typedef enum qw_pool_path {
    QW_POOL_PATH_SERIALIZE = 0, /* QWISP_PREFILL_CACHE_MB, unset = unbounded */
    QW_POOL_PATH_LANES = 1,     /* QWISP_LANE_CACHE_MB, default 2048 */
} qw_pool_path;

/* Called by a path when it starts: applies QWISP_POOL_FIT and the path's cache
 * limit (trimming what is cached to it).  The knobs were validated by
 * qw_options_init; -1 + err only if a value is out of range here. */
int qw_pool_apply_path(qw_pool_path path, qw_error *err);

#endif
