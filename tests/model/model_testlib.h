/* model_testlib.h — helpers shared by the model tests (static; include
 * after cmocka.h; static inline, so a test that uses some of them builds
 * without unused-function warnings):
 *   max_abs_diff        the largest |a[i] - b[i]| of two logit rows;
 *   write_gguf_variant  copies a GGUF's metadata (string, f32 and integer
 *                       keys) and tensor table with one tensor left out and/or
 *                       one bool key added, so a loader test can break a valid
 *                       file in one named way.  Tensor data is not copied
 *                       (the writer zero-fills): these files exist to be refused;
 *   simd_from_knob      runs the program at the SIMD level QWISP_SIMD names
 *                       (tests/run.sh runs the model tests once per level);
 *                       a level this CPU lacks ends the program with a
 *                       "SKIP:" line naming it, never silently. */
#ifndef QWISP_TEST_MODEL_TESTLIB_H
#define QWISP_TEST_MODEL_TESTLIB_H

#include "qwisp/gguf.h"
#include "qwisp/options.h"
#include "qwisp/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Returns normally when the program should run its tests at the knob's level
 * (or at the best level when the knob is unset or "auto"); exits 0 with one
 * SKIP line when the CPU cannot run the level asked for, 2 on a bad knob. */
static inline void simd_from_knob(const char *prog) {
    qw_error err = {0};
    if (qw_options_init(&err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        exit(2);
    }
    const char *want = qw_opt_str(QW_OPT_SIMD);
    if (!want || !strcmp(want, "auto")) return;
    if (qw_simd_force(want)) {
        fprintf(stderr, "%s: unknown SIMD level '%s'\n", prog, want);
        exit(2);
    }
    if (strcasecmp(qw_simd_level(), want) != 0) {
        printf("SKIP: %s at SIMD level %s: this CPU runs %s at most\n", prog, want, qw_simd_level());
        exit(0);
    }
    printf("INFO: %s at SIMD level %s\n", prog, qw_simd_level());
}

/* NaN or infinity on either side counts as an infinite difference (fmaxf
 * would silently drop a NaN). */
static inline float max_abs_diff(const float *a, const float *b, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) {
        const float d = fabsf(a[i] - b[i]);
        if (!isfinite(d)) return INFINITY;
        m = fmaxf(m, d);
    }
    return m;
}

static inline void write_gguf_variant(const char *src, const char *dst, const char *drop_tensor, const char *add_key) {
    qw_error err = {0};
    qw_gguf *g = qw_gguf_open(src, &err);
    assert_non_null(g);
    qw_gguf_writer *w = qw_gguf_writer_new();
    for (size_t i = 0; i < qw_gguf_n_kv(g); i++) {
        const char *key = qw_gguf_kv_key(g, i);
        const qw_gguf_vtype t = qw_gguf_kv_type(g, i);
        if (t == QW_GGUF_STRING) qw_gguf_set_str(w, key, qw_gguf_kv_str(g, i, NULL));
        else if (t == QW_GGUF_FLOAT32) {
            double d;
            qw_gguf_kv_as_f64(g, i, &d);
            qw_gguf_set_f32(w, key, (float)d);
        } else if (t == QW_GGUF_UINT32 || t == QW_GGUF_INT32) {
            int64_t v;
            qw_gguf_kv_as_i64(g, i, &v);
            qw_gguf_set_u32(w, key, (uint32_t)v);
        }
    }
    if (add_key) qw_gguf_set_bool(w, add_key, true);
    for (size_t i = 0; i < qw_gguf_n_tensors(g); i++) {
        const qw_gguf_tensor *t = qw_gguf_tensor_at(g, i);
        if (drop_tensor && !strcmp(t->name, drop_tensor)) continue;
        assert_true(qw_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, &err) >= 0);
    }
    assert_int_equal(qw_gguf_writer_write(w, dst, NULL, NULL, &err), 0);
    qw_gguf_writer_free(w);
    qw_gguf_close(g);
}

#endif
