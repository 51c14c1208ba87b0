/* pool.c — foundation version of the buffer pool: aligned allocations with a
 * small header that records the size, plus atomic active/peak accounting.
 *
 * Layout of a block: [header (64 bytes, holds the size)][user bytes…]; the
 * user pointer is 64-byte aligned.  The caching free lists and cache limits
 * arrive with issue #3 behind the same interface.
 */
#include "qwisp/pool.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t size;
    uint64_t magic;
} block_header;

#define POOL_MAGIC 0x716f6f6c71776973ULL /* "qwispool" */

static _Atomic uint64_t g_active, g_peak, g_n_alloc, g_n_free;

static block_header *header_of(const void *p) {
    return (block_header *)((char *)p - QW_POOL_ALIGN);
}

static void account_alloc(size_t size) {
    uint64_t now = atomic_fetch_add(&g_active, size) + size;
    uint64_t peak = atomic_load(&g_peak);
    while (now > peak && !atomic_compare_exchange_weak(&g_peak, &peak, now)) {
    }
    atomic_fetch_add(&g_n_alloc, 1);
}

void *qw_pool_alloc(size_t size) {
    if (size > SIZE_MAX - 2 * QW_POOL_ALIGN) return NULL;
    size_t total = QW_POOL_ALIGN + ((size + QW_POOL_ALIGN - 1) & ~(size_t)(QW_POOL_ALIGN - 1));
    char *base = aligned_alloc(QW_POOL_ALIGN, total);
    if (!base) return NULL;
    block_header *h = (block_header *)base;
    h->size = size;
    h->magic = POOL_MAGIC;
    account_alloc(size);
    return base + QW_POOL_ALIGN;
}

void *qw_pool_calloc(size_t size) {
    void *p = qw_pool_alloc(size);
    if (p) memset(p, 0, size);
    return p;
}

size_t qw_pool_size_of(const void *p) { return p ? header_of(p)->size : 0; }

void qw_pool_free(void *p) {
    if (!p) return;
    block_header *h = header_of(p);
    if (h->magic != POOL_MAGIC) abort(); /* not a pool buffer: a bug, never input */
    h->magic = 0;
    atomic_fetch_sub(&g_active, h->size);
    atomic_fetch_add(&g_n_free, 1);
    free(h);
}

void *qw_pool_realloc(void *p, size_t size) {
    if (!p) return qw_pool_alloc(size);
    size_t old = qw_pool_size_of(p);
    void *q = qw_pool_alloc(size);
    if (!q) return NULL;
    memcpy(q, p, old < size ? old : size);
    qw_pool_free(p);
    return q;
}

qw_pool_stats qw_pool_get_stats(void) {
    qw_pool_stats s = {
        .active_bytes = atomic_load(&g_active),
        .peak_bytes = atomic_load(&g_peak),
        .n_alloc = atomic_load(&g_n_alloc),
        .n_free = atomic_load(&g_n_free),
    };
    return s;
}

void qw_pool_reset_peak(void) { atomic_store(&g_peak, atomic_load(&g_active)); }
