/* prefix_cache.h — the execution paths' bounded prefix cache
 * (QWISP_PREFIX_CACHE_MB, QWISP_PREFIX_BLOCK): KV (and recurrent state) of
 * earlier requests kept so a later request that starts with the same tokens
 * — its own conversation's history, or only a system prompt another
 * conversation shares — prefills just the rest.
 *
 * An entry is one sequence context (its own KV; the path's workspace
 * computes for it, qw_batch_eval) and the token at each of its positions.
 * acquire finds the entry that shares the longest usable prefix with the
 * prompt (matched from position 0, so KV is only ever reused for exactly the
 * prompt's own leading tokens) and either continues on that entry (cut back
 * to the prefix) or, when cutting would lose most of it, copies the prefix
 * into another entry.  A model with recurrent layers (qwen35moe) can only
 * resume at a position whose state was kept: its state is snapshotted at
 * every block boundary of a prefill (the path calls qw_pcache_snapshot), so
 * there a prefix is reused up to its last block boundary.  record notes what
 * the KV holds after the request and evicts, least recently used entry
 * first, block by block from its tail, until the bytes of all idle entries
 * (KV + live state + snapshots, all pool buffers) fit the budget.
 *
 * An entry is busy from acquire to record (lanes run several at once); the
 * budget counts idle entries only.  Only the worker thread calls these but
 * the stats getters, which are safe from any thread.
 *
 *   qw_pcache *p = qw_pcache_new(model, n_ctx, 64 << 20, 256, &err);
 *   int32_t keep;
 *   qw_ctx *c = qw_pcache_acquire(p, prompt, n, &keep, &err);
 *   // prefill prompt[keep..n) on c in slices that stop at each multiple of
 *   // qw_pcache_snap_block(p) (when it is not 0), calling
 *   // qw_pcache_snapshot(p, c) there; then decode
 *   qw_pcache_record(p, c, prompt, n, gen, n_gen, ok);
 */
#ifndef QWISP_RUNTIME_PREFIX_CACHE_H
#define QWISP_RUNTIME_PREFIX_CACHE_H

#include "qwisp/model.h"

#include <stdatomic.h>

typedef struct qw_pcache qw_pcache;

typedef struct qw_pcache_stats {
    uint64_t budget_bytes, bytes; /* KV + recurrent state + snapshot bytes of idle entries */
    int32_t entries;              /* idle entries (busy ones run requests) */
    int32_t snapshots;            /* recurrent-state snapshots held by idle entries */
    uint64_t evictions;           /* entries dropped to fit the budget */
    uint64_t block_evictions;     /* tail blocks cut from entries to fit the budget */
    uint64_t shared_tokens;       /* prompt tokens reused by copying another entry's prefix */
} qw_pcache_stats;

/* budget_bytes > 0; block >= 1: tokens per block (eviction unit, snapshot
 * spacing); dir: where entries are saved when the cache is freed and loaded
 * from now (NULL = memory only; unreadable files are skipped with a log
 * line).  NULL + err on OOM. */
qw_pcache *qw_pcache_new(const qw_model *m, int32_t n_ctx, uint64_t budget_bytes, int32_t block, const char *dir,
                         qw_error *err);
void qw_pcache_free(qw_pcache *p);
/* The context to run prompt[n] on, its KV already holding prompt[0..*n_cached)
 * (at most n - 1, so one token is evaluated for the logits).  NULL + err
 * when a new context cannot be made. */
qw_ctx *qw_pcache_acquire(qw_pcache *p, const int32_t *prompt, int32_t n, int32_t *n_cached, qw_error *err);
/* Tokens between recurrent-state snapshots the prefill should stop at; 0 for
 * a model without recurrent layers (nothing to snapshot). */
int32_t qw_pcache_snap_block(const qw_pcache *p);
/* c (acquired, busy) has just been prefilled to a multiple of the block:
 * keeps its recurrent state there.  No-op elsewhere or without memory. */
void qw_pcache_snapshot(qw_pcache *p, qw_ctx *c);
/* After the request on c: its KV holds prompt then gen (as far as n_past
 * says); ok = false (a failed eval) forgets the entry's content.  Then
 * evicts to the budget. */
void qw_pcache_record(qw_pcache *p, qw_ctx *c, const int32_t *prompt, int32_t n_prompt, const int32_t *gen,
                      int32_t n_gen, bool ok);
/* Safe from any thread. */
void qw_pcache_get_stats(qw_pcache *p, qw_pcache_stats *out);
/* Copies p's stats into a scheduler's (both paths report them alike); a
 * NULL p (no prefix cache) leaves out untouched. */
struct qw_sched_stats;
void qw_pcache_sched_stats(qw_pcache *p, struct qw_sched_stats *out);

#endif
