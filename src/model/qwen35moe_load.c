/* qwen35moe_load.c — the qwen35moe architecture's metadata keys and tensors
 * (Qwen3.5/3.6-MoE as llama.cpp names them; docs/qwen35moe.md has the tables).
 *
 * Layers come in two kinds: Gated DeltaNet ("recurrent") layers and gated
 * full-attention layers, (il+1) % full_attention_interval == 0 being the
 * attention ones.  Every layer ends in routed experts plus a shared expert.
 * block_count includes the multi-token-prediction blocks
 * (nextn_predict_layers) that follow the trunk; qwisp runs the trunk only and
 * leaves their tensors unread.
 */
#include "model_load.h"

#include <stdio.h>

static const char ARCH[] = "qwen35moe";

int qw_qwen35moe_read_hparams(const qw_gguf *g, qw_hparams *hp, qw_error *err) {
    const char *path = qw_gguf_path(g);
    int32_t nextn = 0;
    hp->full_attn_interval = 4;
    if (qw_model_key_u32(g, ARCH, "expert_shared_feed_forward_length", &hp->n_ff_shexp, true, err) ||
        qw_model_key_u32(g, ARCH, "ssm.conv_kernel", &hp->ssm_d_conv, true, err) ||
        qw_model_key_u32(g, ARCH, "ssm.state_size", &hp->ssm_state, true, err) ||
        qw_model_key_u32(g, ARCH, "ssm.group_count", &hp->ssm_groups, true, err) ||
        qw_model_key_u32(g, ARCH, "ssm.time_step_rank", &hp->ssm_vheads, true, err) ||
        qw_model_key_u32(g, ARCH, "rope.dimension_count", &hp->n_rot, false, err) < 0 ||
        qw_model_key_u32(g, ARCH, "full_attention_interval", &hp->full_attn_interval, false, err) < 0 ||
        qw_model_key_u32(g, ARCH, "nextn_predict_layers", &nextn, false, err) < 0)
        return -1;
    int32_t inner = 0;
    if (qw_model_key_u32(g, ARCH, "ssm.inner_size", &inner, true, err)) return -1;
    if (qw_gguf_find_key(g, "qwen35moe.attention.recurrent_layers") >= 0)
        return qw_fail(err, "%s: qwen35moe.attention.recurrent_layers (an explicit layer pattern) is not supported; "
                       "qwisp follows full_attention_interval", path);
    if (nextn < 0 || nextn >= hp->n_layer)
        return qw_fail(err, "%s: nextn_predict_layers %d leaves no trunk of block_count %d", path, nextn, hp->n_layer);
    hp->n_layer -= nextn;
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return qw_fail(err, "%s: rope.dimension_count %d must be even and at most key_length %d", path, hp->n_rot,
                       hp->head_dim);
    if (hp->n_ff_shexp <= 0 || hp->ssm_d_conv < 1 || hp->ssm_d_conv > 64 || hp->ssm_state <= 0 ||
        hp->ssm_state > 1024 || hp->ssm_groups <= 0 || hp->ssm_vheads <= 0 || hp->ssm_vheads % hp->ssm_groups ||
        hp->full_attn_interval < 1)
        return qw_fail(err,
                       "%s: bad qwen35moe shape: shared ff %d, conv %d, state %d, key heads %d, value heads %d "
                       "(a multiple of key heads), full_attention_interval %d",
                       path, hp->n_ff_shexp, hp->ssm_d_conv, hp->ssm_state, hp->ssm_groups, hp->ssm_vheads,
                       hp->full_attn_interval);
    if ((int64_t)inner != (int64_t)hp->ssm_state * hp->ssm_vheads)
        return qw_fail(err, "%s: ssm.inner_size %d != state_size %d x time_step_rank %d", path, inner, hp->ssm_state,
                       hp->ssm_vheads);
    return 0;
}

/* Fused variants llama.cpp's converter can write on request; named so the
 * user knows which conversion flag to leave out. */
static int refuse_fused(const qw_gguf *g, int il, const char *suffix, const char *flag, qw_error *err) {
    char nm[96];
    snprintf(nm, sizeof nm, "blk.%d.%s.weight", il, suffix);
    if (!qw_gguf_find_tensor(g, nm)) return 0;
    return qw_fail(err, "%s: fused tensor '%s' is not supported yet (convert without %s)", qw_gguf_path(g), nm, flag);
}

int qw_qwen35moe_bind_layer(const qw_gguf *g, const qw_hparams *hp, int il, qw_layer *L, qw_error *err) {
    char nm[96];
    const int64_t E = hp->n_embd, D = hp->head_dim, H = hp->n_head, HKV = hp->n_head_kv;
    const int64_t X = hp->n_expert, F = hp->n_ff_exp, FS = hp->n_ff_shexp, S = hp->ssm_state;
    const int64_t KD = S * hp->ssm_groups, VD = S * hp->ssm_vheads, C = 2 * KD + VD, HV = hp->ssm_vheads;
#define B(field, name, nd, dims, f32)                                                  \
    do {                                                                               \
        snprintf(nm, sizeof nm, "blk.%d.%s", il, name);                                \
        if (qw_model_bind_tensor(g, &L->field, nm, nd, dims, f32, err)) return -1;     \
    } while (0)
    L->recurrent = (il + 1) % hp->full_attn_interval != 0;
    B(attn_norm, "attn_norm.weight", 1, DIMS(E), true);
    B(ffn_norm, "post_attention_norm.weight", 1, DIMS(E), true);
    if (!L->recurrent) {
        if (refuse_fused(g, il, "attn_qkv", "--fuse-qkv", err)) return -1;
        L->gated_attn = true;
        B(wq, "attn_q.weight", 2, DIMS(E, 2 * H * D), false);
        B(wk, "attn_k.weight", 2, DIMS(E, HKV * D), false);
        B(wv, "attn_v.weight", 2, DIMS(E, HKV * D), false);
        B(wo, "attn_output.weight", 2, DIMS(H * D, E), false);
        B(q_norm, "attn_q_norm.weight", 1, DIMS(D), true);
        B(k_norm, "attn_k_norm.weight", 1, DIMS(D), true);
    } else {
        B(wqkv, "attn_qkv.weight", 2, DIMS(E, C), false);
        B(wz, "attn_gate.weight", 2, DIMS(E, VD), false);
        B(conv1d, "ssm_conv1d.weight", 2, DIMS(hp->ssm_d_conv, C), true);
        B(dt_bias, "ssm_dt.bias", 1, DIMS(HV), true);
        B(ssm_a, "ssm_a", 1, DIMS(HV), true);
        B(w_beta, "ssm_beta.weight", 2, DIMS(E, HV), false);
        B(w_alpha, "ssm_alpha.weight", 2, DIMS(E, HV), false);
        B(ssm_norm, "ssm_norm.weight", 1, DIMS(S), true);
        B(ssm_out, "ssm_out.weight", 2, DIMS(VD, E), false);
    }
    if (refuse_fused(g, il, "ffn_gate_up_exps", "--fuse-gate-up-exps", err)) return -1;
    B(gate_inp, "ffn_gate_inp.weight", 2, DIMS(E, X), false);
    B(gate_exps, "ffn_gate_exps.weight", 3, DIMS(E, F, X), false);
    B(up_exps, "ffn_up_exps.weight", 3, DIMS(E, F, X), false);
    B(down_exps, "ffn_down_exps.weight", 3, DIMS(F, E, X), false);
    B(shexp_gate, "ffn_gate_inp_shexp.weight", 1, DIMS(E), false);
    B(gate_shexp, "ffn_gate_shexp.weight", 2, DIMS(E, FS), false);
    B(up_shexp, "ffn_up_shexp.weight", 2, DIMS(E, FS), false);
    B(down_shexp, "ffn_down_shexp.weight", 2, DIMS(FS, E), false);
#undef B
    return 0;
}
