/* convert.c — Hugging Face checkpoint -> GGUF: the entry point and the
 * machinery every architecture shares (see convert_int.h).
 *
 * What it owns: choosing the architecture from config.json's
 * "architectures", the plan representation (a GGUF tensor is a list of
 * (source tensor, first row) pieces, each contributing the same number of
 * rows, with an optional column permutation and element-wise transform), the
 * per-expert / merged expert stacking, the unused-tensor check, and the fill
 * callback that turns safetensors rows into GGUF rows one row at a time (f32,
 * transform, then the output type), so memory stays at one row.  The
 * safetensors files are parsed by format/safetensors.c, the tokenizer by
 * text/tokenizer_hf.c and the bytes written by format/gguf_write.c; the
 * mapping of each architecture lives in convert_qwen3moe.c / convert_qwen35.c.
 */
#include "convert_int.h"

#include "qwisp/quant.h"
#include "qwisp/gguf_meta.h"
#include "qwisp/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CV_SUPPORTED "Qwen3MoeForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration"

/* ---- config.json --------------------------------------------------------- */

char *qw_cv_path_in(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = qw_xmalloc(a + b + 2);
    snprintf(p, a + b + 2, "%s%s%s", dir, (a && dir[a - 1] == '/') ? "" : "/", name);
    return p;
}

int qw_cv_cfg_int(const cJSON *c, const char *cpath, const char *key, long def, long *out, qw_error *err) {
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

const cJSON *qw_cv_cfg_get(const cJSON *c, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(c, key);
    return (j && !cJSON_IsNull(j)) ? j : NULL;
}

cJSON *qw_cv_read_config(const char *dir, char **cpath, qw_error *err) {
    *cpath = qw_cv_path_in(dir, "config.json");
    char *txt = qw_read_file(*cpath, 0, NULL, err);
    if (!txt) return NULL;
    cJSON *c = cJSON_Parse(txt);
    free(txt);
    if (!c || !cJSON_IsObject(c)) {
        cJSON_Delete(c);
        qw_fail(err, "%s: not a JSON object", *cpath);
        return NULL;
    }
    return c;
}

/* ---- tensor plan --------------------------------------------------------- */

static bool dtype_ok(qw_st_dtype d) {
    return d == QW_ST_F32 || d == QW_ST_F16 || d == QW_ST_BF16;
}

void qw_cv_mark_used(qw_cv_ctx *c, const qw_st_tensor *t) {
    c->used[t - qw_safetensors_tensor_at(c->st, 0)] = true;
}

const qw_st_tensor *qw_cv_need(qw_cv_ctx *c, const char *name, int nd, const int64_t *dims, qw_error *err) {
    const qw_st_tensor *t = qw_safetensors_find(c->st, name);
    if (!t) {
        qw_fail(err, "%s: missing tensor '%s' (%s needs it)", c->dir, name, c->arch);
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
    qw_cv_mark_used(c, t);
    return t;
}

qw_cv_tensor *qw_cv_plan_add(qw_cv_ctx *c, const char *name, uint32_t type, uint32_t n_dims, uint64_t ne0,
                             uint64_t ne1, uint64_t ne2, int n_src, int64_t rows_per_src) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->t = qw_xrealloc(c->t, c->cap * sizeof *c->t);
    }
    qw_cv_tensor *t = &c->t[c->n++];
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

qw_cv_tensor *qw_cv_add_plain(qw_cv_ctx *c, const char *gname, const char *hname, uint32_t type, int64_t ne0,
                              int64_t ne1, qw_error *err) {
    int64_t dims[2] = {ne1 ? ne1 : ne0, ne0};
    const qw_st_tensor *s = qw_cv_need(c, hname, ne1 ? 2 : 1, ne1 ? dims : dims + 1, err);
    if (!s) return NULL;
    qw_cv_tensor *t = qw_cv_plan_add(c, gname, type, ne1 ? 2 : 1, (uint64_t)ne0, ne1 ? (uint64_t)ne1 : 1, 1, 1,
                                     ne1 ? ne1 : 1);
    t->src[0] = (qw_cv_src){s, 0};
    return t;
}

int qw_cv_add_experts(qw_cv_ctx *c, const char *lp, int l, int64_t E, int64_t F, int64_t X, uint32_t type,
                      qw_error *err) {
    char g[64], h[160];
    snprintf(h, sizeof h, "%smlp.experts.gate_up_proj", lp);
    bool merged = qw_safetensors_find(c->st, h) != NULL;
    if (!merged) {
        snprintf(h, sizeof h, "%smlp.experts.gate_up_proj.weight", lp);
        merged = qw_safetensors_find(c->st, h) != NULL;
    }
    if (merged) {
        int64_t gu[3] = {X, 2 * F, E};
        const qw_st_tensor *s = qw_cv_need(c, h, 3, gu, err);
        if (!s) return -1;
        for (int w = 0; w < 2; w++) {
            snprintf(g, sizeof g, "blk.%d.ffn_%s_exps.weight", l, w ? "up" : "gate");
            qw_cv_tensor *t = qw_cv_plan_add(c, g, type, 3, (uint64_t)E, (uint64_t)F, (uint64_t)X, (int)X, F);
            for (int64_t x = 0; x < X; x++) t->src[x] = (qw_cv_src){s, x * 2 * F + w * F};
        }
        size_t hl = strlen(h);
        bool suffix = hl > 7 && !strcmp(h + hl - 7, ".weight");
        snprintf(h, sizeof h, "%smlp.experts.down_proj%s", lp, suffix ? ".weight" : "");
        int64_t dd[3] = {X, E, F};
        if (!(s = qw_cv_need(c, h, 3, dd, err))) return -1;
        snprintf(g, sizeof g, "blk.%d.ffn_down_exps.weight", l);
        qw_cv_tensor *t = qw_cv_plan_add(c, g, type, 3, (uint64_t)F, (uint64_t)E, (uint64_t)X, 1, X * E);
        t->src[0] = (qw_cv_src){s, 0};
        return 0;
    }
    static const char *const hf[3] = {"gate_proj", "up_proj", "down_proj"};
    static const char *const gg[3] = {"gate", "up", "down"};
    for (int w = 0; w < 3; w++) {
        snprintf(g, sizeof g, "blk.%d.ffn_%s_exps.weight", l, gg[w]);
        int64_t ne0 = w == 2 ? F : E, ne1 = w == 2 ? E : F;
        qw_cv_tensor *t = qw_cv_plan_add(c, g, type, 3, (uint64_t)ne0, (uint64_t)ne1, (uint64_t)X, (int)X, ne1);
        int64_t dims[2] = {ne1, ne0};
        for (int64_t x = 0; x < X; x++) {
            snprintf(h, sizeof h, "%smlp.experts.%lld.%s.weight", lp, (long long)x, hf[w]);
            const qw_st_tensor *s = qw_cv_need(c, h, 2, dims, err);
            if (!s) return -1;
            t->src[x] = (qw_cv_src){s, 0};
        }
    }
    return 0;
}

int qw_cv_check_plan(qw_cv_ctx *c, bool (*skip)(const char *name), qw_error *err) {
    for (size_t i = 0; i < qw_safetensors_n_tensors(c->st); i++) {
        const qw_st_tensor *t = qw_safetensors_tensor_at(c->st, i);
        size_t n = strlen(t->name);
        if (c->used[i] || (n > 20 && !strcmp(t->name + n - 20, "rotary_emb.inv_freq")) || (skip && skip(t->name)))
            continue;
        return qw_fail(err, "%s: tensor '%s' is not part of %s as qwisp maps it", t->file, t->name, c->arch);
    }
    for (size_t i = 0; i < c->n; i++) {
        const qw_cv_tensor *t = &c->t[i];
        size_t be = qw_type_block_elems(t->type);
        if (be > 1 && t->ne[0] % be)
            return qw_fail(err, "tensor '%s': row length %llu is not a multiple of %zu, needed by type %s", t->name,
                           (unsigned long long)t->ne[0], be, qw_type_name(t->type));
    }
    return 0;
}

/* ---- write --------------------------------------------------------------- */

static int cv_fill(void *vctx, int index, void *dst, size_t nbytes, qw_error *err) {
    qw_cv_ctx *c = vctx;
    const qw_cv_tensor *t = &c->t[index];
    const int64_t ne0 = (int64_t)t->ne[0];
    const size_t rb = qw_row_bytes(t->type, ne0);
    if (rb * (size_t)t->rows_per_src * (size_t)t->n_src != nbytes)
        return qw_fail(err, "convert: %s: writer asked for %zu bytes, expected %zu", t->name, nbytes,
                       rb * (size_t)t->rows_per_src * (size_t)t->n_src);
    uint8_t *out = dst;
    float *in = t->col_perm ? c->row2 : c->row;
    for (int s = 0; s < t->n_src; s++)
        for (int64_t r = 0; r < t->rows_per_src; r++) {
            if (qw_st_read_f32(t->src[s].t, (t->src[s].row0 + r) * ne0, ne0, in, err)) return -1;
            if (t->col_perm)
                for (int64_t j = 0; j < ne0; j++) c->row[j] = in[t->col_perm[j]];
            if (t->xform == QW_CV_X_PLUS_ONE)
                for (int64_t j = 0; j < ne0; j++) c->row[j] += 1.0f;
            else if (t->xform == QW_CV_X_NEG_EXP)
                for (int64_t j = 0; j < ne0; j++) c->row[j] = -expf(c->row[j]);
            qw_quantize_row((qw_type)t->type, c->row, out, ne0);
            out += rb;
        }
    return 0;
}

uint32_t qw_cv_auto_type(const qw_safetensors *st, const char *embd_name) {
    const qw_st_tensor *t = qw_safetensors_find(st, embd_name);
    return t && t->dtype == QW_ST_BF16 ? QW_TYPE_BF16 : QW_TYPE_F16;
}

int qw_cv_finish(qw_cv_ctx *c, const qw_convert_opts *o, uint32_t type, long vocab, long bos, long eos,
                 qw_cv_meta_fn meta, const void *arg, qw_error *err) {
    qw_tokenizer_spec *spec = NULL;
    qw_gguf_writer *w = NULL;
    char *name = NULL;
    char *tj = qw_cv_path_in(o->hf_dir, "tokenizer.json");
    char *tc = qw_cv_path_in(o->hf_dir, "tokenizer_config.json");
    int rc = -1;
    if (!(spec = qw_tokenizer_spec_from_hf_json(tj, access(tc, F_OK) == 0 ? tc : NULL, (int32_t)vocab, err)))
        goto out;
    if (spec->n_tokens != vocab) {
        qw_fail(err, "%s: the tokenizer has %d tokens, config.json's vocab_size is %ld", tj, spec->n_tokens, vocab);
        goto out;
    }
    /* as llama.cpp: tokenizer_config.json's tokens first, then config.json's ids */
    if (spec->bos_id < 0 && bos < vocab) spec->bos_id = (int32_t)bos;
    if (spec->eos_id < 0 && eos < vocab) spec->eos_id = (int32_t)eos;

    if (o->name) {
        name = qw_xstrdup(o->name);
    } else {
        name = qw_xstrdup(o->hf_dir);
        size_t n = strlen(name);
        while (n > 1 && name[n - 1] == '/') name[--n] = 0;
        char *b = strrchr(name, '/');
        if (b) memmove(name, b + 1, strlen(b + 1) + 1);
    }
    w = qw_gguf_writer_new();
    meta(w, arg, name, qw_gguf_file_type(type));
    qw_gguf_set_tokenizer(w, spec);
    uint64_t widest = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (c->t[i].ne[0] > widest) widest = c->t[i].ne[0];
        if (qw_gguf_add_tensor(w, c->t[i].name, c->t[i].type, c->t[i].n_dims, c->t[i].ne, err) < 0) goto out;
    }
    c->row = qw_xmalloc(widest * sizeof(float));
    c->row2 = qw_xmalloc(widest * sizeof(float));
    rc = qw_gguf_writer_write(w, o->out_path, cv_fill, c, err);
out:
    qw_gguf_writer_free(w);
    qw_tokenizer_spec_free(spec);
    free(name);
    free(tj);
    free(tc);
    return rc;
}

void qw_cv_ctx_free(qw_cv_ctx *c) {
    for (size_t i = 0; i < c->n; i++) {
        free(c->t[i].src);
        free(c->t[i].col_perm);
    }
    free(c->t);
    free(c->row);
    free(c->row2);
    free(c->used);
    qw_safetensors_close(c->st);
}

/* ---- entry --------------------------------------------------------------- */

int qw_convert_hf(const qw_convert_opts *o, qw_error *err) {
    char *cpath = NULL;
    cJSON *cfg = qw_cv_read_config(o->hf_dir, &cpath, err);
    int rc = -1;
    if (!cfg) goto out;
    const cJSON *ar = qw_cv_cfg_get(cfg, "architectures");
    const cJSON *a0 = cJSON_IsArray(ar) ? cJSON_GetArrayItem(ar, 0) : NULL;
    if (!cJSON_IsString(a0)) {
        const cJSON *mt = qw_cv_cfg_get(cfg, "model_type");
        qw_fail(err, "%s: no \"architectures\" (model_type '%s'); qwisp convert supports %s", cpath,
                cJSON_IsString(mt) ? mt->valuestring : "?", CV_SUPPORTED);
        goto out;
    }
    const char *arch = a0->valuestring;
    if (!strcmp(arch, "Qwen3MoeForCausalLM"))
        rc = qw_cv_qwen3moe(o->hf_dir, cfg, cpath, o, err);
    else if (!strcmp(arch, "Qwen3_5MoeForCausalLM") || !strcmp(arch, "Qwen3_5MoeForConditionalGeneration"))
        rc = qw_cv_qwen35moe(o->hf_dir, cfg, cpath, o, err);
    else
        qw_fail(err, "%s: architecture '%s' is not supported (qwisp convert supports %s)", cpath, arch,
                CV_SUPPORTED);
out:
    cJSON_Delete(cfg);
    free(cpath);
    return rc;
}
