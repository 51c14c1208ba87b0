/* streaming.c — the streaming tier: a bounded expert cache of C slots per
 * layer, filled on demand by preads from the GGUF file.
 *
 * Arena.  One anonymous mapping of n_layer * C slots; a slot holds one expert
 * as three page-aligned buffers (gate, up, down), each big enough for its
 * slice widened to 4 KiB boundaries.  Pages are faulted in on first read, so
 * the footprint grows to at most the arena and never past it: the arena IS
 * the bound (stats: arena_bytes).
 *
 * Reads.  Each expert is three contiguous slices, one per merged tensor; a
 * slice is one read job.  Jobs wait in a queue (demand loads from get() at
 * its front, need()'s and look-ahead's at its back) for one of two engines:
 *   io_uring (aio.c; QWISP_STREAM_IO=auto|uring): up to QWISP_STREAM_QD reads
 *     in flight, all submitted and reaped by aio's thread — the forward only
 *     queues jobs and kicks it (issuing an O_DIRECT read pins, and on a cold
 *     slot faults in and zeroes, its pages on the issuing thread: that work
 *     must not land on the forward) — on_read_done below: short reads
 *     resubmitted, EINVAL under O_DIRECT switches to buffered, the throttle
 *     applied, the slot finished;
 *   pread (QWISP_STREAM_IO=pread, or auto where io_uring is refused): a pool
 *     of QWISP_EXPERT_READERS threads, each doing one blocking pread at a time.
 * Both engines produce the same bytes in the same slots, so the logits do not
 * depend on the engine.  The page cache must not keep a second
 * copy of what the arena holds, so the file is opened with O_DIRECT and read
 * in 4 KiB-aligned ranges into the aligned buffers (the expert's data starts
 * at its offset within the first page).  Where O_DIRECT is refused (tmpfs,
 * some FUSE), reads fall back to buffered preads followed by
 * posix_fadvise(DONTNEED) on the range: a second copy exists only briefly.
 * O_DIRECT is preferred because DONTNEED is advisory and costs a second
 * memcpy through the cache.
 *
 * Throttle.  QWISP_SSD_THROTTLE_GBS=x: a shared virtual timeline; each read
 * reserves nbytes/x seconds on it and its reader sleeps until the end of its
 * window, so the aggregate read rate never exceeds x (a token bucket with no
 * burst; reads are MBs, so burst does not matter).
 *
 * Cache policy.  Per layer: where[e] -> slot.  A slot is EMPTY, LOADING,
 * READY or FAILED.  need(il, sel) marks the chunk's needed experts with their
 * processing rank (ascending id, the order qw_moe_block, model/moe.c, uses) and *reserves*
 * those already cached; then it starts loads for the first missing ones into
 * free slots.  get(il, e) pins e (loading it if absent, plus prefetching the
 * next missing needed experts into further free slots) and waits for it.
 * Victims, in order: an EMPTY slot; the coldest slot that is not pinned,
 * reserved or loading — by default the one needed least often (counts per
 * layer, halved every 4*C needs), ties to the least recently used
 * (QWISP_EXPERT_POLICY=lru: plain LRU); else — only get does this —
 * the unpinned reserved slot needed furthest in the future (Belady's choice
 * among the chunk's own experts).  Pins of a group are <= C - 1 when a get
 * runs (groups have at most C experts), so a victim always exists.
 * Hit = a get served by an expert cached before this chunk asked for it;
 * miss = a get whose expert had to be read.
 *
 * Look-ahead.  ahead(il, sel) (called by the MoE block of layer il-1 with
 * layer il's router applied to its hidden state) starts loads of predicted
 * experts of layer il into its free slots only (EMPTY or the unreserved,
 * unpinned LRU tail; at most C/2 of them), so a wrong guess costs bandwidth and
 * the LRU tail, never a pinned or needed slot: correctness is untouched.  A
 * slot loaded that way is marked `ahead`; the get that consumes it counts a
 * miss (the bytes were read for this token) and a look-ahead use, and adds the
 * part of its read time it did not wait for to ahead_hidden_ns.  need(il)
 * scores the prediction against the real choice (precision / recall, per
 * layer too: qw_stream_ahead_layer).
 *
 * Errors.  A failed read marks its slot FAILED with the message; the get that
 * waits on it reports it, the slot returns to EMPTY, the layer's pins are
 * dropped.  Nothing else is poisoned: the next request reads again.
 *
 * Locking: one mutex guards every slot, the job queue, the in-flight table
 * and the maps; readers drop it around pread and the throttle sleep, the
 * io_uring completion thread around the throttle sleep.
 */
#include "aio.h"
#include "stream.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { ALIGN = 4096, MAX_READERS = 64, MAX_QD = 256 };
enum { S_EMPTY = 0, S_LOADING, S_READY, S_FAILED };

typedef struct slot {
    char *buf[3];       /* aligned buffers in the arena */
    const char *ptr[3]; /* the expert's data inside them */
    int32_t expert;     /* -1 when EMPTY */
    int state;
    int pending;        /* reads outstanding */
    int pins;
    bool reserved;      /* needed later in the current chunk */
    bool loaded;        /* read for the current need: the consuming get is a miss */
    bool ahead;         /* loaded by look-ahead, not yet scored by a need */
    uint64_t lru;
    uint64_t t_start, t_done; /* ns: load started, its last read finished */
    char msg[640];      /* FAILED: why */
} slot;

typedef struct layer {
    slot *slots;       /* [C] */
    int32_t *where;    /* [n_expert] slot index or -1 */
    int32_t *rank;     /* [n_expert] position in the current need list or -1 */
    int32_t *need;     /* [n_expert] the current need list (ascending) */
    int32_t n_need;
    uint32_t *freq;    /* [n_expert] needs of each expert, halved every 4*C needs (LFU) */
    uint32_t n_needs;  /* need() calls since the last halving */
    uint8_t *pred;     /* [n_expert] 1 = predicted by look-ahead for the next need */
    int32_t n_pred;
    uint64_t ahead[3]; /* look-ahead score of this layer: predicted, correct, needed */
    uint64_t file_off[3]; /* file offset of expert 0 of gate/up/down */
    size_t mbytes[3];     /* bytes of one expert matrix */
} layer;

typedef struct job {
    int32_t il, si, part;
} job;

/* One io_uring read in flight: the aligned range [a0, a0+len) into buf, of
 * which want bytes must arrive; got so far. */
typedef struct inflight {
    job j;
    char *buf;
    uint64_t a0, t0;
    size_t len, want, got, n;
    int direct;
    bool busy;
} inflight;

struct qw_stream {
    int32_t n_layer, n_expert, c;
    bool lfu; /* QWISP_EXPERT_POLICY=lfu: victims by use count, then age */
    layer *layers;
    char *arena;
    size_t arena_bytes, part_cap[3];
    char path[256];
    int fd_direct, fd_buf; /* fd_direct = -1 when O_DIRECT is unavailable */
    _Atomic int use_direct;
    qw_experts_counters *ctr;
    double throttle_bps;
    int64_t fault_read;
    _Atomic int64_t read_seq;
    pthread_mutex_t thr_mu;
    uint64_t thr_next_ns;

    pthread_mutex_t mu;
    pthread_cond_t job_cv, done_cv;
    job *q; /* a deque: demand loads at the front */
    size_t q_cap, q_head, q_len;
    uint64_t clock;
    bool stop;
    int n_readers;
    pthread_t readers[MAX_READERS];
    qw_aio *aio;   /* io_uring engine, or NULL: pread readers */
    inflight *fl;  /* [qd] */
    int qd, n_fl;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t) {
    struct timespec ts = {(time_t)(t / 1000000000u), (long)(t % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

#define ADD(field, v) atomic_fetch_add_explicit(&s->ctr->field, (v), memory_order_relaxed)

/* ---- reading (both engines) ---- */

static void throttle(qw_stream *s, size_t n) {
    if (s->throttle_bps <= 0) return;
    const uint64_t dur = (uint64_t)((double)n / s->throttle_bps * 1e9);
    pthread_mutex_lock(&s->thr_mu);
    const uint64_t t = now_ns();
    const uint64_t start = s->thr_next_ns > t ? s->thr_next_ns : t;
    s->thr_next_ns = start + dur;
    const uint64_t end = s->thr_next_ns;
    pthread_mutex_unlock(&s->thr_mu);
    const uint64_t t1 = now_ns();
    if (end > t1) {
        sleep_until(end);
        ADD(throttle_ns, end - t1);
    }
}

/* Counts one read; 1 (and msg set) when QWISP_FAULT_READ says this one fails. */
static int injected_fault(qw_stream *s, uint64_t off, size_t n, char *msg, size_t msz) {
    const int64_t seq = atomic_fetch_add(&s->read_seq, 1) + 1;
    if (s->fault_read <= 0 || seq != s->fault_read) return 0;
    snprintf(msg, msz, "%s: reading %zu bytes at offset %llu: %s (injected by QWISP_FAULT_READ=%lld)", s->path, n,
             (unsigned long long)off, strerror(EIO), (long long)s->fault_read);
    return 1;
}

static void truncated_msg(qw_stream *s, uint64_t at, size_t got, size_t want, char *msg, size_t msz) {
    snprintf(msg, msz, "%s: short read at offset %llu (%zu of %zu bytes): the file ends early — was it truncated?",
             s->path, (unsigned long long)at, got, want);
}

/* A read finished: counters, and the page cache's copy dropped when buffered. */
static void read_accounted(qw_stream *s, uint64_t t0, size_t got, int direct, uint64_t a0, size_t len) {
    if (!direct) posix_fadvise(s->fd_buf, (off_t)a0, (off_t)len, POSIX_FADV_DONTNEED);
    ADD(read_ns, now_ns() - t0);
    ADD(bytes_read, got);
    ADD(reads, 1);
}

/* Where job j reads: the slice's file offset, its bytes, its buffer. */
static void job_range(qw_stream *s, job j, uint64_t *off, size_t *n, char **buf) {
    const layer *L = &s->layers[j.il];
    const slot *sl = &L->slots[j.si];
    *off = L->file_off[j.part] + (uint64_t)sl->expert * L->mbytes[j.part];
    *n = L->mbytes[j.part];
    *buf = sl->buf[j.part];
}

/* Reads [off, off+n) of the file into buf so the data lands at buf + (off %
 * ALIGN), with blocking preads.  0, or -1 with msg set. */
static int read_range(qw_stream *s, char *buf, uint64_t off, size_t n, char *msg, size_t msz) {
    const uint64_t a0 = off & ~(uint64_t)(ALIGN - 1);
    const uint64_t a1 = (off + n + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
    const size_t want = (size_t)(off + n - a0); /* bytes that must arrive */
    if (injected_fault(s, off, n, msg, msz)) return -1;
    const uint64_t t0 = now_ns();
    size_t got = 0;
    int direct = atomic_load(&s->use_direct);
    while (got < want) {
        const int fd = direct ? s->fd_direct : s->fd_buf;
        const size_t len = (size_t)(a1 - a0) - got;
        ssize_t r = pread(fd, buf + got, len, (off_t)(a0 + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EINVAL && direct && got == 0) {
            /* O_DIRECT refused for this file or alignment: buffered from now on */
            atomic_store(&s->use_direct, 0);
            direct = 0;
            continue;
        }
        if (r < 0) {
            snprintf(msg, msz, "%s: reading %zu bytes at offset %llu: %s", s->path, n,
                     (unsigned long long)(a0 + got), strerror(errno));
            return -1;
        }
        if (r == 0 || (direct && ((got + (size_t)r) % ALIGN) && got + (size_t)r < want)) {
            /* nothing more, or an unaligned short O_DIRECT read: the end of the file */
            truncated_msg(s, a0 + got + (size_t)r, got + (size_t)r, want, msg, msz);
            return -1;
        }
        got += (size_t)r;
    }
    read_accounted(s, t0, got, direct, a0, (size_t)(a1 - a0));
    throttle(s, got);
    return 0;
}

/* ---- the job queue and job completion (under s->mu) ---- */

static void q_push(qw_stream *s, job j, bool front) {
    if (front) {
        s->q_head = (s->q_head + s->q_cap - 1) % s->q_cap;
        s->q[s->q_head] = j;
    } else {
        s->q[(s->q_head + s->q_len) % s->q_cap] = j;
    }
    s->q_len++;
}

static job q_pop(qw_stream *s) {
    job j = s->q[s->q_head];
    s->q_head = (s->q_head + 1) % s->q_cap;
    s->q_len--;
    return j;
}

/* One of a slot's three reads is over (msg non-empty: it failed). */
static void job_finish(qw_stream *s, job j, const char *msg) {
    slot *sl = &s->layers[j.il].slots[j.si];
    if (msg[0]) {
        ADD(read_errors, 1);
        if (sl->msg[0] == '\0') snprintf(sl->msg, sizeof sl->msg, "layer %d expert %d: %s", j.il, sl->expert, msg);
    }
    if (--sl->pending == 0) {
        sl->state = sl->msg[0] ? S_FAILED : S_READY;
        sl->t_done = now_ns();
        pthread_cond_broadcast(&s->done_cv);
    }
}

/* ---- engine 1: pread reader threads ---- */

static void *reader_main(void *arg) {
    qw_stream *s = arg;
    char msg[512];
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && s->q_len == 0) pthread_cond_wait(&s->job_cv, &s->mu);
        if (s->stop) break;
        const job j = q_pop(s);
        uint64_t off;
        size_t n;
        char *buf;
        job_range(s, j, &off, &n, &buf);
        pthread_mutex_unlock(&s->mu);
        msg[0] = '\0';
        read_range(s, buf, off, n, msg, sizeof msg);
        pthread_mutex_lock(&s->mu);
        job_finish(s, j, msg);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- engine 2: io_uring (aio.c) ---- */

static int submit_fl(qw_stream *s, int k) {
    inflight *f = &s->fl[k];
    const int fd = f->direct ? s->fd_direct : s->fd_buf;
    return qw_aio_submit(s->aio, fd, f->buf + f->got, f->len - f->got, f->a0 + f->got, (uint64_t)k);
}

/* The ring's thread: moves queued jobs into the ring while fewer than qd
 * are in flight (aio.c submits them when this returns). */
static void fill_ring(qw_stream *s) {
    char msg[512];
    while (!s->stop && s->q_len && s->n_fl < s->qd) {
        const job j = q_pop(s);
        uint64_t off;
        size_t n;
        char *buf;
        job_range(s, j, &off, &n, &buf);
        msg[0] = '\0';
        if (injected_fault(s, off, n, msg, sizeof msg)) {
            job_finish(s, j, msg);
            continue;
        }
        int k = 0;
        while (s->fl[k].busy) k++;
        inflight *f = &s->fl[k];
        f->j = j;
        f->buf = buf;
        f->a0 = off & ~(uint64_t)(ALIGN - 1);
        f->len = (size_t)(((off + n + ALIGN - 1) & ~(uint64_t)(ALIGN - 1)) - f->a0);
        f->want = (size_t)(off + n - f->a0);
        f->got = 0;
        f->n = n;
        f->direct = atomic_load(&s->use_direct);
        f->t0 = now_ns();
        f->busy = true;
        s->n_fl++;
        const int rc = submit_fl(s, k);
        if (rc) {
            f->busy = false;
            s->n_fl--;
            snprintf(msg, sizeof msg, "%s: io_uring submit of %zu bytes at offset %llu: %s", s->path, n,
                     (unsigned long long)off, strerror(-rc));
            job_finish(s, j, msg);
        }
    }
}

/* aio's wake callback (the ring's thread, after a kick). */
static void on_kick(void *ctx) {
    qw_stream *s = ctx;
    pthread_mutex_lock(&s->mu);
    fill_ring(s);
    pthread_mutex_unlock(&s->mu);
}

/* New jobs are queued: tell the engine (under s->mu, any thread). */
static void pump(qw_stream *s) {
    if (s->aio) qw_aio_kick(s->aio);
    else pthread_cond_broadcast(&s->job_cv);
}

/* aio's completion callback (its thread): res bytes arrived for read tag. */
static void on_read_done(void *ctx, uint64_t tag, int64_t res) {
    qw_stream *s = ctx;
    char msg[512] = "";
    pthread_mutex_lock(&s->mu);
    inflight *f = &s->fl[tag];
    int rc = 0;
    if (res == -EINTR || res == -EAGAIN) {
        rc = submit_fl(s, (int)tag);
    } else if (res == -EINVAL && f->direct && f->got == 0) {
        /* O_DIRECT refused for this file or alignment: buffered from now on */
        atomic_store(&s->use_direct, 0);
        f->direct = 0;
        rc = submit_fl(s, (int)tag);
    } else if (res < 0) {
        snprintf(msg, sizeof msg, "%s: reading %zu bytes at offset %llu: %s", s->path, f->n,
                 (unsigned long long)(f->a0 + f->got), strerror((int)-res));
    } else if (res == 0 || (f->direct && ((f->got + (size_t)res) % ALIGN) && f->got + (size_t)res < f->want)) {
        truncated_msg(s, f->a0 + f->got + (size_t)res, f->got + (size_t)res, f->want, msg, sizeof msg);
    } else {
        f->got += (size_t)res;
        if (f->got < f->want) rc = submit_fl(s, (int)tag); /* a short read: the rest */
    }
    if (rc)
        snprintf(msg, sizeof msg, "%s: io_uring resubmit at offset %llu: %s", s->path,
                 (unsigned long long)(f->a0 + f->got), strerror(-rc));
    else if (!msg[0] && f->got < f->want) { /* resubmitted: this read goes on */
        pthread_mutex_unlock(&s->mu);
        return;
    }
    const job j = f->j;
    const size_t got = f->got;
    if (!msg[0]) read_accounted(s, f->t0, got, f->direct, f->a0, f->len);
    pthread_mutex_unlock(&s->mu);
    if (!msg[0]) throttle(s, got); /* holds this read's place in the window */
    pthread_mutex_lock(&s->mu);
    f->busy = false;
    s->n_fl--;
    job_finish(s, j, msg);
    fill_ring(s);
    pthread_cond_broadcast(&s->done_cv); /* close waits for n_fl == 0 */
    pthread_mutex_unlock(&s->mu);
}

/* ---- the cache (all under s->mu) ---- */

/* Loads expert e into slot si: three jobs, at the queue's front when a get
 * waits for them (urgent), else at its back. */
static void start_load(qw_stream *s, int32_t il, int32_t si, int32_t e, bool urgent) {
    layer *L = &s->layers[il];
    slot *sl = &L->slots[si];
    if (sl->expert >= 0 && L->where[sl->expert] == si) L->where[sl->expert] = -1;
    sl->expert = e;
    sl->state = S_LOADING;
    sl->pending = 3;
    sl->pins = 0;
    sl->reserved = L->rank[e] >= 0;
    sl->loaded = true;
    sl->ahead = false;
    sl->t_start = now_ns();
    sl->msg[0] = '\0';
    L->where[e] = si;
    for (int p = 0; p < 3; p++) {
        sl->ptr[p] = sl->buf[p] + ((L->file_off[p] + (uint64_t)e * L->mbytes[p]) % ALIGN);
        q_push(s, (job){il, si, urgent ? 2 - p : p}, urgent); /* front pushes reverse: gate first */
    }
    pump(s);
}

/* Whether slot a is a better victim than slot b: LFU (the default) takes
 * the one needed least often lately, ties to the older; LRU the older. */
static bool colder(const qw_stream *s, const layer *L, const slot *a, const slot *b) {
    if (s->lfu) {
        const uint32_t fa = L->freq[a->expert], fb = L->freq[b->expert];
        if (fa != fb) return fa < fb;
    }
    return a->lru < b->lru;
}

/* A slot that may be refilled without stealing: EMPTY first, else the
 * coldest slot that is unpinned, unreserved and not loading.  -1 if none. */
static int32_t free_victim(qw_stream *s, layer *L) {
    int32_t best = -1;
    for (int32_t i = 0; i < s->c; i++) {
        slot *sl = &L->slots[i];
        if (sl->state == S_EMPTY || sl->state == S_FAILED) return i;
        if (sl->pins || sl->reserved || sl->state == S_LOADING) continue;
        if (best < 0 || colder(s, L, sl, &L->slots[best])) best = i;
    }
    return best;
}

/* LFU bookkeeping of one need: +1 per distinct expert, all halved every
 * 4*C needs so old popularity fades (bench/route_policy.py measured the
 * same hit rate with and without the halving on the trained models' traces;
 * the halving keeps a topic change from being locked out). */
static void count_need(qw_stream *s, layer *L) {
    for (int32_t r = 0; r < L->n_need; r++) L->freq[L->need[r]]++;
    if (++L->n_needs >= 4 * (uint32_t)s->c) {
        L->n_needs = 0;
        for (int32_t e = 0; e < s->n_expert; e++) L->freq[e] >>= 1;
    }
}

/* Starts loads for the needed-but-absent experts after need position `from`
 * into free slots, stopping at the first one that finds none. */
static void prefetch(qw_stream *s, int32_t il, int32_t from) {
    layer *L = &s->layers[il];
    for (int32_t r = from; r < L->n_need; r++) {
        const int32_t e = L->need[r];
        if (L->where[e] >= 0) continue;
        const int32_t v = free_victim(s, L);
        if (v < 0) return;
        start_load(s, il, v, e, false);
    }
}

/* Waits for a loading slot; the ns waited. */
static uint64_t wait_slot(qw_stream *s, slot *sl) {
    if (sl->state != S_LOADING) return 0;
    const uint64_t t0 = now_ns();
    while (sl->state == S_LOADING) pthread_cond_wait(&s->done_cv, &s->mu);
    const uint64_t w = now_ns() - t0;
    ADD(wait_ns, w);
    return w;
}

static void release_locked(qw_stream *s, int32_t il) {
    layer *L = &s->layers[il];
    for (int32_t i = 0; i < s->c; i++) L->slots[i].pins = 0;
}

static void clear_need(layer *L) {
    for (int32_t r = 0; r < L->n_need; r++) L->rank[L->need[r]] = -1;
    L->n_need = 0;
}

/* need() scores the look-ahead's guess for this layer against the real
 * choice, then forgets the guess; slots it loaded that were not needed
 * become ordinary cache entries (a later use of them is a hit). */
static void score_ahead(qw_stream *s, layer *L) {
    if (L->n_pred) {
        uint64_t correct = 0;
        for (int32_t r = 0; r < L->n_need; r++) correct += L->pred[L->need[r]];
        L->ahead[0] += (uint64_t)L->n_pred;
        L->ahead[1] += correct;
        L->ahead[2] += (uint64_t)L->n_need;
        ADD(ahead_predicted, (uint64_t)L->n_pred);
        ADD(ahead_correct, correct);
        ADD(ahead_needed, (uint64_t)L->n_need);
        memset(L->pred, 0, (size_t)s->n_expert);
        L->n_pred = 0;
    }
    for (int32_t i = 0; i < s->c; i++) {
        slot *sl = &L->slots[i];
        if (sl->ahead && (sl->expert < 0 || L->rank[sl->expert] < 0)) {
            sl->ahead = false;
            if (sl->state == S_READY) sl->loaded = false;
        }
    }
}

void qw_stream_need(qw_stream *s, int32_t il, const int32_t *sel, int32_t n) {
    pthread_mutex_lock(&s->mu);
    layer *L = &s->layers[il];
    release_locked(s, il);
    clear_need(L);
    for (int32_t i = 0; i < s->c; i++) L->slots[i].reserved = false;
    for (int32_t i = 0; i < n; i++)
        if (sel[i] >= 0 && sel[i] < s->n_expert) L->rank[sel[i]] = 0;
    for (int32_t e = 0; e < s->n_expert; e++)
        if (L->rank[e] == 0) L->need[L->n_need++] = e;
    for (int32_t r = 0; r < L->n_need; r++) {
        const int32_t e = L->need[r];
        L->rank[e] = r;
        if (L->where[e] >= 0) {
            slot *sl = &L->slots[L->where[e]];
            sl->reserved = true;
            /* cached before this chunk: a hit; read by look-ahead for it: a miss */
            if (sl->state == S_READY && !sl->ahead) sl->loaded = false;
        }
    }
    score_ahead(s, L);
    count_need(s, L);
    prefetch(s, il, 0);
    pthread_mutex_unlock(&s->mu);
}

void qw_stream_ahead(qw_stream *s, int32_t il, const int32_t *sel, int32_t n) {
    if (il < 0 || il >= s->n_layer) return;
    pthread_mutex_lock(&s->mu);
    layer *L = &s->layers[il];
    memset(L->pred, 0, (size_t)s->n_expert);
    L->n_pred = 0;
    int32_t budget = s->c / 2;
    for (int32_t i = 0; i < n; i++) {
        const int32_t e = sel[i];
        if (e < 0 || e >= s->n_expert || L->pred[e]) continue;
        L->pred[e] = 1;
        L->n_pred++;
        if (L->where[e] >= 0 || budget <= 0) continue; /* cached, or loading already */
        const int32_t v = free_victim(s, L);
        if (v < 0) {
            budget = 0;
            continue;
        }
        start_load(s, il, v, e, false);
        L->slots[v].reserved = false;
        L->slots[v].ahead = true;
        L->slots[v].lru = ++s->clock;
        ADD(ahead_reads, 1);
        budget--;
    }
    pthread_mutex_unlock(&s->mu);
}

void qw_stream_ahead_layer(const qw_stream *s, int32_t il, uint64_t out[3]) {
    for (int i = 0; i < 3; i++) out[i] = il >= 0 && il < s->n_layer ? s->layers[il].ahead[i] : 0;
}

/* A victim for get: a free one, else the unpinned reserved slot needed
 * furthest ahead (waiting out its load first).  -1 if every slot is pinned. */
static int32_t steal_victim(qw_stream *s, int32_t il) {
    layer *L = &s->layers[il];
    for (;;) {
        int32_t v = free_victim(s, L);
        if (v >= 0) return v;
        int32_t best = -1, best_rank = -1;
        for (int32_t i = 0; i < s->c; i++) {
            slot *sl = &L->slots[i];
            if (sl->pins) continue;
            const int32_t r = sl->expert >= 0 ? L->rank[sl->expert] : -1;
            if (best < 0 || r > best_rank) best = i, best_rank = r;
        }
        if (best < 0) return -1;
        slot *sl = &L->slots[best];
        if (sl->state != S_LOADING) {
            sl->reserved = false;
            return best;
        }
        wait_slot(s, sl); /* then look again: the world may have changed */
    }
}

int qw_stream_get(qw_stream *s, int32_t il, int32_t e, const char *w[3], qw_error *err) {
    pthread_mutex_lock(&s->mu);
    layer *L = &s->layers[il];
    int32_t si = L->where[e];
    if (si < 0) {
        si = steal_victim(s, il);
        if (si < 0) {
            release_locked(s, il);
            pthread_mutex_unlock(&s->mu);
            return qw_fail(err, "expert cache: all %d slots of layer %d are pinned (C too small)", s->c, il);
        }
        start_load(s, il, si, e, true);
        if (L->rank[e] >= 0) prefetch(s, il, L->rank[e] + 1);
    }
    slot *sl = &L->slots[si];
    const uint64_t waited = wait_slot(s, sl);
    if (sl->state == S_FAILED || sl->expert != e) {
        int rc = qw_fail(err, "%s", sl->expert == e ? sl->msg : "expert cache: slot reused while waiting");
        if (sl->expert == e) {
            L->where[e] = -1;
            sl->expert = -1;
            sl->state = S_EMPTY;
            sl->msg[0] = '\0';
        }
        release_locked(s, il);
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    if (sl->loaded) ADD(misses, 1);
    else ADD(hits, 1);
    if (sl->ahead) {
        const uint64_t took = sl->t_done > sl->t_start ? sl->t_done - sl->t_start : 0;
        ADD(ahead_used, 1);
        ADD(ahead_hidden_ns, took > waited ? took - waited : 0);
        sl->ahead = false;
    }
    sl->loaded = false;
    sl->reserved = false;
    sl->pins++;
    sl->lru = ++s->clock;
    for (int p = 0; p < 3; p++) w[p] = sl->ptr[p];
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void qw_stream_release(qw_stream *s, int32_t il) {
    pthread_mutex_lock(&s->mu);
    release_locked(s, il);
    pthread_mutex_unlock(&s->mu);
}

/* ---- open / close ---- */

uint64_t qw_stream_arena_bytes(const qw_stream *s) { return s->arena_bytes; }

bool qw_stream_uses_uring(const qw_stream *s) { return s->aio != NULL; }

bool qw_stream_ready(qw_stream *s, int32_t il, int32_t e) {
    pthread_mutex_lock(&s->mu);
    const int32_t si = s->layers[il].where[e];
    const bool yes = si >= 0 && s->layers[il].slots[si].state == S_READY;
    pthread_mutex_unlock(&s->mu);
    return yes;
}

bool qw_stream_cached(qw_stream *s, int32_t il, int32_t e) {
    pthread_mutex_lock(&s->mu);
    const int32_t si = s->layers[il].where[e];
    const bool yes = si >= 0 && s->layers[il].slots[si].state != S_FAILED;
    pthread_mutex_unlock(&s->mu);
    return yes;
}

/* Starts the engine cfg->io asks for.  0, or -1 + err. */
static int start_engine(qw_stream *s, const qw_stream_config *cfg, qw_error *err) {
    if (cfg->io != QW_STREAM_IO_PREAD) {
        char why[256];
        s->qd = cfg->qd < 1 ? 1 : cfg->qd > MAX_QD ? MAX_QD : cfg->qd;
        s->fl = qw_xcalloc((size_t)s->qd, sizeof *s->fl);
        s->aio = qw_aio_open((unsigned)s->qd, on_read_done, on_kick, s, why, sizeof why);
        if (s->aio) return 0;
        if (cfg->io == QW_STREAM_IO_URING)
            return qw_fail(err, "QWISP_STREAM_IO=uring: io_uring is unavailable (%s); unset it or use pread", why);
        qw_log(QW_LOG_INFO, "streaming tier: io_uring unavailable (%s); expert reads use pread threads", why);
    }
    const int nr = cfg->readers < 1 ? 1 : cfg->readers > MAX_READERS ? MAX_READERS : cfg->readers;
    for (; s->n_readers < nr; s->n_readers++) {
        int rc = pthread_create(&s->readers[s->n_readers], NULL, reader_main, s);
        if (rc) return qw_fail(err, "streaming tier: cannot start reader thread: %s", strerror(rc));
    }
    return 0;
}

qw_stream *qw_stream_open(const qw_expert_layout *l, const qw_stream_config *cfg, qw_experts_counters *ctr,
                          qw_error *err) {
    qw_stream *s = qw_xcalloc(1, sizeof *s);
    s->n_layer = l->n_layer;
    s->n_expert = l->n_expert;
    s->c = cfg->c;
    s->lfu = cfg->lfu;
    s->ctr = ctr;
    s->throttle_bps = cfg->throttle_bps;
    s->fault_read = cfg->fault_read;
    s->fd_direct = s->fd_buf = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->thr_mu, NULL);
    pthread_cond_init(&s->job_cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    snprintf(s->path, sizeof s->path, "%s", l->path);
    if (s->c < 1 || s->c > s->n_expert) {
        qw_fail(err, "streaming tier: C=%d outside 1..%d", s->c, s->n_expert);
        goto fail;
    }
    s->fd_buf = open(s->path, O_RDONLY | O_CLOEXEC);
    if (s->fd_buf < 0) {
        qw_fail(err, "%s: cannot open for expert reads: %s", s->path, strerror(errno));
        goto fail;
    }
    s->fd_direct = open(s->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    atomic_store(&s->use_direct, s->fd_direct >= 0);
    posix_fadvise(s->fd_buf, 0, 0, POSIX_FADV_RANDOM);

    const size_t mb[3] = {l->parts[0][0].matrix_bytes, l->parts[0][1].matrix_bytes, l->parts[0][2].matrix_bytes};
    size_t slot_bytes = 0;
    for (int p = 0; p < 3; p++) {
        s->part_cap[p] = ((mb[p] + ALIGN - 1) / ALIGN + 1) * ALIGN; /* slice widened to pages */
        slot_bytes += s->part_cap[p];
    }
    s->arena_bytes = (size_t)s->n_layer * (size_t)s->c * slot_bytes;
    s->arena = mmap(NULL, s->arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                    -1, 0);
    if (s->arena == MAP_FAILED) {
        s->arena = NULL;
        qw_fail(err, "streaming tier: cannot map a %zu-byte expert arena (%d layers x C=%d): %s",
                s->arena_bytes, s->n_layer, s->c, strerror(errno));
        goto fail;
    }
    /* Huge pages where the kernel offers them (THP "madvise"): a cold slot
     * then costs one fault and one page pin per 2 MiB instead of 512 — on a
     * cold cache the 4 KiB faults taken inside the reads were most of the
     * streaming tier's system time.  The arena's size, the bound, is the same. */
#ifdef MADV_HUGEPAGE
    madvise(s->arena, s->arena_bytes, MADV_HUGEPAGE);
#endif
    s->layers = qw_xcalloc((size_t)s->n_layer, sizeof(layer));
    char *p = s->arena;
    for (int32_t il = 0; il < s->n_layer; il++) {
        layer *L = &s->layers[il];
        const qw_expert_part *ts = l->parts[il];
        for (int q = 0; q < 3; q++) {
            if (ts[q].matrix_bytes != mb[q]) {
                qw_fail(err, "%s: layer %d's %s has %zu bytes per expert, layer 0's %zu (mixed layers are not streamed)",
                        s->path, il, ts[q].name, ts[q].matrix_bytes, mb[q]);
                goto fail;
            }
            L->file_off[q] = ts[q].file_off;
            L->mbytes[q] = mb[q];
        }
        L->slots = qw_xcalloc((size_t)s->c, sizeof(slot));
        L->where = qw_xcalloc((size_t)s->n_expert, sizeof(int32_t));
        L->rank = qw_xcalloc((size_t)s->n_expert, sizeof(int32_t));
        L->need = qw_xcalloc((size_t)s->n_expert, sizeof(int32_t));
        L->pred = qw_xcalloc((size_t)s->n_expert, 1);
        L->freq = qw_xcalloc((size_t)s->n_expert, sizeof(uint32_t));
        for (int32_t e = 0; e < s->n_expert; e++) L->where[e] = L->rank[e] = -1;
        for (int32_t i = 0; i < s->c; i++) {
            L->slots[i].expert = -1;
            for (int q = 0; q < 3; q++) {
                L->slots[i].buf[q] = p;
                p += s->part_cap[q];
            }
        }
    }
    s->q_cap = (size_t)s->n_layer * (size_t)s->c * 3 + 16;
    s->q = qw_xcalloc(s->q_cap, sizeof(job));
    if (start_engine(s, cfg, err)) goto fail;
    return s;
fail:
    qw_stream_close(s);
    return NULL;
}

void qw_stream_close(qw_stream *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->job_cv);
    while (s->n_fl > 0) pthread_cond_wait(&s->done_cv, &s->mu); /* the ring writes into the arena */
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_readers; i++) pthread_join(s->readers[i], NULL);
    qw_aio_close(s->aio);
    if (s->layers)
        for (int32_t il = 0; il < s->n_layer; il++) {
            free(s->layers[il].slots);
            free(s->layers[il].where);
            free(s->layers[il].rank);
            free(s->layers[il].need);
            free(s->layers[il].pred);
            free(s->layers[il].freq);
        }
    free(s->layers);
    free(s->q);
    free(s->fl);
    if (s->arena) munmap(s->arena, s->arena_bytes);
    if (s->fd_direct >= 0) close(s->fd_direct);
    if (s->fd_buf >= 0) close(s->fd_buf);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->thr_mu);
    pthread_cond_destroy(&s->job_cv);
    pthread_cond_destroy(&s->done_cv);
    free(s);
}
