/* cu_stage.cu — the streaming tier's copies from pageable host memory,
 * through page-locked staging buffers that host threads fill.
 *
 * Why: a copy from pageable memory goes through the driver's own bounce
 * buffer, filled by one CPU memcpy at a time — on the H200's host, from the
 * page cache of a file on disk, ~8.5 GB/s against the ~46 GB/s the link
 * moves from page-locked memory (bench/RESULTS.md).  Page-locking the file's
 * page cache in place would make every copy one DMA, but registering 18 GB
 * of page cache takes the driver minutes (cu_model.cu, pins_fast).  So the
 * stager keeps a ring of CU_STAGE_NBUF page-locked buffers: the pieces asked
 * for are packed back to back into the current buffer; when it is full (or
 * flushed) every thread of the stager copies its share of the bytes from the
 * mmaped file into it and queues the DMA of that share on the caller's stream
 * at once (so the engine starts on the first shares while the last are still
 * being copied), and an event marks when the buffer may be filled again.
 * While the engine drains one buffer the threads fill the next.  The bytes that arrive
 * are the file's, so the tier's results are unchanged (bit for bit).
 *
 * One stager per model; the streaming tier's slot tables are not thread-safe
 * either, so one caller at a time (the forward pass of one context).
 */
#include "cu_model.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

enum { CU_STAGE_NBUF = 4, CU_STAGE_THREADS_MAX = 8 };

typedef struct stage_piece {
    uint8_t *dst;       /* device */
    const uint8_t *src; /* host, pageable */
    size_t off, n;      /* where in the buffer */
} stage_piece;

struct cu_stager {
    size_t buf_bytes;
    uint8_t *buf[CU_STAGE_NBUF];
    cudaEvent_t drained[CU_STAGE_NBUF]; /* recorded after the buffer's DMAs */
    int cur;
    size_t used;
    stage_piece *pc;
    int npc, cap;
    /* the fill: participants 0..nthr-1 are the workers, nthr the caller */
    int nthr;
    pthread_t thr[CU_STAGE_THREADS_MAX];
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;
    int busy;
    bool quit;
    cudaStream_t s;      /* the flush's stream */
    cudaError_t dma_err; /* the first failed DMA of the flush (under mu) */
};

/* Participant `who` of `of` copies its equal share of the buffer's bytes
 * (the byte range [lo, hi) of the packed pieces) and queues their DMAs.  The
 * runtime's calls are thread-safe; the destinations are disjoint, so the
 * order the participants queue in does not matter. */
static void fill_share(cu_stager *st, int who, int of) {
    const size_t total = st->used, lo = total * who / of, hi = total * (who + 1) / of;
    uint8_t *b = st->buf[st->cur];
    for (int i = 0; i < st->npc; i++) {
        const stage_piece *p = &st->pc[i];
        const size_t a = p->off > lo ? p->off : lo, z = p->off + p->n < hi ? p->off + p->n : hi;
        if (a >= z) continue;
        memcpy(b + a, p->src + (a - p->off), z - a);
        const cudaError_t e = cudaMemcpyAsync(p->dst + (a - p->off), b + a, z - a, cudaMemcpyHostToDevice, st->s);
        if (e != cudaSuccess) {
            pthread_mutex_lock(&st->mu);
            if (st->dma_err == cudaSuccess) st->dma_err = e;
            pthread_mutex_unlock(&st->mu);
        }
    }
}

static void *worker(void *arg) {
    cu_stager *st = (cu_stager *)arg;
    pthread_mutex_lock(&st->mu);
    const int who = st->busy++; /* numbered in start order; the caller waits for all */
    pthread_cond_signal(&st->done);
    uint64_t seen = st->gen;
    for (;;) {
        while (st->gen == seen && !st->quit) pthread_cond_wait(&st->go, &st->mu);
        if (st->quit) break;
        seen = st->gen;
        pthread_mutex_unlock(&st->mu);
        fill_share(st, who, st->nthr + 1);
        pthread_mutex_lock(&st->mu);
        if (--st->busy == 0) pthread_cond_signal(&st->done);
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

static int cpus_allowed(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    return 1;
}

cu_stager *cu_stager_new(size_t bytes, char *why, size_t why_n) {
    cu_stager *st = (cu_stager *)calloc(1, sizeof *st);
    if (!st) {
        snprintf(why, why_n, "out of host memory");
        return NULL;
    }
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->go, NULL);
    pthread_cond_init(&st->done, NULL);
    st->buf_bytes = (bytes / CU_STAGE_NBUF) & ~(size_t)4095;
    if (st->buf_bytes < 4096) st->buf_bytes = 4096;
    for (int i = 0; i < CU_STAGE_NBUF; i++) {
        cudaError_t e = cudaHostAlloc((void **)&st->buf[i], st->buf_bytes, cudaHostAllocPortable);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&st->drained[i], cudaEventDisableTiming);
        if (e != cudaSuccess) {
            snprintf(why, why_n, "staging buffers of %.0f MB: %s", bytes / 1e6, cudaGetErrorString(e));
            cu_stager_free(st);
            return NULL;
        }
    }
    /* the caller fills too: a thread per allowed CPU up to the maximum */
    int want = cpus_allowed() - 1;
    if (want > CU_STAGE_THREADS_MAX - 1) want = CU_STAGE_THREADS_MAX - 1;
    pthread_mutex_lock(&st->mu);
    for (int i = 0; i < want; i++) {
        if (pthread_create(&st->thr[st->nthr], NULL, worker, st)) break;
        st->nthr++;
    }
    while (st->busy < st->nthr) pthread_cond_wait(&st->done, &st->mu); /* every worker numbered */
    st->busy = 0;
    pthread_mutex_unlock(&st->mu);
    return st;
}

int cu_stager_threads(const cu_stager *st) { return st->nthr + 1; }
size_t cu_stager_bytes(const cu_stager *st) { return st->buf_bytes * CU_STAGE_NBUF; }

void cu_stager_free(cu_stager *st) {
    if (!st) return;
    if (st->nthr) {
        pthread_mutex_lock(&st->mu);
        st->quit = true;
        pthread_cond_broadcast(&st->go);
        pthread_mutex_unlock(&st->mu);
        for (int i = 0; i < st->nthr; i++) pthread_join(st->thr[i], NULL);
    }
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->go);
    pthread_cond_destroy(&st->done);
    for (int i = 0; i < CU_STAGE_NBUF; i++) {
        if (st->drained[i]) {
            cudaEventSynchronize(st->drained[i]); /* no DMA may still read the buffer */
            cudaEventDestroy(st->drained[i]);
        }
        if (st->buf[i]) cudaFreeHost(st->buf[i]);
    }
    free(st->pc);
    free(st);
}

int cu_stager_flush(cu_stager *st, cudaStream_t s, qw_error *err) {
    if (!st->npc) return 0;
    const size_t bytes = st->used;
    /* the buffer's previous DMAs must have read it before it is overwritten */
    cudaError_t e = cudaEventSynchronize(st->drained[st->cur]);
    if (e == cudaSuccess) {
        pthread_mutex_lock(&st->mu);
        st->s = s;
        st->dma_err = cudaSuccess;
        st->busy = st->nthr;
        st->gen++;
        pthread_cond_broadcast(&st->go);
        pthread_mutex_unlock(&st->mu);
        fill_share(st, st->nthr, st->nthr + 1);
        pthread_mutex_lock(&st->mu);
        while (st->busy) pthread_cond_wait(&st->done, &st->mu);
        e = st->dma_err;
        pthread_mutex_unlock(&st->mu);
    }
    if (e == cudaSuccess) e = cudaEventRecord(st->drained[st->cur], s);
    /* done or dropped: on failure the caller forgets what the pieces were for */
    st->used = 0;
    st->npc = 0;
    if (e != cudaSuccess) return cu_fail(err, "staged copy of %zu bytes to the device: %s", bytes, cudaGetErrorString(e));
    st->cur = (st->cur + 1) % CU_STAGE_NBUF;
    return 0;
}

int cu_stager_put(cu_stager *st, void *dst, const void *src, size_t n, cudaStream_t s, qw_error *err) {
    uint8_t *d = (uint8_t *)dst;
    const uint8_t *h = (const uint8_t *)src;
    while (n) {
        if (st->used >= st->buf_bytes && cu_stager_flush(st, s, err)) return -1;
        const size_t take = n < st->buf_bytes - st->used ? n : st->buf_bytes - st->used;
        if (st->npc == st->cap) {
            const int cap = st->cap ? 2 * st->cap : 64;
            stage_piece *pc = (stage_piece *)realloc(st->pc, (size_t)cap * sizeof *pc);
            if (!pc) return cu_fail(err, "staging: out of host memory");
            st->pc = pc, st->cap = cap;
        }
        st->pc[st->npc++] = stage_piece{d, h, st->used, take};
        st->used = (st->used + take + 255) & ~(size_t)255; /* each DMA from an aligned start */
        if (st->used > st->buf_bytes) st->used = st->buf_bytes;
        d += take, h += take, n -= take;
    }
    return 0;
}
