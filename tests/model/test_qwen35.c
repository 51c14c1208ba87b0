/* test_qwen35.c — behaviour of the qwen35moe forward pass (Gated DeltaNet +
 * gated attention + shared expert) that parity with llama.cpp does not pin
 * down: the recurrent state is exact across chunk boundaries (a prompt
 * prefilled in chunks of 1, 7, 64 and 512 gives the same logits), each lane
 * of a batched step carries its own state, truncation restarts a recurrent
 * context instead of keeping a state that no longer matches, a saved state
 * loaded back resumes exactly (the prefix cache's snapshots), and a broken
 * file names what is wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/place.h"
#include "qwisp/gen_model.h"
#include "qwisp/gguf.h"
#include "qwisp/model.h"
#include "qwisp/quant.h"
#include "model_testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[256];
static char g_f32[300], g_q8[300];

static int write_model(const char *path, uint32_t type, int interval, bool tied) {
    qw_gen_model_params p;
    qw_error err = {0};
    if (qw_gen_model_preset("tiny", &p)) return -1;
    p.arch = QW_GEN_QWEN35MOE;
    p.type = p.embd_type = type;
    p.n_layer = 4;
    p.n_embd = 64, p.n_head = 4, p.n_head_kv = 2, p.head_dim = 32, p.n_rot = 16;
    p.ssm_state = 16, p.ssm_groups = 2, p.ssm_vheads = 4;
    p.full_attn_interval = interval;
    p.tied = tied;
    if (qw_gen_model_write(&p, path, &err)) {
        fprintf(stderr, "gen: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/qwisp-test-qwen35.XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_f32, sizeof g_f32, "%s/f32.gguf", g_dir);
    snprintf(g_q8, sizeof g_q8, "%s/q8.gguf", g_dir);
    return write_model(g_f32, QW_TYPE_F32, 4, false) || write_model(g_q8, QW_TYPE_Q8_0, 2, true);
}

static int teardown(void **state) {
    (void)state;
    unlink(g_f32);
    unlink(g_q8);
    rmdir(g_dir);
    return 0;
}

static void fill_ids(int32_t *ids, int n, int V, int mul, int add) {
    for (int i = 0; i < n; i++) ids[i] = (i * mul + add) % V;
}

/* The same 600-token prompt in chunks of 1, 7, 64 and 512: identical
 * next-token logits (fp tolerance), and the layer kinds are as the file says. */
static void check_chunk_sizes(const char *path, int interval) {
    qw_error err = {0};
    qw_model *m = qw_model_load(path, &err);
    if (!m) fail_msg("load: %s", err.msg);
    assert_int_equal(m->hp.arch_id, QW_ARCH_QWEN35MOE);
    for (int il = 0; il < m->hp.n_layer; il++) assert_int_equal(m->layers[il].recurrent, (il + 1) % interval != 0);
    enum { N = 600 };
    const int V = m->hp.n_vocab;
    int32_t ids[N];
    fill_ids(ids, N, V, 37, 11);
    const int32_t chunks[] = {512, 64, 7, 1};
    float *ref = malloc((size_t)V * sizeof(float));
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        qw_ctx *c = qw_ctx_new_placed(m, 1024, 2, &err);
        assert_non_null(c);
        qw_ctx_set_chunk_size(c, chunks[k]);
        if (qw_ctx_eval(c, ids, N, QW_LOGITS_LAST, &err)) fail_msg("eval: %s", err.msg);
        assert_int_equal(qw_ctx_n_past(c), N);
        if (k == 0) {
            memcpy(ref, qw_ctx_logits(c), (size_t)V * sizeof(float));
            float lo = INFINITY, hi = -INFINITY;
            for (int i = 0; i < V; i++) {
                assert_true(isfinite(ref[i]));
                lo = fminf(lo, ref[i]), hi = fmaxf(hi, ref[i]);
            }
            assert_true(hi - lo > 1.0f);
        } else {
            const float d = max_abs_diff(qw_ctx_logits(c), ref, V);
            if (d > 1e-3f) fail_msg("chunk %d vs 512: next-token logits differ by %g", chunks[k], d);
        }
        qw_ctx_free(c);
    }
    free(ref);
    qw_model_free(m);
}

static void test_chunk_sizes_f32(void **state) { (void)state; check_chunk_sizes(g_f32, 4); }
static void test_chunk_sizes_q8(void **state) { (void)state; check_chunk_sizes(g_q8, 2); }

/* Every position's logits from one ALL prefill == token-by-token decode. */
static void test_prefill_matches_decode(void **state) {
    (void)state;
    qw_error err = {0};
    qw_model *m = qw_model_load(g_f32, &err);
    assert_non_null(m);
    enum { N = 40 };
    const int V = m->hp.n_vocab;
    int32_t ids[N];
    fill_ids(ids, N, V, 13, 5);
    qw_ctx *a = qw_ctx_new_placed(m, 64, 2, &err), *b = qw_ctx_new_placed(m, 64, 1, &err);
    assert_int_equal(qw_ctx_eval(a, ids, N, QW_LOGITS_ALL, &err), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(qw_ctx_eval(b, &ids[i], 1, QW_LOGITS_LAST, &err), 0);
        const float d = max_abs_diff(qw_ctx_logits(b), qw_ctx_logits(a) + (size_t)i * V, V);
        if (d > 1e-3f) fail_msg("position %d: decode vs prefill differ by %g", i, d);
    }
    qw_ctx_free(a);
    qw_ctx_free(b);
    qw_model_free(m);
}

/* A recurrent state cannot rewind: truncating to a shorter prefix empties
 * the context (returns 0), and the replay equals a fresh context. */
static void test_truncate_restarts(void **state) {
    (void)state;
    qw_error err = {0};
    qw_model *m = qw_model_load(g_q8, &err);
    assert_non_null(m);
    const int V = m->hp.n_vocab;
    int32_t ids[30];
    fill_ids(ids, 30, V, 7, 3);
    qw_ctx *c = qw_ctx_new_placed(m, 64, 2, &err), *fresh = qw_ctx_new_placed(m, 64, 2, &err);
    assert_true(qw_ctx_state_bytes(c) > 0);
    assert_int_equal(qw_ctx_eval(c, ids, 30, QW_LOGITS_LAST, &err), 0);
    assert_int_equal(qw_ctx_truncate(c, 30), 30); /* nothing to drop */
    assert_int_equal(qw_ctx_truncate(c, 20), 0);
    assert_int_equal(qw_ctx_n_past(c), 0);
    assert_int_equal(qw_ctx_eval(c, ids, 12, QW_LOGITS_LAST, &err), 0);
    assert_int_equal(qw_ctx_eval(fresh, ids, 12, QW_LOGITS_LAST, &err), 0);
    assert_true(max_abs_diff(qw_ctx_logits(c), qw_ctx_logits(fresh), V) == 0.0f);
    qw_ctx_free(c);
    qw_ctx_free(fresh);
    qw_model_free(m);
}

/* Marks (`qwisp ab`'s rewinds): a mark re-saved in place at a later position
 * and restored twice continues with the same logits bit for bit each time
 * (same chunks, so the same sums); a mark restores only its own context. */
static void test_mark_update_restore(void **state) {
    (void)state;
    qw_error err = {0};
    qw_model *m = qw_model_load(g_q8, &err);
    assert_non_null(m);
    const int V = m->hp.n_vocab;
    int32_t ids[40];
    fill_ids(ids, 40, V, 7, 3);
    qw_ctx *c = qw_ctx_new_placed(m, 128, 2, &err), *other = qw_ctx_new_placed(m, 128, 2, &err);
    assert_non_null(c), assert_non_null(other);
    assert_int_equal(qw_ctx_eval(c, ids, 10, QW_LOGITS_LAST, &err), 0);
    qw_ctx_mark *mk = qw_ctx_mark_save(c);
    assert_non_null(mk);
    assert_int_equal(qw_ctx_eval(c, ids + 10, 5, QW_LOGITS_LAST, &err), 0);
    assert_int_equal(qw_ctx_mark_update(c, mk), 0); /* now at 15 */
    assert_int_equal(qw_ctx_eval(c, ids + 15, 1, QW_LOGITS_LAST, &err), 0);
    float *want = malloc((size_t)V * sizeof(float));
    memcpy(want, qw_ctx_logits(c), (size_t)V * sizeof(float));
    for (int rep = 0; rep < 2; rep++) {
        assert_int_equal(qw_ctx_eval(c, ids + 20, 7, QW_LOGITS_LAST, &err), 0); /* elsewhere first */
        assert_int_equal(qw_ctx_mark_restore(c, mk), 0);
        assert_int_equal(qw_ctx_n_past(c), 15);
        assert_int_equal(qw_ctx_eval(c, ids + 15, 1, QW_LOGITS_LAST, &err), 0);
        assert_memory_equal(qw_ctx_logits(c), want, (size_t)V * sizeof(float));
    }
    assert_int_equal(qw_ctx_mark_update(other, mk), -1);
    assert_int_equal(qw_ctx_mark_restore(other, mk), -1); /* refused: other starts over */
    assert_int_equal(qw_ctx_n_past(other), 0);
    qw_ctx_mark_free(mk);
    free(want);
    qw_ctx_free(c), qw_ctx_free(other);
    qw_model_free(m);
}

/* The prefix cache's resume points: a state saved at position 16 and loaded
 * back after 30 tokens rewinds the context (the next tokens' logits equal a
 * fresh context's, within test_chunk_sizes' bound: the chunking differs); a prefix copied into another context plus
 * that state continues like the original; and the KV shrinks to fit. */
static void test_state_snapshot_resume(void **state) {
    (void)state;
    qw_error err = {0};
    qw_model *m = qw_model_load(g_q8, &err);
    assert_non_null(m);
    const int V = m->hp.n_vocab;
    int32_t ids[300], other[14];
    fill_ids(ids, 300, V, 11, 2);
    fill_ids(other, 14, V, 5, 9);
    qw_ctx *c = qw_ctx_new_placed(m, 512, 2, &err), *fresh = qw_ctx_new_placed(m, 512, 2, &err);
    qw_ctx *cp = qw_ctx_new_placed(m, 512, 2, &err);
    void *snap = malloc(qw_ctx_state_bytes(c));
    assert_non_null(snap);
    assert_int_equal(qw_ctx_eval(c, ids, 16, QW_LOGITS_LAST, &err), 0);
    qw_ctx_state_save(c, snap);
    assert_int_equal(qw_ctx_eval(c, other, 14, QW_LOGITS_LAST, &err), 0); /* diverge */
    assert_int_equal(qw_ctx_state_load(c, snap, 31), 30); /* past the end: refused */
    assert_int_equal(qw_ctx_state_load(c, snap, 16), 16);
    assert_int_equal(qw_ctx_eval(c, ids + 16, 8, QW_LOGITS_LAST, &err), 0);
    assert_int_equal(qw_ctx_eval(fresh, ids, 24, QW_LOGITS_LAST, &err), 0);
    assert_true(max_abs_diff(qw_ctx_logits(c), qw_ctx_logits(fresh), V) < 1e-3f);
    /* copy the first 16 tokens into another context, load the state there, continue */
    assert_int_equal(qw_ctx_copy_prefix(cp, c, 16, &err), 0);
    assert_int_equal(qw_ctx_n_past(cp), 16);
    assert_int_equal(qw_ctx_state_load(cp, snap, 16), 16);
    assert_int_equal(qw_ctx_eval(cp, ids + 16, 8, QW_LOGITS_LAST, &err), 0);
    assert_true(max_abs_diff(qw_ctx_logits(cp), qw_ctx_logits(fresh), V) < 1e-3f);
    assert_int_not_equal(qw_ctx_copy_prefix(cp, c, 25, &err), 0); /* more than c holds */
    /* a grown KV shrinks back to what it holds (at least 256 positions) */
    assert_int_equal(qw_ctx_eval(fresh, ids + 24, 276, QW_LOGITS_LAST, &err), 0);
    const uint64_t grown = qw_ctx_kv_bytes(fresh);
    assert_int_equal(qw_ctx_truncate(fresh, 0), 0);
    qw_ctx_kv_fit(fresh);
    assert_true(qw_ctx_kv_bytes(fresh) < grown);
    assert_int_equal(qw_ctx_eval(fresh, ids, 24, QW_LOGITS_LAST, &err), 0);
    assert_true(max_abs_diff(qw_ctx_logits(cp), qw_ctx_logits(fresh), V) < 1e-3f);
    free(snap);
    qw_ctx_free(c);
    qw_ctx_free(cp);
    qw_ctx_free(fresh);
    qw_model_free(m);
}

/* Three lanes in one batched step: each gets the logits it gets alone, so
 * each carries its own conv and delta states. */
static void test_lanes_keep_own_state(void **state) {
    (void)state;
    qw_error err = {0};
    qw_model *m = qw_model_load(g_q8, &err);
    assert_non_null(m);
    const int V = m->hp.n_vocab;
    int32_t a[9], b[5], c3[13];
    fill_ids(a, 9, V, 7, 3), fill_ids(b, 5, V, 11, 5), fill_ids(c3, 13, V, 13, 1);
    const int32_t *seqs[3] = {a, b, c3};
    const int lens[3] = {9, 5, 13};
    float *ref = malloc((size_t)6 * V * sizeof(float));
    int32_t next[3];
    for (int s = 0; s < 3; s++) {
        qw_ctx *c = qw_ctx_new_placed(m, 64, 1, &err);
        assert_int_equal(qw_ctx_eval(c, seqs[s], lens[s], QW_LOGITS_LAST, &err), 0);
        memcpy(ref + (size_t)(2 * s) * V, qw_ctx_logits(c), (size_t)V * sizeof(float));
        next[s] = (s * 5 + 2) % V;
        assert_int_equal(qw_ctx_eval(c, &next[s], 1, QW_LOGITS_LAST, &err), 0);
        memcpy(ref + (size_t)(2 * s + 1) * V, qw_ctx_logits(c), (size_t)V * sizeof(float));
        qw_ctx_free(c);
    }
    qw_ctx *ws = qw_ctx_new_placed(m, 64, 2, &err), *lanes[3];
    qw_batch_seq bs[3];
    for (int s = 0; s < 3; s++) {
        lanes[s] = qw_ctx_new_placed(m, 64, 1, &err);
        bs[s] = (qw_batch_seq){lanes[s], seqs[s], lens[s], true};
    }
    assert_int_equal(qw_batch_eval(ws, bs, 3, &err), 0);
    for (int s = 0; s < 3; s++) bs[s] = (qw_batch_seq){lanes[s], &next[s], 1, true};
    for (int step = 0; step < 2; step++) {
        if (step == 1) assert_int_equal(qw_batch_eval(ws, bs, 3, &err), 0);
        for (int s = 0; s < 3; s++) {
            const float d = max_abs_diff(qw_ctx_logits(lanes[s]), ref + (size_t)(2 * s + step) * V, V);
            if (d > 1e-4f) fail_msg("lane %d step %d: batched vs alone differ by %g", s, step, d);
        }
    }
    for (int s = 0; s < 3; s++) qw_ctx_free(lanes[s]);
    qw_ctx_free(ws);
    free(ref);
    qw_model_free(m);
}

static void test_bad_files(void **state) {
    (void)state;
    char path[320];
    qw_error err = {0};
    snprintf(path, sizeof path, "%s/bad.gguf", g_dir);
    write_gguf_variant(g_f32, path, "blk.1.ssm_a", NULL);
    assert_null(qw_model_load(path, &err));
    assert_non_null(strstr(err.msg, "missing tensor 'blk.1.ssm_a'"));
    write_gguf_variant(g_f32, path, "blk.3.ffn_gate_inp_shexp.weight", NULL);
    assert_null(qw_model_load(path, &err));
    assert_non_null(strstr(err.msg, "missing tensor 'blk.3.ffn_gate_inp_shexp.weight'"));
    write_gguf_variant(g_f32, path, NULL, "qwen35moe.attention.recurrent_layers");
    assert_null(qw_model_load(path, &err));
    assert_non_null(strstr(err.msg, "recurrent_layers"));
    unlink(path);
}

int main(void) {
    simd_from_knob("test_qwen35");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunk_sizes_f32),      cmocka_unit_test(test_chunk_sizes_q8),
        cmocka_unit_test(test_prefill_matches_decode), cmocka_unit_test(test_truncate_restarts),
        cmocka_unit_test(test_lanes_keep_own_state), cmocka_unit_test(test_state_snapshot_resume),
        cmocka_unit_test(test_mark_update_restore),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
