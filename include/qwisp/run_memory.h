/* run_memory.h — the serialize path's memory instruments, wired around one
 * qwisp run: apply the path's pool limit (QWISP_PREFILL_CACHE_MB), install
 * the QWISP_PREFILL_MEMDBG reporter on the context's chunk hook (prefill
 * only), sample footprint/RSS peaks in a thread, and export the pool's
 * numbers into the run's JSON.
 *
 *     qw_run_memory rm;
 *     if (qw_run_memory_begin(&rm, ctx, true, &err)) ...
 *     qw_generate(ctx, ...);
 *     qw_run_memory_end(&rm, ctx);
 *     qw_run_memory_json(&rm, json_object);
 */
#ifndef QWISP_RUN_MEMORY_H
#define QWISP_RUN_MEMORY_H

#include "qwisp/footprint.h"
#include "qwisp/memdbg.h"
#include "qwisp/model.h"

typedef struct qw_run_memory {
    qw_memdbg dbg;
    bool prefill_done; /* memdbg reports only the first eval (the prompt) */
    qw_footprint_sampler *sampler;
    uint64_t peak_footprint, peak_rss; /* filled by _end */
} qw_run_memory;

/* Applies the serialize path's pool policy, installs the memdbg hook and (if
 * sample) starts the footprint sampler.  -1 + err. */
int qw_run_memory_begin(qw_run_memory *rm, qw_ctx *c, bool sample, qw_error *err);
/* Stops the sampler and removes the hook. */
void qw_run_memory_end(qw_run_memory *rm, qw_ctx *c);
/* The MEMDBG tail of the runtime's lines: the expert source's counters, then
 * the device pool's when a model is on the GPU (memory/ sees neither). */
void qw_run_memdbg_tail(FILE *f);
/* Adds "pool": {pool.h's QW_POOL_STATS, then "fit"}, "knobs", "experts"
 * (experts.h's QW_EXPERTS_STATS between "tier" and "decision") and
 * footprint_peak_mb / rss_peak_mb to a cJSON object (passed as void * so this
 * header does not drag cJSON into every user). */
void qw_run_memory_json(const qw_run_memory *rm, void *cjson_object);

#endif
