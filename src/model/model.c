/* model.c — loads a model from GGUF: reads the architecture's hyper-parameters
 * from metadata and binds every weight tensor by name, checking its type and
 * shape before the forward pass ever touches it.  Weights are not copied; each
 * qw_tensor points into the read-only mapping owned by the qw_gguf handle.
 *
 * Architectures: qwen3moe (here) and qwen35moe (its keys and tensors:
 * qwen35moe_load.c); one forward pass runs both (forward.c and its blocks).
 * Anything else is refused with the architecture's name.
 *
 * Loading is mechanism only: it also describes the model to experts/ (the
 * expert layout: file offsets and sizes of each layer's merged expert
 * tensors) and states its sizes for the tier decision, but the caller, who
 * knows the real context, decides the tier (runtime/place.c).
 */
#include "model_load.h"
#include "qwisp/backend.h"
#include "qwisp/experts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int qw_model_key_u32(const qw_gguf *g, const char *arch, const char *suffix, int32_t *out,
                       bool required, qw_error *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v;
    if (qw_gguf_get_u32(g, key, &v) != 0) {
        if (!required) return 1;
        return qw_fail(err, "%s: missing or non-integer metadata key '%s'", qw_gguf_path(g), key);
    }
    if (v > (uint32_t)INT32_MAX)
        return qw_fail(err, "%s: metadata '%s' = %u is out of range", qw_gguf_path(g), key, v);
    *out = (int32_t)v;
    return 0;
}

int qw_model_key_f32(const qw_gguf *g, const char *arch, const char *suffix, float *out,
                       bool required, qw_error *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (qw_gguf_get_f32(g, key, out) != 0) {
        if (!required) return 1;
        return qw_fail(err, "%s: missing or non-float metadata key '%s'", qw_gguf_path(g), key);
    }
    return 0;
}

static int read_hparams(const qw_gguf *g, qw_hparams *hp, qw_error *err) {
    const char *arch;
    size_t alen;
    if (qw_gguf_get_str(g, "general.architecture", &arch, &alen) != 0)
        return qw_fail(err, "%s: missing metadata key 'general.architecture'", qw_gguf_path(g));
    if (!strcmp(arch, "qwen3moe"))
        hp->arch_id = QW_ARCH_QWEN3MOE;
    else if (!strcmp(arch, "qwen35moe"))
        hp->arch_id = QW_ARCH_QWEN35MOE;
    else
        return qw_fail(err, "%s: architecture '%s' is not supported (qwisp runs: qwen3moe, qwen35moe)",
                       qw_gguf_path(g), arch);
    snprintf(hp->arch, sizeof hp->arch, "%s", arch);

    if (qw_model_key_u32(g, arch, "embedding_length", &hp->n_embd, true, err) ||
        qw_model_key_u32(g, arch, "block_count", &hp->n_layer, true, err) ||
        qw_model_key_u32(g, arch, "attention.head_count", &hp->n_head, true, err) ||
        qw_model_key_u32(g, arch, "expert_count", &hp->n_expert, true, err) ||
        qw_model_key_u32(g, arch, "expert_used_count", &hp->n_expert_used, true, err) ||
        qw_model_key_f32(g, arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, err))
        return -1;
    hp->n_head_kv = hp->n_head;
    if (qw_model_key_u32(g, arch, "attention.head_count_kv", &hp->n_head_kv, false, err) < 0) return -1;
    hp->head_dim = hp->n_head ? hp->n_embd / hp->n_head : 0;
    if (qw_model_key_u32(g, arch, "attention.key_length", &hp->head_dim, false, err) < 0) return -1;
    int32_t vlen = hp->head_dim;
    if (qw_model_key_u32(g, arch, "attention.value_length", &vlen, false, err) < 0) return -1;
    hp->n_ctx_train = 4096;
    if (qw_model_key_u32(g, arch, "context_length", &hp->n_ctx_train, false, err) < 0) return -1;
    hp->rope_base = 10000.0f;
    if (qw_model_key_f32(g, arch, "rope.freq_base", &hp->rope_base, false, err) < 0) return -1;
    hp->n_ff_exp = 0;
    if (qw_model_key_u32(g, arch, "expert_feed_forward_length", &hp->n_ff_exp, false, err) < 0) return -1;
    hp->expert_weights_scale = 0.0f;
    if (qw_model_key_f32(g, arch, "expert_weights_scale", &hp->expert_weights_scale, false, err) < 0)
        return -1;
    hp->norm_topk = true; /* llama.cpp's qwen3moe and qwen35moe graphs renormalise */
    hp->n_rot = hp->head_dim;
    if (hp->arch_id == QW_ARCH_QWEN35MOE && qw_qwen35moe_read_hparams(g, hp, err)) return -1;

    const char *path = qw_gguf_path(g);
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0)
        return qw_fail(err, "%s: bad shape: n_embd=%d n_layer=%d n_head=%d n_head_kv=%d", path,
                       hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv);
    if (hp->n_head % hp->n_head_kv != 0)
        return qw_fail(err, "%s: head_count %d is not a multiple of head_count_kv %d", path,
                       hp->n_head, hp->n_head_kv);
    if (hp->head_dim <= 0 || hp->head_dim % 2 != 0 || vlen != hp->head_dim)
        return qw_fail(err, "%s: unsupported head dims: key_length=%d value_length=%d", path,
                       hp->head_dim, vlen);
    if (hp->n_expert <= 0 || hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert ||
        hp->n_expert_used > QW_EXPERT_USED_MAX)
        return qw_fail(err, "%s: bad experts: expert_count=%d expert_used_count=%d", path,
                       hp->n_expert, hp->n_expert_used);
    if (!(hp->rms_eps > 0.0f) || !(hp->rope_base > 0.0f))
        return qw_fail(err, "%s: bad rms_eps=%g or rope.freq_base=%g", path, hp->rms_eps,
                       hp->rope_base);
    return 0;
}

int qw_model_bind_tensor(const qw_gguf *g, qw_tensor *t, const char *name, int n_dims,
                         const int64_t *want, bool float_only, qw_error *err) {
    const qw_gguf_tensor *gt = qw_gguf_find_tensor(g, name);
    if (!gt) return qw_fail(err, "%s: missing tensor '%s'", qw_gguf_path(g), name);
    if (!qw_type_supported(gt->type))
        return qw_fail(err, "%s: tensor '%s' has type %s (%u), which qwisp cannot compute with",
                       qw_gguf_path(g), name, qw_type_name(gt->type), gt->type);
    if (float_only && gt->type != QW_TYPE_F32)
        return qw_fail(err, "%s: tensor '%s' must be f32, found %s", qw_gguf_path(g), name,
                       qw_type_name(gt->type));
    for (int d = 0; d < 4; d++) {
        int64_t w = d < n_dims ? want[d] : 1;
        if ((int64_t)gt->ne[d] != w || (d >= n_dims && gt->ne[d] != 1))
            return qw_fail(err,
                           "%s: tensor '%s' has shape [%lld,%lld,%lld,%lld], expected dim %d = %lld",
                           qw_gguf_path(g), name, (long long)gt->ne[0], (long long)gt->ne[1],
                           (long long)gt->ne[2], (long long)gt->ne[3], d, (long long)w);
    }
    t->name = gt->name;
    t->data = gt->data;
    t->type = (qw_type)gt->type;
    for (int d = 0; d < 4; d++) t->ne[d] = (int64_t)gt->ne[d];
    t->row_bytes = qw_row_bytes(gt->type, t->ne[0]);
    t->matrix_bytes = t->row_bytes * (size_t)t->ne[1];
    return 0;
}

static int bind_layer(const qw_gguf *g, const qw_hparams *hp, int il, qw_layer *L, qw_error *err) {
    char nm[96];
    const int64_t E = hp->n_embd, D = hp->head_dim, H = hp->n_head, HKV = hp->n_head_kv;
    const int64_t X = hp->n_expert, F = hp->n_ff_exp;
#define B(field, suffix, nd, dims, f32)                                                  \
    do {                                                                                 \
        snprintf(nm, sizeof nm, "blk.%d.%s.weight", il, suffix);                         \
        if (qw_model_bind_tensor(g, &L->field, nm, nd, dims, f32, err)) return -1;                       \
    } while (0)
    B(attn_norm, "attn_norm", 1, DIMS(E), true);
    B(wq, "attn_q", 2, DIMS(E, H * D), false);
    B(wk, "attn_k", 2, DIMS(E, HKV * D), false);
    B(wv, "attn_v", 2, DIMS(E, HKV * D), false);
    B(wo, "attn_output", 2, DIMS(H * D, E), false);
    B(q_norm, "attn_q_norm", 1, DIMS(D), true);
    B(k_norm, "attn_k_norm", 1, DIMS(D), true);
    B(ffn_norm, "ffn_norm", 1, DIMS(E), true);
    B(gate_inp, "ffn_gate_inp", 2, DIMS(E, X), false);
    B(gate_exps, "ffn_gate_exps", 3, DIMS(E, F, X), false);
    B(up_exps, "ffn_up_exps", 3, DIMS(E, F, X), false);
    B(down_exps, "ffn_down_exps", 3, DIMS(F, E, X), false);
#undef B
    return 0;
}

qw_model *qw_model_load(const char *path, qw_error *err) {
    qw_gguf *g = qw_gguf_open(path, err);
    if (!g) return NULL;
    qw_model *m = qw_xcalloc(1, sizeof *m);
    m->gguf = g;
    qw_hparams *hp = &m->hp;
    if (read_hparams(g, hp, err)) goto fail;

    const qw_gguf_tensor *te = qw_gguf_find_tensor(g, "token_embd.weight");
    if (!te) {
        qw_fail(err, "%s: missing tensor 'token_embd.weight'", path);
        goto fail;
    }
    hp->n_vocab = (int32_t)te->ne[1];
    if (hp->n_ff_exp == 0) {
        /* Older files: infer from the expert tensor, as the shape is authoritative. */
        const qw_gguf_tensor *ge = qw_gguf_find_tensor(g, "blk.0.ffn_gate_exps.weight");
        if (ge) hp->n_ff_exp = (int32_t)ge->ne[1];
    }
    if (hp->n_ff_exp <= 0) {
        qw_fail(err, "%s: cannot determine expert_feed_forward_length", path);
        goto fail;
    }
    if (qw_model_bind_tensor(g, &m->tok_embd, "token_embd.weight", 2, DIMS(hp->n_embd, hp->n_vocab), false, err) ||
        qw_model_bind_tensor(g, &m->output_norm, "output_norm.weight", 1, DIMS(hp->n_embd), true, err))
        goto fail;
    if (qw_gguf_find_tensor(g, "output.weight")) {
        if (qw_model_bind_tensor(g, &m->output, "output.weight", 2, DIMS(hp->n_embd, hp->n_vocab), false, err))
            goto fail;
    } else {
        m->output = m->tok_embd;
        m->tied_output = true;
    }
    m->layers = qw_xcalloc((size_t)hp->n_layer, sizeof(qw_layer));
    for (int il = 0; il < hp->n_layer; il++)
        if ((hp->arch_id == QW_ARCH_QWEN35MOE ? qw_qwen35moe_bind_layer : bind_layer)(g, hp, il, &m->layers[il], err))
            goto fail;

    m->n_weight_ranges = qw_gguf_n_tensors(g);
    m->weight_ranges = qw_xcalloc(m->n_weight_ranges ? m->n_weight_ranges : 1, sizeof *m->weight_ranges);
    for (size_t i = 0; i < m->n_weight_ranges; i++) {
        const qw_gguf_tensor *t = qw_gguf_tensor_at(g, i);
        m->weight_bytes += t->nbytes;
        m->weight_ranges[i] = (qw_mapped_range){t->data, (size_t)t->nbytes};
    }
    m->expert_parts = qw_xcalloc((size_t)hp->n_layer, sizeof *m->expert_parts);
    for (int il = 0; il < hp->n_layer; il++) {
        const qw_layer *L = &m->layers[il];
        const qw_tensor *ts[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (int q = 0; q < 3; q++) {
            const qw_gguf_tensor *gt = qw_gguf_find_tensor(g, ts[q]->name);
            m->expert_parts[il][q] = (qw_expert_part){ts[q]->name, ts[q]->data,
                                                      (uint64_t)qw_gguf_data_offset(g) + gt->offset,
                                                      ts[q]->matrix_bytes};
        }
    }
    return m;
fail:
    qw_model_free(m);
    return NULL;
}

void qw_model_free(qw_model *m) {
    if (!m) return;
    qw_backend_detach(m);
    qw_experts_close(m->experts);
    free(m->expert_parts);
    free(m->weight_ranges);
    free(m->layers);
    qw_gguf_close(m->gguf);
    free(m);
}

size_t qw_model_conv_state_bytes(const qw_hparams *hp) {
    const size_t C = 2 * (size_t)hp->ssm_state * hp->ssm_groups + (size_t)hp->ssm_state * hp->ssm_vheads;
    return (size_t)(hp->ssm_d_conv > 1 ? hp->ssm_d_conv - 1 : 1) * C * sizeof(float);
}

size_t qw_model_delta_state_bytes(const qw_hparams *hp) {
    return (size_t)hp->ssm_vheads * hp->ssm_state * hp->ssm_state * sizeof(float);
}

uint64_t qw_model_state_bytes(const qw_model *m) {
    uint64_t b = 0;
    for (int il = 0; il < m->hp.n_layer; il++)
        if (m->layers[il].recurrent) b += qw_model_conv_state_bytes(&m->hp) + qw_model_delta_state_bytes(&m->hp);
    return b;
}

uint64_t qw_model_active_bytes(const qw_model *m) {
    const qw_hparams *hp = &m->hp;
    uint64_t b = m->output.row_bytes * (uint64_t)hp->n_vocab + m->tok_embd.row_bytes;
    for (int il = 0; il < hp->n_layer; il++) {
        const qw_layer *L = &m->layers[il];
        b += L->wq.matrix_bytes + L->wk.matrix_bytes + L->wv.matrix_bytes + L->wo.matrix_bytes;
        b += L->wqkv.matrix_bytes + L->wz.matrix_bytes + L->w_beta.matrix_bytes + L->w_alpha.matrix_bytes +
             L->ssm_out.matrix_bytes;
        b += L->shexp_gate.matrix_bytes + L->gate_shexp.matrix_bytes + L->up_shexp.matrix_bytes +
             L->down_shexp.matrix_bytes;
        b += L->gate_inp.matrix_bytes;
        b += (uint64_t)hp->n_expert_used *
             (L->gate_exps.matrix_bytes + L->up_exps.matrix_bytes + L->down_exps.matrix_bytes);
    }
    return b;
}

qw_expert_layout qw_model_expert_layout(const qw_model *m) {
    return (qw_expert_layout){.path = qw_gguf_path(m->gguf),
                              .n_layer = m->hp.n_layer,
                              .n_expert = m->hp.n_expert,
                              .parts = (const qw_expert_part(*)[3])m->expert_parts,
                              .weights = m->weight_ranges,
                              .n_weights = m->n_weight_ranges};
}

void qw_model_set_experts(qw_model *m, qw_experts *x) {
    if (m->experts != x) qw_experts_close(m->experts);
    m->experts = x;
}

void qw_model_tier_sizes(const qw_model *m, int64_t kv_positions, qw_tier_input *in) {
    const qw_hparams *hp = &m->hp;
    *in = (qw_tier_input){0};
    in->raw_c = -1;
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
    if (kv_positions <= 0) kv_positions = hp->n_ctx_train;
    /* f16 K and V of the attention layers, plus the Gated DeltaNet layers'
     * recurrent state, which does not grow with the context */
    int n_attn = 0;
    for (int il = 0; il < hp->n_layer; il++) n_attn += !m->layers[il].recurrent;
    in->kv_bytes = (uint64_t)n_attn * (uint64_t)kv_positions * 2u * (uint64_t)hp->n_head_kv * hp->head_dim * 2u +
                   qw_model_state_bytes(m);
}
