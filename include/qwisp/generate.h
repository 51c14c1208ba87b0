/* generate.h — the prefill + decode loop for one request on one context
 * (the serialize path's unit of work).
 *
 *     qw_gen_request rq = {.prompt = ids, .n_prompt = n, .max_tokens = 64,
 *                          .sampler = qw_sampler_default_params()};
 *     qw_gen_result res;
 *     qw_generate(ctx, tok, &rq, on_token, user, &res, &err);
 */
#ifndef QWISP_GENERATE_H
#define QWISP_GENERATE_H

#include "qwisp/model.h"
#include "qwisp/sampler.h"
#include "qwisp/tokenizer.h"

typedef struct qw_gen_request {
    const int32_t *prompt;
    int32_t n_prompt;
    int32_t max_tokens;
    bool ignore_eos; /* keep going past end-of-generation tokens (benchmarks, parity) */
    int32_t n_cached; /* the first n_cached prompt tokens are already in the context's KV cache
                         (prefix reuse): only the rest is evaluated, all of them feed the penalties */
    qw_ctx *ws;       /* NULL: c computes; else c is a sequence context (one thread) and ws the
                         workspace that computes for it (qw_batch_eval, chunks of <= 512 tokens) */
    qw_sampler_params sampler;
    qw_abort_cb abort; /* optional: asked between prefill chunks; true ends the prefill with -1 + err
                          "cancelled after N of M tokens" (the serving paths' cancelled jobs) */
    void *abort_user;
} qw_gen_request;

typedef struct qw_gen_result {
    int32_t *tokens; /* generated ids (malloc'd; caller frees) */
    int32_t n_tokens;
    bool stopped_eos;
    double prefill_s;     /* prompt forward passes */
    double decode_s;      /* forward passes of generated tokens after the first */
    double ttft_s;        /* start -> first token sampled */
    uint64_t logits_hash; /* hash of the final logits row (a cheap correctness fingerprint) */
} qw_gen_result;

/* Called for each generated token; return false to stop early. */
typedef bool (*qw_token_cb)(void *user, int32_t id);

/* Evaluates the prompt past n_cached (appending to whatever the context
 * already holds), then samples up to max_tokens.  0, or -1 + err (the partial result stays valid). */
int qw_generate(qw_ctx *c, const qw_tokenizer *tok, const qw_gen_request *rq, qw_token_cb cb,
                void *user, qw_gen_result *res, qw_error *err);

#endif
