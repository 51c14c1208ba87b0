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
#include "qwisp/generate.h"
#include "qwisp/pool.h"
#include "qwisp/sched.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct node {
    qw_job *job;
    struct node *next;
} node;

typedef struct serial {
    qw_sched base;
    qw_sched_config cfg;
    qw_ctx *ctx;
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* queue non-empty or quitting */
    pthread_cond_t idle_cv; /* queue empty and nothing running */
    node *head, *tail;
    int32_t n_queued, n_running;
    bool draining, quit;
    qw_sched_stats st;
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

/* Adds a finished job to the stats; under s->mu. */
static void account(serial *s, const qw_job_result *rp) {
    const qw_job_result r = *rp;
    qw_sched_stats *st = &s->st;
    if (r.finish == QW_FINISH_CANCELLED) st->cancelled++;
    else if (r.finish == QW_FINISH_ERROR) st->failed++;
    else st->completed++;
    if (r.prefill_s > 0) {
        st->prompt_tokens += (uint64_t)r.n_prompt;
        st->prefill_s += r.prefill_s;
        st->last_prefill_tok_s = r.n_prompt / r.prefill_s;
    }
    st->gen_tokens += (uint64_t)r.n_gen;
    if (r.decode_s > 0 && r.n_gen > 1) {
        st->decode_s += r.decode_s;
        st->last_decode_tok_s = (r.n_gen - 1) / r.decode_s;
    }
}

static void *worker_main(void *arg) {
    serial *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head) break;
        node *n = s->head;
        s->head = n->next;
        if (!s->head) s->tail = NULL;
        s->n_queued--;
        s->n_running = 1;
        pthread_mutex_unlock(&s->mu);
        qw_job_result r;
        run_job(s, n->job, &r);
        pthread_mutex_lock(&s->mu);
        account(s, &r);
        s->n_running = 0;
        /* Published after the stats, so a consumer that saw its job end
         * reads metrics that include it. */
        qw_job_finish(n->job, &r);
        qw_job_release(n->job);
        free(n);
        if (!s->head) pthread_cond_broadcast(&s->idle_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int ser_submit(qw_sched *b, qw_job *j, qw_error *err) {
    serial *s = (serial *)b;
    node *n = malloc(sizeof *n);
    if (!n) return qw_fail(err, QW_SCHED_BUSY " out of memory queueing the request");
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->draining) rc = qw_fail(err, QW_SCHED_DRAINING " the server is shutting down");
    else if (s->n_queued + s->n_running > s->cfg.max_queue)
        rc = qw_fail(err, QW_SCHED_BUSY " %d requests are already queued (limit %d)", s->n_queued,
                     s->cfg.max_queue);
    if (rc == 0) {
        qw_job_retain(j);
        *n = (node){.job = j};
        if (s->tail) s->tail->next = n;
        else s->head = n;
        s->tail = n;
        s->n_queued++;
        s->st.submitted++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc) free(n);
    return rc;
}

static void ser_drain(qw_sched *b) {
    serial *s = (serial *)b;
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    while (s->head || s->n_running) pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static void ser_stats(qw_sched *b, qw_sched_stats *out) {
    serial *s = (serial *)b;
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->queued = s->n_queued;
    out->running = s->n_running;
    pthread_mutex_unlock(&s->mu);
}

static void ser_free(qw_sched *b) {
    serial *s = (serial *)b;
    ser_drain(b);
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->worker, NULL);
    qw_ctx_free(s->ctx);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->idle_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static const qw_sched_ops k_serial_ops = {
    .name = "serialize", .submit = ser_submit, .drain = ser_drain, .stats = ser_stats, .free = ser_free};

qw_sched *qw_sched_serialize_new(const qw_sched_config *cfg, qw_error *err) {
    if (qw_pool_apply_path(QW_POOL_PATH_SERIALIZE, err)) return NULL;
    serial *s = calloc(1, sizeof *s);
    if (!s) {
        qw_fail(err, "out of memory creating the serialize scheduler");
        return NULL;
    }
    s->base.ops = &k_serial_ops;
    s->cfg = *cfg;
    if (s->cfg.max_queue < 0) s->cfg.max_queue = 0;
    s->ctx = qw_ctx_new(cfg->model, cfg->n_ctx, cfg->n_threads, err);
    if (!s->ctx) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    if (pthread_create(&s->worker, NULL, worker_main, s)) {
        qw_ctx_free(s->ctx);
        free(s);
        qw_fail(err, "cannot start the serialize worker thread");
        return NULL;
    }
    return &s->base;
}
