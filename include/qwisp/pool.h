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

typedef struct qw_pool_stats {
    uint64_t active_bytes;    /* capacity of buffers handed out, not yet freed */
    uint64_t peak_bytes;      /* max active_bytes since the last reset */
    uint64_t n_alloc;         /* calls to alloc/calloc (+ realloc that allocates) */
    uint64_t n_free;          /* calls to free (+ realloc that releases) */
    uint64_t cache_bytes;     /* capacity of buffers held free for reuse */
    uint64_t cache_buffers;   /* how many */
    uint64_t requested_bytes; /* sum of requested sizes of active buffers (<= active) */
    uint64_t peak_held_bytes; /* max (active + cache) since the last reset */
    uint64_t cache_limit;     /* 0 = unbounded */
    uint64_t hits;            /* requests served from the cache */
    uint64_t misses;          /* requests that went to the OS */
    uint64_t realloc_in_place;/* reallocs served by the buffer's own capacity */
    uint64_t realloc_remap;   /* reallocs grown with mremap (no copy, nothing cached) */
    uint64_t evicted_buffers; /* cached buffers released to honour the limit or clear */
    uint64_t evicted_bytes;
    uint64_t os_alloc_calls, os_alloc_bytes; /* mmap/mremap/aligned_alloc */
    uint64_t os_free_calls, os_free_bytes;   /* munmap/free */
    uint64_t os_alloc_ns, os_free_ns;        /* time inside those calls */
    uint64_t touch_ns;        /* first-touch of fresh mmap'ed pages (prefaulted by the pool) */
} qw_pool_stats;

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
