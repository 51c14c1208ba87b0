/* qwen35moe_gen.c — writes deterministic synthetic qwen35moe GGUF files
 * (work in progress, see qwen35moe.h and docs/qwen35moe.md).
 *
 * Metadata keys and tensor names/shapes are the ones llama.cpp's qwen35moe
 * loader reads.  Scales follow gen_model.c's principles (branches write
 * entries of std ~4 into the residual, logits of std ~6, sharp attention, a
 * router with std ~3), extended to the DeltaNet and shared-expert tensors:
 * conv taps U[-0.6, 0.6], decay rates A = -U[0.3, 1.5] with dt bias U[-1, 1]
 * (per-token decays mostly 0.3..0.9), beta logits of std 1.  The tokenizer is
 * copied from another GGUF so there is one vocabulary builder (gen_model.c).
 *
 * Determinism: each tensor draws from its own splitmix64 stream seeded by
 * (seed, tensor name), rows in order.
 */
#include "qwen35moe.h"

#include "qwisp/gguf.h"
#include "qwisp/quant.h"
#include "qwisp/qwen3moe_meta.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qw35_gen_defaults(qw35_gen_params *p) {
    *p = (qw35_gen_params){
        .type = QW_TYPE_F32, .n_embd = 64, .n_layer = 4, .n_head = 4, .n_head_kv = 2, .head_dim = 32,
        .n_rot = 16, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 32, .n_ff_shexp = 48,
        .d_conv = 4, .ssm_state = 16, .ssm_groups = 2, .ssm_vheads = 4, .full_attn_interval = 4,
        .n_ctx = 4096, .rope_base = 1e7f, .rms_eps = 1e-6f, .tied = false, .seed = 1,
    };
}

typedef enum { G_UNIFORM, G_NORMAL } g_init;
typedef struct {
    char name[64];
    uint32_t type, n_dims;
    uint64_t ne[3];
    g_init init;
    float a, b;
} g_tensor;
typedef struct {
    g_tensor *t;
    size_t n;
    uint64_t seed;
    float *row;
} g_ctx;

static uint64_t sm64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float unit(uint64_t *s) { return (float)(((double)(sm64(s) >> 11) + 0.5) * 0x1.0p-53); }
static float normal(uint64_t *s) {
    float u1 = unit(s), u2 = unit(s);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

static void add(g_ctx *c, const char *name, uint32_t type, uint32_t nd, uint64_t n0, uint64_t n1, uint64_t n2,
                g_init init, float a, float b) {
    g_tensor *t = &c->t[c->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type, t->n_dims = nd;
    t->ne[0] = n0, t->ne[1] = n1, t->ne[2] = n2;
    t->init = init, t->a = a, t->b = b;
}

static void plan(g_ctx *c, const qw35_gen_params *p, uint64_t V) {
    const uint64_t E = (uint64_t)p->n_embd, D = (uint64_t)p->head_dim, H = (uint64_t)p->n_head;
    const uint64_t HKV = (uint64_t)p->n_head_kv, X = (uint64_t)p->n_expert, F = (uint64_t)p->n_ff_exp;
    const uint64_t FS = (uint64_t)p->n_ff_shexp, S = (uint64_t)p->ssm_state;
    const uint64_t KD = S * (uint64_t)p->ssm_groups, VD = S * (uint64_t)p->ssm_vheads, C = 2 * KD + VD;
    const uint64_t HV = (uint64_t)p->ssm_vheads;
    const float in_std = 1.0f / sqrtf((float)E), F32 = QW_TYPE_F32;
    char nm[64];
    c->t = qw_xcalloc(3 + 24 * (size_t)p->n_layer, sizeof *c->t);
    add(c, "token_embd.weight", p->type, 2, E, V, 1, G_NORMAL, 0, 6.0f / sqrtf((float)E));
    add(c, "output_norm.weight", F32, 1, E, 1, 1, G_UNIFORM, 0.8f, 1.2f);
    if (!p->tied) add(c, "output.weight", p->type, 2, E, V, 1, G_NORMAL, 0, 6.0f / sqrtf((float)E));
    for (int l = 0; l < p->n_layer; l++) {
        const bool recr = (l + 1) % p->full_attn_interval != 0;
#define NM(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
        add(c, NM("attn_norm.weight"), F32, 1, E, 1, 1, G_UNIFORM, 0.7f, 1.3f);
        add(c, NM("post_attention_norm.weight"), F32, 1, E, 1, 1, G_UNIFORM, 0.7f, 1.3f);
        if (!recr) {
            add(c, NM("attn_q.weight"), p->type, 2, E, 2 * H * D, 1, G_NORMAL, 0, in_std);
            add(c, NM("attn_k.weight"), p->type, 2, E, HKV * D, 1, G_NORMAL, 0, in_std);
            add(c, NM("attn_v.weight"), p->type, 2, E, HKV * D, 1, G_NORMAL, 0, in_std);
            add(c, NM("attn_output.weight"), p->type, 2, H * D, E, 1, G_NORMAL, 0, 8.0f / sqrtf((float)(H * D)));
            add(c, NM("attn_q_norm.weight"), F32, 1, D, 1, 1, G_UNIFORM, 2.0f, 3.0f);
            add(c, NM("attn_k_norm.weight"), F32, 1, D, 1, 1, G_UNIFORM, 2.0f, 3.0f);
        } else {
            add(c, NM("attn_qkv.weight"), p->type, 2, E, C, 1, G_NORMAL, 0, in_std);
            add(c, NM("attn_gate.weight"), p->type, 2, E, VD, 1, G_NORMAL, 0, 2.0f * in_std);
            add(c, NM("ssm_conv1d.weight"), F32, 2, (uint64_t)p->d_conv, C, 1, G_UNIFORM, -0.6f, 0.6f);
            add(c, NM("ssm_dt.bias"), F32, 1, HV, 1, 1, G_UNIFORM, -1.0f, 1.0f);
            add(c, NM("ssm_a"), F32, 1, HV, 1, 1, G_UNIFORM, -1.5f, -0.3f);
            add(c, NM("ssm_beta.weight"), p->type, 2, E, HV, 1, G_NORMAL, 0, in_std);
            add(c, NM("ssm_alpha.weight"), p->type, 2, E, HV, 1, G_NORMAL, 0, in_std);
            add(c, NM("ssm_norm.weight"), F32, 1, S, 1, 1, G_UNIFORM, 0.7f, 1.3f);
            add(c, NM("ssm_out.weight"), p->type, 2, VD, E, 1, G_NORMAL, 0, 8.0f / sqrtf((float)VD));
        }
        add(c, NM("ffn_gate_inp.weight"), F32, 2, E, X, 1, G_NORMAL, 0, 3.0f * in_std);
        add(c, NM("ffn_gate_exps.weight"), p->type, 3, E, F, X, G_NORMAL, 0, in_std);
        add(c, NM("ffn_up_exps.weight"), p->type, 3, E, F, X, G_NORMAL, 0, in_std);
        add(c, NM("ffn_down_exps.weight"), p->type, 3, F, E, X, G_NORMAL, 0, 8.0f / sqrtf((float)F));
        add(c, NM("ffn_gate_inp_shexp.weight"), F32, 1, E, 1, 1, G_NORMAL, 0, in_std);
        add(c, NM("ffn_gate_shexp.weight"), p->type, 2, E, FS, 1, G_NORMAL, 0, in_std);
        add(c, NM("ffn_up_shexp.weight"), p->type, 2, E, FS, 1, G_NORMAL, 0, in_std);
        add(c, NM("ffn_down_shexp.weight"), p->type, 2, FS, E, 1, G_NORMAL, 0, 8.0f / sqrtf((float)FS));
#undef NM
    }
}

static int fill(void *vc, int index, void *dst, size_t nbytes, qw_error *err) {
    g_ctx *c = vc;
    const g_tensor *t = &c->t[index];
    const int64_t ne0 = (int64_t)t->ne[0];
    const uint64_t rows = t->ne[1] * t->ne[2];
    const size_t rb = qw_row_bytes(t->type, ne0);
    if (rb * rows != nbytes) return qw_fail(err, "qwen35moe gen: %s: size mismatch", t->name);
    uint64_t s = c->seed ^ qw_hash64(t->name, strlen(t->name), 0x3335u);
    uint8_t *out = dst;
    for (uint64_t i = 0; i < rows; i++, out += rb) {
        for (int64_t j = 0; j < ne0; j++)
            c->row[j] = t->init == G_UNIFORM ? t->a + (t->b - t->a) * unit(&s) : t->a + t->b * normal(&s);
        if (t->type == QW_TYPE_F32)
            memcpy(out, c->row, (size_t)ne0 * sizeof(float));
        else
            qw_quantize_row((qw_type)t->type, c->row, out, ne0);
    }
    return 0;
}

/* Copies every tokenizer.* key of src into w. */
static void copy_tokenizer(qw_gguf_writer *w, const qw_gguf *src) {
    for (size_t i = 0; i < qw_gguf_n_kv(src); i++) {
        const char *key = qw_gguf_kv_key(src, i);
        if (strncmp(key, "tokenizer.", 10) != 0) continue;
        const qw_gguf_vtype vt = qw_gguf_kv_type(src, i);
        int64_t iv;
        size_t len;
        if (vt == QW_GGUF_STRING) {
            qw_gguf_set_str(w, key, qw_gguf_kv_str(src, i, &len));
        } else if (vt == QW_GGUF_BOOL) {
            bool b = false;
            qw_gguf_get_bool(src, key, &b);
            qw_gguf_set_bool(w, key, b);
        } else if (vt == QW_GGUF_UINT32 && qw_gguf_kv_as_i64(src, i, &iv) == 0) {
            qw_gguf_set_u32(w, key, (uint32_t)iv);
        } else if (vt == QW_GGUF_ARRAY) {
            qw_gguf_vtype et;
            uint64_t n;
            const void *data;
            if (qw_gguf_kv_arr(src, i, &et, &n, &data) != 0) continue;
            if (et == QW_GGUF_STRING) {
                const char **strs = qw_xmalloc((n ? n : 1) * sizeof *strs);
                for (uint64_t j = 0; j < n; j++) strs[j] = qw_gguf_arr_str(src, i, j, &len);
                qw_gguf_set_arr_str(w, key, strs, n);
                free(strs);
            } else {
                qw_gguf_set_arr(w, key, et, data, n);
            }
        }
    }
}

int qw35_gen_write(const qw35_gen_params *p, const char *tok_src, const char *path, qw_error *err) {
    if (p->n_layer < 1 || p->full_attn_interval < 1 || p->n_rot > p->head_dim || p->n_rot % 2 ||
        p->n_head % p->n_head_kv || p->ssm_vheads % p->ssm_groups || p->n_expert_used > p->n_expert)
        return qw_fail(err, "qwen35moe gen: inconsistent shape");
    qw_gguf *src = qw_gguf_open(tok_src, err);
    if (!src) return -1;
    qw_gguf_vtype et;
    uint64_t V = 0;
    const void *data;
    if (qw_gguf_get_arr(src, "tokenizer.ggml.tokens", &et, &V, &data) != 0 || V == 0) {
        qw_gguf_close(src);
        return qw_fail(err, "qwen35moe gen: %s has no tokenizer.ggml.tokens", tok_src);
    }
    qw_gguf_writer *w = qw_gguf_writer_new();
    const char *A = "qwen35moe";
    char k[128];
#define U32(s, v) (snprintf(k, sizeof k, "%s." s, A), qw_gguf_set_u32(w, k, (uint32_t)(v)))
#define F32K(s, v) (snprintf(k, sizeof k, "%s." s, A), qw_gguf_set_f32(w, k, (v)))
    qw_gguf_set_str(w, "general.architecture", A);
    qw_gguf_set_str(w, "general.name", "qwisp-synthetic-qwen35moe");
    qw_gguf_set_u32(w, "general.file_type", qw_gguf_file_type(p->type));
    qw_gguf_set_u32(w, "general.quantization_version", 2);
    U32("context_length", p->n_ctx);
    U32("embedding_length", p->n_embd);
    U32("block_count", p->n_layer);
    U32("feed_forward_length", p->n_ff_exp * p->n_expert_used);
    U32("attention.head_count", p->n_head);
    U32("attention.head_count_kv", p->n_head_kv);
    U32("attention.key_length", p->head_dim);
    U32("attention.value_length", p->head_dim);
    U32("rope.dimension_count", p->n_rot);
    F32K("rope.freq_base", p->rope_base);
    F32K("attention.layer_norm_rms_epsilon", p->rms_eps);
    U32("expert_count", p->n_expert);
    U32("expert_used_count", p->n_expert_used);
    U32("expert_feed_forward_length", p->n_ff_exp);
    U32("expert_shared_feed_forward_length", p->n_ff_shexp);
    U32("ssm.conv_kernel", p->d_conv);
    U32("ssm.state_size", p->ssm_state);
    U32("ssm.group_count", p->ssm_groups);
    U32("ssm.time_step_rank", p->ssm_vheads);
    U32("ssm.inner_size", p->ssm_state * p->ssm_vheads);
    U32("full_attention_interval", p->full_attn_interval);
    {
        /* text-only: any sections covering n_rot/2 frequencies give plain NeoX RoPE */
        const int32_t half = p->n_rot / 2, s0 = (half + 2) / 3, s1 = (half + 1) / 3;
        const int32_t sec[4] = {s0, s1, half - s0 - s1, 0};
        snprintf(k, sizeof k, "%s.rope.dimension_sections", A);
        qw_gguf_set_arr(w, k, QW_GGUF_INT32, sec, 4);
    }
#undef U32
#undef F32K
    qw_gguf_set_u64(w, "qwisp.gen.seed", p->seed);
    copy_tokenizer(w, src);

    g_ctx c = {.seed = p->seed};
    plan(&c, p, V);
    uint64_t widest = 0;
    for (size_t i = 0; i < c.n; i++) widest = c.t[i].ne[0] > widest ? c.t[i].ne[0] : widest;
    c.row = qw_xmalloc(widest * sizeof(float));
    int rc = -1;
    for (size_t i = 0; i < c.n; i++)
        if (qw_gguf_add_tensor(w, c.t[i].name, c.t[i].type, c.t[i].n_dims, c.t[i].ne, err) < 0) goto done;
    rc = qw_gguf_writer_write(w, path, fill, &c, err);
done:
    qw_gguf_writer_free(w);
    qw_gguf_close(src);
    free(c.row);
    free(c.t);
    return rc;
}
