/* job_queue.h — the part of a scheduler both execution paths share: a FIFO
 * of submitted jobs with admission limits, drain, and the running stats.
 *
 * The scheduler's worker thread pops jobs (blocking when it has nothing else
 * to do, non-blocking between lane steps), runs them, and hands each finished
 * job back with qw_jq_finish, which accounts it, publishes the result and
 * drops the queue's reference — in that order, so a consumer that sees its
 * job end reads metrics that include it.
 *
 * Invariant: queued + running <= max_queue + capacity (the worker's slots:
 * 1 for serialize, B for lanes); submit refuses beyond that.
 */
#ifndef QWISP_RUNTIME_JOB_QUEUE_H
#define QWISP_RUNTIME_JOB_QUEUE_H

#include "qwisp/sched.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct qw_jq_node qw_jq_node;

typedef struct qw_job_queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* a job arrived, or quit */
    pthread_cond_t idle_cv; /* queue empty and nothing running */
    qw_jq_node *head, *tail;
    int32_t n_queued, n_running;
    int32_t max_queue, capacity;
    bool draining, quit;
    qw_sched_stats st;
    _Atomic int64_t kv_used; /* published by the worker (qw_jq_set_kv), read by stats */
    int64_t kv_capacity;
    bool prefix_reuse;                  /* set once at start by a path that reuses prefixes */
    _Atomic uint64_t prefix_queried, prefix_hit; /* prompt tokens looked up / found in the KV */
} qw_job_queue;

void qw_jq_init(qw_job_queue *q, int32_t max_queue, int32_t capacity);
void qw_jq_destroy(qw_job_queue *q);
/* Takes a reference on success; -1 + err (QW_SCHED_BUSY / QW_SCHED_DRAINING). */
int qw_jq_submit(qw_job_queue *q, qw_job *j, qw_error *err);
/* Next job (counted as running), or NULL.  With wait, blocks until a job
 * arrives or quit is set; without, returns NULL at once if none is queued. */
qw_job *qw_jq_pop(qw_job_queue *q, bool wait);
/* Accounts r, publishes it (qw_job_finish) and releases the queue's reference. */
void qw_jq_finish(qw_job_queue *q, qw_job *j, const qw_job_result *r);
/* Stops admitting; returns when nothing is queued or running. */
void qw_jq_drain(qw_job_queue *q);
/* Makes a blocked qw_jq_pop return NULL (shutdown). */
void qw_jq_quit(qw_job_queue *q);
void qw_jq_stats(qw_job_queue *q, qw_sched_stats *out);
/* The worker publishes how many KV positions its running jobs hold (a gauge
 * for /metrics), out of capacity (set once at start). */
static inline void qw_jq_set_kv(qw_job_queue *q, int64_t used) { atomic_store_explicit(&q->kv_used, used, memory_order_relaxed); }

#endif
