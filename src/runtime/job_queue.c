/* job_queue.c — see job_queue.h: the FIFO, admission, drain and stats that
 * the serialize and lanes schedulers share. */
#include "job_queue.h"

#include <stdlib.h>

struct qw_jq_node {
    qw_job *job;
    qw_jq_node *next;
};

void qw_jq_init(qw_job_queue *q, int32_t max_queue, int32_t capacity) {
    *q = (qw_job_queue){.max_queue = max_queue < 0 ? 0 : max_queue, .capacity = capacity < 1 ? 1 : capacity};
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    pthread_cond_init(&q->idle_cv, NULL);
}

void qw_jq_destroy(qw_job_queue *q) {
    while (q->head) { /* only after drain; a queued job here was never run */
        qw_jq_node *n = q->head;
        q->head = n->next;
        qw_job_release(n->job);
        free(n);
    }
    pthread_cond_destroy(&q->cv);
    pthread_cond_destroy(&q->idle_cv);
    pthread_mutex_destroy(&q->mu);
}

int qw_jq_submit(qw_job_queue *q, qw_job *j, qw_error *err) {
    qw_jq_node *n = malloc(sizeof *n);
    if (!n) return qw_fail(err, QW_SCHED_BUSY " out of memory queueing the request");
    pthread_mutex_lock(&q->mu);
    int rc = 0;
    if (q->draining) rc = qw_fail(err, QW_SCHED_DRAINING " the server is shutting down");
    else if (q->n_queued + q->n_running >= q->max_queue + q->capacity)
        rc = qw_fail(err, QW_SCHED_BUSY " %d requests are already queued (limit %d)", q->n_queued,
                     q->max_queue);
    if (rc == 0) {
        qw_job_retain(j);
        *n = (qw_jq_node){.job = j};
        if (q->tail) q->tail->next = n;
        else q->head = n;
        q->tail = n;
        q->n_queued++;
        q->st.submitted++;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    if (rc) free(n);
    return rc;
}

qw_job *qw_jq_pop(qw_job_queue *q, bool wait) {
    pthread_mutex_lock(&q->mu);
    while (wait && !q->head && !q->quit) pthread_cond_wait(&q->cv, &q->mu);
    qw_job *j = NULL;
    if (q->head) {
        qw_jq_node *n = q->head;
        q->head = n->next;
        if (!q->head) q->tail = NULL;
        q->n_queued--;
        q->n_running++;
        j = n->job;
        free(n);
    }
    pthread_mutex_unlock(&q->mu);
    return j;
}

static void account(qw_sched_stats *st, const qw_job_result *r) {
    if (r->finish == QW_FINISH_CANCELLED) st->cancelled += 1, st->cancelled_in_prompt += r->in_prompt;
    else if (r->finish == QW_FINISH_ERROR) st->failed++;
    else st->completed++;
    if (r->prefill_s > 0) {
        st->prompt_tokens += (uint64_t)r->n_prompt;
        st->prefill_s += r->prefill_s;
        st->last_prefill_tok_s = r->n_prompt / r->prefill_s;
    }
    st->gen_tokens += (uint64_t)r->n_gen;
    if (r->decode_s > 0 && r->n_gen > 1) {
        st->decode_s += r->decode_s;
        st->last_decode_tok_s = (r->n_gen - 1) / r->decode_s;
    }
}

void qw_jq_finish(qw_job_queue *q, qw_job *j, const qw_job_result *r) {
    pthread_mutex_lock(&q->mu);
    account(&q->st, r);
    q->n_running--;
    qw_job_finish(j, r);
    qw_job_release(j);
    if (!q->head && q->n_running == 0) pthread_cond_broadcast(&q->idle_cv);
    pthread_mutex_unlock(&q->mu);
}

void qw_jq_drain(qw_job_queue *q) {
    pthread_mutex_lock(&q->mu);
    q->draining = true;
    while (q->head || q->n_running) pthread_cond_wait(&q->idle_cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

void qw_jq_quit(qw_job_queue *q) {
    pthread_mutex_lock(&q->mu);
    q->quit = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

void qw_jq_stats(qw_job_queue *q, qw_sched_stats *out) {
    pthread_mutex_lock(&q->mu);
    *out = q->st;
    out->queued = q->n_queued;
    out->running = q->n_running;
    pthread_mutex_unlock(&q->mu);
    out->kv_used_tokens = atomic_load_explicit(&q->kv_used, memory_order_relaxed);
    out->kv_capacity_tokens = q->kv_capacity;
    out->prefix_reuse = q->prefix_reuse;
    out->prefix_queried_tokens = atomic_load_explicit(&q->prefix_queried, memory_order_relaxed);
    out->prefix_hit_tokens = atomic_load_explicit(&q->prefix_hit, memory_order_relaxed);
}
