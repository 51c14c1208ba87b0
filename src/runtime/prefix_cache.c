/* prefix_cache.c — see prefix_cache.h.
 *
 * Choosing (acquire): for every idle entry, the usable prefix u it shares
 * with the prompt — the matched token count k for a KV-only model; for a
 * model with recurrent layers, k itself only when the entry holds exactly k
 * tokens (its live state continues), else the last snapshot at or below k.
 * The entry with the largest u wins.  It is continued in place when the
 * prompt contains the entry's last prompt whole (the same conversation's
 * next turn or a regenerated answer: what is cut is at most the answer,
 * which the history may re-render differently); otherwise its first u
 * tokens are copied (qw_ctx_copy_prefix, plus
 * the snapshot at u) into a free slot or the least recently used other
 * entry, so a conversation that shares only a system prompt with another
 * reuses those blocks without wiping out the other's history.  With no
 * usable prefix: a free slot, else the least recently used entry, emptied.
 *
 * Shared blocks are copied, not referenced: the forward pass attends over
 * one contiguous KV per sequence, so two entries that share a system prompt
 * each hold it (the copy costs a memcpy of its rows — nothing next to
 * prefilling them; a paged KV would share them in place).
 *
 * Snapshots: a qwen35moe state cannot be rewound (qw_ctx_truncate empties
 * it), so while a prompt is prefilled the path stops at every multiple of
 * the block and qw_pcache_snapshot keeps the state there (a pool buffer of
 * qw_ctx_state_bytes).  Rewinding an entry to a snapshot position loads it
 * (qw_ctx_state_load) and cuts the KV to the same position.
 *
 * Eviction (one loop, in record): while the idle entries' bytes exceed the
 * budget, cut the least recently used entry (the current one last) back by
 * one block — to the previous block boundary, or for a recurrent model the
 * previous snapshot — shrinking its KV allocation (qw_ctx_kv_fit); an entry
 * with nothing left is dropped.  Bytes are measured, not estimated:
 * qw_ctx_kv_bytes (the KV grows on demand) + the live recurrent state + the
 * snapshots.  A busy entry is neither chosen, counted nor evicted.
 *
 * Entries live in a small array (at most MAX_ENTRIES; a linear scan per
 * request is nothing next to a forward pass).  Recency is a counter bumped
 * at each acquire.
 */
#include "prefix_cache.h"
#include "qwisp/pool.h"
#include "qwisp/sched.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_ENTRIES = 64 };

typedef struct snap {
    int32_t pos;  /* the state after exactly pos tokens */
    void *state;  /* pool buffer of state_bytes */
} snap;

typedef struct entry {
    qw_ctx *ctx;      /* NULL: slot free */
    int32_t *toks;    /* [n_ctx] the token at each KV position */
    int32_t n;        /* valid tokens (= qw_ctx_n_past once recorded) */
    int32_t n_prompt; /* of those, the last request's prompt (the rest it generated) */
    uint64_t used;    /* recency stamp */
    bool busy;        /* acquired and not recorded yet: a request runs on it */
    snap *snaps;      /* [n_snaps] ascending pos, all < n or == n */
    int32_t n_snaps, cap_snaps;
} entry;

struct qw_pcache {
    const qw_model *m;
    int32_t n_ctx, block;
    uint64_t budget, clock, state_bytes; /* state_bytes: 0 for a KV-only model */
    entry e[MAX_ENTRIES];
    uint64_t evictions, block_evictions, shared_tokens;
    pthread_mutex_t mu; /* guards the stats copy below */
    qw_pcache_stats st;
};

/* Bytes an idle entry holds (a busy one's KV is a running request's, not the cache's). */
static uint64_t entry_bytes(const qw_pcache *p, const entry *e) {
    if (!e->ctx || e->busy) return 0;
    return qw_ctx_kv_bytes(e->ctx) + p->state_bytes * (1 + (uint64_t)e->n_snaps);
}

static void publish(qw_pcache *p) {
    qw_pcache_stats st = {.budget_bytes = p->budget, .evictions = p->evictions,
                          .block_evictions = p->block_evictions, .shared_tokens = p->shared_tokens};
    for (int i = 0; i < MAX_ENTRIES; i++)
        if (p->e[i].ctx && !p->e[i].busy) {
            st.entries++;
            st.snapshots += p->e[i].n_snaps;
            st.bytes += entry_bytes(p, &p->e[i]);
        }
    pthread_mutex_lock(&p->mu);
    p->st = st;
    pthread_mutex_unlock(&p->mu);
}

qw_pcache *qw_pcache_new(const qw_model *m, int32_t n_ctx, uint64_t budget_bytes, int32_t block, qw_error *err) {
    qw_pcache *p = calloc(1, sizeof *p);
    if (!p) {
        qw_fail(err, "out of memory creating the prefix cache");
        return NULL;
    }
    p->m = m;
    p->n_ctx = n_ctx;
    p->block = block < 1 ? 1 : block;
    p->budget = budget_bytes;
    p->state_bytes = qw_model_state_bytes(m);
    pthread_mutex_init(&p->mu, NULL);
    publish(p);
    return p;
}

/* Drops e's snapshots above pos. */
static void drop_snaps_above(entry *e, int32_t pos) {
    while (e->n_snaps > 0 && e->snaps[e->n_snaps - 1].pos > pos) qw_pool_free(e->snaps[--e->n_snaps].state);
}

static void drop(entry *e) {
    drop_snaps_above(e, -1);
    free(e->snaps);
    qw_ctx_free(e->ctx);
    free(e->toks);
    *e = (entry){0};
}

void qw_pcache_free(qw_pcache *p) {
    if (!p) return;
    for (int i = 0; i < MAX_ENTRIES; i++) drop(&p->e[i]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* e's snapshot at exactly pos, or NULL. */
static snap *snap_at(entry *e, int32_t pos) {
    for (int32_t i = 0; i < e->n_snaps; i++)
        if (e->snaps[i].pos == pos) return &e->snaps[i];
    return NULL;
}

/* How many of e's tokens a prompt sharing its first k can resume from. */
static int32_t usable(const qw_pcache *p, const entry *e, int32_t k) {
    if (!p->state_bytes || (k == e->n && k == qw_ctx_n_past(e->ctx))) return k;
    int32_t u = 0;
    for (int32_t i = 0; i < e->n_snaps && e->snaps[i].pos <= k; i++) u = e->snaps[i].pos;
    return u;
}

/* Cuts e back to its first u tokens (u is e->n, a snapshot position, or
 * anything for a KV-only model; 0 empties it). */
static void rewind_to(qw_pcache *p, entry *e, int32_t u) {
    snap *s = p->state_bytes && u > 0 && u < qw_ctx_n_past(e->ctx) ? snap_at(e, u) : NULL;
    if (s) qw_ctx_state_load(e->ctx, s->state, u);
    else if (p->state_bytes && u > 0 && u < qw_ctx_n_past(e->ctx)) u = 0; /* no state there: start over */
    if (u < qw_ctx_n_past(e->ctx)) qw_ctx_truncate(e->ctx, u);
    drop_snaps_above(e, u);
    e->n = u;
    if (e->n_prompt > u) e->n_prompt = u;
}

/* A free slot with a new context, or NULL + err. */
static entry *new_entry(qw_pcache *p, int slot, qw_error *err) {
    entry *e = &p->e[slot];
    e->toks = malloc((size_t)p->n_ctx * sizeof(int32_t));
    e->ctx = e->toks ? qw_ctx_new(p->m, p->n_ctx, 1, err) : NULL; /* one thread: the workspace computes */
    if (!e->ctx) {
        if (!e->toks) qw_fail(err, "out of memory for a prefix-cache entry");
        drop(e);
        return NULL;
    }
    return e;
}

/* Makes dst hold src's first u tokens (u is usable(src)); false when out of memory (dst emptied). */
static bool copy_prefix(qw_pcache *p, entry *dst, entry *src, int32_t u) {
    qw_error err = {0};
    rewind_to(p, dst, 0);
    if (qw_ctx_copy_prefix(dst->ctx, src->ctx, u, &err)) return false;
    if (p->state_bytes) {
        snap *s = u == qw_ctx_n_past(src->ctx) ? NULL : snap_at(src, u);
        if (s) qw_ctx_state_load(dst->ctx, s->state, u);
        else { /* u is src's live end: its state is the context's own */
            void *tmp = qw_pool_alloc(p->state_bytes);
            if (!tmp) {
                qw_ctx_truncate(dst->ctx, 0);
                return false;
            }
            qw_ctx_state_save(src->ctx, tmp);
            qw_ctx_state_load(dst->ctx, tmp, u);
            qw_pool_free(tmp);
        }
    }
    memcpy(dst->toks, src->toks, (size_t)u * sizeof(int32_t));
    dst->n = dst->n_prompt = u;
    return true;
}

qw_ctx *qw_pcache_acquire(qw_pcache *p, const int32_t *prompt, int32_t n, int32_t *n_cached, qw_error *err) {
    int best = -1, free_slot = -1, lru = -1, lru2 = -1; /* lru2: the least recent idle entry but best */
    int32_t best_u = 0, best_k = 0;
    for (int i = 0; i < MAX_ENTRIES; i++) {
        entry *e = &p->e[i];
        if (!e->ctx) {
            if (free_slot < 0) free_slot = i;
            continue;
        }
        if (e->busy) continue;
        if (lru < 0 || e->used < p->e[lru].used) lru = i;
        int32_t lim = e->n < n - 1 ? e->n : n - 1, k = 0;
        while (k < lim && e->toks[k] == prompt[k]) k++;
        int32_t u = usable(p, e, k);
        if (u > best_u || (u == best_u && u > 0 && e->used > p->e[best].used)) best_u = u, best_k = k, best = i;
    }
    for (int i = 0; i < MAX_ENTRIES; i++)
        if (p->e[i].ctx && !p->e[i].busy && i != best && (lru2 < 0 || p->e[i].used < p->e[lru2].used)) lru2 = i;
    entry *e = NULL;
    if (best >= 0 && (best_k >= p->e[best].n_prompt || (free_slot < 0 && lru2 < 0))) {
        e = &p->e[best]; /* continue this conversation (or no other room) */
        rewind_to(p, e, best_u);
    } else if (best >= 0) {
        /* share the prefix: copy it so the donor keeps its history */
        e = free_slot >= 0 ? new_entry(p, free_slot, err) : &p->e[lru2];
        if (!e) return NULL;
        if (copy_prefix(p, e, &p->e[best], best_u)) p->shared_tokens += (uint64_t)best_u;
        else rewind_to(p, e, 0);
    } else {
        if (free_slot >= 0) e = new_entry(p, free_slot, err);
        else if (lru >= 0) e = &p->e[lru];
        else qw_fail(err, "prefix cache: all %d entries are in use", MAX_ENTRIES);
        if (!e) return NULL;
        rewind_to(p, e, 0);
    }
    *n_cached = e->n;
    e->used = ++p->clock;
    e->busy = true;
    return e->ctx;
}

int32_t qw_pcache_snap_block(const qw_pcache *p) { return p->state_bytes ? p->block : 0; }

static entry *find(qw_pcache *p, const qw_ctx *c) {
    for (int i = 0; i < MAX_ENTRIES; i++)
        if (p->e[i].ctx == c) return &p->e[i];
    return NULL;
}

void qw_pcache_snapshot(qw_pcache *p, qw_ctx *c) {
    entry *e = find(p, c);
    int32_t pos = qw_ctx_n_past(c);
    if (!e || !p->state_bytes || pos <= 0 || pos % p->block || snap_at(e, pos)) return;
    if (e->n_snaps && e->snaps[e->n_snaps - 1].pos > pos) return; /* ascending only */
    if (e->n_snaps == e->cap_snaps) {
        int32_t cap = e->cap_snaps ? 2 * e->cap_snaps : 8;
        snap *ns = realloc(e->snaps, (size_t)cap * sizeof *ns);
        if (!ns) return;
        e->snaps = ns;
        e->cap_snaps = cap;
    }
    void *st = qw_pool_alloc(p->state_bytes);
    if (!st) return; /* a cache: without memory it just keeps less */
    qw_ctx_state_save(c, st);
    e->snaps[e->n_snaps++] = (snap){pos, st};
}

/* Cuts e's last block (to the previous block boundary, or the previous
 * snapshot for a recurrent model); drops e when nothing would be left. */
static void evict_block(qw_pcache *p, entry *e) {
    int32_t to = 0;
    if (p->state_bytes) {
        for (int32_t i = 0; i < e->n_snaps; i++)
            if (e->snaps[i].pos < e->n) to = e->snaps[i].pos;
    } else to = e->n > 0 ? (e->n - 1) / p->block * p->block : 0;
    if (to == 0) {
        drop(e);
        p->evictions++;
        return;
    }
    rewind_to(p, e, to);
    qw_ctx_kv_fit(e->ctx);
    p->block_evictions++;
}

void qw_pcache_record(qw_pcache *p, qw_ctx *c, const int32_t *prompt, int32_t n_prompt, const int32_t *gen,
                      int32_t n_gen, bool ok) {
    entry *cur = find(p, c);
    if (!cur) return;
    cur->busy = false;
    int32_t past = qw_ctx_n_past(c);
    if (!ok || past > n_prompt + n_gen) past = 0; /* unknown content: start over */
    if (past == 0) {
        qw_ctx_truncate(c, 0);
        drop_snaps_above(cur, -1);
    }
    /* positions [cur->n, past): the rest of the prompt, then the generated tokens */
    for (int32_t k = cur->n; k < past; k++) cur->toks[k] = k < n_prompt ? prompt[k] : gen[k - n_prompt];
    cur->n = past;
    cur->n_prompt = n_prompt < past ? n_prompt : past;
    drop_snaps_above(cur, past);
    /* the one limit: cut least recently used entries (the current one last) block by block */
    for (;;) {
        uint64_t total = 0;
        int lru = -1;
        for (int i = 0; i < MAX_ENTRIES; i++) {
            entry *e = &p->e[i];
            if (!e->ctx || e->busy) continue;
            total += entry_bytes(p, e);
            if (e != cur && (lru < 0 || e->used < p->e[lru].used)) lru = i;
        }
        if (total <= p->budget) break;
        if (lru >= 0) evict_block(p, &p->e[lru]);
        else if (!cur->ctx) break;
        else evict_block(p, cur);
        if (!cur->ctx) {
            publish(p);
            return;
        }
    }
    publish(p);
}

void qw_pcache_get_stats(qw_pcache *p, qw_pcache_stats *out) {
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    pthread_mutex_unlock(&p->mu);
}

void qw_pcache_sched_stats(qw_pcache *p, struct qw_sched_stats *out) {
    if (!p) return;
    qw_pcache_stats ps;
    qw_pcache_get_stats(p, &ps);
    out->prefix_bytes = ps.bytes;
    out->prefix_budget_bytes = ps.budget_bytes;
    out->prefix_entries = ps.entries;
    out->prefix_evictions = ps.evictions;
    out->prefix_snapshots = ps.snapshots;
    out->prefix_block_evictions = ps.block_evictions;
    out->prefix_shared_tokens = ps.shared_tokens;
}
