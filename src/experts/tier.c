/* tier.c — choosing the expert tier and C (slots per layer) from RAM.
 *
 * The decision is a pure function of (RAM limits, model sizes, QWISP_RAW_C)
 * so it is unit-tested from pairs; its inputs are gathered by the caller that
 * knows the real context (runtime/place.c: the model's sizes from model.c,
 * the RAM probes from memory/sysmem.c, the knobs):
 *
 *   RAM      = min(physical, cgroup limit, QWISP_DEVICE_RAM) over the known ones
 *   budget   = RAM - non-expert weights (an untied token embedding excluded:
 *              it is read a row per token) - KV(requested context) - headroom
 *   headroom = 32 MiB + RAM/16 (activations, pool cache, stacks, page tables)
 *   resident   if all experts fit in the budget (or QWISP_RAW_C=0)
 *   streaming  otherwise, C = budget / (n_layer * slot bytes), clamped to
 *              [n_expert_used, n_expert - 1]; below n_expert_used the model
 *              cannot run within the RAM and C = n_expert_used is the best try.
 */
#include "qwisp/experts.h"

#include <stdio.h>

uint64_t qw_tier_headroom(uint64_t ram) { return ((uint64_t)32 << 20) + ram / 16; }

static double gb(uint64_t b) { return (double)b / 1e9; }

void qw_tier_decide(const qw_tier_input *in, qw_tier_decision *out) {
    *out = (qw_tier_decision){0};
    uint64_t ram = 0;
    const uint64_t lims[3] = {in->ram_phys, in->ram_cgroup, in->ram_device};
    for (int i = 0; i < 3; i++)
        if (lims[i] && (!ram || lims[i] < ram)) ram = lims[i];
    out->ram = ram;
    out->headroom = qw_tier_headroom(ram);
    const uint64_t fixed = in->nonexpert_bytes + in->kv_bytes + out->headroom;
    out->budget = ram > fixed ? ram - fixed : 0;
    const int32_t k = in->n_expert_used, X = in->n_expert;
    const char *why = "";
    if (in->raw_c == 0) {
        out->tier = QW_TIER_RESIDENT;
        why = ", QWISP_RAW_C=0";
    } else if (in->raw_c > 0) {
        out->tier = QW_TIER_STREAMING;
        int64_t c = in->raw_c < k ? k : in->raw_c > X ? X : in->raw_c;
        out->c = (int32_t)c;
        why = ", QWISP_RAW_C";
    } else if (!ram || in->expert_bytes <= out->budget) {
        out->tier = QW_TIER_RESIDENT;
    } else {
        out->tier = QW_TIER_STREAMING;
        const uint64_t per_c = (uint64_t)in->n_layer * (in->slot_bytes ? in->slot_bytes : 1);
        uint64_t c = out->budget / per_c;
        if (c < (uint64_t)k) {
            c = (uint64_t)k;
            why = ", below the minimum: C = top-k";
        }
        if (c > (uint64_t)X - 1) c = X > k ? (uint64_t)X - 1 : (uint64_t)X;
        out->c = (int32_t)c;
    }
    if (out->tier == QW_TIER_RESIDENT) out->c = X;
    char ramtxt[32];
    if (ram) snprintf(ramtxt, sizeof ramtxt, gb(ram) < 10 ? "%.2f GB" : "%.1f GB", gb(ram));
    else snprintf(ramtxt, sizeof ramtxt, "unknown");
    snprintf(out->line, sizeof out->line, "tier=%s C=%d/%d (RAM %s, experts %.*f GB%s)",
             out->tier == QW_TIER_RESIDENT ? "resident" : "streaming", out->c, X, ramtxt,
             gb(in->expert_bytes) < 10 ? 2 : 1, gb(in->expert_bytes), why);
}
