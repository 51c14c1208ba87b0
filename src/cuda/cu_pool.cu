/* cu_pool.cu — the device buffer pool: every device buffer of the CUDA
 * backend (weights arena, expert slots, KV caches, states, activations) comes
 * from here, with the host pool's policy (memory/pool.c):
 *
 *   fit    a request is rounded up to the host pool's size class
 *          (qw_pool_class_size, handed over in qw_backend_cfg) and served by
 *          any cached buffer of that class or larger within one class step;
 *          QWISP_POOL_FIT=exact reuses only buffers within 2 pages (64 KiB
 *          here: device pages are 2 MiB but the rule is MLX's) of the request;
 *   cache  freed buffers are kept on one LRU list; after every free the
 *          least recently freed are released (cudaFree) while the cache is
 *          over the limit (the path's QWISP_PREFILL_CACHE_MB /
 *          QWISP_LANE_CACHE_MB, applied to device memory);
 *   stats  active / cache / peak / cache peak / hits / misses, QW_DEVICE_STATS
 *          (backend.h); the cache peak is sampled after every trim, i.e. at
 *          every moment a caller can observe, and restarts when the limit
 *          changes, so a test can show the cache never passed its limit, not
 *          only that it is under it at the end.
 *
 * Why not cudaMallocAsync's pools: their release threshold is one number
 * per device with no per-path limit and no size classes we choose, their
 * reuse happens per stream in the driver where the counters cannot see it,
 * and trimming is all-or-nothing (cudaMemPoolTrimTo).  The engine allocates
 * per chunk, never per kernel, so a mutex-guarded list costs nothing.
 */
#include "cu_common.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct dblock {
    void *p;
    size_t cap;
    struct dblock *next; /* LRU order on the cache list (head = most recent) / active list */
} dblock;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static dblock *g_cache;  /* free buffers, most recently freed first */
static dblock *g_active; /* buffers handed out */
static qw_device_stats g_st;
static size_t (*g_class)(size_t);
static int g_exact;
static uint64_t (*g_get_limit)(void); /* the host pool's current limit: one limit for both sides */
static uint64_t g_peak_limit;         /* the limit cache_peak_bytes was measured under */

int cu_fail(qw_error *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void enforce_limit(void);

void cu_pool_config(const qw_backend_cfg *cfg) {
    pthread_mutex_lock(&g_lock);
    g_class = cfg->class_size;
    g_exact = cfg->fit_exact;
    g_st.cache_limit = cfg->cache_limit;
    g_get_limit = cfg->get_cache_limit;
    enforce_limit(); /* a lower limit applies now, as qw_pool_set_cache_limit does */
    pthread_mutex_unlock(&g_lock);
}

static size_t round_cap(size_t n) {
    if (g_exact || !g_class) return (n + 255) & ~(size_t)255;
    return (g_class(n) + 255) & ~(size_t)255;
}

/* The cached buffer that serves n: smallest with cap >= want and (exact)
 * cap <= n + 64 KiB or (classes) cap < want + want/8 (the next class). */
static dblock *take_cached(size_t n, size_t want) {
    dblock **best = NULL;
    for (dblock **pp = &g_cache; *pp; pp = &(*pp)->next) {
        const size_t c = (*pp)->cap;
        const bool ok = g_exact ? c >= n && c <= n + (64u << 10) : c >= want && c <= want + want / 8;
        if (ok && (!best || c < (*best)->cap)) best = pp;
    }
    if (!best) return NULL;
    dblock *b = *best;
    *best = b->next;
    g_st.cache_bytes -= b->cap;
    return b;
}

static void enforce_limit(void) {
    if (g_get_limit) g_st.cache_limit = g_get_limit();
    while (g_st.cache_limit && g_st.cache_bytes > g_st.cache_limit && g_cache) {
        /* the LRU tail */
        dblock **pp = &g_cache;
        while ((*pp)->next) pp = &(*pp)->next;
        dblock *b = *pp;
        *pp = NULL;
        g_st.cache_bytes -= b->cap;
        g_st.evicted_bytes += b->cap;
        cudaFree(b->p);
        free(b);
    }
    if (g_st.cache_limit != g_peak_limit) { /* a new limit: its own high-water mark */
        g_peak_limit = g_st.cache_limit;
        g_st.cache_peak_bytes = g_st.cache_bytes;
    }
    if (g_st.cache_bytes > g_st.cache_peak_bytes) g_st.cache_peak_bytes = g_st.cache_bytes;
}

void *cu_pool_alloc(size_t n) { return cu_pool_alloc_fit(n, false); }

void *cu_pool_alloc_fit(size_t n, bool exact) {
    if (!n) n = 1;
    pthread_mutex_lock(&g_lock);
    const size_t want = exact ? (n + 255) & ~(size_t)255 : round_cap(n);
    dblock *b = take_cached(n, want);
    if (b) {
        g_st.hits++;
    } else {
        g_st.misses++;
        void *p = NULL;
        if (cudaMalloc(&p, want) != cudaSuccess) {
            cudaGetLastError(); /* clear it: an allocation failure is an answer, not a sticky error */
            /* release the cache and try once more */
            while (g_cache) {
                dblock *c = g_cache;
                g_cache = c->next;
                cudaFree(c->p);
                free(c);
            }
            g_st.cache_bytes = 0;
            if (cudaMalloc(&p, want) != cudaSuccess) {
                cudaGetLastError();
                pthread_mutex_unlock(&g_lock);
                return NULL;
            }
        }
        b = (dblock *)calloc(1, sizeof *b);
        b->p = p;
        b->cap = want;
    }
    b->next = g_active;
    g_active = b;
    g_st.active_bytes += b->cap;
    if (g_st.active_bytes > g_st.peak_bytes) g_st.peak_bytes = g_st.active_bytes;
    if (g_st.active_bytes + g_st.cache_bytes > g_st.held_peak_bytes) g_st.held_peak_bytes = g_st.active_bytes + g_st.cache_bytes;
    pthread_mutex_unlock(&g_lock);
    return b->p;
}

void cu_pool_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_lock);
    for (dblock **pp = &g_active; *pp; pp = &(*pp)->next) {
        if ((*pp)->p != p) continue;
        dblock *b = *pp;
        *pp = b->next;
        g_st.active_bytes -= b->cap;
        b->next = g_cache;
        g_cache = b;
        g_st.cache_bytes += b->cap;
        enforce_limit();
        break;
    }
    pthread_mutex_unlock(&g_lock);
}

void cu_pool_trim(void) {
    pthread_mutex_lock(&g_lock);
    while (g_cache) {
        dblock *c = g_cache;
        g_cache = c->next;
        cudaFree(c->p);
        free(c);
    }
    g_st.cache_bytes = 0;
    pthread_mutex_unlock(&g_lock);
}

void cu_pool_stats(qw_device_stats *s) {
    pthread_mutex_lock(&g_lock);
    enforce_limit(); /* picks up a limit the path set since the last free */
    s->active_bytes = g_st.active_bytes;
    s->cache_bytes = g_st.cache_bytes;
    s->peak_bytes = g_st.peak_bytes;
    s->cache_peak_bytes = g_st.cache_peak_bytes;
    s->held_peak_bytes = g_st.held_peak_bytes;
    s->evicted_bytes = g_st.evicted_bytes;
    s->cache_limit = g_st.cache_limit;
    s->hits = g_st.hits;
    s->misses = g_st.misses;
    pthread_mutex_unlock(&g_lock);
}

int cu_grow(void **p, size_t *cap, size_t need, qw_error *err) {
    if (need <= *cap && *p) return 0;
    cu_pool_free(*p);
    *p = cu_pool_alloc(need);
    *cap = *p ? need : 0;
    if (!*p) return cu_fail(err, "out of device memory for a buffer of %zu bytes", need);
    return 0;
}
