/* generate.c — one request's prefill + decode loop on a context.
 *
 * Timing: prefill_s covers the prompt's forward passes; ttft_s runs from the
 * start to the first sampled token (prefill + sampling); decode_s covers the
 * forward passes of the tokens after the first, so decode tok/s =
 * (n_tokens - 1) / decode_s — the llama-bench convention.
 */
#include "qwisp/generate.h"

#include <stdlib.h>

/* Appends tokens to c: on c itself, or through workspace ws (a batch of one
 * sequence, in chunks of at most ws's default chunk size).  rq's abort is
 * asked between chunks either way. */
static int eval_on(qw_ctx *c, const qw_gen_request *rq, const int32_t *t, int32_t n, qw_error *err) {
    qw_ctx *ws = rq->ws;
    if (!ws) {
        qw_ctx_set_abort(c, rq->abort, rq->abort_user);
        int rc = qw_ctx_eval(c, t, n, QW_LOGITS_LAST, err);
        qw_ctx_set_abort(c, NULL, NULL);
        return rc;
    }
    for (int32_t done = 0, total = n; n > 0;) {
        if (done > 0 && rq->abort && rq->abort(rq->abort_user))
            return qw_fail(err, "cancelled after %d of %d tokens", done, total);
        int32_t k = n > 512 ? 512 : n;
        done += k;
        qw_batch_seq sq = {.ctx = c, .tokens = t, .n = k, .logits = k == n};
        if (qw_batch_eval(ws, &sq, 1, err)) return -1;
        t += k;
        n -= k;
    }
    return 0;
}

int qw_generate(qw_ctx *c, const qw_tokenizer *tok, const qw_gen_request *rq, qw_token_cb cb,
                void *user, qw_gen_result *res, qw_error *err) {
    *res = (qw_gen_result){0};
    if (rq->n_prompt <= 0) return qw_fail(err, "empty prompt");
    if (rq->n_cached < 0 || rq->n_cached >= rq->n_prompt)
        return qw_fail(err, "n_cached = %d: need 0 <= n_cached < n_prompt (%d)", rq->n_cached, rq->n_prompt);
    const int32_t n_vocab = qw_tokenizer_n_vocab(tok);
    int32_t cap = rq->max_tokens > 0 ? rq->max_tokens : 0;
    res->tokens = malloc((size_t)(cap ? cap : 1) * sizeof(int32_t));
    if (!res->tokens) return qw_fail(err, "out of memory");
    qw_sampler *s = qw_sampler_new(&rq->sampler, n_vocab);
    if (!s) return qw_fail(err, "out of memory creating the sampler");
    for (int32_t i = 0; i < rq->n_prompt; i++) qw_sampler_accept(s, rq->prompt[i]);

    const double t0 = qw_time_s();
    int rc = eval_on(c, rq, rq->prompt + rq->n_cached, rq->n_prompt - rq->n_cached, err);
    res->prefill_s = qw_time_s() - t0;
    double t_decode = 0.0;
    while (rc == 0 && res->n_tokens < cap) {
        const float *logits = qw_ctx_logits(c);
        int32_t id = qw_sampler_sample(s, logits);
        if (res->n_tokens == 0) res->ttft_s = qw_time_s() - t0;
        qw_sampler_accept(s, id);
        res->tokens[res->n_tokens++] = id;
        bool eog = qw_tokenizer_is_eog(tok, id);
        if (cb && !cb(user, id)) break;
        if (eog && !rq->ignore_eos) {
            res->stopped_eos = true;
            break;
        }
        if (res->n_tokens == cap) break;
        const double t1 = qw_time_s();
        rc = eval_on(c, rq, &id, 1, err);
        t_decode += qw_time_s() - t1;
    }
    res->decode_s = t_decode;
    if (rc == 0 && qw_ctx_logits(c))
        res->logits_hash = qw_hash64(qw_ctx_logits(c), (size_t)n_vocab * sizeof(float), 0);
    qw_sampler_free(s);
    return rc;
}
