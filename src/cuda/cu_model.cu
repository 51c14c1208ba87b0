/* cu_model.cu — a qw_model onto the device, and the VRAM tier.
 *
 * Budget: the device's free memory, or QWISP_DEVICE_VRAM when set (an
 * emulated smaller GPU: the tier decision, the pool and the expert cache all
 * obey it).  Reserved out of it before weights: the KV cache for the
 * caller's positions, the recurrent state, and the activations of one
 * 512-token chunk.  Resident when all weights fit in what is left; else
 * streaming with C = (left - non-expert weights) / (layers x expert bytes)
 * slots per layer, at least n_expert_used (else the model does not fit, and
 * the error says by how much); QWISP_DEVICE_SLOTS forces C (0 = resident).
 *
 * Streaming copies: from pageable memory the driver stages every copy through
 * its own bounce buffer with a CPU memcpy, at a fraction of the link's speed.
 * QWISP_DEVICE_PIN=auto page-locks the experts' pages of the mmaped file in
 * place (cudaHostRegister, read-only: the mapping is PROT_READ), so a copy is
 * one DMA; no second host copy of the experts is made.  Where the driver
 * refuses (no read-only registration, RLIMIT_MEMLOCK, a file system that
 * cannot pin) or where the file is on a disk file system (its page cache
 * pins slowly: pins_fast; QWISP_DEVICE_PIN=on pins anyway), the copies stay
 * pageable and the reason is kept for the log.
 */
#include "cu_model.h"

#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/vfs.h>

int cu_pdl_on; /* cu_common.h: cu_launch */
int cu_lanes_group; /* cu_common.h */

static size_t tensor_bytes(const qw_tensor *t) {
    size_t n = t->row_bytes;
    for (int d = 1; d < 4; d++) n *= (size_t)(t->ne[d] > 0 ? t->ne[d] : 1);
    return n;
}

static size_t align_up(size_t n) { return (n + 255) & ~(size_t)255; }

/* Each weight of the model once: its host view, its device view, whether
 * it is a routed-expert tensor, and whether a matmul reads it (those need a
 * device kernel for their type and rows of a multiple of 32). */
typedef struct {
    const qw_tensor *h;
    cu_tensor *d;
    bool expert, mm;
} binding;

static int bindings(const qw_model *m, cu_model *dm, binding *b) {
    int n = 0;
#define BIND(H, D, X, MM)                                                       \
    do {                                                                        \
        if ((H).data) b[n++] = (binding){&(H), &(D), (X), (MM)};                \
    } while (0)
#define W(name) BIND(L->name, D->name, false, true)   /* a matmul weight */
#define V(name) BIND(L->name, D->name, false, false)  /* a vector / conv kernel, f32 */
    BIND(m->tok_embd, dm->tok_embd, false, true);
    BIND(m->output_norm, dm->output_norm, false, false);
    if (!m->tied_output) BIND(m->output, dm->output, false, true);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const qw_layer *L = &m->layers[il];
        cu_layer *D = &dm->layers[il];
        D->recurrent = L->recurrent;
        D->gated = L->gated_attn;
        V(attn_norm); W(wq); W(wk); W(wv); W(wo); V(q_norm); V(k_norm); V(ffn_norm);
        W(wqkv); W(wz); W(w_beta); W(w_alpha); V(conv1d); V(dt_bias); V(ssm_a); V(ssm_norm); W(ssm_out);
        W(shexp_gate); W(gate_shexp); W(up_shexp); W(down_shexp); W(gate_inp);
        BIND(L->gate_exps, D->gate_exps, true, true);
        BIND(L->up_exps, D->up_exps, true, true);
        BIND(L->down_exps, D->down_exps, true, true);
    }
#undef W
#undef V
#undef BIND
    return n;
}

static void view(const qw_tensor *h, cu_tensor *d) {
    d->type = h->type;
    d->ne0 = h->ne[0];
    d->ne1 = h->ne[1] > 0 ? h->ne[1] : 1;
    d->row_bytes = h->row_bytes;
    d->matrix_bytes = h->matrix_bytes ? h->matrix_bytes : h->row_bytes * (size_t)d->ne1;
    d->data = NULL;
}

/* Device bytes of activations for a chunk of `rows` rows (cu_forward.cu's
 * buffers, roughly; logits for at most 512 rows: cu_forward.cu's
 * CU_LOGIT_ROWS). */
static uint64_t activation_bytes(const qw_hparams *hp, int rows) {
    const uint64_t E = hp->n_embd, QD = (uint64_t)hp->n_head * hp->head_dim, K = hp->n_expert_used;
    const uint64_t S = hp->ssm_state, C = 2 * S * hp->ssm_groups + S * hp->ssm_vheads;
    const uint64_t per_row = 4 * (4 * E + 4 * QD + hp->n_expert + 2 * K + K * (2 * hp->n_ff_exp + E) + 3 * C +
                                  2 * hp->n_ff_shexp);
    return per_row * rows + 4 * (uint64_t)hp->n_vocab * (rows < 512 ? rows : 512) + (64u << 20);
}

/* One host-to-slot copy: staged (cu_stage.cu) when the experts are pageable
 * and staging is on, else one cudaMemcpyAsync (a DMA from page-locked
 * memory; from pageable memory, the driver's own staging). */
static int copy_in(cu_model *dm, uint8_t *dst, const uint8_t *src, size_t n, cudaStream_t s, qw_error *err) {
    if (dm->stager) return cu_stager_put(dm->stager, dst, src, n, s, err);
    CU_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s), err);
    return 0;
}

/* After a failed copy no slot of the layer is trusted: all empty, so the
 * next use copies again (a failed copy never leaves a slot claiming an
 * expert it does not hold).  Returns -1. */
static int forget_slots(cu_model *dm, cu_layer *D) {
    for (int q = dm->n_fixed; q < dm->slots; q++) { /* the fixed set is never a copy's target */
        if (D->who[q] >= 0) D->slot_of[D->who[q]] = -1;
        D->who[q] = -1;
        D->stamp[q] = 0;
    }
    return -1;
}

int cu_model_load_experts(cu_model *dm, int il, const int32_t *experts, int n, cudaStream_t s, qw_error *err) {
    cu_layer *D = &dm->layers[il];
    const qw_layer *L = &dm->m->layers[il];
    const uint64_t mark = ++dm->clock;
    for (int i = 0; i < n; i++) /* pin the ones already there */
        if (D->slot_of[experts[i]] >= 0) D->stamp[D->slot_of[experts[i]]] = mark;
    for (int i = 0; i < n; i++) {
        const int e = experts[i];
        if (D->slot_of[e] >= 0) continue;
        int victim = -1;
        for (int q = dm->n_fixed; q < dm->slots; q++)
            if (D->stamp[q] != mark && (victim < 0 || D->stamp[q] < D->stamp[victim])) victim = q;
        if (victim < 0) return cu_fail(err, "layer %d: %d experts in one group exceed %d slots", il, n, dm->slots);
        if (D->who[victim] >= 0) D->slot_of[D->who[victim]] = -1;
        const size_t g = D->gate_exps.matrix_bytes, u = D->up_exps.matrix_bytes, dn = D->down_exps.matrix_bytes;
        if (copy_in(dm, D->slot_g + (size_t)victim * g, (const uint8_t *)L->gate_exps.data + (size_t)e * g, g, s, err) ||
            copy_in(dm, D->slot_u + (size_t)victim * u, (const uint8_t *)L->up_exps.data + (size_t)e * u, u, s, err) ||
            copy_in(dm, D->slot_d + (size_t)victim * dn, (const uint8_t *)L->down_exps.data + (size_t)e * dn, dn, s, err))
            return forget_slots(dm, D);
        D->who[victim] = e;
        D->slot_of[e] = victim;
        D->stamp[victim] = mark;
        dm->copies++;
        dm->copy_bytes += g + u + dn;
    }
    if (dm->stager && cu_stager_flush(dm->stager, s, err)) return forget_slots(dm, D);
    return 0;
}

/* Page-locks the routed experts' bytes (page-aligned spans, merged where
 * they touch: a page can be registered once).  On refusal nothing stays
 * registered and dm->pin_why says why. */
static int span_cmp(const void *a, const void *b) {
    const uintptr_t x = ((const uintptr_t *)a)[0], y = ((const uintptr_t *)b)[0];
    return x < y ? -1 : x > y;
}

/* Whether the pages at addr page-lock at memory speed: anonymous memory and
 * memory file systems (tmpfs, ramfs, hugetlbfs) do; a disk file's page cache
 * was measured at minutes of kernel time for the 18 GB of experts of the
 * full-size qwen36-a3b (the driver pins its pages one by one), longer than
 * pageable copies lose.  Else why says so. */
static bool pins_fast(const void *addr, char *why, size_t n) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return true; /* cannot tell: try */
    char line[4096 + 128];
    bool fast = true;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int off = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &off) < 2 || !off) continue;
        if ((uintptr_t)addr < lo || (uintptr_t)addr >= hi) continue;
        char *path = line + off;
        path[strcspn(path, "\n")] = 0;
        struct statfs st;
        if (path[0] == '/' && statfs(path, &st) == 0 && st.f_type != TMPFS_MAGIC && st.f_type != RAMFS_MAGIC &&
            st.f_type != HUGETLBFS_MAGIC) {
            snprintf(why, n, "the file is on a disk file system, whose page cache page-locks slowly "
                             "(QWISP_DEVICE_PIN=on forces it)");
            fast = false;
        }
        break;
    }
    fclose(f);
    return fast;
}

static void pin_experts(cu_model *dm, bool force) {
    const qw_model *m = dm->m;
    const int nl = m->hp.n_layer;
    for (int il = 0; !force && il < nl; il++)
        if (m->layers[il].gate_exps.data) {
            if (!pins_fast(m->layers[il].gate_exps.data, dm->pin_why, sizeof dm->pin_why)) return;
            break;
        }
    int ro = 0;
    cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, 0);
    if (!ro) {
        snprintf(dm->pin_why, sizeof dm->pin_why, "the device cannot register read-only host memory");
        return;
    }
    const uintptr_t pg = 4096;
    uintptr_t *sp = (uintptr_t *)malloc((size_t)nl * 3 * 2 * sizeof(uintptr_t));
    if (!sp) {
        snprintf(dm->pin_why, sizeof dm->pin_why, "out of host memory for the expert spans");
        return;
    }
    int n = 0;
    for (int il = 0; il < nl; il++) {
        const qw_tensor *t[3] = {&m->layers[il].gate_exps, &m->layers[il].up_exps, &m->layers[il].down_exps};
        for (int i = 0; i < 3; i++) {
            if (!t[i]->data) continue;
            const uintptr_t a = (uintptr_t)t[i]->data, b = a + (uintptr_t)t[i]->matrix_bytes * m->hp.n_expert;
            sp[2 * n] = a & ~(pg - 1);
            sp[2 * n + 1] = (b + pg - 1) & ~(pg - 1);
            n++;
        }
    }
    qsort(sp, (size_t)n, 2 * sizeof(uintptr_t), span_cmp);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k && sp[2 * i] <= sp[2 * (k - 1) + 1]) {
            if (sp[2 * i + 1] > sp[2 * (k - 1) + 1]) sp[2 * (k - 1) + 1] = sp[2 * i + 1];
        } else {
            sp[2 * k] = sp[2 * i], sp[2 * k + 1] = sp[2 * i + 1];
            k++;
        }
    }
    dm->pinned = (void **)calloc((size_t)k, sizeof(void *));
    if (!dm->pinned) {
        snprintf(dm->pin_why, sizeof dm->pin_why, "out of host memory for %d pinned spans", k);
        k = 0;
    }
    for (int i = 0; i < k; i++) {
        const cudaError_t e = cudaHostRegister((void *)sp[2 * i], sp[2 * i + 1] - sp[2 * i],
                                               cudaHostRegisterReadOnly | cudaHostRegisterPortable);
        if (e != cudaSuccess) {
            cudaGetLastError();
            snprintf(dm->pin_why, sizeof dm->pin_why, "cudaHostRegister of %.2f GB: %s",
                     (sp[2 * i + 1] - sp[2 * i]) / 1e9, cudaGetErrorString(e));
            for (int j = 0; j < dm->n_pinned; j++) cudaHostUnregister(dm->pinned[j]);
            dm->n_pinned = 0;
            dm->pinned_bytes = 0;
            break;
        }
        dm->pinned[dm->n_pinned++] = (void *)sp[2 * i];
        dm->pinned_bytes += sp[2 * i + 1] - sp[2 * i];
    }
    free(sp);
}

static int check_model(const qw_model *m, qw_error *err) {
    const qw_hparams *hp = &m->hp;
    if (hp->head_dim > 512) return cu_fail(err, "head_dim %d > 512 (the device attention's limit)", hp->head_dim);
    if (hp->n_expert > 4096) return cu_fail(err, "%d experts > 4096", hp->n_expert);
    for (int il = 0; il < hp->n_layer; il++)
        if (m->layers[il].recurrent && !cu_delta_supported(hp->ssm_state))
            return cu_fail(err, "Gated DeltaNet state size %d (the device kernel takes 16, 32, 64 or 128)",
                           hp->ssm_state);
    return 0;
}

static void free_dm(cu_model *dm) {
    if (!dm) return;
    cu_stager_free(dm->stager);
    for (int j = 0; j < dm->n_pinned; j++) cudaHostUnregister(dm->pinned[j]);
    free(dm->pinned);
    if (dm->layers)
        for (int il = 0; il < dm->hp.n_layer; il++) {
            cu_layer *D = &dm->layers[il];
            cu_pool_free(D->slot_g);
            cu_pool_free(D->slot_u);
            cu_pool_free(D->slot_d);
            free(D->slot_of);
            free(D->who);
            free(D->stamp);
        }
    cu_pool_free(dm->arena);
    free(dm->layers);
    free(dm);
}

/* QWISP_DEVICE_MISSES=host: slots [0, F) of every layer get F experts for
 * good (the first F of the layer's fixed_order, QWISP_DEVICE_FIXED's profile,
 * else experts 0 .. F-1), F = slots less the scratch prefill copies through
 * (2 top-k's worth, or all slots when fewer): which picks the GPU runs in
 * decode then depends on the routing alone, never on what earlier steps
 * copied. */
static int load_fixed(cu_model *dm, const qw_backend_cfg *cfg, qw_error *err) {
    const int K = dm->hp.n_expert_used, X = dm->hp.n_expert, scratch = 2 * K < dm->slots ? 2 * K : dm->slots;
    const int F = dm->slots - scratch < X ? dm->slots - scratch : X;
    int32_t *ids = (int32_t *)malloc((size_t)(F > 0 ? F : 1) * sizeof(int32_t));
    if (!ids) return cu_fail(err, "out of host memory");
    for (int il = 0; il < dm->hp.n_layer && F > 0; il++) {
        for (int r = 0; r < F; r++) ids[r] = cfg->fixed_order ? cfg->fixed_order[(size_t)il * X + r] : r;
        if (cu_model_load_experts(dm, il, ids, F, 0, err)) return free(ids), -1;
    }
    free(ids);
    if (cudaStreamSynchronize(0) != cudaSuccess)
        return cu_fail(err, "loading the fixed experts: %s", cudaGetErrorString(cudaGetLastError()));
    dm->n_fixed = F;
    dm->host_misses = 1;
    dm->fixed_profile = cfg->fixed_order != NULL;
    return 0;
}

static void *model_new(const qw_model *m, const qw_backend_cfg *cfg, qw_error *err) {
    if (check_model(m, err)) return NULL;
    cu_pool_config(cfg);
    cu_mma_mode(cfg->mma);
    int cc_major = 0;
    cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0);
    cu_pdl_on = cfg->pdl && cc_major >= 9;
    cu_lanes_group = cfg->lanes_group;
    cu_model *dm = (cu_model *)calloc(1, sizeof *dm);
    if (!dm) {
        cu_fail(err, "out of host memory for the device model");
        return NULL;
    }
    dm->m = m;
    dm->hp = m->hp;
    dm->kv_f32 = cfg->kv_f32;
    dm->layers = (cu_layer *)calloc((size_t)m->hp.n_layer, sizeof(cu_layer));
    const int max_b = 3 + 25 * m->hp.n_layer;
    binding *b = (binding *)calloc((size_t)max_b, sizeof *b);
    if (!dm->layers || !b) {
        cu_fail(err, "out of host memory for the device model's %d layers", m->hp.n_layer);
        free(b);
        free_dm(dm);
        return NULL;
    }
    const int nb = bindings(m, dm, b);
    uint64_t dense = 0, experts = 0, per_expert = 0; /* per_expert: gate+up+down of one expert, all layers */
    for (int i = 0; i < nb; i++) {
        view(b[i].h, b[i].d);
        if (!b[i].mm && b[i].h->type != QW_TYPE_F32) {
            cu_fail(err, "tensor %s: type %d (the device reads vectors as f32)", b[i].h->name, b[i].h->type);
            goto fail;
        }
        if (b[i].mm && !cu_type_ok(b[i].h->type)) {
            cu_fail(err, "tensor %s: type %d has no device kernel", b[i].h->name, b[i].h->type);
            goto fail;
        }
        if (b[i].mm && b[i].h->ne[0] % 32) {
            cu_fail(err, "tensor %s: row of %lld elements (the device matmul wants a multiple of 32)", b[i].h->name,
                    (long long)b[i].h->ne[0]);
            goto fail;
        }
        const size_t nbytes = align_up(tensor_bytes(b[i].h));
        if (b[i].expert) {
            experts += nbytes;
            per_expert += b[i].h->matrix_bytes;
        } else {
            dense += nbytes;
        }
    }
    if (m->tied_output) dm->output = dm->tok_embd;
    {
        size_t free_b = 0, total_b = 0;
        const cudaError_t me = cudaMemGetInfo(&free_b, &total_b);
        if (me != cudaSuccess) {
            cu_fail(err, "cudaMemGetInfo: %s", cudaGetErrorString(me));
            goto fail;
        }
        uint64_t budget = free_b;
        if (cfg->vram_limit && cfg->vram_limit < budget) budget = cfg->vram_limit;
        const qw_hparams *hp = &m->hp;
        int n_attn = 0;
        for (int il = 0; il < hp->n_layer; il++) n_attn += !m->layers[il].recurrent;
        const int64_t pos = cfg->kv_positions > 0 ? cfg->kv_positions : 4096;
        const uint64_t kv = 2ull * n_attn * (uint64_t)pos * hp->n_head_kv * hp->head_dim * (cfg->kv_f32 ? 4 : 2);
        uint64_t state = 0;
        for (int il = 0; il < hp->n_layer; il++)
            if (m->layers[il].recurrent) state += cu_conv_state_bytes(hp) + cu_delta_state_bytes(hp);
        const uint64_t reserve = kv + state + activation_bytes(hp, cfg->chunk > 0 ? cfg->chunk : 512);
        const uint64_t one = per_expert + 3 * 256 * (uint64_t)hp->n_layer; /* a slot in every layer */
        const qw_device_tier tier = qw_device_tier_decide(budget, reserve, dense, experts, one, hp->n_expert,
                                                          hp->n_expert_used, cfg->expert_slots);
        if (!tier.fits) {
            if (cfg->expert_slots >= 0)
                cu_fail(err, "QWISP_DEVICE_SLOTS=%lld is below the %d experts a token uses", (long long)cfg->expert_slots,
                        hp->n_expert_used);
            else
                cu_fail(err, "the model does not fit %.2f GB of device memory: %.2f GB of non-expert weights + "
                             "%d expert slots a layer need %.2f GB, plus %.2f GB of KV/state/activations",
                        budget / 1e9, dense / 1e9, hp->n_expert_used, (dense + (double)one * hp->n_expert_used) / 1e9,
                        reserve / 1e9);
            goto fail;
        }
        const int64_t slots = tier.slots;
        dm->streaming = slots > 0;
        dm->slots = (int)slots;
        const uint64_t arena = dm->streaming ? dense : dense + experts;
        dm->arena = cu_pool_alloc_fit(arena, true);
        if (!dm->arena) {
            cu_fail(err, "out of device memory for %.2f GB of weights", arena / 1e9);
            goto fail;
        }
        dm->arena_bytes = arena;
        size_t off = 0;
        for (int i = 0; i < nb; i++) {
            if (dm->streaming && b[i].expert) continue;
            const size_t nbytes = tensor_bytes(b[i].h);
            if (cudaMemcpy((uint8_t *)dm->arena + off, b[i].h->data, nbytes, cudaMemcpyHostToDevice) != cudaSuccess) {
                cu_fail(err, "copying %s to the device: %s", b[i].h->name, cudaGetErrorString(cudaGetLastError()));
                goto fail;
            }
            b[i].d->data = (const uint8_t *)dm->arena + off;
            off += align_up(nbytes);
        }
        if (m->tied_output) dm->output = dm->tok_embd;
        char copies[400] = "page-locked"; /* how experts reach the slots, for the tier line */
        if (dm->streaming) {
            for (int il = 0; il < hp->n_layer; il++) {
                cu_layer *D = &dm->layers[il];
                D->slot_g = (uint8_t *)cu_pool_alloc_fit((size_t)slots * D->gate_exps.matrix_bytes, true);
                D->slot_u = (uint8_t *)cu_pool_alloc_fit((size_t)slots * D->up_exps.matrix_bytes, true);
                D->slot_d = (uint8_t *)cu_pool_alloc_fit((size_t)slots * D->down_exps.matrix_bytes, true);
                if (!D->slot_g || !D->slot_u || !D->slot_d) {
                    cu_fail(err, "out of device memory for %lld expert slots of layer %d", (long long)slots, il);
                    goto fail;
                }
                dm->slot_bytes += (uint64_t)slots * (D->gate_exps.matrix_bytes + D->up_exps.matrix_bytes +
                                                     D->down_exps.matrix_bytes);
                D->slot_of = (int32_t *)malloc((size_t)hp->n_expert * sizeof(int32_t));
                D->who = (int32_t *)malloc((size_t)slots * sizeof(int32_t));
                D->stamp = (uint64_t *)calloc((size_t)slots, sizeof(uint64_t));
                if (!D->slot_of || !D->who || !D->stamp) {
                    cu_fail(err, "out of host memory for layer %d's expert slot table", il);
                    goto fail;
                }
                for (int e = 0; e < hp->n_expert; e++) D->slot_of[e] = -1;
                for (int q = 0; q < slots; q++) D->who[q] = -1;
            }
            if (cfg->host_run) { /* QWISP_DEVICE_HOST_EXPERTS or QWISP_DEVICE_MISSES=host (load_fixed, below) */
                dm->host_experts = cfg->host_experts < hp->n_expert_used ? cfg->host_experts : hp->n_expert_used;
                dm->host_run = cfg->host_run;
                dm->host = cfg->host;
            }
            if (cfg->pin_host) pin_experts(dm, cfg->pin_host == 2);
            else snprintf(dm->pin_why, sizeof dm->pin_why, "QWISP_DEVICE_PIN=off");
            if (!dm->n_pinned) {
                char how[200], failed[160];
                if (!cfg->stage_bytes)
                    snprintf(how, sizeof how, "the driver's copies: QWISP_DEVICE_STAGE_MB=0");
                else if (!(dm->stager = cu_stager_new(cfg->stage_bytes, failed, sizeof failed)))
                    snprintf(how, sizeof how, "the driver's copies (%s)", failed);
                else
                    snprintf(how, sizeof how, "staged through %.0f MB of page-locked buffers by %d threads",
                             cu_stager_bytes(dm->stager) / 1e6, cu_stager_threads(dm->stager));
                snprintf(copies, sizeof copies, "pageable: %s; %s", dm->pin_why, how);
            }
            /* after the pinning and the stager: the fixed set is copied in as any expert */
            if (cfg->host_misses && cfg->host_run && load_fixed(dm, cfg, err)) goto fail;
        }
        cudaDeviceProp prop;
        cudaGetDeviceProperties(&prop, 0);
        char fixed_note[200] = "";
        if (dm->host_misses && dm->n_fixed > 0)
            snprintf(fixed_note, sizeof fixed_note,
                     "; %s %d experts of each layer fixed in slots, the host computes the other picks of decode "
                     "(QWISP_DEVICE_MISSES=host)",
                     dm->fixed_profile ? "the most used" : "the first", dm->n_fixed);
        else if (dm->host_misses)
            snprintf(fixed_note, sizeof fixed_note,
                     "; no slots to spare for fixed experts, the host computes every pick of decode (QWISP_DEVICE_MISSES=host)");
        else if (dm->host_experts)
            snprintf(fixed_note, sizeof fixed_note, "; the host computes each token's last picks (QWISP_DEVICE_HOST_EXPERTS)");
        if (dm->streaming)
            snprintf(dm->desc, sizeof dm->desc,
                     "cuda (%s): streaming tier, %.2f GB non-expert weights in VRAM + %d expert slots/layer (%.2f GB); "
                     "%.2f GB of experts in host memory (%s); budget %.2f GB%s",
                     prop.name, dense / 1e9, dm->slots, dm->slot_bytes / 1e9, experts / 1e9, copies, budget / 1e9,
                     fixed_note);
        else
            snprintf(dm->desc, sizeof dm->desc, "cuda (%s): resident tier, %.2f GB of weights in VRAM; budget %.2f GB",
                     prop.name, arena / 1e9, budget / 1e9);
    }
    free(b);
    return dm;
fail:
    free(b);
    free_dm(dm);
    return NULL;
}

static void model_free(void *p) {
    free_dm((cu_model *)p);
    cu_pool_trim();
}

static const char *model_describe(void *p) { return ((cu_model *)p)->desc; }

static void model_stats(void *p, qw_device_stats *s) {
    const cu_model *dm = (const cu_model *)p;
    cu_pool_stats(s);
    s->weight_bytes = dm->arena_bytes;
    s->expert_slot_bytes = dm->slot_bytes;
    s->expert_copies = dm->copies;
    s->expert_copy_bytes = dm->copy_bytes;
    s->expert_pinned_bytes = dm->pinned_bytes;
    s->host_expert_rows = dm->host_rows;
}

/* ---- the ops table (contexts and eval: cu_forward.cu) ---- */
void *cu_ctx_new(void *dm, int32_t n_ctx, qw_error *err);
void cu_ctx_free(void *dc);
int cu_eval(void *dc, const int32_t *tokens, int32_t n, int32_t n_past, float *logits, int all, qw_error *err);
void cu_ctx_reset(void *dc);
uint64_t cu_ctx_bytes(void *dc);
int cu_ctx_state_io(void *dc, void *buf, int to_device, qw_error *err);
int cu_ctx_kv_io(void *dc, int il, int kv, int32_t n, void *buf, int to_device, qw_error *err);
int cu_ctx_kv_copy(void *dst, void *src, int32_t n, qw_error *err);
void *cu_snap_new(void *dc, qw_error *err);
int cu_snap_copy(void *dc, void *snap, int save, qw_error *err);
void cu_snap_free(void *snap);
int cu_eval_batch(void *ws, const qw_backend_seq *seqs, int n_seqs, qw_error *err);

static int probe(char *dev, size_t n, qw_error *err) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return cu_fail(err, "no usable CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
    if (count < 1) return cu_fail(err, "no CUDA device");
    cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) return cu_fail(err, "cudaGetDeviceProperties: %s", cudaGetErrorString(e));
    if (prop.major < 7)
        return cu_fail(err, "%s has compute capability %d.%d (the backend needs 7.0 or newer)", prop.name, prop.major,
                       prop.minor);
    snprintf(dev, n, "%s (%.0f GB)", prop.name, prop.totalGlobalMem / 1e9);
    return 0;
}

#ifndef QW_PIN_LOGITS /* 0: logits copied into pageable memory (to time the pinning against) */
#define QW_PIN_LOGITS 1
#endif

/* backend.h host_pin / host_unpin: a context's logits buffer page-locked in
 * place, so the copy that ends every step is a DMA into it (the driver copies
 * into pageable memory through its own staging buffers, one chunk at a time). */
static int host_pin(void *p, size_t n) {
    if (!QW_PIN_LOGITS || cudaHostRegister(p, n, cudaHostRegisterPortable) != cudaSuccess) {
        cudaGetLastError(); /* not sticky: the copies stay pageable */
        return -1;
    }
    return 0;
}
static void host_unpin(void *p) {
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

static const qw_backend_ops k_ops = {
    QW_BACKEND_ABI, "cuda", probe, model_new, model_free, model_describe, model_stats,
    cu_ctx_new,     cu_ctx_free, cu_eval, cu_ctx_reset, cu_ctx_bytes,
    cu_ctx_state_io, cu_ctx_kv_io, cu_ctx_kv_copy, cu_snap_new, cu_snap_copy, cu_snap_free, cu_eval_batch,
    host_pin,       host_unpin,
};

extern "C" __attribute__((visibility("default"))) const qw_backend_ops *qw_backend_cuda_ops(void) { return &k_ops; }
