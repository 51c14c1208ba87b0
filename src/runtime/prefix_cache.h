/* prefix_cache.h — the execution paths' bounded prefix cache
 * (QWISP_PREFIX_CACHE_MB): sequence contexts kept after their requests so a
 * later request that starts with the same tokens reuses their KV instead of
 * prefilling them again.
 *
 * An entry is one sequence context (its own KV cache, one thread: the
 * path's workspace context computes for it, qw_batch_eval)
 * and the token at each of its KV positions.  acquire picks the entry that
 * shares the longest token prefix with the prompt (matched from position 0,
 * so a request only ever reuses KV computed for exactly its own leading
 * tokens; and only if that keeps at least half the entry) and cuts its KV
 * back to that prefix; with none, a new entry or the least recently used
 * one, emptied.  record notes what the KV holds after
 * the request and evicts least-recently-used entries until the KV bytes of
 * all entries fit the budget.  Eviction is by entry (a conversation), not by
 * block: entries share no KV, since the model API has no KV block copy.
 *
 * An entry is busy from acquire to record (lanes run several at once); the
 * budget counts idle entries only.  Only the worker thread calls these; the
 * stats are read from any thread.
 */
#ifndef QWISP_RUNTIME_PREFIX_CACHE_H
#define QWISP_RUNTIME_PREFIX_CACHE_H

#include "qwisp/model.h"

#include <stdatomic.h>

typedef struct qw_pcache qw_pcache;

typedef struct qw_pcache_stats {
    uint64_t budget_bytes, bytes; /* KV (+ recurrent state) bytes of all entries */
    int32_t entries;              /* idle entries (busy ones run requests) */
    uint64_t evictions;
} qw_pcache_stats;

/* budget_bytes > 0.  NULL + err on OOM. */
qw_pcache *qw_pcache_new(const qw_model *m, int32_t n_ctx, uint64_t budget_bytes, qw_error *err);
void qw_pcache_free(qw_pcache *p);
/* The context to run prompt[n] on, its KV already holding prompt[0..*n_cached)
 * (at most n - 1, so one token is evaluated for the logits).  NULL + err
 * when a new context cannot be made. */
qw_ctx *qw_pcache_acquire(qw_pcache *p, const int32_t *prompt, int32_t n, int32_t *n_cached, qw_error *err);
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
