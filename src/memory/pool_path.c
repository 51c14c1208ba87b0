/* pool_path.c — the per-path pool policy: each execution path calls
 * qw_pool_apply_path() when it starts, which sets the fit rule
 * (QWISP_POOL_FIT) and the path's cache limit from the knob table:
 *   serialize (qwisp run through run_memory.c, serve without lanes
 *     through runtime/serialize.c): QWISP_PREFILL_CACHE_MB
 *     (alias QWISP_PREFILL_MLX_CACHE_MB), unset or 0 = unbounded;
 *   lanes: QWISP_LANE_CACHE_MB (alias QWISP_LANE_MLX_CACHE_MB), default 2048.
 * Setting a limit trims what is already cached to it.  The values were
 * range-checked by qw_options_init (malformed, negative or absurd values are
 * rejected there with the variable's name); this file only converts MB to
 * bytes.  Kept apart from pool.c so the pool itself never reads knobs.
 */
#include "qwisp/options.h"
#include "qwisp/pool.h"

#include <string.h>

int qw_pool_apply_path(qw_pool_path path, qw_error *err) {
    const char *fit = qw_opt_str(QW_OPT_POOL_FIT);
    if (fit && !strcmp(fit, "exact")) qw_pool_set_fit(QW_POOL_FIT_EXACT);
    else if (!fit || !strcmp(fit, "classes")) qw_pool_set_fit(QW_POOL_FIT_CLASSES);
    else return qw_fail(err, "QWISP_POOL_FIT='%s': expected classes or exact", fit);
    qw_opt id = path == QW_POOL_PATH_LANES ? QW_OPT_LANE_CACHE_MB : QW_OPT_PREFILL_CACHE_MB;
    int64_t mb = qw_opt_str(id) ? qw_opt_int(id) : 0;
    if (mb < 0 || mb > ((int64_t)1 << 24))
        return qw_fail(err, "%s=%lld: out of range [0, %lld] MB", qw_opt_name(id), (long long)mb,
                       (long long)1 << 24);
    qw_pool_set_cache_limit((uint64_t)mb << 20);
    qw_pool_set_decay_ms((uint32_t)qw_opt_int(QW_OPT_POOL_DECAY_MS));
    return 0;
}
