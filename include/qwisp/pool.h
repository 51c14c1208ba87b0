/* pool.h — the buffer pool every dynamic engine buffer comes from.
 *
 * Today (foundation): 64-byte aligned allocations with live accounting
 * (active, peak, count).  The free-buffer cache with size classes and a cache
 * limit per path is issue #3; callers already go through this interface so
 * that change stays inside memory/.
 *
 *     float *x = qw_pool_alloc(n * sizeof(float));
 *     ...
 *     qw_pool_free(x);
 */
#ifndef QWISP_POOL_H
#define QWISP_POOL_H

#include <stddef.h>
#include <stdint.h>

#define QW_POOL_ALIGN 64

/* Aligned, uninitialised; NULL on OOM (size 0 returns a valid unique pointer). */
void *qw_pool_alloc(size_t size);
/* Aligned and zeroed. */
void *qw_pool_calloc(size_t size);
/* Grows (or shrinks) a pool buffer, preserving min(old, new) bytes. */
void *qw_pool_realloc(void *p, size_t size);
void qw_pool_free(void *p);
/* Usable size of a pool buffer. */
size_t qw_pool_size_of(const void *p);

typedef struct qw_pool_stats {
    uint64_t active_bytes; /* handed out, not yet freed */
    uint64_t peak_bytes;   /* max active since the last reset */
    uint64_t n_alloc;      /* calls to alloc */
    uint64_t n_free;
} qw_pool_stats;

qw_pool_stats qw_pool_get_stats(void);
void qw_pool_reset_peak(void);

#endif
