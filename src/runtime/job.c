/* job.c — one request as the runtime sees it (sched.h): a copy of the prompt,
 * the generated tokens so far, two end flags and the result.
 *
 * Design: a job is shared by exactly two parties — its consumer (an HTTP
 * connection or the CLI) and the scheduler that runs it — so it is reference
 * counted (atomic) and everything mutable sits under one mutex with one
 * condition variable: the producer signals after each token and at the end;
 * the consumer waits with a timeout so it can also watch its socket.
 * Invariants: tokens[0..n_tokens) never change once pushed; finish goes from
 * NONE to a final value exactly once; n_tokens <= max(max_tokens, 1).
 * The token array is sized from max_tokens at creation, so pushing never
 * allocates on the decode path; so is the logprobs array, when asked for.
 * The job owns its sampler constraint (params.sampler.constraint) and frees
 * it with the job: the consumer may be gone while the scheduler still
 * samples with it.
 */
#include "qwisp/sched.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct qw_job {
    atomic_int refs;
    atomic_bool stop, cancel;
    qw_job_params params; /* params.prompt points at prompt below */
    int32_t *prompt;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t *tokens; /* [cap] */
    qw_token_logprobs *lps; /* [cap] when params.logprobs, else NULL */
    int32_t n_tokens, cap;
    double t_submit, t_start;
    qw_job_result result; /* finish == NONE until the end */
};

const char *qw_finish_name(qw_finish f) {
    switch (f) {
    case QW_FINISH_NONE: return "none";
    case QW_FINISH_EOS: return "eos";
    case QW_FINISH_LENGTH: return "length";
    case QW_FINISH_STOPPED: return "stop";
    case QW_FINISH_CANCELLED: return "cancelled";
    case QW_FINISH_ERROR: return "error";
    }
    return "?";
}

qw_job *qw_job_new(const qw_job_params *p) {
    qw_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->cap = p->max_tokens > 0 ? p->max_tokens : 1;
    j->prompt = malloc((size_t)(p->n_prompt > 0 ? p->n_prompt : 1) * sizeof(int32_t));
    j->tokens = malloc((size_t)j->cap * sizeof(int32_t));
    j->lps = p->logprobs ? malloc((size_t)j->cap * sizeof *j->lps) : NULL;
    if (!j->prompt || !j->tokens || (p->logprobs && !j->lps)) {
        free(j->prompt);
        free(j->tokens);
        free(j->lps);
        free(j);
        return NULL;
    }
    if (p->n_prompt > 0) memcpy(j->prompt, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
    j->params = *p;
    j->params.prompt = j->prompt;
    atomic_init(&j->refs, 1);
    atomic_init(&j->stop, false);
    atomic_init(&j->cancel, false);
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->t_submit = qw_time_s();
    j->result.n_prompt = p->n_prompt;
    return j;
}

void qw_job_retain(qw_job *j) { atomic_fetch_add(&j->refs, 1); }

void qw_job_release(qw_job *j) {
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1) return;
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    qw_sampler_constraint *k = j->params.sampler.constraint;
    if (k) k->free(k);
    free(j->prompt);
    free(j->tokens);
    free(j->lps);
    free(j);
}

void qw_job_stop(qw_job *j) { atomic_store(&j->stop, true); }
void qw_job_cancel(qw_job *j) { atomic_store(&j->cancel, true); }
bool qw_job_is_cancelled(const qw_job *j) { return atomic_load(&j->cancel); }
bool qw_job_is_stopped(const qw_job *j) { return atomic_load(&j->stop); }
bool qw_job_should_end(const qw_job *j) { return atomic_load(&j->stop) || atomic_load(&j->cancel); }
const qw_job_params *qw_job_params_of(const qw_job *j) { return &j->params; }

void qw_job_mark_started(qw_job *j) {
    pthread_mutex_lock(&j->mu);
    j->t_start = qw_time_s();
    pthread_mutex_unlock(&j->mu);
}

bool qw_job_push(qw_job *j, int32_t id) {
    pthread_mutex_lock(&j->mu);
    if (j->n_tokens < j->cap) j->tokens[j->n_tokens++] = id;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return !qw_job_should_end(j);
}

bool qw_job_push_logits(qw_job *j, int32_t id, const float *logits, int32_t n_vocab) {
    if (j->lps && logits) {
        /* computed outside the lock: readers only look at records below n_tokens */
        qw_token_logprobs lp;
        qw_logprobs_of(logits, n_vocab, id, j->params.top_logprobs, &lp);
        pthread_mutex_lock(&j->mu);
        if (j->n_tokens < j->cap) j->lps[j->n_tokens] = lp;
        pthread_mutex_unlock(&j->mu);
    }
    return qw_job_push(j, id);
}

int32_t qw_job_read_logprobs(qw_job *j, int32_t from, int32_t n, qw_token_logprobs *out) {
    pthread_mutex_lock(&j->mu);
    int32_t k = 0;
    if (j->lps && from >= 0)
        for (; k < n && from + k < j->n_tokens; k++) out[k] = j->lps[from + k];
    pthread_mutex_unlock(&j->mu);
    return k;
}

void qw_job_finish(qw_job *j, const qw_job_result *r) {
    pthread_mutex_lock(&j->mu);
    if (j->result.finish == QW_FINISH_NONE) {
        j->result = *r;
        j->result.n_prompt = j->params.n_prompt;
        j->result.n_gen = j->n_tokens;
        j->result.queue_s = (j->t_start > 0 ? j->t_start : qw_time_s()) - j->t_submit;
        if (j->result.finish == QW_FINISH_NONE) j->result.finish = QW_FINISH_ERROR;
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

int qw_job_read(qw_job *j, int32_t *cursor, int32_t *out, int32_t cap, double timeout_s, bool *done) {
    pthread_mutex_lock(&j->mu);
    if (*cursor >= j->n_tokens && j->result.finish == QW_FINISH_NONE && timeout_s > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + timeout_s;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        while (*cursor >= j->n_tokens && j->result.finish == QW_FINISH_NONE)
            if (pthread_cond_timedwait(&j->cv, &j->mu, &ts) == ETIMEDOUT) break;
    }
    int32_t n = j->n_tokens - *cursor;
    if (n > cap) n = cap;
    if (n > 0) memcpy(out, j->tokens + *cursor, (size_t)n * sizeof(int32_t));
    *cursor += n;
    *done = j->result.finish != QW_FINISH_NONE && *cursor >= j->n_tokens;
    pthread_mutex_unlock(&j->mu);
    return n;
}

void qw_job_get_result(qw_job *j, qw_job_result *out) {
    pthread_mutex_lock(&j->mu);
    *out = j->result;
    pthread_mutex_unlock(&j->mu);
}
