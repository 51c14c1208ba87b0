/* serialize.c — the serialize execution path (the default): jobs queue FIFO
 * and run one at a time on a single context by one worker thread.
 *
 * Per job: the KV cache is emptied (qw_ctx_truncate(c, 0)), the prompt is
 * prefilled and tokens decoded by qw_generate; after every token the job's
 * stop/cancel flags are checked, so an abandoned request stops within one
 * token and a job cancelled while still queued never runs.  The pool's
 * serialize-path policy (QWISP_PREFILL_CACHE_MB, QWISP_POOL_FIT) is applied
 * once when the path starts — it is the only path in the process.
 *
 * Invariants: at most one job is running; queued + running <= max_queue + 1
 * (submit refuses beyond that);
 * after drain returns, the queue is empty and nothing runs; the worker is the
 * only thread that touches the context.
 */
#include "job_queue.h"
#include "qwisp/generate.h"
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
    qw_ctx *ctx;
    pthread_t worker;
    qw_job_queue q;
} serial;

static bool on_token(void *user, int32_t id) { return qw_job_push(user, id); }

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
    qw_ctx_truncate(s->ctx, 0);
    qw_gen_request rq = {.prompt = p->prompt,
                         .n_prompt = p->n_prompt,
                         .max_tokens = p->max_tokens,
                         .ignore_eos = p->ignore_eos,
                         .sampler = p->sampler};
    qw_gen_result res = {0};
    qw_error err = {0};
    int rc = p->max_tokens > 0 ? qw_generate(s->ctx, s->cfg.tok, &rq, on_token, j, &res, &err)
                               : qw_ctx_eval(s->ctx, p->prompt, p->n_prompt, QW_LOGITS_NONE, &err);
    r.prefill_s = res.prefill_s;
    r.decode_s = res.decode_s;
    r.ttft_s = res.ttft_s;
    r.n_gen = res.n_tokens;
    if (rc) {
        r.finish = QW_FINISH_ERROR;
        snprintf(r.error, sizeof r.error, "%s", err.msg);
    } else if (qw_job_is_cancelled(j)) r.finish = QW_FINISH_CANCELLED;
    else if (res.stopped_eos) r.finish = QW_FINISH_EOS;
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
        qw_jq_finish(&s->q, j, &r);
    }
    return NULL;
}

static int ser_submit(qw_sched *b, qw_job *j, qw_error *err) { return qw_jq_submit(&((serial *)b)->q, j, err); }
static void ser_drain(qw_sched *b) { qw_jq_drain(&((serial *)b)->q); }
static void ser_stats(qw_sched *b, qw_sched_stats *out) { qw_jq_stats(&((serial *)b)->q, out); }

static void ser_free(qw_sched *b) {
    serial *s = (serial *)b;
    qw_jq_drain(&s->q);
    qw_jq_quit(&s->q);
    pthread_join(s->worker, NULL);
    qw_ctx_free(s->ctx);
    qw_jq_destroy(&s->q);
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
    if (pthread_create(&s->worker, NULL, worker_main, s)) {
        qw_ctx_free(s->ctx);
        qw_jq_destroy(&s->q);
        free(s);
        qw_fail(err, "cannot start the serialize worker thread");
        return NULL;
    }
    return &s->base;
}
