/* convert_qwen3moe.c — Qwen3MoeForCausalLM checkpoint -> qwen3moe GGUF.
 *
 * What it owns: reading a Qwen3-MoE config.json and the HF -> GGUF tensor
 * mapping for it (the shared machinery is convert.c's, the metadata keys are
 * gguf_meta.c's, shared with gen_model.c).
 *
 * Mapping (HF name, PyTorch shape -> GGUF name, ggml ne; ne[0] is the row):
 *   model.embed_tokens.weight [V, E]              -> token_embd [E, V]
 *   model.norm.weight [E]                         -> output_norm (F32)
 *   lm_head.weight [V, E]                         -> output [E, V] (absent when tied)
 *   model.layers.L.input_layernorm [E]            -> blk.L.attn_norm (F32)
 *   ….self_attn.{q,k,v}_proj [n*hd, E]            -> blk.L.attn_{q,k,v} [E, n*hd]
 *   ….self_attn.o_proj [E, nq]                    -> blk.L.attn_output [nq, E]
 *   ….self_attn.{q,k}_norm [hd]                   -> blk.L.attn_{q,k}_norm (F32)
 *   ….post_attention_layernorm [E]                -> blk.L.ffn_norm (F32)
 *   ….mlp.gate [X, E]                             -> blk.L.ffn_gate_inp [E, X] (F32)
 *   ….mlp.experts.x.{gate,up}_proj [F, E], x<X    -> blk.L.ffn_{gate,up}_exps [E, F, X]
 *   ….mlp.experts.x.down_proj [E, F]              -> blk.L.ffn_down_exps [F, E, X]
 * The merged layout of transformers 5 (mlp.experts.gate_up_proj [X, 2F, E],
 * gate rows first, and mlp.experts.down_proj [X, E, F]) is read too.
 *
 * Refusals, each with its own message: config features qwisp's forward does
 * not implement (dense MLP layers, attention bias, sliding window, rope
 * scaling), a missing tensor, a tensor of the wrong shape, a dtype other than
 * F32/F16/BF16, and any checkpoint tensor the mapping does not consume.
 */
#include "convert_int.h"

#include "qwisp/quant.h"
#include "qwisp/gguf_meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CV_ARCH "Qwen3MoeForCausalLM"

typedef struct cv_config {
    qw_qwen3moe_hparams hp;
    long vocab, bos, eos;
    bool tied;
} cv_config;

static int read_config(const cJSON *c, const char *cpath, cv_config *cfg, qw_error *err) {
    long v[6];
    const char *keys[] = {"hidden_size", "num_hidden_layers", "num_attention_heads", "moe_intermediate_size",
                          "num_experts_per_tok", "vocab_size"};
    for (int i = 0; i < 6; i++)
        if (qw_cv_cfg_int(c, cpath, keys[i], -1, &v[i], err)) return -1;
    cv_config k = {.vocab = v[5]};
    k.hp.n_embd = (int)v[0];
    k.hp.n_layer = (int)v[1];
    k.hp.n_head = (int)v[2];
    k.hp.n_ff_exp = (int)v[3];
    k.hp.n_expert_used = (int)v[4];
    long x;
    /* transformers 5 writes num_local_experts, earlier versions num_experts */
    const char *ek = qw_cv_cfg_get(c, "num_experts") ? "num_experts" : "num_local_experts";
    if (qw_cv_cfg_int(c, cpath, ek, -1, &x, err)) return -1;
    k.hp.n_expert = (int)x;
    if (qw_cv_cfg_int(c, cpath, "num_key_value_heads", v[2], &x, err)) return -1;
    k.hp.n_head_kv = (int)x;
    if (k.hp.n_head == 0) return qw_fail(err, "%s: num_attention_heads is 0", cpath);
    if (qw_cv_cfg_int(c, cpath, "head_dim", v[0] / v[2], &x, err)) return -1;
    k.hp.head_dim = (int)x;
    if (qw_cv_cfg_int(c, cpath, "intermediate_size", v[3] * v[4], &x, err)) return -1;
    k.hp.n_ff = (int)x;
    if (qw_cv_cfg_int(c, cpath, "max_position_embeddings", 40960, &x, err)) return -1;
    k.hp.n_ctx = (int)x;
    if (qw_cv_cfg_int(c, cpath, "bos_token_id", 0x7fffffff, &k.bos, err)) return -1;
    if (qw_cv_cfg_int(c, cpath, "eos_token_id", 0x7fffffff, &k.eos, err)) k.eos = 0x7fffffff; /* may be a list */
    const cJSON *j;
    k.hp.rms_eps = (j = qw_cv_cfg_get(c, "rms_norm_eps")) && cJSON_IsNumber(j) ? (float)j->valuedouble : 1e-6f;
    k.tied = (j = qw_cv_cfg_get(c, "tie_word_embeddings")) && cJSON_IsTrue(j);
    /* rope: rope_theta (transformers 4) or rope_parameters.rope_theta (5) */
    const cJSON *rp = qw_cv_cfg_get(c, "rope_parameters");
    const cJSON *rs = qw_cv_cfg_get(c, "rope_scaling");
    const cJSON *rt = qw_cv_cfg_get(c, "rope_theta");
    if (!rt && cJSON_IsObject(rp)) rt = qw_cv_cfg_get(rp, "rope_theta");
    k.hp.rope_base = cJSON_IsNumber(rt) ? (float)rt->valuedouble : 10000.0f;
    const cJSON *scal = cJSON_IsObject(rs) ? rs : (cJSON_IsObject(rp) ? rp : NULL);
    if (scal) {
        const cJSON *ty = qw_cv_cfg_get(scal, "rope_type");
        if (!ty) ty = qw_cv_cfg_get(scal, "type");
        if (cJSON_IsString(ty) && strcmp(ty->valuestring, "default") != 0)
            return qw_fail(err, "%s: rope scaling type '%s' is not supported (only default rope)", cpath,
                           ty->valuestring);
    }
    const cJSON *mo = qw_cv_cfg_get(c, "mlp_only_layers");
    long step = 1;
    if (qw_cv_cfg_int(c, cpath, "decoder_sparse_step", 1, &step, err)) return -1;
    if ((cJSON_IsArray(mo) && cJSON_GetArraySize(mo) > 0) || step != 1)
        return qw_fail(err, "%s: dense MLP layers (mlp_only_layers / decoder_sparse_step %ld) are not supported",
                       cpath, step);
    if ((j = qw_cv_cfg_get(c, "attention_bias")) && cJSON_IsTrue(j))
        return qw_fail(err, "%s: attention_bias true is not supported", cpath);
    if ((j = qw_cv_cfg_get(c, "use_sliding_window")) && cJSON_IsTrue(j))
        return qw_fail(err, "%s: use_sliding_window true is not supported", cpath);
    if ((j = qw_cv_cfg_get(c, "hidden_act")) && cJSON_IsString(j) && strcmp(j->valuestring, "silu") != 0)
        return qw_fail(err, "%s: hidden_act '%s' is not supported (silu)", cpath, j->valuestring);
    if (k.hp.n_embd <= 0 || k.hp.n_layer <= 0 || k.hp.n_head_kv <= 0 || k.hp.n_head % k.hp.n_head_kv ||
        k.hp.head_dim <= 0 || k.hp.n_expert <= 0 || k.hp.n_expert_used <= 0 ||
        k.hp.n_expert_used > k.hp.n_expert || k.hp.n_ff_exp <= 0 || k.vocab <= 0)
        return qw_fail(err,
                       "%s: inconsistent sizes (hidden %d, layers %d, heads %d/%d, head_dim %d, experts %d top %d, "
                       "moe ff %d, vocab %ld)",
                       cpath, k.hp.n_embd, k.hp.n_layer, k.hp.n_head, k.hp.n_head_kv, k.hp.head_dim, k.hp.n_expert,
                       k.hp.n_expert_used, k.hp.n_ff_exp, k.vocab);
    *cfg = k;
    return 0;
}

static int plan(qw_cv_ctx *c, const cv_config *k, uint32_t type, qw_error *err) {
    const int64_t E = k->hp.n_embd, hd = k->hp.head_dim, V = k->vocab;
    const int64_t nq = hd * k->hp.n_head, nkv = hd * k->hp.n_head_kv;
    const uint32_t F32 = QW_TYPE_F32;
    if (!qw_cv_add_plain(c, "token_embd.weight", "model.embed_tokens.weight", type, E, V, err)) return -1;
    if (!qw_cv_add_plain(c, "output_norm.weight", "model.norm.weight", F32, E, 0, err)) return -1;
    const qw_st_tensor *lm = qw_safetensors_find(c->st, "lm_head.weight");
    if (!k->tied) {
        if (!qw_cv_add_plain(c, "output.weight", "lm_head.weight", type, E, V, err)) return -1;
    } else if (lm) {
        qw_cv_mark_used(c, lm); /* tied: a copy of the embedding */
    }
    for (int l = 0; l < k->hp.n_layer; l++) {
        char g[64], h[128], lp[64];
#define MAP(gs, hs, ty, a, b)                                                                  \
    do {                                                                                       \
        snprintf(g, sizeof g, "blk.%d." gs ".weight", l);                                      \
        snprintf(h, sizeof h, "model.layers.%d." hs ".weight", l);                             \
        if (!qw_cv_add_plain(c, g, h, ty, a, b, err)) return -1;                               \
    } while (0)
        MAP("attn_norm", "input_layernorm", F32, E, 0);
        MAP("attn_q", "self_attn.q_proj", type, E, nq);
        MAP("attn_k", "self_attn.k_proj", type, E, nkv);
        MAP("attn_v", "self_attn.v_proj", type, E, nkv);
        MAP("attn_output", "self_attn.o_proj", type, nq, E);
        MAP("attn_q_norm", "self_attn.q_norm", F32, hd, 0);
        MAP("attn_k_norm", "self_attn.k_norm", F32, hd, 0);
        MAP("ffn_norm", "post_attention_layernorm", F32, E, 0);
        MAP("ffn_gate_inp", "mlp.gate", F32, E, k->hp.n_expert);
#undef MAP
        snprintf(lp, sizeof lp, "model.layers.%d.", l);
        if (qw_cv_add_experts(c, lp, l, E, k->hp.n_ff_exp, k->hp.n_expert, type, err)) return -1;
    }
    return qw_cv_check_plan(c, NULL, err);
}

static void meta(qw_gguf_writer *w, const void *arg, const char *name, uint32_t file_type) {
    qw_qwen3moe_hparams hp = ((const cv_config *)arg)->hp;
    hp.name = name;
    hp.file_type = file_type;
    qw_qwen3moe_set_metadata(w, &hp);
}

int qw_cv_qwen3moe(const char *dir, const cJSON *cfg, const char *cpath, const qw_convert_opts *o,
                   qw_error *err) {
    cv_config k;
    if (read_config(cfg, cpath, &k, err)) return -1;
    qw_cv_ctx c = {.dir = dir, .arch = CV_ARCH};
    int rc = -1;
    if (!(c.st = qw_safetensors_open_dir(dir, err))) goto out;
    c.used = qw_xcalloc(qw_safetensors_n_tensors(c.st) + 1, sizeof *c.used);
    uint32_t type = o->type == QW_CONVERT_TYPE_AUTO ? qw_cv_auto_type(c.st, "model.embed_tokens.weight") : o->type;
    if (!qw_type_supported(type)) {
        qw_fail(err, "convert: output type %u is not supported", type);
        goto out;
    }
    if (plan(&c, &k, type, err)) goto out;
    rc = qw_cv_finish(&c, o, type, k.vocab, k.bos, k.eos, meta, &k, err);
out:
    qw_cv_ctx_free(&c);
    return rc;
}
