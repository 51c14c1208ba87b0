/* gen_model.c — writes deterministic synthetic qwen3moe GGUF files.
 *
 * What it owns: the presets, the shape checks, the metadata a qwen3moe GGUF
 * carries, and the seeded weights; the vocabulary (a small learned byte-level
 * BPE, or a real Hugging Face tokenizer) is gen_vocab.c's.
 * The GGUF bytes themselves are written by format/gguf_write.c.
 *
 * File layout matches what llama.cpp's qwen3moe loader creates (dims are
 * ggml order, ne[0] = row length):
 *   token_embd [n_embd, n_vocab]           embd_type
 *   output_norm [n_embd]                   f32
 *   output [n_embd, n_vocab]               embd_type, absent when tied
 *   blk.i.attn_norm [n_embd]               f32
 *   blk.i.attn_q [n_embd, n_head*hd]       type
 *   blk.i.attn_k/v [n_embd, n_head_kv*hd]  type
 *   blk.i.attn_output [n_head*hd, n_embd]  type
 *   blk.i.attn_q_norm/k_norm [hd]          f32
 *   blk.i.ffn_norm [n_embd]                f32
 *   blk.i.ffn_gate_inp [n_embd, n_expert]  f32 (llama-quantize never quantizes the router)
 *   blk.i.ffn_gate_exps/up_exps [n_embd, n_ff_exp, n_expert]  type
 *   blk.i.ffn_down_exps [n_ff_exp, n_embd, n_expert]          type
 *
 * Determinism: every tensor draws from its own xoshiro256** stream seeded by
 * splitmix64(seed ^ hash(tensor name)), rows in order, so the file depends
 * only on (params, seed) and not on write order or thread count.
 *
 * Memory: the writer calls fill() once per tensor with the destination
 * buffer; rows are generated into one f32 row buffer and converted in place,
 * so peak memory is the largest tensor in its stored type plus one row.
 *
 * Scales — why a random model is worth testing against.  Weights at "init"
 * scale make a model whose residual stream is dominated by the token
 * embedding, so the LM head maps the current token to a fixed next token and
 * greedy decoding falls into a short loop independent of the prompt; and
 * logits that sit close together make two engines' float rounding flip the
 * argmax.  The choices below follow three principles, independent of shape:
 *   1. Every branch (attention, MoE) writes entries of std ~4 into the
 *      residual, and the embedding is much smaller (std C/sqrt(n_embd)), so
 *      after a layer the stream is mostly context, not the current token
 *      (which, with a tied head, would otherwise predict itself forever).
 *   2. Logit spread is fixed in absolute units: the LM head rows (tied or not)
 *      have norm ~C and the final RMS norm gives the state norm ~sqrt(n_embd)
 *      times the output-norm gain, so logits have std ~C whatever n_embd is;
 *      C = 6 puts the median top-1/top-2 margin well over 0.5 even with a
 *      151k vocabulary (max-of-n Gaussian spacing ~ C/sqrt(2 ln n)).  Row
 *      norms are spread log-normally so the logits are heavier-tailed than a
 *      Gaussian: engines' rounding noise grows with the logits, a Gaussian's
 *      top gap is only ~1/(2 ln n) of the top logit, a heavier tail's more.
 *   3. Attention is sharp, not uniform: q_norm/k_norm gains ~2-3 make the
 *      per-head score std ~ g_q*g_k, so each head attends to a few
 *      content/position-dependent tokens; the router's logits have std ~3 so
 *      the top-k expert set changes from token to token.
 * Norm gains vary per channel (uniform ranges) so no direction is special.
 * Measured with llama.cpp (tests/peers/discrimination.mjs, greedy 32 tokens,
 * 6 prompts, several shapes) — see the numbers recorded at GEN_SCALES below.
 */
#include "gen_model_plan.h"
#include "gen_vocab.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwisp/gguf.h"
#include "qwisp/quant.h"
#include "qwisp/tokenizer.h"
#include "qwisp/gguf_meta.h"

/* ------------------------------------------------------------------------ */
/* GEN_SCALES (principles in the header comment).  Measured with llama.cpp
 * (tests/peers/discrimination.mjs: greedy 32 tokens after each of 6 prompts —
 * English, code, CJK, emoji+digits, story, ChatML), on four shapes: tiny
 * (bytes vocab, 4/2 heads, 8 experts top-2, untied, f32), 6/2 heads 12 top-3
 * tied, qwen3 vocab n_embd 64 3 layers tied q8_0, qwen3 vocab n_embd 128
 * 8/8 heads untied q8_0.  With the values below:
 *   distinct tokens per 32-token continuation: min 13 / 24 / 22 / 21
 *   all 6 continuations different: yes on every shape
 *   median top1-top2 margin: 3.6 / 1.8 / 1.7 / 4.8 logits
 *   steps with margin < 0.1: 0.5% / 2.6% / 2.1% / 2.1%
 * What the knobs did: with branch gains 1 (wo) and 2 (down) tied heads
 * collapsed to one repeated token (a large self-logit e_j.e_j); gains 4/8
 * fixed that (distinct 1 -> 24+).  A log-normal spread of LM head row norms
 * (sigma 0.4) made the top logit stand out (median margin ~1.0 -> ~4 on
 * untied heads, fewer near-ties relative to the logit size); on tied heads
 * a big-norm embedding also attracts itself, so they get half the spread.
 * Known limit — sensitivity: these models are more chaotic than trained ones.
 * A q8_0 activation rounding flip (inevitable between two engines summing in
 * different orders) can flip a router top-k choice at one position, whose
 * changed K/V then moves every later position: on 3-layer q8_0 shapes
 * llama.cpp batched vs token-by-token differs by up to ~0.2 logprob, and
 * qwisp vs llama.cpp by up to several.  Router std 1..6, q/k gains 1..3 and
 * branch gains 2..8 did not change that measurably; 1-2 layer models stay
 * within ~1e-5 (q8_0), so the parity tests use 2-3 layers. */
#define GEN_LOGIT_STD 6.0f      /* C: std of the logits, in nats */
#define GEN_HEAD_ROW_SIGMA 0.4f /* log-normal spread of LM head row norms (tied: half) */
#define GEN_QK_GAIN_LO 2.0f     /* q_norm / k_norm gains ~ U[lo, hi] */
#define GEN_QK_GAIN_HI 3.0f
#define GEN_ROUTER_STD 3.0f     /* std of router logits */
#define GEN_WO_GAIN 4.0f        /* attention output: entries ~4 into the residual */
#define GEN_DOWN_GAIN 8.0f      /* expert down: silu(g)*u has std ~0.5, so ~4 out */
#define GEN_NORM_LO 0.7f        /* attn_norm / ffn_norm gains ~ U[lo, hi] */
#define GEN_NORM_HI 1.3f
#define GEN_OUT_NORM_LO 0.8f
#define GEN_OUT_NORM_HI 1.2f

/* ---- random numbers: splitmix64 seeds xoshiro256** ---------------------- */

typedef struct {
    uint64_t s[4];
    bool have_spare;
    float spare;
} gen_rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(gen_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
    r->have_spare = false;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(gen_rng *r) {
    uint64_t *s = r->s;
    uint64_t res = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

/* Uniform in (0, 1): 53 random bits, never exactly 0 (log() below). */
static double rng_unit(gen_rng *r) { return ((double)(rng_next(r) >> 11) + 0.5) * 0x1.0p-53; }

static float rng_uniform(gen_rng *r, float lo, float hi) {
    return lo + (hi - lo) * (float)rng_unit(r);
}

/* Standard normal by Box-Muller; the second value is kept for the next call. */
static float rng_normal(gen_rng *r) {
    if (r->have_spare) {
        r->have_spare = false;
        return r->spare;
    }
    double u = rng_unit(r), v = rng_unit(r);
    double m = sqrt(-2.0 * log(u));
    r->spare = (float)(m * sin(2.0 * M_PI * v));
    r->have_spare = true;
    return (float)(m * cos(2.0 * M_PI * v));
}

/* ---- presets and validation --------------------------------------------- */

int qw_gen_model_preset(const char *name, qw_gen_model_params *p) {
    qw_gen_model_params d = {
        .name = "qwisp-synthetic",
        .tokenizer = QW_GEN_TOK_HF,
        .type = QW_TYPE_F32,
        .embd_type = QW_TYPE_F32,
        .n_ctx = 4096,
        .rope_base = 1000000.0f,
        .rms_eps = 1e-6f,
        .tied = false,
        .seed = 42,
    };
    if (strcmp(name, "tiny") == 0) {
        d.name = "qwisp-tiny";
        d.tokenizer = QW_GEN_TOK_BYTES;
        d.n_embd = 64, d.n_layer = 2, d.n_head = 4, d.n_head_kv = 2, d.head_dim = 16;
        d.n_expert = 8, d.n_expert_used = 2, d.n_ff_exp = 32;
        d.n_ctx = 2048;
    } else if (strcmp(name, "small") == 0) {
        d.name = "qwisp-small";
        d.n_embd = 128, d.n_layer = 4, d.n_head = 8, d.n_head_kv = 4, d.head_dim = 32;
        d.n_expert = 16, d.n_expert_used = 4, d.n_ff_exp = 64;
    } else if (strcmp(name, "default") == 0) {
        /* < 40 MB with the 151k Qwen3 vocab: the embedding alone would be
         * 41 MB in q8_0, so it is stored in q4_0 and tied (one copy, 22 MB);
         * the vocab strings take 6 MB, and n_ff_exp is 64 rather than 128 to
         * keep the q8_0 experts at 10 MB: 39 MB in all. */
        d.name = "qwisp-default";
        d.n_embd = 256, d.n_layer = 6, d.n_head = 8, d.n_head_kv = 4, d.head_dim = 32;
        d.n_expert = 32, d.n_expert_used = 4, d.n_ff_exp = 64;
        d.type = QW_TYPE_Q8_0, d.embd_type = QW_TYPE_Q4_0, d.tied = true;
    } else if (strcmp(name, "bench") == 0) {
        d.name = "qwisp-bench";
        d.n_embd = 1024, d.n_layer = 8, d.n_head = 16, d.n_head_kv = 4, d.head_dim = 64;
        d.n_expert = 64, d.n_expert_used = 8, d.n_ff_exp = 512;
        d.type = QW_TYPE_Q8_0, d.embd_type = QW_TYPE_Q8_0;
    } else if (strcmp(name, "qwen36-a3b") == 0) {
        /* Qwen3.6-35B-A3B's published config: 40 layers (30 Gated DeltaNet,
         * 10 gated attention), 256 experts top-8 + a shared expert */
        d.arch = QW_GEN_QWEN35MOE;
        d.name = "qwisp-synthetic-qwen36-35b-a3b";
        d.n_embd = 2048, d.n_layer = 40, d.n_head = 16, d.n_head_kv = 2, d.head_dim = 256, d.n_rot = 64;
        d.n_expert = 256, d.n_expert_used = 8, d.n_ff_exp = 512, d.n_ff_shexp = 512;
        d.ssm_d_conv = 4, d.ssm_state = 128, d.ssm_groups = 16, d.ssm_vheads = 32, d.full_attn_interval = 4;
        d.n_ctx = 262144, d.rope_base = 1e7f;
        d.type = QW_TYPE_Q4_K, d.embd_type = QW_TYPE_Q6_K;
    } else {
        return -1;
    }
    *p = d;
    return 0;
}

static bool gen_type_ok(uint32_t t) {
    return t == QW_TYPE_F32 || t == QW_TYPE_F16 || t == QW_TYPE_BF16 || t == QW_TYPE_Q8_0 ||
           t == QW_TYPE_Q4_0 || (t >= QW_TYPE_Q2_K && t <= QW_TYPE_Q6_K);
}
#define GEN_TYPES "f32, f16, bf16, q8_0, q4_0, q2_K, q3_K, q4_K, q5_K, q6_K"

const char *qw_gen_type_name(uint32_t t) {
    switch (t) {
    case QW_TYPE_F32: return "f32";
    case QW_TYPE_F16: return "f16";
    case QW_TYPE_BF16: return "bf16";
    case QW_TYPE_Q8_0: return "q8_0";
    case QW_TYPE_Q4_0: return "q4_0";
    case QW_TYPE_Q2_K: case QW_TYPE_Q3_K: case QW_TYPE_Q4_K: case QW_TYPE_Q5_K:
    case QW_TYPE_Q6_K: return qw_type_name(t);
    default: return "unknown";
    }
}

bool qw_gen_is_block_type(uint32_t t) { return t == QW_TYPE_Q8_0 || t == QW_TYPE_Q4_0; }
bool qw_gen_is_kquant(uint32_t t) { return t >= QW_TYPE_Q2_K && t <= QW_TYPE_Q6_K; }

/* LLAMA_FTYPE of a file whose big matrices are `t` (1-D tensors stay f32). */
int qw_gen_model_validate(const qw_gen_model_params *p, qw_error *err) {
    struct {
        const char *flag;
        int v, lo, hi;
    } ranges[] = {
        {"--n-embd", p->n_embd, 2, 65536},       {"--n-layer", p->n_layer, 1, 1024},
        {"--n-head", p->n_head, 1, 1024},        {"--n-head-kv", p->n_head_kv, 1, 1024},
        {"--head-dim", p->head_dim, 2, 1024},    {"--n-expert", p->n_expert, 1, 4096},
        {"--n-expert-used", p->n_expert_used, 1, 4096}, {"--n-ff-exp", p->n_ff_exp, 1, 1 << 20},
        {"--n-ctx", p->n_ctx, 1, 1 << 24},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        if (ranges[i].v < ranges[i].lo || ranges[i].v > ranges[i].hi)
            return qw_fail(err, "%s %d: must be in [%d, %d]", ranges[i].flag, ranges[i].v,
                           ranges[i].lo, ranges[i].hi);
    if (!gen_type_ok(p->type))
        return qw_fail(err, "--type %u: not one of " GEN_TYPES, p->type);
    if (!gen_type_ok(p->embd_type))
        return qw_fail(err, "--embd-type %u: not one of " GEN_TYPES, p->embd_type);
    if (p->head_dim % 2 != 0)
        return qw_fail(err, "--head-dim %d: must be even (RoPE rotates pairs)", p->head_dim);
    if (p->n_head % p->n_head_kv != 0)
        return qw_fail(err, "--n-head-kv %d: must divide --n-head %d", p->n_head_kv, p->n_head);
    if (p->n_expert_used > p->n_expert)
        return qw_fail(err, "--n-expert-used %d: must be <= --n-expert %d", p->n_expert_used,
                       p->n_expert);
    /* every matrix row is whole blocks: 32 elements (q8_0, q4_0), or 256-element
     * super-blocks (K-quants) */
    const int32_t blk = qw_gen_is_block_type(p->type) ? 32 : qw_gen_is_kquant(p->type) ? 256 : 1;
    if (blk > 1) {
        if (p->n_embd % blk != 0)
            return qw_fail(err, "--n-embd %d: must be a multiple of %d for type %s", p->n_embd, blk,
                           qw_gen_type_name(p->type));
        if ((p->n_head * p->head_dim) % blk != 0)
            return qw_fail(err, "--head-dim %d: n_head*head_dim (%d) must be a multiple of %d for type %s",
                           p->head_dim, p->n_head * p->head_dim, blk, qw_gen_type_name(p->type));
        if (p->n_ff_exp % blk != 0)
            return qw_fail(err, "--n-ff-exp %d: must be a multiple of %d for type %s", p->n_ff_exp, blk,
                           qw_gen_type_name(p->type));
    }
    if (qw_gen_is_kquant(p->embd_type) && p->n_embd % 256 != 0)
        return qw_fail(err, "--n-embd %d: must be a multiple of 256 for embedding type %s", p->n_embd,
                       qw_gen_type_name(p->embd_type));
    if (qw_gen_is_block_type(p->embd_type) && p->n_embd % 32 != 0)
        return qw_fail(err, "--n-embd %d: must be a multiple of 32 for embedding type %s", p->n_embd,
                       qw_gen_type_name(p->embd_type));
    if (!(p->rope_base > 0.0f) || !isfinite(p->rope_base))
        return qw_fail(err, "--rope-base %g: must be a positive number", (double)p->rope_base);
    if (!(p->rms_eps > 0.0f) || !isfinite(p->rms_eps))
        return qw_fail(err, "rms_eps %g: must be a positive number", (double)p->rms_eps);
    if (p->arch == QW_GEN_QWEN35MOE) {
        qw_gen_model_params q = *p;
        qw_gen_model_fill_qwen35(&q);
        if (qw_gen_validate_qwen35(&q, err)) return -1;
    }
    if (p->tokenizer == QW_GEN_TOK_HF && (!p->hf_tokenizer_dir || !*p->hf_tokenizer_dir))
        return qw_fail(err, "--tokenizer qwen3: no tokenizer directory given (--hf-tokenizer DIR)");
    return 0;
}

/* ---- tensors ------------------------------------------------------------- */

void qw_gen_plan_add(gen_ctx *c, const char *name, uint32_t type, uint32_t n_dims, uint64_t ne0,
                     uint64_t ne1, uint64_t ne2, gen_init init, float a, float b) {
    gen_tensor *t = &c->t[c->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = n_dims;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = ne2;
    t->init = init;
    t->a = a, t->b = b;
}

/* The tensor list with each tensor's distribution (see GEN_SCALES). */
static void plan_tensors(gen_ctx *c, const qw_gen_model_params *p, uint64_t n_vocab) {
    const uint64_t E = (uint64_t)p->n_embd, hd = (uint64_t)p->head_dim;
    const uint64_t nq = hd * (uint64_t)p->n_head, nkv = hd * (uint64_t)p->n_head_kv;
    const uint64_t X = (uint64_t)p->n_expert, F = (uint64_t)p->n_ff_exp;
    const float e_std = GEN_LOGIT_STD / sqrtf((float)E);
    const float in_std = 1.0f / sqrtf((float)E);
    char nm[64];

    c->t = qw_xcalloc(3 + 12 * (size_t)p->n_layer, sizeof *c->t);
    /* token_embd doubles as the LM head when tied, so it has the head's scale */
    qw_gen_plan_add(c, "token_embd.weight", p->embd_type, 2, E, n_vocab, 1, INIT_NORMAL, 0, e_std);
    c->t[c->n - 1].row_sigma = p->tied ? 0.5f * GEN_HEAD_ROW_SIGMA : 0.0f;
    qw_gen_plan_add(c, "output_norm.weight", QW_TYPE_F32, 1, E, 1, 1, INIT_UNIFORM, GEN_OUT_NORM_LO,
             GEN_OUT_NORM_HI);
    if (!p->tied)
        qw_gen_plan_add(c, "output.weight", p->embd_type, 2, E, n_vocab, 1, INIT_NORMAL, 0, e_std);
    if (!p->tied) c->t[c->n - 1].row_sigma = GEN_HEAD_ROW_SIGMA;
    for (int l = 0; l < p->n_layer; l++) {
#define NM(s) (snprintf(nm, sizeof nm, "blk.%d." s ".weight", l), nm)
        qw_gen_plan_add(c, NM("attn_norm"), QW_TYPE_F32, 1, E, 1, 1, INIT_UNIFORM, GEN_NORM_LO, GEN_NORM_HI);
        qw_gen_plan_add(c, NM("attn_q"), p->type, 2, E, nq, 1, INIT_NORMAL, 0, in_std);
        qw_gen_plan_add(c, NM("attn_k"), p->type, 2, E, nkv, 1, INIT_NORMAL, 0, in_std);
        qw_gen_plan_add(c, NM("attn_v"), p->type, 2, E, nkv, 1, INIT_NORMAL, 0, in_std);
        qw_gen_plan_add(c, NM("attn_output"), p->type, 2, nq, E, 1, INIT_NORMAL, 0,
                 GEN_WO_GAIN / sqrtf((float)nq));
        qw_gen_plan_add(c, NM("attn_q_norm"), QW_TYPE_F32, 1, hd, 1, 1, INIT_UNIFORM, GEN_QK_GAIN_LO,
                 GEN_QK_GAIN_HI);
        qw_gen_plan_add(c, NM("attn_k_norm"), QW_TYPE_F32, 1, hd, 1, 1, INIT_UNIFORM, GEN_QK_GAIN_LO,
                 GEN_QK_GAIN_HI);
        qw_gen_plan_add(c, NM("ffn_norm"), QW_TYPE_F32, 1, E, 1, 1, INIT_UNIFORM, GEN_NORM_LO, GEN_NORM_HI);
        qw_gen_plan_add(c, NM("ffn_gate_inp"), QW_TYPE_F32, 2, E, X, 1, INIT_NORMAL, 0,
                 GEN_ROUTER_STD / sqrtf((float)E));
        qw_gen_plan_add(c, NM("ffn_gate_exps"), p->type, 3, E, F, X, INIT_NORMAL, 0, in_std);
        qw_gen_plan_add(c, NM("ffn_up_exps"), p->type, 3, E, F, X, INIT_NORMAL, 0, in_std);
        qw_gen_plan_add(c, NM("ffn_down_exps"), p->type, 3, F, E, X, INIT_NORMAL, 0,
                 GEN_DOWN_GAIN / sqrtf((float)F));
#undef NM
    }
}

/* One row of t's distribution into x[ne0]. */
static void gen_row(const gen_tensor *t, gen_rng *r, float *x) {
    const int64_t ne0 = (int64_t)t->ne[0];
    if (t->init == INIT_UNIFORM) {
        for (int64_t j = 0; j < ne0; j++) x[j] = rng_uniform(r, t->a, t->b);
        return;
    }
    float std = t->b;
    if (t->row_sigma > 0.0f) std *= expf(t->row_sigma * rng_normal(r) - t->row_sigma * t->row_sigma);
    for (int64_t j = 0; j < ne0; j++) x[j] = t->a + std * rng_normal(r);
}

static int gen_fill(void *vctx, int index, void *dst, size_t nbytes, qw_error *err) {
    gen_ctx *c = vctx;
    if (index < 0 || (size_t)index >= c->n) return qw_fail(err, "gen-model: bad tensor index %d", index);
    const gen_tensor *t = &c->t[index];
    const int64_t ne0 = (int64_t)t->ne[0];
    const uint64_t rows = t->ne[1] * t->ne[2];
    const size_t rb = qw_row_bytes(t->type, ne0);
    if (rb * rows != nbytes)
        return qw_fail(err, "gen-model: %s: writer asked for %zu bytes, expected %zu", t->name, nbytes,
                       rb * (size_t)rows);
    gen_rng r;
    rng_seed(&r, c->seed ^ qw_hash64(t->name, strlen(t->name), 0x5157495350ull));
    /* fast_weights: the first POOL_ROWS rows are generated, the rest copied */
    enum { POOL_ROWS = 64 };
    const uint64_t gen_rows = c->fast && rows > 2 * POOL_ROWS ? POOL_ROWS : rows;
    uint8_t *out = dst;
    for (uint64_t i = 0; i < gen_rows; i++) {
        gen_row(t, &r, c->row);
        if (t->type == QW_TYPE_F32)
            memcpy(out, c->row, (size_t)ne0 * sizeof(float));
        else
            qw_quantize_row((qw_type)t->type, c->row, out, ne0);
        out += rb;
    }
    for (uint64_t i = gen_rows; i < rows; i++, out += rb)
        memcpy(out, (uint8_t *)dst + (rng_next(&r) % POOL_ROWS) * rb, rb);
    return 0;
}

/* ---- metadata + write ---------------------------------------------------- */

/* The keys themselves are written by gguf_meta.c, shared with the HF
 * converter; only qwisp.gen.seed is ours. */
static void set_metadata(qw_gguf_writer *w, const qw_gen_model_params *p, const gen_vocab *v) {
    qw_qwen3moe_hparams hp = {
        .name = p->name ? p->name : "qwisp-synthetic",
        .file_type = qw_gguf_file_type(p->type),
        .n_ctx = p->n_ctx,
        .n_embd = p->n_embd,
        .n_layer = p->n_layer,
        /* Qwen3-MoE configs give intermediate_size = n_expert_used * moe size */
        .n_ff = p->n_ff_exp * p->n_expert_used,
        .n_head = p->n_head,
        .n_head_kv = p->n_head_kv,
        .head_dim = p->head_dim,
        .n_expert = p->n_expert,
        .n_expert_used = p->n_expert_used,
        .n_ff_exp = p->n_ff_exp,
        .rope_base = p->rope_base,
        .rms_eps = p->rms_eps,
    };
    if (p->arch == QW_GEN_QWEN35MOE)
        qw_gen_meta_qwen35(w, p);
    else
        qw_qwen3moe_set_metadata(w, &hp);
    qw_gguf_set_u64(w, "qwisp.gen.seed", p->seed);
    qw_tokenizer_spec s = {
        .model = "gpt2",
        .pre = "qwen2",
        .n_tokens = (int32_t)v->n_tokens,
        .tokens = (const char *const *)v->tokens,
        .token_types = v->types,
        .n_merges = (int32_t)v->n_merges,
        .merges = (const char *const *)v->merges,
        .bos_id = v->bos,
        .eos_id = v->eos,
        .eot_id = -1,
        .pad_id = v->pad,
        .add_bos = false,
        .chat_template = v->chat_template,
    };
    qw_gguf_set_tokenizer(w, &s);
}

int qw_gen_model_write(const qw_gen_model_params *p, const char *path, qw_error *err) {
    if (qw_gen_model_validate(p, err) != 0) return -1;
    gen_vocab v = {.bos = -1, .eos = -1, .pad = -1};
    if (p->tokenizer == QW_GEN_TOK_BYTES)
        qw_gen_vocab_build_bytes(&v);
    else if (qw_gen_vocab_build_hf(&v, p->hf_tokenizer_dir, err) != 0) {
        qw_gen_vocab_free(&v);
        return -1;
    }

    qw_gen_model_params q = *p;
    if (q.arch == QW_GEN_QWEN35MOE) qw_gen_model_fill_qwen35(&q);
    p = &q;
    gen_ctx c = {.seed = p->seed, .fast = p->fast_weights};
    if (p->arch == QW_GEN_QWEN35MOE)
        qw_gen_plan_qwen35(&c, p, v.n_tokens);
    else
        plan_tensors(&c, p, v.n_tokens);
    uint64_t widest = 0;
    for (size_t i = 0; i < c.n; i++)
        if (c.t[i].ne[0] > widest) widest = c.t[i].ne[0];
    c.row = qw_xmalloc(widest * sizeof(float));

    int rc = -1;
    qw_gguf_writer *w = qw_gguf_writer_new();
    set_metadata(w, p, &v);
    for (size_t i = 0; i < c.n; i++)
        if (qw_gguf_add_tensor(w, c.t[i].name, c.t[i].type, c.t[i].n_dims, c.t[i].ne, err) < 0)
            goto done;
    rc = qw_gguf_writer_write(w, path, gen_fill, &c, err);
done:
    qw_gguf_writer_free(w);
    free(c.row);
    free(c.t);
    qw_gen_vocab_free(&v);
    return rc;
}
