/* run_memory.c — the serialize path's memory instruments (run_memory.h).
 * The chunk hook reports only during the first qw_ctx_eval after begin (the
 * prompt): decode evals also fire the hook, one token at a time, and a line
 * per generated token would drown the breakdown.
 */
#include "qwisp/run_memory.h"
#include "qwisp/backend.h"
#include "qwisp/experts.h"
#include "qwisp/options.h"
#include "qwisp/pool.h"

#include <cjson/cJSON.h>

static void on_chunk(void *user, const qw_ctx *c, int32_t n_done, int32_t n_total) {
    qw_run_memory *rm = user;
    if (rm->prefill_done) return;
    /* "kv" counts a recurrent model's conv/delta state too: per-sequence memory */
    qw_memdbg_chunk(&rm->dbg, n_done, n_total, qw_ctx_kv_bytes(c) + qw_ctx_state_bytes(c));
    if (n_done == n_total) rm->prefill_done = true;
}

int qw_run_memory_begin(qw_run_memory *rm, qw_ctx *c, bool sample, qw_error *err) {
    *rm = (qw_run_memory){0};
    if (qw_pool_apply_path(QW_POOL_PATH_SERIALIZE, err)) return -1;
    qw_memdbg_init(&rm->dbg, "prefill", (int)qw_opt_int(QW_OPT_PREFILL_MEMDBG),
                   (int)qw_opt_int(QW_OPT_PREFILL_MEMDBG_EVERY), stderr);
    rm->dbg.tail = qw_run_memdbg_tail; /* memory/ cannot see experts/ or the device */
    if (rm->dbg.mode > 0) qw_ctx_set_chunk_cb(c, on_chunk, rm);
    qw_pool_reset_peak();
    if (sample) {
        rm->sampler = qw_footprint_sampler_start(10, err);
        if (!rm->sampler) return -1;
    }
    return 0;
}

void qw_run_memdbg_tail(FILE *f) {
    qw_experts_stats_line(f);
    qw_backend_stats_line(f);
}

void qw_run_memory_end(qw_run_memory *rm, qw_ctx *c) {
    if (rm->dbg.mode > 0 && c) qw_ctx_set_chunk_cb(c, NULL, NULL);
    qw_footprint_sampler_stop(rm->sampler, &rm->peak_footprint, &rm->peak_rss);
    rm->sampler = NULL;
}

void qw_run_memory_json(const qw_run_memory *rm, void *cjson_object) {
    cJSON *o = cjson_object;
    qw_pool_stats s = qw_pool_get_stats();
    cJSON *p = cJSON_AddObjectToObject(o, "pool");
    qw_stats_json(&qw_pool_stat_group, &s, p, 0, -1); /* pool.h's QW_POOL_STATS, in order */
    cJSON_AddStringToObject(p, "fit", qw_pool_get_fit() == QW_POOL_FIT_EXACT ? "exact" : "classes");
    /* The knobs this process saw set (env or flag), so `qwisp ab` can check
     * that its arms differ only by their environment. */
    cJSON *k = cJSON_AddObjectToObject(o, "knobs");
    for (int i = 0; i < QW_OPT_COUNT; i++)
        if (qw_opt_is_set((qw_opt)i))
            cJSON_AddStringToObject(k, qw_opt_name((qw_opt)i), i == QW_OPT_API_KEY ? "(hidden)" : qw_opt_str((qw_opt)i));
    /* the device pool (CUDA backend): its counters, and the footprint with its bytes added */
    qw_device_stats ds;
    const bool dev = qw_backend_active_stats(&ds);
    cJSON_AddStringToObject(o, "backend", dev ? "cuda" : "cpu");
    if (dev) {
        cJSON *d = cJSON_AddObjectToObject(o, "device");
        qw_stats_json(&qw_device_stat_group, &ds, d, 0, -1); /* backend.h's QW_DEVICE_STATS */
        cJSON_AddNumberToObject(o, "footprint_with_device_peak_mb",
                                (double)(rm->peak_footprint + ds.held_peak_bytes) / 1048576.0);
    }
    cJSON_AddNumberToObject(o, "footprint_peak_mb", (double)rm->peak_footprint / 1048576.0);
    cJSON_AddNumberToObject(o, "rss_peak_mb", (double)rm->peak_rss / 1048576.0);
    qw_experts_stats_json(o); /* "experts": tier, experts.h's QW_EXPERTS_STATS, decision */
}
