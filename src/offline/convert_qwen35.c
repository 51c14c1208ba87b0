/* convert_qwen35.c — Qwen3_5MoeForCausalLM / Qwen3_5MoeForConditionalGeneration
 * checkpoint -> qwen35moe GGUF (docs/qwen35moe.md, "Converting a Hugging Face
 * checkpoint").
 *
 * What it owns: reading a Qwen3.5-MoE config.json (plain text-only form, or
 * the published multimodal form whose text model sits under "text_config";
 * its keys override the root's, as llama.cpp merges them), the HF -> GGUF
 * tensor mapping with its transforms, and the qwen35moe metadata keys.  The
 * keys and tensors are the ones llama.cpp's convert_hf_to_gguf.py writes for
 * this architecture with MTP left out, except that the layer pattern is
 * always written as qwen35moe.full_attention_interval (derived from
 * layer_types, which must follow it) and never as the equivalent
 * attention.recurrent_layers array.
 *
 * Mapping (P = "model." or "model.language_model."; PyTorch shape -> ggml ne):
 *   P embed_tokens [V, E] -> token_embd [E, V];  lm_head [V, E] -> output (absent when tied)
 *   P norm, L.input_layernorm, L.post_attention_layernorm, L.self_attn.{q,k}_norm
 *       -> output_norm, blk.L.attn_norm, blk.L.post_attention_norm, blk.L.attn_{q,k}_norm,
 *          F32, w + 1 (HF's RMSNorm multiplies by 1 + w)
 *   full attention: self_attn.q_proj [2HD, E] -> attn_q (per head D query then D gate rows,
 *       already llama.cpp's layout), {k,v}_proj -> attn_{k,v}, o_proj -> attn_output
 *   linear attention (Hk key heads, Hv value heads of S dims):
 *       in_proj_qkv [2HkS + HvS, E] -> attn_qkv,  in_proj_z [HvS, E] -> attn_gate,
 *       conv1d [C, 1, K] -> ssm_conv1d [K, C] F32,  dt_bias [Hv] -> ssm_dt.bias F32,
 *       A_log [Hv] -> ssm_a = -exp(A_log) F32,  in_proj_b / in_proj_a [Hv, E] -> ssm_beta / ssm_alpha,
 *       norm [S] -> ssm_norm F32 (not zero-centred: no + 1),  out_proj [E, HvS] -> ssm_out [HvS, E]
 *     When Hv > Hk the value heads are reordered from HF's grouped order (value head
 *     k·r + v uses key head k, r = Hv/Hk) to the tiled order llama.cpp's kernels
 *     broadcast with (new head v·Hk + k): the v rows of in_proj_qkv and conv1d, the
 *     rows of in_proj_z / in_proj_b / in_proj_a, the entries of dt_bias and A_log and
 *     the columns of out_proj.
 *   mlp.gate [X, E] -> ffn_gate_inp F32;  experts (per-expert or merged) -> ffn_{gate,up,down}_exps;
 *   mlp.shared_expert_gate [1, E] -> ffn_gate_inp_shexp [E, 1] F32;
 *   mlp.shared_expert.{gate,up,down}_proj -> ffn_{gate,up,down}_shexp
 * Left out on purpose: mtp.* (multi-token prediction), model.visual.* (vision tower).
 */
#include "convert_int.h"

#include "qwisp/quant.h"
#include "qwisp/gguf_meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct q35_config {
    long vocab, bos, eos, n_ctx, n_ff; /* n_ctx, n_ff: -1 when config.json has none */
    int E, L, H, HKV, D, n_rot, X, K, F, FS, d_conv, S, HK, HV, interval;
    float rope_base, rms_eps;
    int32_t sections[4];
    bool tied;
    const char *arch;
} q35_config;

/* {**root, **root["text_config"]} */
static cJSON *merged_config(const cJSON *root) {
    cJSON *m = cJSON_Duplicate(root, 1);
    const cJSON *tc = qw_cv_cfg_get(root, "text_config");
    if (!cJSON_IsObject(tc)) return m;
    for (const cJSON *it = tc->child; it; it = it->next) {
        cJSON_DeleteItemFromObjectCaseSensitive(m, it->string);
        cJSON_AddItemToObject(m, it->string, cJSON_Duplicate(it, 1));
    }
    return m;
}

static const cJSON *rope_key(const cJSON *c, const cJSON *rp, const char *key) {
    const cJSON *j = rp ? qw_cv_cfg_get(rp, key) : NULL;
    return j ? j : qw_cv_cfg_get(c, key);
}

static int read_rope(const cJSON *c, const char *cpath, q35_config *k, qw_error *err) {
    const cJSON *rp = qw_cv_cfg_get(c, "rope_parameters");
    if (!cJSON_IsObject(rp)) rp = qw_cv_cfg_get(c, "rope_scaling");
    if (!cJSON_IsObject(rp)) rp = NULL;
    const cJSON *ty = rp ? qw_cv_cfg_get(rp, "rope_type") : NULL;
    if (!ty && rp) ty = qw_cv_cfg_get(rp, "type");
    if (cJSON_IsString(ty) && strcmp(ty->valuestring, "default") != 0 && strcmp(ty->valuestring, "mrope") != 0)
        return qw_fail(err, "%s: rope type '%s' is not supported (only default (M-)RoPE)", cpath, ty->valuestring);
    const cJSON *j = rope_key(c, rp, "rope_theta");
    k->rope_base = cJSON_IsNumber(j) ? (float)j->valuedouble : 10000.0f;
    j = rope_key(c, rp, "partial_rotary_factor");
    const double prf = cJSON_IsNumber(j) ? j->valuedouble : 0.25;
    k->n_rot = (int)(k->D * prf);
    if (k->n_rot <= 0 || k->n_rot > k->D || k->n_rot % 2)
        return qw_fail(err, "%s: partial_rotary_factor %g gives %d rotated dims of head_dim %d (need an even "
                            "count in 2..head_dim)", cpath, prf, k->n_rot, k->D);
    const int32_t def[4] = {11, 11, 10, 0};
    memcpy(k->sections, def, sizeof def);
    j = rp ? qw_cv_cfg_get(rp, "mrope_section") : NULL;
    if (j) {
        int n = cJSON_IsArray(j) ? cJSON_GetArraySize(j) : -1;
        if (n < 1 || n > 4) return qw_fail(err, "%s: mrope_section must be an array of 1 to 4 integers", cpath);
        for (int i = 0; i < 4; i++) {
            const cJSON *e = i < n ? cJSON_GetArrayItem(j, i) : NULL;
            if (e && (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e6))
                return qw_fail(err, "%s: mrope_section[%d] is not a non-negative integer", cpath, i);
            k->sections[i] = e ? (int32_t)e->valuedouble : 0;
        }
    }
    return 0;
}

/* The layer pattern: layer_types (each "linear_attention" or "full_attention") must
 * be the one full_attention_interval n describes (layer l is full iff (l+1) % n == 0). */
static int read_layer_types(const cJSON *c, const char *cpath, q35_config *k, qw_error *err) {
    const cJSON *lt = qw_cv_cfg_get(c, "layer_types");
    long iv;
    if (!lt) {
        if (qw_cv_cfg_int(c, cpath, "full_attention_interval", 4, &iv, err)) return -1;
        if (iv < 1) return qw_fail(err, "%s: full_attention_interval must be >= 1", cpath);
        k->interval = (int)iv;
        return 0;
    }
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != k->L)
        return qw_fail(err, "%s: layer_types must be an array of num_hidden_layers (%d) strings", cpath, k->L);
    int first_full = -1;
    for (int l = 0; l < k->L; l++) {
        const cJSON *e = cJSON_GetArrayItem(lt, l);
        const char *s = cJSON_IsString(e) ? e->valuestring : "?";
        if (strcmp(s, "linear_attention") != 0 && strcmp(s, "full_attention") != 0)
            return qw_fail(err, "%s: layer_types[%d] is '%s' (expected linear_attention or full_attention)",
                           cpath, l, s);
        if (first_full < 0 && !strcmp(s, "full_attention")) first_full = l;
    }
    k->interval = first_full < 0 ? k->L + 1 : first_full + 1;
    for (int l = 0; l < k->L; l++) {
        const bool full = !strcmp(cJSON_GetArrayItem(lt, l)->valuestring, "full_attention");
        if (full != ((l + 1) % k->interval == 0))
            return qw_fail(err, "%s: layer_types[%d] is '%s', which breaks the pattern of the layers before it "
                                "(full attention every %d layers); qwisp runs only that periodic pattern", cpath, l,
                           full ? "full_attention" : "linear_attention", k->interval);
    }
    return 0;
}

static int read_config(const cJSON *root, const char *cpath, const char *arch, q35_config *out, qw_error *err) {
    cJSON *c = merged_config(root);
    q35_config k = {.arch = arch};
    int rc = -1;
    static const char *const keys[] = {
        "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
        "num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
        "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
        "linear_num_value_heads"};
    long v[14], x;
    for (int i = 0; i < 14; i++)
        if (qw_cv_cfg_int(c, cpath, keys[i], -1, &v[i], err)) goto out;
    k.E = (int)v[0], k.L = (int)v[1], k.H = (int)v[2], k.HKV = (int)v[3], k.vocab = v[4];
    k.X = (int)v[5], k.K = (int)v[6], k.F = (int)v[7], k.FS = (int)v[8], k.d_conv = (int)v[9];
    k.S = (int)v[10], k.HK = (int)v[12], k.HV = (int)v[13];
    if (v[10] != v[11]) {
        qw_fail(err, "%s: linear_key_head_dim %ld != linear_value_head_dim %ld is not supported", cpath, v[10],
                v[11]);
        goto out;
    }
    if (k.H == 0 || k.HKV == 0 || k.HK == 0 || k.E == 0 || k.L == 0 || k.H % k.HKV || k.HV % k.HK || k.X == 0 ||
        k.K == 0 || k.K > k.X || k.F == 0 || k.FS == 0 || k.d_conv == 0 || k.S == 0 || k.vocab == 0) {
        qw_fail(err, "%s: inconsistent sizes (hidden %d, layers %d, heads %d/%d, experts %d top %d, ff %d/%d, "
                     "linear heads %d/%d of %d, conv %d, vocab %ld)", cpath, k.E, k.L, k.H, k.HKV, k.X, k.K, k.F,
                k.FS, k.HK, k.HV, k.S, k.d_conv, k.vocab);
        goto out;
    }
    if (qw_cv_cfg_int(c, cpath, "head_dim", k.E / k.H, &x, err)) goto out;
    k.D = (int)x;
    if (k.D == 0) {
        qw_fail(err, "%s: head_dim is 0", cpath);
        goto out;
    }
    if (qw_cv_cfg_int(c, cpath, "max_position_embeddings", 0x7fffffff, &k.n_ctx, err) ||
        qw_cv_cfg_int(c, cpath, "intermediate_size", 0x7fffffff, &k.n_ff, err) ||
        qw_cv_cfg_int(c, cpath, "bos_token_id", 0x7fffffff, &k.bos, err))
        goto out;
    if (k.n_ctx == 0x7fffffff) k.n_ctx = -1;
    if (k.n_ff == 0x7fffffff) k.n_ff = -1;
    if (qw_cv_cfg_int(c, cpath, "eos_token_id", 0x7fffffff, &k.eos, err)) k.eos = 0x7fffffff; /* may be a list */
    const cJSON *j;
    k.rms_eps = (j = qw_cv_cfg_get(c, "rms_norm_eps")) && cJSON_IsNumber(j) ? (float)j->valuedouble : 1e-6f;
    k.tied = (j = qw_cv_cfg_get(c, "tie_word_embeddings")) && cJSON_IsTrue(j);
    if (read_rope(c, cpath, &k, err) || read_layer_types(c, cpath, &k, err)) goto out;
    const cJSON *mo = qw_cv_cfg_get(c, "mlp_only_layers");
    long step;
    if (qw_cv_cfg_int(c, cpath, "decoder_sparse_step", 1, &step, err)) goto out;
    if ((cJSON_IsArray(mo) && cJSON_GetArraySize(mo) > 0) || step != 1) {
        qw_fail(err, "%s: dense MLP layers (mlp_only_layers / decoder_sparse_step %ld) are not supported", cpath,
                step);
        goto out;
    }
    if ((j = qw_cv_cfg_get(c, "attention_bias")) && cJSON_IsTrue(j)) {
        qw_fail(err, "%s: attention_bias true is not supported", cpath);
        goto out;
    }
    if ((j = qw_cv_cfg_get(c, "attn_output_gate")) && cJSON_IsFalse(j)) {
        qw_fail(err, "%s: attn_output_gate false is not supported (qwen35moe gates every attention output)", cpath);
        goto out;
    }
    if ((j = qw_cv_cfg_get(c, "hidden_act")) && cJSON_IsString(j) && strcmp(j->valuestring, "silu") != 0) {
        qw_fail(err, "%s: hidden_act '%s' is not supported (silu)", cpath, j->valuestring);
        goto out;
    }
    *out = k;
    rc = 0;
out:
    cJSON_Delete(c);
    return rc;
}

/* ---- plan ---------------------------------------------------------------- */

/* HF value head of GGUF value head n (see the header comment). */
static int64_t v_src(const q35_config *k, int64_t n) {
    return (n % k->HK) * (k->HV / k->HK) + n / k->HK;
}

static int32_t *head_perm(const q35_config *k, int64_t head_len) {
    int32_t *p = qw_xmalloc((size_t)(k->HV * head_len) * sizeof *p);
    for (int64_t n = 0; n < k->HV; n++)
        for (int64_t d = 0; d < head_len; d++) p[n * head_len + d] = (int32_t)(v_src(k, n) * head_len + d);
    return p;
}

/* q, k heads in order, then the value heads reordered: pieces of S rows of src. */
static qw_cv_tensor *add_qkv_rows(qw_cv_ctx *c, const char *g, const qw_st_tensor *s, const q35_config *k,
                                  uint32_t type, int64_t ne0) {
    const int64_t S = k->S, KD = (int64_t)k->HK * S;
    const int n_src = 2 * k->HK + k->HV;
    qw_cv_tensor *t = qw_cv_plan_add(c, g, type, 2, (uint64_t)ne0, (uint64_t)(n_src * S), 1, n_src, S);
    for (int i = 0; i < 2 * k->HK; i++) t->src[i] = (qw_cv_src){s, i * S};
    for (int n = 0; n < k->HV; n++) t->src[2 * k->HK + n] = (qw_cv_src){s, 2 * KD + v_src(k, n) * S};
    return t;
}

/* GGUF rows n = 0..Hv-1 (each `rows` rows of src) from HF value head v_src(n). */
static qw_cv_tensor *add_vhead_rows(qw_cv_ctx *c, const char *g, const qw_st_tensor *s, const q35_config *k,
                                    uint32_t type, int64_t ne0, int64_t rows) {
    qw_cv_tensor *t = qw_cv_plan_add(c, g, type, 2, (uint64_t)ne0, (uint64_t)(k->HV * rows), 1, k->HV, rows);
    for (int n = 0; n < k->HV; n++) t->src[n] = (qw_cv_src){s, v_src(k, n) * rows};
    return t;
}

static int plan_linear_attn(qw_cv_ctx *c, const char *lp, int l, const q35_config *k, uint32_t type,
                            qw_error *err) {
    const int64_t E = k->E, S = k->S, VD = (int64_t)k->HV * S, C = 2 * (int64_t)k->HK * S + VD;
    const uint32_t F32 = QW_TYPE_F32;
    char g[64], h[160];
    const qw_st_tensor *s;
    qw_cv_tensor *t;
#define HF(suffix) (snprintf(h, sizeof h, "%slinear_attn." suffix, lp), h)
#define GG(suffix) (snprintf(g, sizeof g, "blk.%d." suffix, l), g)
    if (!(s = qw_cv_need(c, HF("in_proj_qkv.weight"), 2, (int64_t[]){C, E}, err))) return -1;
    add_qkv_rows(c, GG("attn_qkv.weight"), s, k, type, E);
    if (!(s = qw_cv_need(c, HF("in_proj_z.weight"), 2, (int64_t[]){VD, E}, err))) return -1;
    add_vhead_rows(c, GG("attn_gate.weight"), s, k, type, E, S);
    const qw_st_tensor *cv = qw_safetensors_find(c->st, HF("conv1d.weight"));
    if (cv && cv->n_dims == 2)
        s = qw_cv_need(c, h, 2, (int64_t[]){C, k->d_conv}, err);
    else
        s = qw_cv_need(c, h, 3, (int64_t[]){C, 1, k->d_conv}, err);
    if (!s) return -1;
    add_qkv_rows(c, GG("ssm_conv1d.weight"), s, k, F32, k->d_conv);
    if (!(t = qw_cv_add_plain(c, GG("ssm_dt.bias"), HF("dt_bias"), F32, k->HV, 0, err))) return -1;
    t->col_perm = head_perm(k, 1);
    if (!(t = qw_cv_add_plain(c, GG("ssm_a"), HF("A_log"), F32, k->HV, 0, err))) return -1;
    t->col_perm = head_perm(k, 1);
    t->xform = QW_CV_X_NEG_EXP;
    if (!(s = qw_cv_need(c, HF("in_proj_b.weight"), 2, (int64_t[]){k->HV, E}, err))) return -1;
    add_vhead_rows(c, GG("ssm_beta.weight"), s, k, type, E, 1);
    if (!(s = qw_cv_need(c, HF("in_proj_a.weight"), 2, (int64_t[]){k->HV, E}, err))) return -1;
    add_vhead_rows(c, GG("ssm_alpha.weight"), s, k, type, E, 1);
    if (!qw_cv_add_plain(c, GG("ssm_norm.weight"), HF("norm.weight"), F32, S, 0, err)) return -1;
    if (!(t = qw_cv_add_plain(c, GG("ssm_out.weight"), HF("out_proj.weight"), type, VD, E, err))) return -1;
    t->col_perm = head_perm(k, S);
#undef HF
#undef GG
    return 0;
}

static int plan_layer(qw_cv_ctx *c, const char *P, int l, const q35_config *k, uint32_t type, qw_error *err) {
    const int64_t E = k->E, D = k->D, HD = (int64_t)k->H * k->D, KVD = (int64_t)k->HKV * k->D;
    const uint32_t F32 = QW_TYPE_F32;
    char g[64], h[160], lp[64];
    qw_cv_tensor *t;
    snprintf(lp, sizeof lp, "%slayers.%d.", P, l);
#define MAP(gs, hs, ty, a, b)                                                                  \
    (snprintf(g, sizeof g, "blk.%d." gs, l), snprintf(h, sizeof h, "%s" hs, lp),               \
     t = qw_cv_add_plain(c, g, h, ty, a, b, err))
    if (!MAP("attn_norm.weight", "input_layernorm.weight", F32, E, 0)) return -1;
    t->xform = QW_CV_X_PLUS_ONE;
    if (!MAP("post_attention_norm.weight", "post_attention_layernorm.weight", F32, E, 0)) return -1;
    t->xform = QW_CV_X_PLUS_ONE;
    if ((l + 1) % k->interval == 0) {
        if (!MAP("attn_q.weight", "self_attn.q_proj.weight", type, E, 2 * HD) ||
            !MAP("attn_k.weight", "self_attn.k_proj.weight", type, E, KVD) ||
            !MAP("attn_v.weight", "self_attn.v_proj.weight", type, E, KVD) ||
            !MAP("attn_output.weight", "self_attn.o_proj.weight", type, HD, E))
            return -1;
        if (!MAP("attn_q_norm.weight", "self_attn.q_norm.weight", F32, D, 0)) return -1;
        t->xform = QW_CV_X_PLUS_ONE;
        if (!MAP("attn_k_norm.weight", "self_attn.k_norm.weight", F32, D, 0)) return -1;
        t->xform = QW_CV_X_PLUS_ONE;
    } else if (plan_linear_attn(c, lp, l, k, type, err)) {
        return -1;
    }
    if (!MAP("ffn_gate_inp.weight", "mlp.gate.weight", F32, E, k->X)) return -1;
    if (qw_cv_add_experts(c, lp, l, E, k->F, k->X, type, err)) return -1;
    if (!MAP("ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", F32, E, 1) ||
        !MAP("ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", type, E, k->FS) ||
        !MAP("ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", type, E, k->FS) ||
        !MAP("ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", type, k->FS, E))
        return -1;
#undef MAP
    return 0;
}

static bool skip_tensor(const char *name) {
    static const char *const pre[] = {"mtp.", "model.mtp.", "model.visual.", "visual."};
    for (size_t i = 0; i < sizeof pre / sizeof *pre; i++)
        if (!strncmp(name, pre[i], strlen(pre[i]))) return true;
    return false;
}

static int plan(qw_cv_ctx *c, const char *P, const q35_config *k, uint32_t type, qw_error *err) {
    char h[96];
    qw_cv_tensor *t;
    snprintf(h, sizeof h, "%sembed_tokens.weight", P);
    if (!qw_cv_add_plain(c, "token_embd.weight", h, type, k->E, k->vocab, err)) return -1;
    snprintf(h, sizeof h, "%snorm.weight", P);
    if (!(t = qw_cv_add_plain(c, "output_norm.weight", h, QW_TYPE_F32, k->E, 0, err))) return -1;
    t->xform = QW_CV_X_PLUS_ONE;
    const qw_st_tensor *lm = qw_safetensors_find(c->st, "lm_head.weight");
    if (!k->tied) {
        if (!qw_cv_add_plain(c, "output.weight", "lm_head.weight", type, k->E, k->vocab, err)) return -1;
    } else if (lm) {
        qw_cv_mark_used(c, lm); /* tied: a copy of the embedding */
    }
    for (int l = 0; l < k->L; l++)
        if (plan_layer(c, P, l, k, type, err)) return -1;
    return qw_cv_check_plan(c, skip_tensor, err);
}

/* ---- metadata ------------------------------------------------------------ */

static void meta(qw_gguf_writer *w, const void *arg, const char *name, uint32_t file_type) {
    const q35_config *k = arg;
    qw_qwen35moe_hparams hp = {
        .name = name, .file_type = file_type, .n_ctx = (int)k->n_ctx, .n_embd = k->E, .n_layer = k->L,
        .n_ff = (int)k->n_ff, .n_head = k->H, .n_head_kv = k->HKV, .head_dim = k->D, .n_rot = k->n_rot,
        .n_expert = k->X, .n_expert_used = k->K, .n_ff_exp = k->F, .n_ff_shexp = k->FS,
        .ssm_d_conv = k->d_conv, .ssm_state = k->S, .ssm_groups = k->HK, .ssm_vheads = k->HV,
        .full_attn_interval = k->interval, .rope_base = k->rope_base, .rms_eps = k->rms_eps,
    };
    memcpy(hp.rope_sections, k->sections, sizeof hp.rope_sections);
    qw_qwen35moe_set_metadata(w, &hp);
}

int qw_cv_qwen35moe(const char *dir, const cJSON *cfg, const char *cpath, const qw_convert_opts *o,
                    qw_error *err) {
    const char *arch = cJSON_GetArrayItem(qw_cv_cfg_get(cfg, "architectures"), 0)->valuestring;
    q35_config k;
    if (read_config(cfg, cpath, arch, &k, err)) return -1;
    qw_cv_ctx c = {.dir = dir, .arch = arch};
    int rc = -1;
    if (!(c.st = qw_safetensors_open_dir(dir, err))) goto out;
    c.used = qw_xcalloc(qw_safetensors_n_tensors(c.st) + 1, sizeof *c.used);
    const char *P = qw_safetensors_find(c.st, "model.language_model.embed_tokens.weight") ? "model.language_model."
                                                                                          : "model.";
    char embd[96];
    snprintf(embd, sizeof embd, "%sembed_tokens.weight", P);
    uint32_t type = o->type == QW_CONVERT_TYPE_AUTO ? qw_cv_auto_type(c.st, embd) : o->type;
    if (!qw_type_supported(type)) {
        qw_fail(err, "convert: output type %u is not supported", type);
        goto out;
    }
    if (plan(&c, P, &k, type, err)) goto out;
    rc = qw_cv_finish(&c, o, type, k.vocab, k.bos, k.eos, meta, &k, err);
out:
    qw_cv_ctx_free(&c);
    return rc;
}
