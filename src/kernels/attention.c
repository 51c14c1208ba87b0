/* attention.c — causal multi-head attention (GQA) over an f16 or f32 KV cache.
 *
 * For each (query token, head): scores s_j = dot(f16(q), k_j) for the
 * positions j <= pos, softmax(s * scale) with the sum in double, then
 * out = sum_j f16(p_j) * v_j.  Rounding q and p to f16 mirrors llama.cpp's
 * CPU path (its K·Q and V·P matmuls convert the f32 side to the cache type),
 * which keeps logits within rounding of it.  With an f32 cache
 * (QWISP_KV_TYPE=f32, for comparisons with fp32 references such as
 * transformers) nothing is rounded: q, k, p and v stay f32.
 *
 * The V accumulation runs SIMD over head_dim (qw_axpy_f16: F16C conversion,
 * multiply then add, the same bits as the scalar loop it replaced).  A level
 * whose kernel table has the specialised loops (attn_scores_f16 /
 * attn_values_f16: AVX-512, attention_avx512.c, head_dim 64 / 128 / 256) runs
 * both loops over positions there, with the same bits again.
 *
 * Work items are (token, head) pairs handed to the thread pool; each thread
 * owns a slice of `scratch` for its scores and converted query.  Scratch grows
 * with the context length (n_pos), never with its square.
 */
#include "kernels/quant_impl.h"
#include "qwisp/ops.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

enum { QUAD = 4 }; /* query heads a work item takes when four share a KV head */

size_t qw_attention_scratch_bytes(int n_threads, int64_t n_pos, int64_t head_dim) {
    /* per thread, per head of a work item (QUAD at most): scores [n_pos] f32,
     * the probabilities as f16 [n_pos], q as f16 [head_dim]; then acc
     * [head_dim] f32 (64-aligned) */
    size_t per = QUAD * ((size_t)n_pos * (sizeof(float) + sizeof(uint16_t)) + (size_t)head_dim * 2) +
                 (size_t)head_dim * 4 + 128;
    per = (per + 63) & ~(size_t)63; /* each thread's slice starts 64-byte aligned */
    return per * (size_t)n_threads;
}

typedef struct {
    const float *q;
    const char *k, *v; /* cache rows of kv_type */
    qw_type kv_type;
    float *out;
    int64_t n_head, n_head_kv, head_dim, n_pos_max;
    int32_t pos0;
    float scale;
    char *scratch;
    size_t per_thread;
    int heads; /* per work item: 1, or QUAD heads of one KV head (the level's *4 loops) */
} attn_job;

/* scores (already times scale, their max mx) -> the softmax's p in place,
 * rounded to f16 with an f16 cache (p16: that row's room); the level's
 * exponentials where it has them (quant_impl.h exp_row) */
static void softmax_row(const qw_kernel_table *kt, float *scores, uint16_t *p16, int64_t n_pos, float mx, bool f32) {
    double sum = 0.0;
    if (kt->exp_row) {
        sum = kt->exp_row(scores, n_pos, mx);
    } else {
        for (int64_t s = 0; s < n_pos; s++) {
            scores[s] = expf(scores[s] - mx);
            sum += (double)scores[s];
        }
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t s = 0; s < n_pos; s++) scores[s] *= inv;
    if (!f32) { /* p rounded to f16, a whole row per conversion */
        qw_quantize_row(QW_TYPE_F16, scores, p16, n_pos);
        qw_dequantize_row(QW_TYPE_F16, p16, scores, n_pos);
    }
}

/* scores[s] *= scale, returning their max (after a level's score loop) */
static float scale_max(float *scores, int64_t n_pos, float scale) {
    float mx = -INFINITY;
    for (int64_t s = 0; s < n_pos; s++) {
        scores[s] *= scale;
        mx = scores[s] > mx ? scores[s] : mx;
    }
    return mx;
}

/* A work item of QUAD heads h0.. sharing KV head hkv, for token t: the
 * level's four-row loops, each head's softmax between them. */
static void attend_quad(const attn_job *j, const qw_kernel_table *kt, int64_t t, int64_t h0, char *mine) {
    const int64_t D = j->head_dim, n_pos = j->pos0 + t + 1, hkv = h0 / (j->n_head / j->n_head_kv);
    const size_t kv_stride = (size_t)(j->n_head_kv * D) * sizeof(uint16_t);
    const size_t head_off = (size_t)(hkv * D) * sizeof(uint16_t);
    /* the slice: QUAD score rows, QUAD f16 p rows, QUAD f16 queries (qw_attention_scratch_bytes) */
    float *const sc = (float *)mine;
    uint16_t *const p16_rows = (uint16_t *)(sc + (size_t)QUAD * j->n_pos_max);
    uint16_t *const q16_rows = p16_rows + (size_t)QUAD * j->n_pos_max;
    float *scores[QUAD], *out[QUAD];
    uint16_t *p16[QUAD], *q16[QUAD];
    for (int i = 0; i < QUAD; i++) {
        scores[i] = sc + (size_t)i * j->n_pos_max;
        p16[i] = p16_rows + (size_t)i * j->n_pos_max;
        q16[i] = q16_rows + (size_t)i * D;
        qw_quantize_row(QW_TYPE_F16, j->q + (t * j->n_head + h0 + i) * D, q16[i], D);
        out[i] = j->out + (t * j->n_head + h0 + i) * D;
    }
    kt->attn_scores4_f16((const uint16_t *const *)q16, j->k + head_off, kv_stride, n_pos, D, scores);
    for (int i = 0; i < QUAD; i++)
        softmax_row(kt, scores[i], p16[i], n_pos, scale_max(scores[i], n_pos, j->scale), false);
    kt->attn_values4_f16((const float *const *)scores, j->v + head_off, kv_stride, n_pos, D, out);
}

static void attend_items(void *p, int64_t i0, int64_t i1, int ith) {
    attn_job *j = p;
    const int64_t D = j->head_dim, group = j->n_head / j->n_head_kv;
    const bool f32 = j->kv_type == QW_TYPE_F32;
    const size_t elt = f32 ? sizeof(float) : sizeof(uint16_t);
    const size_t kv_stride = (size_t)(j->n_head_kv * D) * elt; /* bytes between positions */
    char *mine = j->scratch + (size_t)ith * j->per_thread;
    float *scores = (float *)mine;
    uint16_t *p16 = (uint16_t *)(scores + j->n_pos_max);
    uint16_t *q16 = p16 + j->n_pos_max;
    float *acc = (float *)(((uintptr_t)(mine + j->per_thread - (size_t)D * 4 - 64) + 63) & ~(uintptr_t)63);

    const qw_vec_dot_fn dot16 = qw_vec_dot_get(QW_TYPE_F16);
    const qw_kernel_table *kt = qw_kernels_active();
    if (j->heads == QUAD) {
        const int64_t per_tok = j->n_head / QUAD;
        for (int64_t item = i0; item < i1; item++) attend_quad(j, kt, item / per_tok, item % per_tok * QUAD, mine);
        return;
    }
    /* the level's specialised loops, NULL where it has none (f32 cache: never) */
    const __typeof__(kt->attn_scores_f16) loop_scores = f32 ? NULL : kt->attn_scores_f16;
    const __typeof__(kt->attn_values_f16) loop_values = f32 ? NULL : kt->attn_values_f16;
    for (int64_t item = i0; item < i1; item++) {
        const int64_t t = item / j->n_head, h = item % j->n_head, hkv = h / group;
        const int64_t n_pos = j->pos0 + t + 1; /* causal: positions 0..pos */
        const float *q = j->q + (t * j->n_head + h) * D;
        const size_t head_off = (size_t)(hkv * D) * elt;
        if (!f32) qw_quantize_row(QW_TYPE_F16, q, q16, D);

        float mx = -INFINITY;
        if (loop_scores && loop_scores(q16, j->k + head_off, kv_stride, n_pos, D, scores)) {
            mx = scale_max(scores, n_pos, j->scale);
        } else {
            for (int64_t s = 0; s < n_pos; s++) {
                const char *kr = j->k + (size_t)s * kv_stride + head_off;
                float d;
                if (f32) d = qw_dot_f32(q, (const float *)kr, D);
                else dot16(D, &d, kr, q16);
                d *= j->scale;
                scores[s] = d;
                mx = d > mx ? d : mx;
            }
        }
        softmax_row(kt, scores, p16, n_pos, mx, f32);
        float *out = j->out + (t * j->n_head + h) * D;
        if (loop_values && loop_values(scores, j->v + head_off, kv_stride, n_pos, D, out)) continue;
        memset(acc, 0, (size_t)D * sizeof(float));
        for (int64_t s = 0; s < n_pos; s++) {
            const char *vr = j->v + (size_t)s * kv_stride + head_off;
            if (f32) {
                qw_axpy_f32(acc, scores[s], (const float *)vr, D);
                continue;
            }
            if (scores[s] == 0.0f) continue;
            qw_axpy_f16(acc, scores[s], (const uint16_t *)vr, D); /* SIMD over head_dim */
        }
        memcpy(out, acc, (size_t)D * sizeof(float));
    }
}

void qw_attention(qw_threadpool *tp, const float *q, const void *k, const void *v, qw_type kv_type,
                  float *out, int64_t n_tok, int32_t pos0, int64_t n_head, int64_t n_head_kv,
                  int64_t head_dim, float scale, void *scratch) {
    const int n_threads = qw_threadpool_size(tp);
    const int64_t n_pos_max = pos0 + n_tok;
    const qw_kernel_table *kt = qw_kernels_active();
    /* four heads an item where four share a KV head and the level has the loops */
    const bool quad = kv_type == QW_TYPE_F16 && kt->attn_scores4_f16 && kt->attn_values4_f16 &&
                      (n_head / n_head_kv) % QUAD == 0 && (head_dim == 64 || head_dim == 128 || head_dim == 256);
    attn_job j = {q, k, v, kv_type, out, n_head, n_head_kv, head_dim, n_pos_max, pos0, scale, scratch,
                  qw_attention_scratch_bytes(n_threads, n_pos_max, head_dim) / (size_t)n_threads, quad ? QUAD : 1};
    qw_parallel_for(tp, n_tok * n_head / j.heads, 1, attend_items, &j);
}
