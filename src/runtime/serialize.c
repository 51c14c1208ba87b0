/* serialize.c — the serialize execution path (the default): jobs queue FIFO
 * and run one at a time by one worker thread.
 *
 * Per job: the KV cache is emptied (qw_ctx_truncate(c, 0)), the prompt is
 * prefilled and tokens decoded by qw_generate; after every token the job's
 * stop/cancel flags are checked, so an abandoned request stops within one
 * token and a job cancelled while still queued never runs; during the prompt
 * the cancel flag is asked between chunks (qw_gen_request.abort), so a client
 * that leaves during a long prefill frees the worker within one chunk.  The pool's
 * serialize-path policy (QWISP_PREFILL_CACHE_MB, QWISP_POOL_FIT) is applied
 * once when the path starts — it is the only path in the process.
 *
 * With QWISP_PREFIX_CACHE_MB > 0 a job instead runs on a prefix-cache entry
 * (prefix_cache.h): a sequence context kept from earlier requests whose KV
 * already holds the longest token prefix the prompt shares with it, so only
 * the rest is prefilled — the agent / chat case where every turn resends
 * the same system prompt and history.  The path's own context is then the
 * workspace that computes for the entry (qw_batch_eval, one sequence), as
 * the lanes path does.  KV rows reused were computed in another chunking
 * (or by decode steps), so logits may differ from a cold prefill in the last
 * bits, as with llama.cpp's prompt cache; the tests find greedy tokens equal.
 * For a model with recurrent layers the prompt is prefilled block by block
 * up to its last block boundary (prefill_blocks), the state snapshotted at
 * each: the positions a later prompt can resume from.
 *
 * Invariants: at most one job is running; queued + running <= max_queue + 1
 * (submit refuses beyond that);
 * after drain returns, the queue is empty and nothing runs; the worker is the
 * only thread that touches the contexts.
 */
#include "job_queue.h"
#include "prefix_cache.h"
#include "qwisp/threadpool.h"
#include "qwisp/generate.h"
#include "qwisp/options.h"
#include "qwisp/place.h"
#include "qwisp/pool.h"
#include "qwisp/sched.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct serial {
    qw_sched base;
    qw_sched_config cfg;
    qw_ctx *ctx;    /* the context (without a prefix cache), or the workspace (with) */
    qw_pcache *pc;  /* QWISP_PREFIX_CACHE_MB > 0, else NULL */
    pthread_t worker;
    qw_job_queue q;
} serial;

typedef struct tok_sink {
    serial *s;
    qw_ctx *c; /* the sequence the job runs on */
    qw_job *j;
} tok_sink;

/* Called before the next forward pass, so the context's logits are still the
 * row the token was drawn from (for the job's logprobs). */
static bool on_token(void *user, int32_t id) {
    tok_sink *k = user;
    qw_jq_set_kv(&k->s->q, qw_ctx_n_past(k->c));
    return qw_job_push_logits(k->j, id, qw_ctx_logits(k->c), qw_tokenizer_n_vocab(k->s->cfg.tok));
}

static bool job_cancelled(void *j) { return qw_job_is_cancelled(j); }

/* With a recurrent model: prefills prompt[*keep..) on entry c up to its last
 * block boundary before the prompt's final token, one block at a time,
 * snapshotting the state at each boundary (the prefix cache's resume
 * points); *keep advances.  qw_generate does the rest.  0, or -1 + err. */
static int prefill_blocks(serial *s, qw_ctx *c, qw_job *j, const int32_t *prompt, int32_t n, int32_t *keep,
                          qw_error *err) {
    const int32_t B = qw_pcache_snap_block(s->pc);
    if (B <= 0) return 0;
    while ((*keep / B + 1) * B <= n - 1) {
        if (qw_job_is_cancelled(j)) return qw_fail(err, "cancelled after %d of %d tokens", *keep, n);
        const int32_t end = (*keep / B + 1) * B;
        for (int32_t at = *keep; at < end;) {
            int32_t k = end - at > 512 ? 512 : end - at;
            qw_batch_seq sq = {.ctx = c, .tokens = prompt + at, .n = k};
            if (qw_batch_eval(s->ctx, &sq, 1, err)) return -1;
            at += k;
        }
        *keep = end;
        qw_pcache_snapshot(s->pc, c);
    }
    return 0;
}

/* Runs one job to its end and fills r (finish, timings, n_prompt, n_gen);
 * the caller publishes it with qw_job_finish after accounting. */
static void run_job(serial *s, qw_job *j, qw_job_result *out) {
    qw_job_result r = {0};
    r.n_prompt = qw_job_params_of(j)->n_prompt;
    if (qw_job_is_cancelled(j)) {
        r.finish = QW_FINISH_CANCELLED;
        *out = r;
        return;
    }
    qw_job_mark_started(j);
    const qw_job_params *p = qw_job_params_of(j);
    qw_error err = {0};
    int32_t keep = 0;
    qw_ctx *c = s->ctx;
    if (s->pc) {
        c = qw_pcache_acquire(s->pc, p->prompt, p->n_prompt, &keep, &err);
        if (!c) {
            r.finish = QW_FINISH_ERROR;
            snprintf(r.error, sizeof r.error, "%s", err.msg);
            *out = r;
            return;
        }
        atomic_fetch_add(&s->q.prefix_queried, (uint64_t)p->n_prompt);
        atomic_fetch_add(&s->q.prefix_hit, (uint64_t)keep);
    } else qw_ctx_truncate(c, 0);
    const double t0 = qw_time_s();
    int rc = s->pc ? prefill_blocks(s, c, j, p->prompt, p->n_prompt, &keep, &err) : 0;
    const double t_blocks = qw_time_s() - t0;
    qw_gen_request rq = {.prompt = p->prompt,
                         .n_prompt = p->n_prompt,
                         .n_cached = keep,
                         .ws = s->pc ? s->ctx : NULL,
                         .max_tokens = p->max_tokens,
                         .ignore_eos = p->ignore_eos,
                         .sampler = p->sampler,
                         .abort = job_cancelled,
                         .abort_user = j};
    qw_gen_result res = {0};
    tok_sink sink = {s, c, j};
    if (rc == 0 && p->max_tokens > 0) rc = qw_generate(c, s->cfg.tok, &rq, on_token, &sink, &res, &err);
    else if (rc == 0 && !s->pc) rc = qw_ctx_eval(c, p->prompt, p->n_prompt, QW_LOGITS_NONE, &err);
    else if (rc == 0) {
        qw_batch_seq sq = {.ctx = c, .tokens = p->prompt + keep, .n = p->n_prompt - keep};
        rc = qw_batch_eval(s->ctx, &sq, 1, &err);
    }
    r.prefill_s = res.prefill_s + t_blocks;
    r.decode_s = res.decode_s;
    r.ttft_s = res.ttft_s > 0 ? res.ttft_s + t_blocks : 0;
    r.n_gen = res.n_tokens;
    const bool cut = rc && res.n_tokens == 0 && qw_job_is_cancelled(j); /* the abort's -1, during the prompt */
    /* a prompt cut short still left known KV: its first n_past prompt tokens */
    if (s->pc) qw_pcache_record(s->pc, c, p->prompt, p->n_prompt, res.tokens, res.n_tokens, rc == 0 || cut);
    if (qw_job_is_cancelled(j)) {
        r.finish = QW_FINISH_CANCELLED;
        if (cut) {
            r.in_prompt = true;
            r.prefill_s = r.ttft_s = 0; /* not a prefill speed */
            snprintf(r.error, sizeof r.error, "%s", err.msg);
        }
    } else if (rc) {
        r.finish = QW_FINISH_ERROR;
        snprintf(r.error, sizeof r.error, "%s", err.msg);
    } else if (res.stopped_eos) r.finish = QW_FINISH_EOS;
    else if (qw_job_is_stopped(j)) r.finish = QW_FINISH_STOPPED;
    else r.finish = QW_FINISH_LENGTH;
    free(res.tokens);
    *out = r;
}

static void *worker_main(void *arg) {
    serial *s = arg;
    qw_job *j;
    while ((j = qw_jq_pop(&s->q, true)) != NULL) {
        qw_job_result r;
        run_job(s, j, &r);
        qw_jq_set_kv(&s->q, 0); /* the next job starts from an empty cache */
        qw_jq_finish(&s->q, j, &r);
    }
    return NULL;
}

static int ser_submit(qw_sched *b, qw_job *j, qw_error *err) { return qw_jq_submit(&((serial *)b)->q, j, err); }
static void ser_drain(qw_sched *b) { qw_jq_drain(&((serial *)b)->q); }
static void ser_stats(qw_sched *b, qw_sched_stats *out) {
    serial *s = (serial *)b;
    qw_jq_stats(&s->q, out);
    qw_pcache_sched_stats(s->pc, out);
}

static void ser_free(qw_sched *b) {
    serial *s = (serial *)b;
    qw_jq_drain(&s->q);
    qw_jq_quit(&s->q);
    pthread_join(s->worker, NULL);
    qw_ctx_free(s->ctx);
    qw_jq_destroy(&s->q);
    qw_pcache_free(s->pc);
    free(s);
}

static const qw_sched_ops k_serial_ops = {
    .name = "serialize", .submit = ser_submit, .drain = ser_drain, .stats = ser_stats, .free = ser_free};

qw_sched *qw_sched_serialize_new(const qw_sched_config *cfg, qw_error *err) {
    if (qw_pool_apply_path(QW_POOL_PATH_SERIALIZE, err)) return NULL;
    if (qw_place_experts(cfg->model, cfg->n_ctx, err)) return NULL;
    serial *s = calloc(1, sizeof *s);
    if (!s) {
        qw_fail(err, "out of memory creating the serialize scheduler");
        return NULL;
    }
    s->base.ops = &k_serial_ops;
    s->cfg = *cfg;
    s->ctx = qw_ctx_new(cfg->model, cfg->n_ctx, cfg->n_threads, err);
    if (!s->ctx) {
        free(s);
        return NULL;
    }
    qw_jq_init(&s->q, cfg->max_queue, 1);
    s->q.kv_capacity = cfg->n_ctx;
    int64_t mb = qw_opt_int(QW_OPT_PREFIX_CACHE_MB);
    if (mb > 0) {
        s->pc = qw_pcache_new(cfg->model, cfg->n_ctx, (uint64_t)mb << 20, (int32_t)qw_opt_int(QW_OPT_PREFIX_BLOCK),
                              qw_opt_str(QW_OPT_PREFIX_CACHE_DIR), err);
        if (!s->pc) {
            qw_ctx_free(s->ctx);
            qw_jq_destroy(&s->q);
            free(s);
            return NULL;
        }
        s->q.prefix_reuse = true;
    }
    if (qw_thread_start(&s->worker, worker_main, s)) {
        qw_ctx_free(s->ctx);
        qw_jq_destroy(&s->q);
        free(s);
        qw_fail(err, "cannot start the serialize worker thread");
        return NULL;
    }
    return &s->base;
}
