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
#include "cfile.h"
#include "qwisp/options.h"
#include "qwisp/pool.h"
#include "qwisp/sched.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    char *dir;          /* QWISP_PREFIX_CACHE_DIR, or NULL */
    uint64_t model_fp;  /* what a file on disk must have been made with */
    pthread_mutex_t mu; /* guards the stats copy below */
    qw_pcache_stats st;
};

/* Bytes an idle entry holds (a busy one's KV is a running request's, not the cache's). */
static uint64_t entry_bytes(const qw_pcache *p, const entry *e) {
    if (!e->ctx || e->busy) return 0;
    return qw_ctx_kv_bytes(e->ctx) + p->state_bytes * (1 + (uint64_t)e->n_snaps);
}

static void enforce(qw_pcache *p, entry *cur);
static void disk_load(qw_pcache *p);
static void disk_save(qw_pcache *p);

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

/* The model and KV layout a saved entry must match: shape, weight bytes, the
 * first rows of the embedding and output norm, and the KV element type. */
static uint64_t model_fingerprint(const qw_model *m) {
    const qw_hparams *hp = &m->hp;
    const char *kvt = qw_opt_str(QW_OPT_KV_TYPE);
    int64_t f[] = {hp->arch_id, hp->n_vocab, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim,
                   (int64_t)m->weight_bytes, kvt && !strcmp(kvt, "f32")};
    uint64_t h = qw_hash64(f, sizeof f, 0);
    size_t n = m->tok_embd.row_bytes * (hp->n_vocab < 16 ? (size_t)hp->n_vocab : 16);
    h = qw_hash64(m->tok_embd.data, n, h);
    return qw_hash64(m->output_norm.data, m->output_norm.row_bytes, h);
}

qw_pcache *qw_pcache_new(const qw_model *m, int32_t n_ctx, uint64_t budget_bytes, int32_t block, const char *dir,
                         qw_error *err) {
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
    if (dir && *dir) {
        p->dir = strdup(dir);
        p->model_fp = model_fingerprint(m);
        if (p->dir) disk_load(p);
    }
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
    if (p->dir) disk_save(p);
    free(p->dir);
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
    if (s) u = qw_ctx_state_load(e->ctx, s->state, u); /* 0 when a device refused the copy */
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
            const bool ok = !qw_ctx_state_save(src->ctx, tmp) && qw_ctx_state_load(dst->ctx, tmp, u) == u;
            qw_pool_free(tmp);
            if (!ok) {
                qw_ctx_truncate(dst->ctx, 0);
                return false;
            }
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
        if (copy_prefix(p, e, &p->e[best], best_u)) {
            p->shared_tokens += (uint64_t)best_u;
            p->e[best].used = ++p->clock; /* its blocks were just used */
        } else rewind_to(p, e, 0);
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
    if (qw_ctx_state_save(c, st)) {
        qw_pool_free(st);
        return;
    }
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

static void enforce(qw_pcache *p, entry *cur);

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
    enforce(p, cur);
    publish(p);
}

/* The one limit: cuts least recently used idle entries (cur, if any, last)
 * block by block until their bytes fit the budget. */
static void enforce(qw_pcache *p, entry *cur) {
    for (;;) {
        uint64_t total = 0;
        int lru = -1;
        for (int i = 0; i < MAX_ENTRIES; i++) {
            entry *e = &p->e[i];
            if (!e->ctx || e->busy) continue;
            total += entry_bytes(p, e);
            if (e != cur && (lru < 0 || e->used < p->e[lru].used)) lru = i;
        }
        if (total <= p->budget) return;
        if (lru >= 0) evict_block(p, &p->e[lru]);
        else if (cur && cur->ctx) evict_block(p, cur);
        if (lru < 0 && (!cur || !cur->ctx)) return;
    }
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

/* ---- on disk (QWISP_PREFIX_CACHE_DIR): one file per entry ----
 * prefix-<hash of its tokens>.qwpc: disk_head, the tokens, the KV rows
 * (qw_ctx_kv_export's order), the live recurrent state, then each snapshot
 * (position, state); a cfile (atomic rename, FNV-1a trailer).  Saved when
 * the cache is freed (the server's drain on SIGTERM/SIGINT), loaded when it
 * is made, most recent first, while the budget holds; a file that fails any
 * check is ignored with a log line naming it and why. */

typedef struct disk_head {
    char magic[8]; /* "QWPCACHE" */
    uint32_t version, block;
    uint64_t model_fp, state_bytes, used;
    int32_t n, n_prompt, n_snaps, reserved;
} disk_head;
_Static_assert(sizeof(disk_head) == 56, "disk_head is a file format");

static int kv_write(void *user, void *rows, size_t bytes) { return qw_cfile_write(user, rows, bytes); }
static int kv_read(void *user, void *rows, size_t bytes) { return qw_cfile_read(user, rows, bytes); }

static int save_entry(qw_pcache *p, entry *e, const char *path, qw_error *err) {
    qw_cfile w;
    if (qw_cfile_create(&w, path, err)) return -1;
    disk_head h = {.magic = "QWPCACHE", .version = 1, .block = (uint32_t)p->block, .model_fp = p->model_fp,
                   .state_bytes = p->state_bytes, .used = e->used, .n = e->n, .n_prompt = e->n_prompt,
                   .n_snaps = e->n_snaps};
    void *st = p->state_bytes ? qw_pool_alloc(p->state_bytes) : NULL;
    int bad = (p->state_bytes && !st) || qw_cfile_write(&w, &h, sizeof h) ||
              qw_cfile_write(&w, e->toks, (size_t)e->n * sizeof(int32_t)) || qw_ctx_kv_export(e->ctx, e->n, kv_write, &w);
    if (!bad && st) {
        bad = qw_ctx_state_save(e->ctx, st) || qw_cfile_write(&w, st, p->state_bytes);
    }
    for (int32_t i = 0; !bad && i < e->n_snaps; i++)
        bad = qw_cfile_write(&w, &e->snaps[i].pos, sizeof(int32_t)) || qw_cfile_write(&w, e->snaps[i].state, p->state_bytes);
    qw_pool_free(st);
    if (bad) {
        qw_cfile_abort(&w);
        return qw_fail(err, "%s: write failed", path);
    }
    return qw_cfile_commit(&w, err);
}

static bool is_entry_file(const char *name) {
    size_t n = strlen(name);
    return n > 12 && !strncmp(name, "prefix-", 7) && !strcmp(name + n - 5, ".qwpc");
}

static void disk_save(qw_pcache *p) {
    char keep[MAX_ENTRIES][32];
    int n_keep = 0, n_tok = 0;
    for (int i = 0; i < MAX_ENTRIES; i++) {
        entry *e = &p->e[i];
        if (!e->ctx || e->busy || e->n <= 0) continue;
        char path[1024];
        snprintf(keep[n_keep], sizeof keep[0], "prefix-%016llx.qwpc",
                 (unsigned long long)qw_hash64(e->toks, (size_t)e->n * sizeof(int32_t), 0));
        snprintf(path, sizeof path, "%s/%s", p->dir, keep[n_keep]);
        qw_error err = {0};
        if (save_entry(p, e, path, &err)) qw_log(QW_LOG_WARN, "prefix cache: %s", err.msg);
        else n_keep++, n_tok += e->n;
    }
    /* files of entries evicted since they were written go */
    DIR *d = opendir(p->dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (!is_entry_file(de->d_name)) continue;
        bool kept = false;
        for (int i = 0; i < n_keep && !kept; i++) kept = !strcmp(keep[i], de->d_name);
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", p->dir, de->d_name);
        if (!kept) unlink(path);
    }
    if (d) closedir(d);
    qw_log(QW_LOG_INFO, "prefix cache: saved %d entries (%d tokens) to %s", n_keep, n_tok, p->dir);
}

/* Reads and checks a file's head (the cheap checks before reading it whole). */
static int read_head(qw_pcache *p, qw_cfile *r, disk_head *h, qw_error *err) {
    if (qw_cfile_read(r, h, sizeof *h)) return qw_fail(err, "truncated header");
    if (memcmp(h->magic, "QWPCACHE", 8) || h->version != 1) return qw_fail(err, "not a version-1 prefix-cache file");
    if (h->model_fp != p->model_fp || h->state_bytes != p->state_bytes)
        return qw_fail(err, "made with another model or KV type");
    if (h->n <= 0 || h->n > p->n_ctx || h->n_prompt < 0 || h->n_prompt > h->n || h->n_snaps < 0 || h->n_snaps > h->n)
        return qw_fail(err, "%d tokens (%d prompt, %d snapshots) do not fit a context of %d", h->n, h->n_prompt,
                       h->n_snaps, p->n_ctx);
    return 0;
}

/* Loads one file into free slot `slot`.  0, or -1 + err (slot left free). */
static int load_entry(qw_pcache *p, const char *path, int slot, uint64_t used, qw_error *err) {
    qw_cfile r;
    if (qw_cfile_open(&r, path, err)) return -1;
    disk_head h;
    entry *e = NULL;
    void *st = NULL;
    int rc = read_head(p, &r, &h, err);
    if (!rc && !(e = new_entry(p, slot, err))) rc = -1;
    if (!rc && qw_cfile_read(&r, e->toks, (size_t)h.n * sizeof(int32_t))) rc = qw_fail(err, "truncated tokens");
    if (!rc) {
        qw_error kerr = {0};
        int k = qw_ctx_kv_import(e->ctx, h.n, kv_read, &r, &kerr);
        if (k) rc = qw_fail(err, "%s", kerr.msg[0] ? kerr.msg : "truncated KV rows");
    }
    if (!rc && p->state_bytes) {
        if (!(st = qw_pool_alloc(p->state_bytes))) rc = qw_fail(err, "out of memory");
        else if (qw_cfile_read(&r, st, p->state_bytes)) rc = qw_fail(err, "truncated state");
        else if (qw_ctx_state_load(e->ctx, st, h.n) != h.n) rc = qw_fail(err, "the device refused the state");
    }
    for (int32_t i = 0; !rc && i < h.n_snaps; i++) {
        int32_t pos;
        void *s = NULL;
        if (qw_cfile_read(&r, &pos, sizeof pos)) rc = qw_fail(err, "truncated snapshot");
        else if (pos <= 0 || pos > h.n || (i > 0 && pos <= e->snaps[i - 1].pos)) rc = qw_fail(err, "snapshot %d at position %d", i, pos);
        else if (!(s = qw_pool_alloc(p->state_bytes)) || qw_cfile_read(&r, s, p->state_bytes)) {
            qw_pool_free(s);
            rc = qw_fail(err, "truncated snapshot");
        } else {
            if (e->n_snaps == e->cap_snaps) {
                snap *ns = realloc(e->snaps, (size_t)(e->cap_snaps + 8) * sizeof *ns);
                if (!ns) {
                    qw_pool_free(s);
                    rc = qw_fail(err, "out of memory");
                    break;
                }
                e->snaps = ns;
                e->cap_snaps += 8;
            }
            e->snaps[e->n_snaps++] = (snap){pos, s};
        }
    }
    if (!rc) rc = qw_cfile_verify(&r, err);
    qw_cfile_close(&r);
    qw_pool_free(st);
    if (rc) {
        if (e) drop(e);
        return -1;
    }
    e->n = h.n;
    e->n_prompt = h.n_prompt;
    e->used = used;
    return 0;
}

typedef struct found { char name[64]; uint64_t used; } found;

static int by_recency(const void *a, const void *b) {
    uint64_t x = ((const found *)a)->used, y = ((const found *)b)->used;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void disk_load(qw_pcache *p) {
    DIR *d = opendir(p->dir);
    if (!d) {
        qw_log(QW_LOG_WARN, "prefix cache: cannot open %s: %s (nothing loaded; saves go there: create it)", p->dir,
               strerror(errno));
        return;
    }
    found *f = NULL;
    int n = 0, cap = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (!is_entry_file(de->d_name) || strlen(de->d_name) >= sizeof f->name) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", p->dir, de->d_name);
        qw_cfile r;
        qw_error err = {0};
        disk_head h;
        if (qw_cfile_open(&r, path, &err) == 0 && read_head(p, &r, &h, &err) == 0) {
            if (n == cap) {
                found *nf = realloc(f, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *nf);
                if (!nf) break;
                f = nf;
            }
            snprintf(f[n].name, sizeof f[n].name, "%s", de->d_name);
            f[n++].used = h.used;
        } else qw_log(QW_LOG_WARN, "prefix cache: %s ignored: %s", path, err.msg);
        qw_cfile_close(&r);
    }
    closedir(d);
    if (n > 1) qsort(f, (size_t)n, sizeof *f, by_recency);
    int loaded = 0, n_tok = 0;
    for (int i = 0; i < n && loaded < MAX_ENTRIES; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", p->dir, f[i].name);
        qw_error err = {0};
        if (load_entry(p, path, loaded, (uint64_t)(n - i), &err)) {
            qw_log(QW_LOG_WARN, "prefix cache: %s ignored: %s", path, err.msg);
            continue;
        }
        n_tok += p->e[loaded].n;
        loaded++;
        uint64_t total = 0;
        for (int k = 0; k < loaded; k++) total += entry_bytes(p, &p->e[k]);
        if (total > p->budget) break; /* enforce trims the oldest loaded */
    }
    free(f);
    p->clock = (uint64_t)n + 1;
    enforce(p, NULL);
    qw_log(QW_LOG_INFO, "prefix cache: loaded %d entries (%d tokens) from %s", loaded, n_tok, p->dir);
}
