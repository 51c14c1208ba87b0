/* test_attention.c — qw_attention's grouped-query form gives each head the
 * bits it gets alone.
 *
 * Where four query heads share a KV head, a level with the four-row loops
 * (attention_avx512.c) runs them as one work item: each cached K and V row is
 * converted once for the four.  The check: the same queries against the same
 * cache laid out once per query head (n_head_kv = n_head, so every head runs
 * by itself) must give identical outputs, bit for bit, at every SIMD level
 * this CPU runs, for head_dim 64 / 128 / 256 and for decode (one token) and
 * prefill rows.  The queries are scaled so many positions get p = 0 after
 * the f16 rounding (the single-row loop skips those positions; the grouped
 * one must leave the sums as the skip does: some V entries are infinite, so
 * adding 0 * v instead would give NaN), and some V entries are -0.0.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "levels.h"
#include "qwisp/ops.h"
#include "qwisp/threadpool.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* out of one qw_attention call over an f16 cache [pos][hkv][D] */
static float *attend(qw_threadpool *tp, const float *q, const uint16_t *k, const uint16_t *v, int n_tok, int pos0,
                     int H, int HKV, int D) {
    const int n_pos = pos0 + n_tok;
    void *scratch = malloc(qw_attention_scratch_bytes(qw_threadpool_size(tp), n_pos, D));
    float *out = malloc((size_t)n_tok * H * D * sizeof(float));
    assert_non_null(scratch), assert_non_null(out);
    qw_attention(tp, q, k, v, QW_TYPE_F16, out, n_tok, pos0, H, HKV, D, 1.0f / sqrtf((float)D), scratch);
    free(scratch);
    return out;
}

static void check_shape(qw_threadpool *tp, int D, int n_tok, int n_pos, const char *level) {
    enum { H = 8, HKV = 2 };
    const int pos0 = n_pos - n_tok;
    float *q = malloc((size_t)n_tok * H * D * sizeof(float)), *kv32 = malloc((size_t)n_pos * HKV * D * sizeof(float));
    uint16_t *k = malloc((size_t)n_pos * HKV * D * 2), *v = malloc((size_t)n_pos * HKV * D * 2);
    uint16_t *k1 = malloc((size_t)n_pos * H * D * 2), *v1 = malloc((size_t)n_pos * H * D * 2);
    if (!q || !kv32 || !k || !v || !k1 || !v1) fail_msg("out of memory");
    for (int i = 0; i < n_tok * H * D; i++) q[i] = 30.0f * rnd(); /* peaked: most far p round to 0 */
    for (int i = 0; i < n_pos * HKV * D; i++) kv32[i] = rnd();
    qw_quantize_row(QW_TYPE_F16, kv32, k, (int64_t)n_pos * HKV * D);
    for (int i = 0; i < n_pos * HKV * D; i++) kv32[i] = i % 97 == 0 ? -0.0f : rnd();
    for (int p = 0; p < n_pos; p += 50) kv32[(size_t)p * HKV * D + 7] = INFINITY; /* 0 * inf: only a skip avoids NaN */
    qw_quantize_row(QW_TYPE_F16, kv32, v, (int64_t)n_pos * HKV * D);
    for (int p = 0; p < n_pos; p++) /* every query head its own copy of its group's row */
        for (int h = 0; h < H; h++) {
            const size_t src = ((size_t)p * HKV + h / (H / HKV)) * D, dst = ((size_t)p * H + h) * D;
            memcpy(k1 + dst, k + src, (size_t)D * 2);
            memcpy(v1 + dst, v + src, (size_t)D * 2);
        }
    float *grouped = attend(tp, q, k, v, n_tok, pos0, H, HKV, D);
    float *alone = attend(tp, q, k1, v1, n_tok, pos0, H, H, D);
    if (memcmp(grouped, alone, (size_t)n_tok * H * D * sizeof(float)))
        fail_msg("%s, head_dim %d, %d tokens at %d positions: grouped heads differ from heads alone", level, D, n_tok,
                 n_pos);
    free(grouped), free(alone), free(q), free(kv32), free(k), free(v), free(k1), free(v1);
}

static void test_grouped_heads_same_bits(void **state) {
    (void)state;
    qw_threadpool *tp = qw_threadpool_new(2);
    assert_non_null(tp);
    for (int l = 0; l < N_LEVELS; l++) {
        if (!use_level(k_levels[l])) continue;
        const int dims[] = {64, 128, 256};
        for (int d = 0; d < 3; d++) {
            check_shape(tp, dims[d], 1, 700, k_levels[l]); /* decode */
            check_shape(tp, dims[d], 5, 300, k_levels[l]); /* prefill rows */
        }
    }
    restore_best();
    qw_threadpool_free(tp);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_grouped_heads_same_bits)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
