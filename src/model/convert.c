/* convert.c — Qwen3MoeForCausalLM checkpoint -> qwen3moe GGUF.
 *
 * What it owns: reading config.json, the HF -> GGUF tensor mapping for
 * Qwen3-MoE, and the fill callback that turns safetensors rows into GGUF
 * rows.  The safetensors files are parsed by format/safetensors.c, the
 * tokenizer by text/tokenizer_hf.c, the metadata keys by qwen3moe_meta.c
 * (shared with gen_model.c) and the bytes by format/gguf_write.c.
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
 * A GGUF tensor is thus a list of (source tensor, first row) pieces, each
 * contributing the same number of rows; the fill callback converts one row
 * at a time to f32 and then to the output type, so memory stays at one row.
 *
 * Refusals, each with its own message: an architecture other than
 * Qwen3MoeForCausalLM, config features qwisp's forward does not implement
 * (dense MLP layers, attention bias, sliding window, rope scaling), a
 * missing tensor, a tensor of the wrong shape, a dtype other than
 * F32/F16/BF16, and any checkpoint tensor the mapping does not consume.
 */
#include "qwisp/convert.h"

#include "qwisp/gguf.h"
#include "qwisp/quant.h"
#include "qwisp/qwen3moe_meta.h"
#include "qwisp/safetensors.h"
#include "qwisp/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CV_ARCH "Qwen3MoeForCausalLM"

typedef struct cv_src {
    const qw_st_tensor *t;
    int64_t row0;
} cv_src;

typedef struct cv_tensor {
    char name[64];
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[3];
    int n_src;
    cv_src *src;
    int64_t rows_per_src;
} cv_tensor;

typedef struct cv_ctx {
    const char *dir;
    qw_safetensors *st;
    bool *used; /* per safetensors tensor */
    cv_tensor *t;
    size_t n, cap;
    float *row;
} cv_ctx;

/* ---- config.json --------------------------------------------------------- */

static char *path_in(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = qw_xmalloc(a + b + 2);
    snprintf(p, a + b + 2, "%s%s%s", dir, (a && dir[a - 1] == '/') ? "" : "/", name);
    return p;
}

/* An integer config value; def < 0 means required. */
static int cfg_int(const cJSON *c, const char *cpath, const char *key, long def, long *out, qw_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(c, key);
    if (!j || cJSON_IsNull(j)) {
        if (def < 0) return qw_fail(err, "%s: missing \"%s\"", cpath, key);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(j) || j->valuedouble != (double)(long)j->valuedouble || j->valuedouble < 0 ||
        j->valuedouble > 1e9)
        return qw_fail(err, "%s: \"%s\" must be a non-negative integer", cpath, key);
    *out = (long)j->valuedouble;
    return 0;
}

static const cJSON *cfg_get(const cJSON *c, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(c, key);
    return (j && !cJSON_IsNull(j)) ? j : NULL;
}

typedef struct cv_config {
    qw_qwen3moe_hparams hp;
    long vocab, bos, eos;
    bool tied;
} cv_config;

static int read_config(const char *dir, cv_config *cfg, qw_error *err) {
    char *cpath = path_in(dir, "config.json");
    char *txt = qw_read_file(cpath, 0, NULL, err);
    int rc = -1;
    cJSON *c = NULL;
    if (!txt) goto out;
    c = cJSON_Parse(txt);
    if (!c || !cJSON_IsObject(c)) {
        qw_fail(err, "%s: not a JSON object", cpath);
        goto out;
    }
    const cJSON *ar = cfg_get(c, "architectures");
    const cJSON *a0 = cJSON_IsArray(ar) ? cJSON_GetArrayItem(ar, 0) : NULL;
    if (!cJSON_IsString(a0)) {
        const cJSON *mt = cfg_get(c, "model_type");
        qw_fail(err, "%s: no \"architectures\" (model_type '%s'); qwisp convert supports %s", cpath,
                cJSON_IsString(mt) ? mt->valuestring : "?", CV_ARCH);
        goto out;
    }
    if (strcmp(a0->valuestring, CV_ARCH) != 0) {
        qw_fail(err, "%s: architecture '%s' is not supported (qwisp convert supports %s)", cpath,
                a0->valuestring, CV_ARCH);
        goto out;
    }
    long v[16];
    const char *keys[] = {"hidden_size", "num_hidden_layers", "num_attention_heads", "moe_intermediate_size",
                          "num_experts_per_tok", "vocab_size"};
    for (int i = 0; i < 6; i++)
        if (cfg_int(c, cpath, keys[i], -1, &v[i], err)) goto out;
    cv_config k = {.vocab = v[5]};
    k.hp.n_embd = (int)v[0];
    k.hp.n_layer = (int)v[1];
    k.hp.n_head = (int)v[2];
    k.hp.n_ff_exp = (int)v[3];
    k.hp.n_expert_used = (int)v[4];
    long x;
    /* transformers 5 writes num_local_experts, earlier versions num_experts */
    const char *ek = cfg_get(c, "num_experts") ? "num_experts" : "num_local_experts";
    if (cfg_int(c, cpath, ek, -1, &x, err)) goto out;
    k.hp.n_expert = (int)x;
    if (cfg_int(c, cpath, "num_key_value_heads", v[2], &x, err)) goto out;
    k.hp.n_head_kv = (int)x;
    if (k.hp.n_head == 0 || cfg_int(c, cpath, "head_dim", v[0] / (v[2] ? v[2] : 1), &x, err)) {
        if (k.hp.n_head == 0) qw_fail(err, "%s: num_attention_heads is 0", cpath);
        goto out;
    }
    k.hp.head_dim = (int)x;
    if (cfg_int(c, cpath, "intermediate_size", v[3] * v[4], &x, err)) goto out;
    k.hp.n_ff = (int)x;
    if (cfg_int(c, cpath, "max_position_embeddings", 40960, &x, err)) goto out;
    k.hp.n_ctx = (int)x;
    if (cfg_int(c, cpath, "bos_token_id", 0x7fffffff, &k.bos, err)) goto out;
    if (cfg_int(c, cpath, "eos_token_id", 0x7fffffff, &k.eos, err)) k.eos = 0x7fffffff; /* may be a list */
    const cJSON *j;
    k.hp.rms_eps = (j = cfg_get(c, "rms_norm_eps")) && cJSON_IsNumber(j) ? (float)j->valuedouble : 1e-6f;
    k.tied = (j = cfg_get(c, "tie_word_embeddings")) && cJSON_IsTrue(j);
    /* rope: rope_theta (transformers 4) or rope_parameters.rope_theta (5) */
    const cJSON *rp = cfg_get(c, "rope_parameters");
    const cJSON *rs = cfg_get(c, "rope_scaling");
    const cJSON *rt = cfg_get(c, "rope_theta");
    if (!rt && cJSON_IsObject(rp)) rt = cfg_get(rp, "rope_theta");
    k.hp.rope_base = cJSON_IsNumber(rt) ? (float)rt->valuedouble : 10000.0f;
    const cJSON *scal = cJSON_IsObject(rs) ? rs : (cJSON_IsObject(rp) ? rp : NULL);
    if (scal) {
        const cJSON *ty = cfg_get(scal, "rope_type");
        if (!ty) ty = cfg_get(scal, "type");
        if (cJSON_IsString(ty) && strcmp(ty->valuestring, "default") != 0) {
            qw_fail(err, "%s: rope scaling type '%s' is not supported (only default rope)", cpath, ty->valuestring);
            goto out;
        }
    }
    const cJSON *mo = cfg_get(c, "mlp_only_layers");
    long step = 1;
    if (cfg_int(c, cpath, "decoder_sparse_step", 1, &step, err)) goto out;
    if ((cJSON_IsArray(mo) && cJSON_GetArraySize(mo) > 0) || step != 1) {
        qw_fail(err, "%s: dense MLP layers (mlp_only_layers / decoder_sparse_step %ld) are not supported", cpath,
                step);
        goto out;
    }
    if ((j = cfg_get(c, "attention_bias")) && cJSON_IsTrue(j)) {
        qw_fail(err, "%s: attention_bias true is not supported", cpath);
        goto out;
    }
    if ((j = cfg_get(c, "use_sliding_window")) && cJSON_IsTrue(j)) {
        qw_fail(err, "%s: use_sliding_window true is not supported", cpath);
        goto out;
    }
    if ((j = cfg_get(c, "hidden_act")) && cJSON_IsString(j) && strcmp(j->valuestring, "silu") != 0) {
        qw_fail(err, "%s: hidden_act '%s' is not supported (silu)", cpath, j->valuestring);
        goto out;
    }
    if (k.hp.n_embd <= 0 || k.hp.n_layer <= 0 || k.hp.n_head_kv <= 0 || k.hp.n_head % k.hp.n_head_kv ||
        k.hp.head_dim <= 0 || k.hp.n_expert <= 0 || k.hp.n_expert_used <= 0 ||
        k.hp.n_expert_used > k.hp.n_expert || k.hp.n_ff_exp <= 0 || k.vocab <= 0) {
        qw_fail(err, "%s: inconsistent sizes (hidden %d, layers %d, heads %d/%d, head_dim %d, experts %d top %d, "
                     "moe ff %d, vocab %ld)", cpath, k.hp.n_embd, k.hp.n_layer, k.hp.n_head, k.hp.n_head_kv,
                k.hp.head_dim, k.hp.n_expert, k.hp.n_expert_used, k.hp.n_ff_exp, k.vocab);
        goto out;
    }
    *cfg = k;
    rc = 0;
out:
    cJSON_Delete(c);
    free(txt);
    free(cpath);
    return rc;
}

/* ---- tensor plan --------------------------------------------------------- */

static bool dtype_ok(qw_st_dtype d) {
    return d == QW_ST_F32 || d == QW_ST_F16 || d == QW_ST_BF16;
}

/* Finds hf name with PyTorch shape dims[0..nd) and marks it used. */
static const qw_st_tensor *need(cv_ctx *c, const char *name, int nd, const int64_t *dims, qw_error *err) {
    const qw_st_tensor *t = qw_safetensors_find(c->st, name);
    if (!t) {
        qw_fail(err, "%s: missing tensor '%s' (%s needs it)", c->dir, name, CV_ARCH);
        return NULL;
    }
    bool ok = t->n_dims == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == dims[i];
    if (!ok) {
        char want[96] = "", got[96] = "";
        for (int i = 0; i < nd; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)dims[i]);
        for (int i = 0; i < t->n_dims; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        qw_fail(err, "%s: tensor '%s' has shape [%s], expected [%s]", t->file, name, got, want);
        return NULL;
    }
    if (!dtype_ok(t->dtype)) {
        qw_fail(err, "%s: tensor '%s': dtype %s is not supported (F32, F16, BF16 are)", t->file, name,
                qw_st_dtype_name(t->dtype));
        return NULL;
    }
    c->used[t - qw_safetensors_tensor_at(c->st, 0)] = true;
    return t;
}

static cv_tensor *plan_add(cv_ctx *c, const char *name, uint32_t type, uint32_t n_dims, uint64_t ne0,
                           uint64_t ne1, uint64_t ne2, int n_src, int64_t rows_per_src) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->t = qw_xrealloc(c->t, c->cap * sizeof *c->t);
    }
    cv_tensor *t = &c->t[c->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = n_dims;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = ne2;
    t->n_src = n_src;
    t->src = qw_xcalloc((size_t)n_src, sizeof *t->src);
    t->rows_per_src = rows_per_src;
    return t;
}

/* A 1-D (ne1 == 0) or 2-D tensor copied from one HF tensor. */
static int add_plain(cv_ctx *c, const char *gname, const char *hname, uint32_t type, int64_t ne0, int64_t ne1,
                     qw_error *err) {
    int64_t dims[2] = {ne1 ? ne1 : ne0, ne0};
    const qw_st_tensor *s = need(c, hname, ne1 ? 2 : 1, ne1 ? dims : dims + 1, err);
    if (!s) return -1;
    cv_tensor *t = plan_add(c, gname, type, ne1 ? 2 : 1, (uint64_t)ne0, ne1 ? (uint64_t)ne1 : 1, 1, 1,
                            ne1 ? ne1 : 1);
    t->src[0] = (cv_src){s, 0};
    return 0;
}

/* blk.L.ffn_{gate,up,down}_exps from per-expert or merged HF tensors. */
static int add_experts(cv_ctx *c, int l, const cv_config *k, uint32_t type, qw_error *err) {
    const int64_t E = k->hp.n_embd, F = k->hp.n_ff_exp, X = k->hp.n_expert;
    char g[64], h[128];
    snprintf(h, sizeof h, "model.layers.%d.mlp.experts.gate_up_proj", l);
    bool merged = qw_safetensors_find(c->st, h) != NULL;
    if (!merged) {
        snprintf(h, sizeof h, "model.layers.%d.mlp.experts.gate_up_proj.weight", l);
        merged = qw_safetensors_find(c->st, h) != NULL;
    }
    if (merged) {
        int64_t gu[3] = {X, 2 * F, E};
        const qw_st_tensor *s = need(c, h, 3, gu, err);
        if (!s) return -1;
        for (int w = 0; w < 2; w++) {
            snprintf(g, sizeof g, "blk.%d.ffn_%s_exps.weight", l, w ? "up" : "gate");
            cv_tensor *t = plan_add(c, g, type, 3, (uint64_t)E, (uint64_t)F, (uint64_t)X, (int)X, F);
            for (int64_t x = 0; x < X; x++) t->src[x] = (cv_src){s, x * 2 * F + w * F};
        }
        size_t hl = strlen(h);
        snprintf(h, sizeof h, "model.layers.%d.mlp.experts.down_proj%s", l,
                 hl > 7 && !strcmp(h + hl - 7, ".weight") ? ".weight" : "");
        int64_t dd[3] = {X, E, F};
        if (!(s = need(c, h, 3, dd, err))) return -1;
        snprintf(g, sizeof g, "blk.%d.ffn_down_exps.weight", l);
        cv_tensor *t = plan_add(c, g, type, 3, (uint64_t)F, (uint64_t)E, (uint64_t)X, 1, X * E);
        t->src[0] = (cv_src){s, 0};
        return 0;
    }
    static const char *const hf[3] = {"gate_proj", "up_proj", "down_proj"};
    static const char *const gg[3] = {"gate", "up", "down"};
    for (int w = 0; w < 3; w++) {
        snprintf(g, sizeof g, "blk.%d.ffn_%s_exps.weight", l, gg[w]);
        int64_t ne0 = w == 2 ? F : E, ne1 = w == 2 ? E : F;
        cv_tensor *t = plan_add(c, g, type, 3, (uint64_t)ne0, (uint64_t)ne1, (uint64_t)X, (int)X, ne1);
        int64_t dims[2] = {ne1, ne0};
        for (int64_t x = 0; x < X; x++) {
            snprintf(h, sizeof h, "model.layers.%d.mlp.experts.%lld.%s.weight", l, (long long)x, hf[w]);
            const qw_st_tensor *s = need(c, h, 2, dims, err);
            if (!s) return -1;
            t->src[x] = (cv_src){s, 0};
        }
    }
    return 0;
}

static int plan(cv_ctx *c, const cv_config *k, uint32_t type, qw_error *err) {
    const int64_t E = k->hp.n_embd, hd = k->hp.head_dim, V = k->vocab;
    const int64_t nq = hd * k->hp.n_head, nkv = hd * k->hp.n_head_kv;
    const uint32_t F32 = QW_TYPE_F32;
    if (add_plain(c, "token_embd.weight", "model.embed_tokens.weight", type, E, V, err)) return -1;
    if (add_plain(c, "output_norm.weight", "model.norm.weight", F32, E, 0, err)) return -1;
    const qw_st_tensor *lm = qw_safetensors_find(c->st, "lm_head.weight");
    if (!k->tied) {
        if (add_plain(c, "output.weight", "lm_head.weight", type, E, V, err)) return -1;
    } else if (lm) {
        c->used[lm - qw_safetensors_tensor_at(c->st, 0)] = true; /* tied: a copy of the embedding */
    }
    for (int l = 0; l < k->hp.n_layer; l++) {
        char g[64], h[128];
#define MAP(gs, hs, ty, a, b)                                                                  \
    do {                                                                                       \
        snprintf(g, sizeof g, "blk.%d." gs ".weight", l);                                      \
        snprintf(h, sizeof h, "model.layers.%d." hs ".weight", l);                             \
        if (add_plain(c, g, h, ty, a, b, err)) return -1;                                      \
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
        if (add_experts(c, l, k, type, err)) return -1;
    }
    for (size_t i = 0; i < qw_safetensors_n_tensors(c->st); i++) {
        const qw_st_tensor *t = qw_safetensors_tensor_at(c->st, i);
        size_t n = strlen(t->name);
        if (!c->used[i] && !(n > 20 && !strcmp(t->name + n - 20, "rotary_emb.inv_freq")))
            return qw_fail(err, "%s: tensor '%s' is not part of %s as qwisp maps it", t->file, t->name, CV_ARCH);
    }
    for (size_t i = 0; i < c->n; i++) {
        const cv_tensor *t = &c->t[i];
        size_t be = qw_type_block_elems(t->type);
        if (be > 1 && t->ne[0] % be)
            return qw_fail(err, "tensor '%s': row length %llu is not a multiple of %zu, needed by type %s", t->name,
                           (unsigned long long)t->ne[0], be, qw_type_name(t->type));
    }
    return 0;
}

/* ---- write --------------------------------------------------------------- */

static int cv_fill(void *vctx, int index, void *dst, size_t nbytes, qw_error *err) {
    cv_ctx *c = vctx;
    const cv_tensor *t = &c->t[index];
    const int64_t ne0 = (int64_t)t->ne[0];
    const size_t rb = qw_row_bytes(t->type, ne0);
    if (rb * (size_t)t->rows_per_src * (size_t)t->n_src != nbytes)
        return qw_fail(err, "convert: %s: writer asked for %zu bytes, expected %zu", t->name, nbytes,
                       rb * (size_t)t->rows_per_src * (size_t)t->n_src);
    uint8_t *out = dst;
    for (int s = 0; s < t->n_src; s++)
        for (int64_t r = 0; r < t->rows_per_src; r++) {
            if (qw_st_read_f32(t->src[s].t, (t->src[s].row0 + r) * ne0, ne0, c->row, err)) return -1;
            qw_quantize_row((qw_type)t->type, c->row, out, ne0);
            out += rb;
        }
    return 0;
}

static uint32_t auto_type(const qw_safetensors *st) {
    const qw_st_tensor *t = qw_safetensors_find(st, "model.embed_tokens.weight");
    return t && t->dtype == QW_ST_BF16 ? QW_TYPE_BF16 : QW_TYPE_F16;
}

int qw_convert_hf(const qw_convert_opts *o, qw_error *err) {
    cv_config k;
    if (read_config(o->hf_dir, &k, err)) return -1;
    cv_ctx c = {.dir = o->hf_dir};
    qw_tokenizer_spec *spec = NULL;
    qw_gguf_writer *w = NULL;
    char *name = NULL, *tj = NULL, *tc = NULL;
    int rc = -1;
    if (!(c.st = qw_safetensors_open_dir(o->hf_dir, err))) goto out;
    c.used = qw_xcalloc(qw_safetensors_n_tensors(c.st) + 1, sizeof *c.used);
    uint32_t type = o->type == QW_CONVERT_TYPE_AUTO ? auto_type(c.st) : o->type;
    if (!qw_type_supported(type)) {
        qw_fail(err, "convert: output type %u is not supported", type);
        goto out;
    }
    if (plan(&c, &k, type, err)) goto out;

    tj = path_in(o->hf_dir, "tokenizer.json");
    tc = path_in(o->hf_dir, "tokenizer_config.json");
    if (!(spec = qw_tokenizer_spec_from_hf_json(tj, access(tc, F_OK) == 0 ? tc : NULL, (int32_t)k.vocab, err)))
        goto out;
    if (spec->n_tokens != k.vocab) {
        qw_fail(err, "%s: the tokenizer has %d tokens, config.json's vocab_size is %ld", tj, spec->n_tokens, k.vocab);
        goto out;
    }
    /* as llama.cpp: tokenizer_config.json's tokens first, then config.json's ids */
    if (spec->bos_id < 0 && k.bos < k.vocab) spec->bos_id = (int32_t)k.bos;
    if (spec->eos_id < 0 && k.eos < k.vocab) spec->eos_id = (int32_t)k.eos;

    if (o->name) {
        name = qw_xstrdup(o->name);
    } else {
        name = qw_xstrdup(o->hf_dir);
        size_t n = strlen(name);
        while (n > 1 && name[n - 1] == '/') name[--n] = 0;
        char *b = strrchr(name, '/');
        if (b) memmove(name, b + 1, strlen(b + 1) + 1);
    }
    k.hp.name = name;
    k.hp.file_type = qw_gguf_file_type(type);
    w = qw_gguf_writer_new();
    qw_qwen3moe_set_metadata(w, &k.hp);
    qw_gguf_set_tokenizer(w, spec);
    uint64_t widest = 0;
    for (size_t i = 0; i < c.n; i++) {
        if (c.t[i].ne[0] > widest) widest = c.t[i].ne[0];
        if (qw_gguf_add_tensor(w, c.t[i].name, c.t[i].type, c.t[i].n_dims, c.t[i].ne, err) < 0) goto out;
    }
    c.row = qw_xmalloc(widest * sizeof(float));
    rc = qw_gguf_writer_write(w, o->out_path, cv_fill, &c, err);
out:
    qw_gguf_writer_free(w);
    qw_tokenizer_spec_free(spec);
    for (size_t i = 0; i < c.n; i++) free(c.t[i].src);
    free(c.t);
    free(c.row);
    free(c.used);
    qw_safetensors_close(c.st);
    free(name);
    free(tj);
    free(tc);
    return rc;
}
