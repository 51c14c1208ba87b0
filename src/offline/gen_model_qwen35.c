/* gen_model_qwen35.c — the qwen35moe part of `gen-model`: default shape
 * fields, shape checks, metadata keys and the tensor plan (names and dims as
 * llama.cpp's qwen35moe loader reads them; docs/qwen35moe.md).
 *
 * Scales follow gen_model.c's principles (branches write entries of std ~4
 * into the residual, logits of std ~6, sharp attention, a router with std ~3),
 * extended to the DeltaNet and shared-expert tensors: conv taps U[-0.6, 0.6],
 * decay rates A = -U[0.3, 1.5] with dt bias U[-1, 1] (per-token decays mostly
 * 0.3..0.9), beta logits of std 1, a shared-expert gate logit of std 1.
 * Measured with llama.cpp on 3 shapes (tests/peers/t_parity_qwen35.sh):
 * greedy continuations differ per prompt and argmax margins sit well above
 * float noise.
 */
#include "gen_model_plan.h"

#include "qwisp/quant.h"
#include "qwisp/gguf_meta.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void qw_gen_model_fill_qwen35(qw_gen_model_params *p) {
    if (!p->n_rot) p->n_rot = p->head_dim >= 8 ? (p->head_dim / 4) & ~1 : p->head_dim;
    if (!p->n_ff_shexp) p->n_ff_shexp = p->n_ff_exp;
    if (!p->ssm_d_conv) p->ssm_d_conv = 4;
    if (!p->ssm_state) p->ssm_state = p->head_dim;
    if (!p->ssm_groups) p->ssm_groups = p->n_head_kv;
    if (!p->ssm_vheads) p->ssm_vheads = 2 * p->ssm_groups;
    if (!p->full_attn_interval) p->full_attn_interval = 4;
}

int qw_gen_validate_qwen35(const qw_gen_model_params *p, qw_error *err) {
    struct {
        const char *flag;
        int v, lo, hi;
    } ranges[] = {
        {"--n-rot", p->n_rot, 2, p->head_dim},          {"--n-ff-shexp", p->n_ff_shexp, 1, 1 << 20},
        {"--ssm-conv", p->ssm_d_conv, 1, 64},           {"--ssm-state", p->ssm_state, 1, 1024},
        {"--ssm-groups", p->ssm_groups, 1, 1024},       {"--ssm-vheads", p->ssm_vheads, 1, 4096},
        {"--attn-interval", p->full_attn_interval, 1, 1024},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        if (ranges[i].v < ranges[i].lo || ranges[i].v > ranges[i].hi)
            return qw_fail(err, "%s %d: must be in [%d, %d]", ranges[i].flag, ranges[i].v, ranges[i].lo,
                           ranges[i].hi);
    if (p->n_rot % 2) return qw_fail(err, "--n-rot %d: must be even (RoPE rotates pairs)", p->n_rot);
    if (p->ssm_vheads % p->ssm_groups)
        return qw_fail(err, "--ssm-vheads %d: must be a multiple of --ssm-groups %d", p->ssm_vheads, p->ssm_groups);
    /* rows the quantized matrices get beyond qwen3moe's: ssm_out's
     * (vheads*state) and the shared expert's down (n_ff_shexp) */
    const int blk = qw_gen_is_kquant(p->type) ? 256 : qw_gen_is_block_type(p->type) ? 32 : 1;
    if ((p->ssm_state * p->ssm_vheads) % blk)
        return qw_fail(err, "--ssm-state %d: state x vheads (%d) must be a multiple of %d for type %s", p->ssm_state,
                       p->ssm_state * p->ssm_vheads, blk, qw_gen_type_name(p->type));
    if (p->n_ff_shexp % blk)
        return qw_fail(err, "--n-ff-shexp %d: must be a multiple of %d for type %s", p->n_ff_shexp, blk,
                       qw_gen_type_name(p->type));
    return 0;
}

void qw_gen_meta_qwen35(qw_gguf_writer *w, const qw_gen_model_params *p) {
    /* text only: every M-RoPE section sees the same position, so any split of
     * n_rot/2 is plain NeoX RoPE over the first n_rot dims */
    const int32_t half = p->n_rot / 2, s0 = (half + 2) / 3, s1 = (half + 1) / 3;
    qw_qwen35moe_hparams hp = {
        .name = p->name ? p->name : "qwisp-synthetic-qwen35moe",
        .file_type = qw_gguf_file_type(p->type),
        .n_ctx = p->n_ctx, .n_embd = p->n_embd, .n_layer = p->n_layer, .n_ff = p->n_ff_exp * p->n_expert_used,
        .n_head = p->n_head, .n_head_kv = p->n_head_kv, .head_dim = p->head_dim, .n_rot = p->n_rot,
        .n_expert = p->n_expert, .n_expert_used = p->n_expert_used, .n_ff_exp = p->n_ff_exp,
        .n_ff_shexp = p->n_ff_shexp, .ssm_d_conv = p->ssm_d_conv, .ssm_state = p->ssm_state,
        .ssm_groups = p->ssm_groups, .ssm_vheads = p->ssm_vheads, .full_attn_interval = p->full_attn_interval,
        .rope_sections = {s0, s1, half - s0 - s1, 0}, .rope_base = p->rope_base, .rms_eps = p->rms_eps,
    };
    qw_qwen35moe_set_metadata(w, &hp);
}

void qw_gen_plan_qwen35(gen_ctx *c, const qw_gen_model_params *p, uint64_t V) {
    const uint64_t E = (uint64_t)p->n_embd, D = (uint64_t)p->head_dim, H = (uint64_t)p->n_head;
    const uint64_t HKV = (uint64_t)p->n_head_kv, X = (uint64_t)p->n_expert, F = (uint64_t)p->n_ff_exp;
    const uint64_t FS = (uint64_t)p->n_ff_shexp, S = (uint64_t)p->ssm_state;
    const uint64_t KD = S * (uint64_t)p->ssm_groups, VD = S * (uint64_t)p->ssm_vheads, C = 2 * KD + VD;
    const uint64_t HV = (uint64_t)p->ssm_vheads;
    const float in_std = 1.0f / sqrtf((float)E), e_std = 6.0f / sqrtf((float)E);
    const uint32_t T = p->type, F32 = QW_TYPE_F32;
    char nm[64];
    c->t = qw_xcalloc(3 + 24 * (size_t)p->n_layer, sizeof *c->t);
    qw_gen_plan_add(c, "token_embd.weight", p->embd_type, 2, E, V, 1, INIT_NORMAL, 0, e_std);
    qw_gen_plan_add(c, "output_norm.weight", F32, 1, E, 1, 1, INIT_UNIFORM, 0.8f, 1.2f);
    if (!p->tied) qw_gen_plan_add(c, "output.weight", p->embd_type, 2, E, V, 1, INIT_NORMAL, 0, e_std);
    for (int l = 0; l < p->n_layer; l++) {
        const bool recurrent = (l + 1) % p->full_attn_interval != 0;
#define NM(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
        qw_gen_plan_add(c, NM("attn_norm.weight"), F32, 1, E, 1, 1, INIT_UNIFORM, 0.7f, 1.3f);
        qw_gen_plan_add(c, NM("post_attention_norm.weight"), F32, 1, E, 1, 1, INIT_UNIFORM, 0.7f, 1.3f);
        if (!recurrent) {
            qw_gen_plan_add(c, NM("attn_q.weight"), T, 2, E, 2 * H * D, 1, INIT_NORMAL, 0, in_std);
            qw_gen_plan_add(c, NM("attn_k.weight"), T, 2, E, HKV * D, 1, INIT_NORMAL, 0, in_std);
            qw_gen_plan_add(c, NM("attn_v.weight"), T, 2, E, HKV * D, 1, INIT_NORMAL, 0, in_std);
            qw_gen_plan_add(c, NM("attn_output.weight"), T, 2, H * D, E, 1, INIT_NORMAL, 0,
                            8.0f / sqrtf((float)(H * D)));
            qw_gen_plan_add(c, NM("attn_q_norm.weight"), F32, 1, D, 1, 1, INIT_UNIFORM, 2.0f, 3.0f);
            qw_gen_plan_add(c, NM("attn_k_norm.weight"), F32, 1, D, 1, 1, INIT_UNIFORM, 2.0f, 3.0f);
        } else {
            qw_gen_plan_add(c, NM("attn_qkv.weight"), T, 2, E, C, 1, INIT_NORMAL, 0, in_std);
            qw_gen_plan_add(c, NM("attn_gate.weight"), T, 2, E, VD, 1, INIT_NORMAL, 0, 2.0f * in_std);
            qw_gen_plan_add(c, NM("ssm_conv1d.weight"), F32, 2, (uint64_t)p->ssm_d_conv, C, 1, INIT_UNIFORM, -0.6f,
                            0.6f);
            qw_gen_plan_add(c, NM("ssm_dt.bias"), F32, 1, HV, 1, 1, INIT_UNIFORM, -1.0f, 1.0f);
            qw_gen_plan_add(c, NM("ssm_a"), F32, 1, HV, 1, 1, INIT_UNIFORM, -1.5f, -0.3f);
            qw_gen_plan_add(c, NM("ssm_beta.weight"), T, 2, E, HV, 1, INIT_NORMAL, 0, in_std);
            qw_gen_plan_add(c, NM("ssm_alpha.weight"), T, 2, E, HV, 1, INIT_NORMAL, 0, in_std);
            qw_gen_plan_add(c, NM("ssm_norm.weight"), F32, 1, S, 1, 1, INIT_UNIFORM, 0.7f, 1.3f);
            qw_gen_plan_add(c, NM("ssm_out.weight"), T, 2, VD, E, 1, INIT_NORMAL, 0, 8.0f / sqrtf((float)VD));
        }
        qw_gen_plan_add(c, NM("ffn_gate_inp.weight"), F32, 2, E, X, 1, INIT_NORMAL, 0, 3.0f * in_std);
        qw_gen_plan_add(c, NM("ffn_gate_exps.weight"), T, 3, E, F, X, INIT_NORMAL, 0, in_std);
        qw_gen_plan_add(c, NM("ffn_up_exps.weight"), T, 3, E, F, X, INIT_NORMAL, 0, in_std);
        qw_gen_plan_add(c, NM("ffn_down_exps.weight"), T, 3, F, E, X, INIT_NORMAL, 0, 8.0f / sqrtf((float)F));
        qw_gen_plan_add(c, NM("ffn_gate_inp_shexp.weight"), F32, 1, E, 1, 1, INIT_NORMAL, 0, in_std);
        qw_gen_plan_add(c, NM("ffn_gate_shexp.weight"), T, 2, E, FS, 1, INIT_NORMAL, 0, in_std);
        qw_gen_plan_add(c, NM("ffn_up_shexp.weight"), T, 2, E, FS, 1, INIT_NORMAL, 0, in_std);
        qw_gen_plan_add(c, NM("ffn_down_shexp.weight"), T, 2, FS, E, 1, INIT_NORMAL, 0, 8.0f / sqrtf((float)FS));
#undef NM
    }
}
