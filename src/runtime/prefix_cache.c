/* prefix_cache.c — see prefix_cache.h.
 *
 * Choosing: the entry with the longest match, if the match keeps at least
 * half of what the entry holds (cutting an entry back destroys the rest: a
 * conversation that merely shares a short system prompt with another must
 * not wipe out that one's history); else a free slot (a cold prefill, after
 * which the new conversation's turns hit), else the least recently used.
 *
 * On the lanes path several entries are in use at once: a busy entry is
 * neither chosen, counted nor evicted (its KV is a running request's); the
 * budget bounds what idle entries hold.
 *
 * Entries live in a small array (at most MAX_ENTRIES; a linear scan per
 * request is nothing next to a forward pass).  Recency is a counter bumped
 * at each acquire.  Bytes are measured, not estimated: qw_ctx_kv_bytes (the
 * KV grows on demand, so a short conversation costs little) plus the
 * recurrent state of a qwen35moe context.  A recurrent state cannot rewind
 * (qw_ctx_truncate empties it), so there an entry is reused only by a
 * prompt that extends everything it holds.
 *
 * Why entries and not blocks: sharing blocks between sequences needs the KV
 * to be addressable per block across contexts, which the forward pass does
 * not offer; whole-sequence entries give the common case (an agent or chat
 * that resends its system prompt and history every turn, several
 * conversations interleaved) without touching the model code.
 */
#include "prefix_cache.h"
#include "qwisp/sched.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_ENTRIES = 64 };

typedef struct entry {
    qw_ctx *ctx;     /* NULL: slot free */
    int32_t *toks;   /* [n_ctx] the token at each KV position */
    int32_t n;       /* valid tokens (<= qw_ctx_n_past) */
    uint64_t used;   /* recency stamp */
    bool busy;       /* acquired and not recorded yet: a request runs on it */
} entry;

struct qw_pcache {
    const qw_model *m;
    int32_t n_ctx;
    uint64_t budget, clock;
    entry e[MAX_ENTRIES];
    pthread_mutex_t mu; /* guards the stats copy below */
    qw_pcache_stats st;
};

/* Bytes an idle entry holds (a busy one's KV is a running request's, not the cache's). */
static uint64_t entry_bytes(const entry *e) {
    return e->ctx && !e->busy ? qw_ctx_kv_bytes(e->ctx) + qw_ctx_state_bytes(e->ctx) : 0;
}

static void publish(qw_pcache *p) {
    qw_pcache_stats st = {.budget_bytes = p->budget, .evictions = p->st.evictions};
    for (int i = 0; i < MAX_ENTRIES; i++)
        if (p->e[i].ctx && !p->e[i].busy) {
            st.entries++;
            st.bytes += entry_bytes(&p->e[i]);
        }
    pthread_mutex_lock(&p->mu);
    p->st = st;
    pthread_mutex_unlock(&p->mu);
}

qw_pcache *qw_pcache_new(const qw_model *m, int32_t n_ctx, uint64_t budget_bytes, qw_error *err) {
    qw_pcache *p = calloc(1, sizeof *p);
    if (!p) {
        qw_fail(err, "out of memory creating the prefix cache");
        return NULL;
    }
    p->m = m;
    p->n_ctx = n_ctx;
    p->budget = budget_bytes;
    pthread_mutex_init(&p->mu, NULL);
    publish(p);
    return p;
}

static void drop(entry *e) {
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

qw_ctx *qw_pcache_acquire(qw_pcache *p, const int32_t *prompt, int32_t n, int32_t *n_cached, qw_error *err) {
    int best = -1, free_slot = -1, lru = -1;
    int32_t best_len = 0;
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
        /* a recurrent state only continues: a partial match there is no match */
        if (k < qw_ctx_n_past(e->ctx) && qw_ctx_state_bytes(e->ctx) > 0) k = 0;
        /* cutting an entry back loses what follows the match: take it only if
         * that keeps at least half of it; else a fresh entry keeps it whole */
        if (2 * k < e->n) k = 0;
        if (k > best_len) best_len = k, best = i;
    }
    entry *e;
    if (best >= 0) e = &p->e[best];
    else if (free_slot >= 0) {
        e = &p->e[free_slot];
        e->toks = malloc((size_t)p->n_ctx * sizeof(int32_t));
        e->ctx = e->toks ? qw_ctx_new(p->m, p->n_ctx, 1, err) : NULL; /* one thread: the workspace computes */
        if (!e->ctx) {
            if (!e->toks) qw_fail(err, "out of memory for a prefix-cache entry");
            drop(e);
            return NULL;
        }
        e->n = 0;
    } else if (lru >= 0) e = &p->e[lru];
    else {
        qw_fail(err, "prefix cache: all %d entries are in use", MAX_ENTRIES);
        return NULL;
    }
    *n_cached = qw_ctx_truncate(e->ctx, best >= 0 ? best_len : 0);
    e->n = *n_cached;
    e->used = ++p->clock;
    e->busy = true;
    return e->ctx;
}

void qw_pcache_record(qw_pcache *p, qw_ctx *c, const int32_t *prompt, int32_t n_prompt, const int32_t *gen,
                      int32_t n_gen, bool ok) {
    entry *cur = NULL;
    for (int i = 0; i < MAX_ENTRIES; i++)
        if (p->e[i].ctx == c) cur = &p->e[i];
    if (!cur) return;
    cur->busy = false;
    int32_t past = qw_ctx_n_past(c);
    if (!ok || past > n_prompt + n_gen) past = 0; /* unknown content: start over */
    if (past == 0) qw_ctx_truncate(c, 0);
    /* positions [e->n, past): the rest of the prompt, then the generated tokens */
    for (int32_t k = cur->n; k < past; k++) cur->toks[k] = k < n_prompt ? prompt[k] : gen[k - n_prompt];
    cur->n = past;
    /* evict least recently used entries (the current one last) until the budget holds */
    for (;;) {
        uint64_t total = 0;
        int lru = -1;
        for (int i = 0; i < MAX_ENTRIES; i++) {
            entry *e = &p->e[i];
            if (!e->ctx || e->busy) continue;
            total += entry_bytes(e);
            if (e != cur && (lru < 0 || e->used < p->e[lru].used)) lru = i;
        }
        if (total <= p->budget) break;
        if (lru >= 0) drop(&p->e[lru]);
        else {
            drop(cur); /* alone over the budget: not kept */
            p->st.evictions++;
            break;
        }
        p->st.evictions++;
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
}
