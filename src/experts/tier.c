/* tier.c — choosing the expert tier and C (slots per layer) from RAM.
 *
 * The decision is a pure function of (RAM limits, model sizes, QWISP_RAW_C)
 * so it is unit-tested from pairs; the probes and knob parsing live beside it
 * but apart:
 *
 *   RAM      = min(physical, cgroup limit, QWISP_DEVICE_RAM) over the known ones
 *   budget   = RAM - non-expert weights (an untied token embedding excluded:
 *              it is read a row per token) - KV(requested context) - headroom
 *   headroom = 32 MiB + RAM/16 (activations, pool cache, stacks, page tables)
 *   resident   if all experts fit in the budget (or QWISP_RAW_C=0)
 *   streaming  otherwise, C = budget / (n_layer * slot bytes), clamped to
 *              [n_expert_used, n_expert - 1]; below n_expert_used the model
 *              cannot run within the RAM and C = n_expert_used is the best try.
 *
 * The cgroup limit is the smallest on the path from this process's cgroup up
 * to the root (a parent's limit binds its children too).
 */
#include "qwisp/experts.h"
#include "qwisp/model.h"
#include "qwisp/options.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

uint64_t qw_ram_physical(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
}

/* Reads one number from a cgroup file; "max" or absurd values = no limit (0). */
static uint64_t read_limit(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = {0};
    const bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok || strncmp(buf, "max", 3) == 0) return 0;
    unsigned long long v = strtoull(buf, NULL, 10);
    return v >= (1ull << 60) ? 0 : (uint64_t)v;
}

/* Smallest limit of `file` in dir root+cg and its ancestors. */
static uint64_t walk_limits(const char *root, char *cg, const char *file) {
    uint64_t best = 0;
    for (;;) {
        char p[1024];
        snprintf(p, sizeof p, "%s%s/%s", root, strcmp(cg, "/") == 0 ? "" : cg, file);
        uint64_t v = read_limit(p);
        if (v && (!best || v < best)) best = v;
        char *slash = strrchr(cg, '/');
        if (!slash || cg[0] == '\0' || strcmp(cg, "/") == 0) break;
        if (slash == cg) strcpy(cg, "/");
        else *slash = '\0';
    }
    return best;
}

uint64_t qw_ram_cgroup_limit(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[1024];
    uint64_t best = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *ctrls = c1 + 1;
        char cg[1024];
        snprintf(cg, sizeof cg, "%s", c2 + 1);
        uint64_t v = 0;
        if (strcmp(line, "0") == 0 && ctrls[0] == '\0') {
            v = walk_limits("/sys/fs/cgroup", cg, "memory.max");
        } else {
            /* v1: the controller list may be "memory" or e.g. "memory,foo" */
            char tmp[256];
            snprintf(tmp, sizeof tmp, ",%s,", ctrls);
            if (strstr(tmp, ",memory,")) v = walk_limits("/sys/fs/cgroup/memory", cg, "memory.limit_in_bytes");
        }
        if (v && (!best || v < best)) best = v;
    }
    fclose(f);
    return best;
}

int qw_parse_gb(const char *what, const char *text, uint64_t *bytes, qw_error *err) {
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    while (*end == ' ') end++;
    if (end != text && (*end == 'g' || *end == 'G')) end++;
    if (end != text && (*end == 'b' || *end == 'B')) end++;
    if (end == text || *end || errno || !isfinite(v) || v <= 0 || v > 1e6)
        return qw_fail(err, "%s='%s': expected a positive number of GB (e.g. 16 or 0.5)", what, text);
    *bytes = (uint64_t)(v * 1e9);
    return 0;
}

int qw_tier_input_for(const qw_model *m, int32_t n_ctx, qw_tier_input *in, qw_error *err) {
    const qw_hparams *hp = &m->hp;
    *in = (qw_tier_input){0};
    in->n_layer = hp->n_layer;
    in->n_expert = hp->n_expert;
    in->n_expert_used = hp->n_expert_used;
    uint64_t slot = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const qw_layer *L = &m->layers[il];
        in->expert_bytes += (uint64_t)hp->n_expert *
                            (L->gate_exps.matrix_bytes + L->up_exps.matrix_bytes + L->down_exps.matrix_bytes);
    }
    if (hp->n_layer > 0) {
        const qw_layer *L = &m->layers[0];
        const size_t mb[3] = {L->gate_exps.matrix_bytes, L->up_exps.matrix_bytes, L->down_exps.matrix_bytes};
        for (int i = 0; i < 3; i++) slot += ((mb[i] + 4095) / 4096 + 1) * 4096; /* read alignment */
    }
    in->slot_bytes = slot;
    in->nonexpert_bytes = m->weight_bytes > in->expert_bytes ? m->weight_bytes - in->expert_bytes : 0;
    /* An untied token embedding is gathered a row per token, never streamed
     * whole, so its pages barely count (151k x 1024 Q8_0 is 165 MB of which a
     * run touches a few hundred KB).  Tied, it is also the LM head: all of it. */
    if (!m->tied_output) {
        const uint64_t embd = m->tok_embd.row_bytes * (uint64_t)m->tok_embd.ne[1];
        in->nonexpert_bytes = in->nonexpert_bytes > embd ? in->nonexpert_bytes - embd : 0;
    }
    if (n_ctx <= 0) n_ctx = hp->n_ctx_train;
    /* f16 K and V of the attention layers, plus the Gated DeltaNet layers'
     * recurrent state, which does not grow with the context */
    int n_attn = 0;
    for (int il = 0; il < hp->n_layer; il++) n_attn += !m->layers[il].recurrent;
    in->kv_bytes = (uint64_t)n_attn * (uint64_t)n_ctx * 2u * (uint64_t)hp->n_head_kv * hp->head_dim * 2u +
                   qw_model_state_bytes(m);
    in->ram_phys = qw_ram_physical();
    in->ram_cgroup = qw_ram_cgroup_limit();
    const char *dev = qw_opt_str(QW_OPT_DEVICE_RAM);
    if (dev && qw_parse_gb("QWISP_DEVICE_RAM", dev, &in->ram_device, err)) return -1;
    in->raw_c = qw_opt_is_set(QW_OPT_RAW_C) ? qw_opt_int(QW_OPT_RAW_C) : -1;
    return 0;
}
