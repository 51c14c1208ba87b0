/* phase_times.c — the forward pass's time by phase (QWISP_PROFILE=1): the
 * phases' names and a context's totals.  The blocks add to c->phase through
 * qw_phase_lap (context.h); qwisp bench and qwisp run print the shares.
 */
#include "context.h"

#include <string.h>

const char *qw_phase_name(qw_phase p) {
    static const char *const names[QW_PHASE_COUNT] = {
        [QW_PHASE_EMBED] = "embed",           [QW_PHASE_ATTN_PROJ] = "attn.proj",
        [QW_PHASE_ATTN_CORE] = "attn.core",   [QW_PHASE_ATTN_OUT] = "attn.out",
        [QW_PHASE_DELTA_PROJ] = "delta.proj", [QW_PHASE_DELTA_CORE] = "delta.core",
        [QW_PHASE_DELTA_OUT] = "delta.out",   [QW_PHASE_MOE_ROUTE] = "moe.route",
        [QW_PHASE_MOE_GATE_UP] = "moe.gate_up", [QW_PHASE_MOE_ACT] = "moe.act",
        [QW_PHASE_MOE_DOWN] = "moe.down",     [QW_PHASE_MOE_SHARED] = "moe.shared",
        [QW_PHASE_MOE_OUT] = "moe.out",       [QW_PHASE_HEAD] = "head",
    };
    return (unsigned)p < QW_PHASE_COUNT ? names[p] : "?";
}

bool qw_ctx_phase_times(const qw_ctx *c, qw_phase_times *out) {
    memset(out, 0, sizeof *out);
    if (!c->phase) return false;
    *out = *c->phase;
    return true;
}

void qw_ctx_phase_times_reset(qw_ctx *c) {
    if (c->phase) memset(c->phase, 0, sizeof *c->phase);
}
