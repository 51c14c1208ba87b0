/* place.c — the expert tier decision for a loaded model, made here because
 * only the caller knows the real context: `qwisp run` sizes it from --ctx and
 * the prompt, serve from its context times its lanes.  Loading (model.c) is
 * mechanism only; the decision itself is the pure qw_tier_decide
 * (experts/tier.c), fed from three sides:
 *
 *   the model   its expert, non-expert, KV and slot bytes (qw_model_tier_sizes)
 *   the machine physical RAM and the cgroup limit (memory/sysmem.c)
 *   the knobs   QWISP_RAW_C (explicit C), QWISP_DEVICE_RAM (pretend RAM)
 *
 * and the source is opened on the model's layout (experts/ never sees the
 * model itself).
 */
#include "qwisp/place.h"
#include "qwisp/backend.h"
#include "qwisp/experts.h"
#include "qwisp/options.h"
#include "qwisp/sysmem.h"

int qw_place_experts(qw_model *m, int64_t kv_positions, qw_error *err) {
    /* the backend first (QWISP_BACKEND): on the GPU the device tier decides
     * where experts live; the host source below stays for the CPU path */
    if (qw_backend_attach(m, kv_positions, err)) return -1;
    if (m->experts) return 0;
    qw_tier_input in;
    qw_model_tier_sizes(m, kv_positions, &in);
    in.ram_phys = qw_ram_physical();
    in.ram_cgroup = qw_ram_cgroup_limit();
    const char *dev = qw_opt_str(QW_OPT_DEVICE_RAM);
    if (dev && qw_parse_gb("QWISP_DEVICE_RAM", dev, &in.ram_device, err)) return -1;
    in.raw_c = qw_opt_is_set(QW_OPT_RAW_C) ? qw_opt_int(QW_OPT_RAW_C) : -1;
    qw_tier_decision dec;
    qw_tier_decide(&in, &dec);
    const qw_expert_layout layout = qw_model_expert_layout(m);
    qw_experts *x = qw_experts_open(&layout, &dec, err);
    if (!x) return -1;
    qw_model_set_experts(m, x);
    qw_log(dec.tier == QW_TIER_STREAMING ? QW_LOG_WARN : QW_LOG_INFO, "%s", dec.line);
    return 0;
}

qw_ctx *qw_ctx_new_placed(qw_model *m, int32_t n_ctx, int n_threads, qw_error *err) {
    return qw_place_experts(m, n_ctx, err) ? NULL : qw_ctx_new(m, n_ctx, n_threads, err);
}
