/* stream_testlib.h — what the streaming-tier tests share (static; include
 * after cmocka.h): a knob setter that must succeed, and the fixed greedy run
 * whose logits every tier and engine must reproduce bit for bit:
 *   run_seq  prompt of N_PROMPT ids + N_GEN greedy steps, every step's logits
 *            row into out[(N_GEN + 1)][vocab];
 *   new_ctx  a placed context of 256 positions, 2 threads, CHUNK-token
 *            prefill chunks (several chunks per prompt, so chunking is tested). */
#ifndef QWISP_TEST_STREAM_TESTLIB_H
#define QWISP_TEST_STREAM_TESTLIB_H

#include "qwisp/model.h"
#include "qwisp/options.h"
#include "qwisp/place.h"

#include <stdio.h>
#include <string.h>

enum { N_PROMPT = 40, N_GEN = 12, CHUNK = 16 };

static inline void set_opt(qw_opt id, const char *v) {
    qw_error err = {0};
    if (qw_opt_set(id, v, "test", &err)) fprintf(stderr, "set: %s\n", err.msg);
    assert_int_equal(qw_opt_set(id, v, "test", &err), 0);
}

static inline int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* 0, or -1 with err filled at the first failing eval. */
static inline int run_seq(qw_ctx *c, int32_t vocab, float *out, qw_error *err) {
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = (i * 37 + 11) % vocab;
    qw_ctx_truncate(c, 0);
    if (qw_ctx_eval(c, prompt, N_PROMPT, QW_LOGITS_LAST, err)) return -1;
    memcpy(out, qw_ctx_logits(c), (size_t)vocab * sizeof(float));
    for (int s = 1; s <= N_GEN; s++) {
        int32_t t = argmax(out + (size_t)(s - 1) * vocab, vocab);
        if (qw_ctx_eval(c, &t, 1, QW_LOGITS_LAST, err)) return -1;
        memcpy(out + (size_t)s * vocab, qw_ctx_logits(c), (size_t)vocab * sizeof(float));
    }
    return 0;
}

static inline qw_ctx *new_ctx(qw_model *m) {
    qw_error err = {0};
    qw_ctx *c = qw_ctx_new_placed(m, 256, 2, &err);
    assert_non_null(c);
    qw_ctx_set_chunk_size(c, CHUNK);
    return c;
}

#endif
