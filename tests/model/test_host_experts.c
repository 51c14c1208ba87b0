/* test_host_experts.c — the host's expert step for a device backend
 * (qwisp/host_experts.h): each output row equals that expert's FFN on that
 * token computed row by row with qw_vec_dot (the tile contract makes the
 * bits equal), whatever the assignments' order, repeats and grouping, on
 * qwen3moe files of three weight types and a qwen35moe one; and bad
 * layers, experts and tokens are refused by name.  Run once per SIMD level
 * by tests/run.sh (QWISP_SIMD, model_testlib.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/gen_model.h"
#include "qwisp/host_experts.h"
#include "qwisp/model.h"
#include "qwisp/ops.h"
#include "qwisp/quant.h"
#include "model_testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N_MODELS = 4 };
static char g_dir[256];
static char g_path[N_MODELS][300];

/* i: 0 f32, 1 Q8_0 and 2 Q4_0 with 256-wide rows (prefill tiles), 3 qwen35moe Q8_0 */
static int write_model(int i) {
    qw_gen_model_params p;
    qw_error err = {0};
    if (qw_gen_model_preset("tiny", &p)) return -1;
    static const uint32_t types[N_MODELS] = {QW_TYPE_F32, QW_TYPE_Q8_0, QW_TYPE_Q4_0, QW_TYPE_Q8_0};
    p.type = p.embd_type = types[i];
    if (i == 1 || i == 2) p.n_embd = 256, p.head_dim = 32, p.n_ff_exp = 128;
    if (i == 3) {
        p.arch = QW_GEN_QWEN35MOE;
        p.n_layer = 4;
        p.n_embd = 64, p.n_head = 4, p.n_head_kv = 2, p.head_dim = 32, p.n_rot = 16;
        p.ssm_state = 16, p.ssm_groups = 2, p.ssm_vheads = 4;
        p.full_attn_interval = 4;
    }
    if (qw_gen_model_write(&p, g_path[i], &err)) {
        fprintf(stderr, "gen: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/qwisp-test-host-experts.XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    for (int i = 0; i < N_MODELS; i++) {
        snprintf(g_path[i], sizeof g_path[i], "%s/m%d.gguf", g_dir, i);
        if (write_model(i)) return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < N_MODELS; i++) unlink(g_path[i]);
    rmdir(g_dir);
    return 0;
}

/* y[r] = dot(row r of W, the activation row xq), r < n_rows, one dot at a time. */
static void rows_dot(const qw_tensor *w, int e, int64_t n_rows, int64_t k, const void *xq, float *y) {
    const char *base = (const char *)w->data + (size_t)e * w->matrix_bytes;
    for (int64_t r = 0; r < n_rows; r++) qw_vec_dot(w->type, k, &y[r], base + (size_t)r * w->row_bytes, xq);
}

/* The expert's FFN on one token, the slow way. */
static void reference(const qw_model *m, qw_threadpool *tp, int il, int e, const float *x, float *out) {
    const qw_layer *L = &m->layers[il];
    const int E = m->hp.n_embd, F = m->hp.n_ff_exp;
    char *xq = malloc(qw_act_bytes(L->gate_exps.type, E, 1) + qw_act_bytes(L->up_exps.type, E, 1));
    char *uq = xq + qw_act_bytes(L->gate_exps.type, E, 1);
    char *hq = malloc(qw_act_bytes(L->down_exps.type, F, 1));
    float *g = malloc((size_t)F * sizeof(float)), *u = malloc((size_t)F * sizeof(float));
    qw_act_convert(tp, L->gate_exps.type, x, E, E, 1, xq);
    qw_act_convert(tp, L->up_exps.type, x, E, E, 1, uq);
    rows_dot(&L->gate_exps, e, F, E, xq, g);
    rows_dot(&L->up_exps, e, F, E, uq, u);
    qw_swiglu(g, g, u, F);
    qw_act_convert(tp, L->down_exps.type, g, F, F, 1, hq);
    rows_dot(&L->down_exps, e, E, F, hq, out);
    free(xq);
    free(hq);
    free(g);
    free(u);
}

static void check_model(const char *path) {
    qw_error err = {0};
    qw_model *m = qw_model_load(path, &err);
    assert_non_null(m);
    const int E = m->hp.n_embd, X = m->hp.n_expert, n_tok = 3;
    float *xn = malloc((size_t)n_tok * E * sizeof(float));
    for (int i = 0; i < n_tok * E; i++) xn[i] = (float)((i * 7919) % 2003) / 1001.0f - 1.0f;
    /* repeats, an expert shared by tokens, tokens out of order */
    const int32_t tok[] = {2, 0, 1, 0, 2, 1, 0, 2};
    const int32_t ex[] = {3 % X, 3 % X, 0, 5 % X, 1, 3 % X, 0, 7 % X};
    const int n = (int)(sizeof tok / sizeof *tok);
    float *out = malloc((size_t)n * E * sizeof(float)), *want = malloc((size_t)E * sizeof(float));
    qw_threadpool *tp = qw_threadpool_new(1);
    qw_host_experts *hx = qw_host_experts_new(m, 2);
    for (int il = 0; il < m->hp.n_layer; il++) {
        memset(out, 0xff, (size_t)n * E * sizeof(float));
        assert_int_equal(qw_host_experts_run(hx, il, xn, n_tok, tok, ex, n, out, &err), 0);
        for (int i = 0; i < n; i++) {
            reference(m, tp, il, ex[i], xn + (size_t)tok[i] * E, want);
            if (memcmp(out + (size_t)i * E, want, (size_t)E * sizeof(float))) {
                fprintf(stderr, "%s layer %d assignment %d (token %d, expert %d): not the row-by-row bits\n", path,
                        il, i, tok[i], ex[i]);
                fail();
            }
        }
        /* one assignment alone gives its row of the batch */
        float one[1024];
        assert_true(E <= 1024);
        assert_int_equal(qw_host_experts_run(hx, il, xn, n_tok, tok + 4, ex + 4, 1, one, &err), 0);
        assert_memory_equal(one, out + (size_t)4 * E, (size_t)E * sizeof(float));
    }
    /* nothing to do is fine; bad input is refused by name */
    assert_int_equal(qw_host_experts_run(hx, 0, xn, n_tok, tok, ex, 0, out, &err), 0);
    const int32_t bad_e[] = {X}, bad_t[] = {n_tok}, ok[] = {0};
    assert_int_equal(qw_host_experts_run(hx, 0, xn, n_tok, ok, bad_e, 1, out, &err), -1);
    assert_non_null(strstr(err.msg, "expert"));
    assert_int_equal(qw_host_experts_run(hx, 0, xn, n_tok, bad_t, ok, 1, out, &err), -1);
    assert_non_null(strstr(err.msg, "token"));
    assert_int_equal(qw_host_experts_run(hx, m->hp.n_layer, xn, n_tok, ok, ok, 1, out, &err), -1);
    assert_non_null(strstr(err.msg, "layer"));
    qw_host_experts_free(hx);
    qw_threadpool_free(tp);
    free(xn);
    free(out);
    free(want);
    qw_model_free(m);
}

static void test_f32(void **state) { (void)state; check_model(g_path[0]); }
static void test_q8_0_wide(void **state) { (void)state; check_model(g_path[1]); }
static void test_q4_0_wide(void **state) { (void)state; check_model(g_path[2]); }
static void test_qwen35moe(void **state) { (void)state; check_model(g_path[3]); }

int main(void) {
    simd_from_knob("test_host_experts");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32),
        cmocka_unit_test(test_q8_0_wide),
        cmocka_unit_test(test_q4_0_wide),
        cmocka_unit_test(test_qwen35moe),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
