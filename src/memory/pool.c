/* pool.c — the free-buffer pool: aligned buffers, free lists (the cache) with
 * a byte limit and least-recently-freed release, and counters that explain
 * what memory costs.
 *
 * Layout of a buffer: [block header, 64 bytes][capacity bytes…]; the user
 * pointer is header + 64, so it is 64-byte aligned.  Buffers whose capacity
 * is >= QW_POOL_MMAP_MIN (256 KiB) are their own anonymous mmap (length =
 * capacity + 64, a whole number of pages); smaller ones come from
 * aligned_alloc.  Fresh mmap'ed pages are prefaulted by the pool (one write a
 * page) so that first-touch cost is measured here (touch_ns), not smeared
 * over the kernels that happen to write first.
 *
 * Fit rule — how a request finds a cached buffer:
 *  - MLX (metal/allocator.cpp, BufferCache::reuse_from_cache) keeps a
 *    size-ordered multimap and reuses the smallest cached buffer whose size is
 *    < min(2*req, req + 2 pages).  Nearly exact: when shapes drift with the
 *    context (KV growth, attention scratch every chunk) nothing fits twice and
 *    the cache only grows — the seed's +7.7 GB.  QWISP_POOL_FIT=exact keeps
 *    that rule so the harness can show it side by side.
 *  - PyTorch's CUDA caching allocator rounds requests (512 B granules; with
 *    roundup_power2_divisions, N classes per power of two), splits large
 *    blocks and merges neighbours; splitting buys reuse but fragments.
 *  - qwisp (QWISP_POOL_FIT=classes, the default): 8 classes per power of two
 *    (step p/8 in [p, 2p); 64-byte steps up to 512 B), no splitting.  A
 *    request is rounded up to its class and served by any cached buffer of
 *    that class, so shapes that drift by less than 1/8 reuse one buffer, and
 *    the rounding wastes at most 12.5% (6% on average) plus a page for
 *    mmap'ed buffers.  Growth is where drifting shapes hurt most, so realloc
 *    first uses the buffer's own capacity (in place), then grows mmap'ed
 *    buffers with mremap — the kernel moves the pages, nothing is copied and
 *    no outgrown buffer is left in the cache.  Together these keep the cache
 *    to buffers that will really be asked for again; the limit then costs
 *    nothing because little that is useful is ever released.
 *
 * Cache structure: one doubly linked free list per class bin (bin = the
 * largest class <= capacity; a buffer in bin k can serve any request of class
 * <= k), most recently freed at the head; and one global LRU list of all
 * cached buffers in free order.  The limit is enforced in one place,
 * enforce_limit(), after every release: while cache > limit, release the
 * LRU tail to the OS.
 *
 * Invariants (under g_lock): cache_bytes = sum of capacities on the LRU list;
 * every cached buffer is on exactly one bin list and the LRU list; after any
 * public call returns, cache_bytes <= limit when limit > 0.  Thread safety:
 * one mutex; engine allocations are per chunk, never per element, so a lock
 * is cheaper than per-thread caches that would hide memory from the limit.
 */
#include "qwisp/pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef struct block {
    uint64_t magic;
    size_t size; /* last requested size */
    size_t cap;  /* usable bytes after the header */
    struct block *bin_prev, *bin_next;
    struct block *lru_prev, *lru_next; /* lru_prev = more recently freed */
    uint16_t bin;
    uint8_t is_mmap;
    uint8_t is_fresh;  /* pages never written by a user (still zero) */
    uint32_t freed_ms; /* when it entered the cache (now_ms(); wraps harmlessly) */
} block;
_Static_assert(sizeof(block) == QW_POOL_ALIGN, "block header must keep user pointers aligned");

#define MAGIC_LIVE 0x716f6f6c71776973ULL /* "qwispool" */
#define MAGIC_FREE 0x6672656571776973ULL
#define N_BINS 448

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static block *g_bins[N_BINS];
static block *g_lru_head, *g_lru_tail; /* head = most recently freed */
static uint32_t g_decay_ms;            /* 0 = no age limit */
static qw_pool_stats g_st;
static qw_pool_fit g_fit = QW_POOL_FIT_CLASSES;
static size_t g_page;

static size_t page_size(void) {
    if (!g_page) {
        long p = sysconf(_SC_PAGESIZE);
        g_page = p > 0 ? (size_t)p : 4096;
    }
    return g_page;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t now_ms(void) { return (uint32_t)(now_ns() / 1000000u); }

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

static int log2_floor(size_t n) { return 63 - __builtin_clzll((unsigned long long)n); }

size_t qw_pool_class_size(size_t n) {
    if (n <= 512) return n ? round_up(n, 64) : 64;
    size_t p = (size_t)1 << log2_floor(n - 1);
    return round_up(n, p / 8);
}

/* Index of the largest class <= cap (cap >= 64). */
static uint32_t bin_floor(size_t cap) {
    if (cap < 512) return (uint32_t)(cap / 64 - 1);
    int lg = log2_floor(cap);
    size_t p = (size_t)1 << lg;
    uint32_t idx = 7 + 8 * (uint32_t)(lg - 9) + (uint32_t)((cap - p) / (p / 8));
    return idx < N_BINS ? idx : N_BINS - 1;
}

/* ---- OS side ---- */

static void touch_pages(char *p, size_t n) {
    uint64_t t0 = now_ns();
    const size_t pg = page_size();
    for (size_t off = 0; off < n; off += pg) ((volatile char *)p)[off] = 0;
    g_st.touch_ns += now_ns() - t0;
}

/* A new buffer of capacity >= cap (header included in the mapping). */
static block *os_alloc(size_t cap) {
    block *b;
    bool use_mmap = cap >= QW_POOL_MMAP_MIN;
    size_t len = use_mmap ? round_up(cap + QW_POOL_ALIGN, page_size()) : cap + QW_POOL_ALIGN;
    uint64_t t0 = now_ns();
    if (use_mmap) {
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        b = m == MAP_FAILED ? NULL : m;
    } else {
        b = aligned_alloc(QW_POOL_ALIGN, len);
    }
    g_st.os_alloc_ns += now_ns() - t0;
    if (!b) return NULL;
    g_st.os_alloc_calls++;
    g_st.os_alloc_bytes += len;
    if (use_mmap) touch_pages((char *)b + page_size(), len - page_size()); /* header page: below */
    *b = (block){.magic = MAGIC_LIVE, .cap = len - QW_POOL_ALIGN, .is_mmap = use_mmap,
                 .is_fresh = use_mmap};
    return b;
}

static void os_free(block *b) {
    size_t len = b->cap + QW_POOL_ALIGN;
    b->magic = 0;
    uint64_t t0 = now_ns();
    if (b->is_mmap) munmap(b, len);
    else free(b);
    g_st.os_free_ns += now_ns() - t0;
    g_st.os_free_calls++;
    g_st.os_free_bytes += len;
}

/* ---- cache lists (g_lock held) ---- */

static void cache_insert(block *b) {
    b->magic = MAGIC_FREE;
    b->bin = bin_floor(b->cap);
    b->bin_prev = NULL;
    b->bin_next = g_bins[b->bin];
    if (b->bin_next) b->bin_next->bin_prev = b;
    g_bins[b->bin] = b;
    b->lru_prev = NULL;
    b->lru_next = g_lru_head;
    if (g_lru_head) g_lru_head->lru_prev = b;
    else g_lru_tail = b;
    g_lru_head = b;
    b->freed_ms = now_ms();
    g_st.cache_bytes += b->cap;
    g_st.cache_buffers++;
}

static void cache_remove(block *b) {
    if (b->bin_prev) b->bin_prev->bin_next = b->bin_next;
    else g_bins[b->bin] = b->bin_next;
    if (b->bin_next) b->bin_next->bin_prev = b->bin_prev;
    if (b->lru_prev) b->lru_prev->lru_next = b->lru_next;
    else g_lru_head = b->lru_next;
    if (b->lru_next) b->lru_next->lru_prev = b->lru_prev;
    else g_lru_tail = b->lru_prev;
    g_st.cache_bytes -= b->cap;
    g_st.cache_buffers--;
    b->magic = MAGIC_LIVE;
}

/* The one place the limit is enforced: the LRU tail goes back to the OS while
 * the cache is over `limit` bytes or (decay on) the tail has sat unused for
 * longer than the decay — jemalloc/mimalloc's lesson that idle memory should
 * be returned by age, not only by a size cap. */
static bool tail_expired(uint32_t now) {
    return g_decay_ms && g_lru_tail && (uint32_t)(now - g_lru_tail->freed_ms) > g_decay_ms;
}

static void enforce_limit(uint64_t limit) {
    const uint32_t now = g_decay_ms ? now_ms() : 0;
    while (g_lru_tail && (g_st.cache_bytes > limit || tail_expired(now))) {
        block *b = g_lru_tail;
        cache_remove(b);
        g_st.evicted_buffers++;
        g_st.evicted_bytes += b->cap;
        os_free(b);
    }
}

/* Exclusive upper bound on a reusable capacity under the exact rule (MLX). */
static size_t exact_limit(size_t n) {
    size_t a = n > SIZE_MAX / 2 ? SIZE_MAX : 2 * n;
    size_t b = n + 2 * page_size();
    return a < b ? a : b;
}

static block *cache_find(size_t n) {
    if (g_fit == QW_POOL_FIT_CLASSES) {
        block *b = g_bins[bin_floor(qw_pool_class_size(n))];
        return b && b->cap >= n ? b : NULL;
    }
    size_t lim = exact_limit(n), need = n < 64 ? 64 : n;
    block *best = NULL;
    for (uint32_t k = bin_floor(need); k <= bin_floor(lim) && k < N_BINS; k++)
        for (block *b = g_bins[k]; b; b = b->bin_next)
            if (b->cap >= need && b->cap < lim && (!best || b->cap < best->cap)) best = b;
    return best;
}

static void account_out(block *b, size_t n) {
    b->size = n;
    g_st.active_bytes += b->cap;
    g_st.requested_bytes += n;
    if (g_st.active_bytes > g_st.peak_bytes) g_st.peak_bytes = g_st.active_bytes;
    uint64_t held = g_st.active_bytes + g_st.cache_bytes;
    if (held > g_st.peak_held_bytes) g_st.peak_held_bytes = held;
}

/* Capacity a fresh buffer gets for a request of n bytes. */
static size_t fresh_cap(size_t n) {
    return g_fit == QW_POOL_FIT_CLASSES ? qw_pool_class_size(n) : round_up(n ? n : 1, 64);
}

static block *take(size_t n) {
    if (g_decay_ms) enforce_limit(g_st.cache_limit ? g_st.cache_limit : UINT64_MAX);
    block *b = cache_find(n);
    if (b) {
        cache_remove(b);
        g_st.hits++;
    } else {
        b = os_alloc(fresh_cap(n));
        if (!b) {
            /* the cache may hold what the OS no longer gives: release it and retry */
            enforce_limit(0);
            b = os_alloc(fresh_cap(n));
            if (!b) return NULL;
        }
        g_st.misses++;
    }
    g_st.n_alloc++;
    account_out(b, n);
    return b;
}

static void give_back(block *b) {
    g_st.active_bytes -= b->cap;
    g_st.requested_bytes -= b->size;
    g_st.n_free++;
    cache_insert(b);
    b->is_fresh = 0;
    if (g_st.cache_limit || g_decay_ms) enforce_limit(g_st.cache_limit ? g_st.cache_limit : UINT64_MAX);
}

static block *header_of(const void *p) { return (block *)((char *)p - QW_POOL_ALIGN); }

static block *checked(const void *p) {
    block *b = header_of(p);
    if (b->magic != MAGIC_LIVE) abort(); /* double free or not a pool buffer: a bug, never input */
    return b;
}

/* ---- public ---- */

void *qw_pool_alloc(size_t size) {
    if (size > SIZE_MAX / 2) return NULL;
    pthread_mutex_lock(&g_lock);
    block *b = take(size);
    pthread_mutex_unlock(&g_lock);
    return b ? (char *)b + QW_POOL_ALIGN : NULL;
}

void *qw_pool_calloc(size_t size) {
    if (size > SIZE_MAX / 2) return NULL;
    pthread_mutex_lock(&g_lock);
    block *b = take(size);
    bool fresh = b && b->is_fresh;
    pthread_mutex_unlock(&g_lock);
    if (!b) return NULL;
    if (!fresh) memset((char *)b + QW_POOL_ALIGN, 0, size);
    return (char *)b + QW_POOL_ALIGN;
}

size_t qw_pool_size_of(const void *p) { return p ? checked(p)->size : 0; }

void qw_pool_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_lock);
    give_back(checked(p));
    pthread_mutex_unlock(&g_lock);
}

/* Grows an mmap'ed buffer in place or by moving its pages; NULL if it cannot. */
static block *remap(block *b, size_t n) {
    size_t old_len = b->cap + QW_POOL_ALIGN;
    size_t new_len = round_up(qw_pool_class_size(n) + QW_POOL_ALIGN, page_size());
    uint64_t t0 = now_ns();
    void *m = mremap(b, old_len, new_len, MREMAP_MAYMOVE);
    g_st.os_alloc_ns += now_ns() - t0;
    if (m == MAP_FAILED) return NULL;
    block *nb = m;
    g_st.os_alloc_calls++;
    g_st.os_alloc_bytes += new_len - old_len;
    touch_pages((char *)nb + old_len, new_len - old_len);
    g_st.active_bytes += new_len - old_len;
    g_st.requested_bytes += n - nb->size;
    nb->cap = new_len - QW_POOL_ALIGN;
    nb->size = n;
    if (g_st.active_bytes > g_st.peak_bytes) g_st.peak_bytes = g_st.active_bytes;
    uint64_t held = g_st.active_bytes + g_st.cache_bytes;
    if (held > g_st.peak_held_bytes) g_st.peak_held_bytes = held;
    g_st.realloc_remap++;
    return nb;
}

void *qw_pool_realloc(void *p, size_t size) {
    if (!p) return qw_pool_alloc(size);
    if (size > SIZE_MAX / 2) return NULL;
    pthread_mutex_lock(&g_lock);
    block *b = checked(p);
    /* In place when the capacity fits and would not waste more than the fit
     * rule allows (classes: shrinking below half the capacity moves the data
     * to a smaller buffer; exact: MLX's reuse window). */
    bool fits = size <= b->cap && (g_fit == QW_POOL_FIT_CLASSES
                                       ? size * 2 >= b->cap || b->cap <= 4096
                                       : b->cap < exact_limit(size));
    if (fits) {
        g_st.requested_bytes += size;
        g_st.requested_bytes -= b->size;
        b->size = size;
        b->is_fresh = 0;
        g_st.realloc_in_place++;
        pthread_mutex_unlock(&g_lock);
        return p;
    }
    if (g_fit == QW_POOL_FIT_CLASSES && b->is_mmap && size > b->cap) {
        block *nb = remap(b, size);
        if (nb) {
            nb->is_fresh = 0;
            pthread_mutex_unlock(&g_lock);
            return (char *)nb + QW_POOL_ALIGN;
        }
    }
    size_t old = b->size;
    block *nb = take(size);
    if (!nb) {
        pthread_mutex_unlock(&g_lock);
        return NULL;
    }
    nb->is_fresh = 0;
    memcpy((char *)nb + QW_POOL_ALIGN, p, old < size ? old : size);
    give_back(b);
    pthread_mutex_unlock(&g_lock);
    return (char *)nb + QW_POOL_ALIGN;
}

void qw_pool_set_fit(qw_pool_fit fit) {
    pthread_mutex_lock(&g_lock);
    g_fit = fit == QW_POOL_FIT_EXACT ? QW_POOL_FIT_EXACT : QW_POOL_FIT_CLASSES;
    pthread_mutex_unlock(&g_lock);
}

qw_pool_fit qw_pool_get_fit(void) {
    pthread_mutex_lock(&g_lock);
    qw_pool_fit f = g_fit;
    pthread_mutex_unlock(&g_lock);
    return f;
}

void qw_pool_set_decay_ms(uint32_t ms) {
    pthread_mutex_lock(&g_lock);
    g_decay_ms = ms;
    if (ms) enforce_limit(g_st.cache_limit ? g_st.cache_limit : UINT64_MAX);
    pthread_mutex_unlock(&g_lock);
}

void qw_pool_set_cache_limit(uint64_t bytes) {
    pthread_mutex_lock(&g_lock);
    g_st.cache_limit = bytes;
    if (bytes) enforce_limit(bytes);
    pthread_mutex_unlock(&g_lock);
}

uint64_t qw_pool_get_cache_limit(void) {
    pthread_mutex_lock(&g_lock);
    uint64_t l = g_st.cache_limit;
    pthread_mutex_unlock(&g_lock);
    return l;
}

void qw_pool_clear_cache(void) {
    pthread_mutex_lock(&g_lock);
    enforce_limit(0);
    pthread_mutex_unlock(&g_lock);
}

qw_pool_stats qw_pool_get_stats(void) {
    pthread_mutex_lock(&g_lock);
    qw_pool_stats s = g_st;
    pthread_mutex_unlock(&g_lock);
    return s;
}

void qw_pool_reset_peak(void) {
    pthread_mutex_lock(&g_lock);
    g_st.peak_bytes = g_st.active_bytes;
    g_st.peak_held_bytes = g_st.active_bytes + g_st.cache_bytes;
    pthread_mutex_unlock(&g_lock);
}

void qw_pool_reset_counters(void) {
    pthread_mutex_lock(&g_lock);
    /* TOTAL rows are the event counters; CURRENT and PEAK rows stay. */
#define ZERO_TOTAL(field, kind, ...) QW_STAT_IF_TOTAL(kind, g_st.field = 0;)
    QW_POOL_STATS(ZERO_TOTAL, QW_STAT_NONE)
#undef ZERO_TOTAL
    pthread_mutex_unlock(&g_lock);
}

/* ---- the counter list as a table (pool.h's QW_POOL_STATS) ---- */
#define DERIVE(name, kind, unit, key, prom, help, expr) QW_STAT_DERIVE_FN(qw_pool_stats, name, expr)
QW_POOL_STATS(QW_STAT_NONE, DERIVE)
#undef DERIVE
#define ROW(...) QW_STAT_ROW(qw_pool_stats, __VA_ARGS__)
#define DROW(name, kind, unit, key, prom, help, expr) QW_STAT_DROW(name, kind, unit, key, prom, help)
static const qw_stat k_rows[] = {QW_POOL_STATS(ROW, DROW)};
#undef ROW
#undef DROW
const qw_stat_group qw_pool_stat_group = {"pool", "", "buffer pool: ", k_rows, (int)(sizeof k_rows / sizeof *k_rows)};
