/* sched.h — the runtime's request interface: jobs and the schedulers that run
 * them.
 *
 * A *job* is one request as the runtime sees it: prompt token ids, a token
 * budget and sampler settings in; generated token ids streamed out, then a
 * result (why it finished, timings).  A *scheduler* accepts jobs and runs
 * them on the model.  Two execution paths implement the same interface:
 *   serialize (default; src/runtime/serialize.c): FIFO, one job at a time on
 *       one context, KV reset between jobs, pool limit QWISP_PREFILL_CACHE_MB;
 *   lanes (QWISP_LANES=B; src/runtime/lanes.c): B jobs decoded together in one
 *       batched forward per step, new jobs admitted between steps, pool limit
 *       QWISP_LANE_CACHE_MB.
 * Either may keep earlier requests' KV for prompts that share their token
 * prefix (QWISP_PREFIX_CACHE_MB; src/runtime/prefix_cache.c).
 * serve/ only ever calls qw_sched_* and qw_job_*; it never knows which path
 * runs its job.  The one-shot CLI commands (run, chat, logits, bench) drive a
 * single context directly (generate.h); run applies the serialize path's pool
 * policy (run_memory.h).
 *
 * Threads: the submitter (an HTTP connection thread) and the scheduler's
 * worker share a job; it is reference counted and its token list is guarded
 * by its own mutex.  The consumer reads tokens with qw_job_read (blocking with
 * a timeout); it may stop the job at any time (qw_job_stop: a stop string was
 * seen, the result is normal) or abandon it (qw_job_cancel: the client went
 * away).  The scheduler checks both flags after every token, so a job ends at
 * most one token after either.
 *
 *     qw_job *j = qw_job_new(&(qw_job_params){.prompt = ids, .n_prompt = n,
 *                            .max_tokens = 64, .sampler = sp});
 *     if (qw_sched_submit(s, j, &err)) { ...busy/draining... }
 *     int32_t cur = 0, buf[64]; bool done = false;
 *     while (!done) { int k = qw_job_read(j, &cur, buf, 64, 0.05, &done); ... }
 *     qw_job_result r; qw_job_get_result(j, &r);
 *     qw_job_release(j);
 */
#ifndef QWISP_SCHED_H
#define QWISP_SCHED_H

#include "qwisp/model.h"
#include "qwisp/sampler.h"
#include "qwisp/tokenizer.h"

/* ---- jobs ---- */

typedef enum qw_finish {
    QW_FINISH_NONE = 0,  /* not finished */
    QW_FINISH_EOS,       /* an end-of-generation token was sampled (it is the last token) */
    QW_FINISH_LENGTH,    /* max_tokens reached */
    QW_FINISH_STOPPED,   /* the consumer called qw_job_stop (e.g. a stop string) */
    QW_FINISH_CANCELLED, /* the consumer called qw_job_cancel (client gone), or drained before start */
    QW_FINISH_ERROR,     /* the forward pass failed; result.error says why */
} qw_finish;

const char *qw_finish_name(qw_finish f);

typedef struct qw_job_params {
    const int32_t *prompt; /* copied by qw_job_new */
    int32_t n_prompt;      /* >= 1 */
    int32_t max_tokens;    /* >= 0 */
    bool ignore_eos;       /* keep going past end-of-generation tokens */
    bool logprobs;         /* record each token's qw_token_logprobs (qw_job_read_logprobs) */
    int32_t top_logprobs;  /* alternatives per record, 0..QW_SAMPLER_MAX_TOP_LOGPROBS */
    qw_sampler_params sampler; /* sampler.constraint, if any, is owned by the job once
                                  qw_job_new succeeds, and freed with it */
} qw_job_params;

typedef struct qw_job_result {
    qw_finish finish;
    int32_t n_prompt, n_gen;
    double queue_s;   /* submit -> start */
    double prefill_s; /* prompt forward passes */
    double decode_s;  /* forward passes of tokens after the first */
    double ttft_s;    /* start -> first token */
    bool in_prompt;   /* cancelled part-way through its prompt (the prefill was cut short) */
    char error[QW_ERROR_MAX]; /* QW_FINISH_ERROR; for a cancel in the prompt, how far it got */
} qw_job_result;

typedef struct qw_job qw_job;

/* A new job holding one reference (the caller's).  NULL on OOM. */
qw_job *qw_job_new(const qw_job_params *p);
void qw_job_retain(qw_job *j);
/* Drops a reference; the last one frees the job.  NULL-safe. */
void qw_job_release(qw_job *j);
/* Ask the job to end after the current token with QW_FINISH_STOPPED. */
void qw_job_stop(qw_job *j);
/* Abandon the job: it ends (or, still queued, is skipped) with QW_FINISH_CANCELLED. */
void qw_job_cancel(qw_job *j);
/* Waits up to timeout_s for tokens past *cursor or the end of the job; copies
 * up to cap of them to out and advances *cursor.  *done becomes true once the
 * job has finished and every token was read.  Returns the number copied. */
int qw_job_read(qw_job *j, int32_t *cursor, int32_t *out, int32_t cap, double timeout_s, bool *done);
/* Copies the logprobs records of tokens [from, from + n) (already read with
 * qw_job_read) to out; returns how many were copied (0 without params.logprobs). */
int32_t qw_job_read_logprobs(qw_job *j, int32_t from, int32_t n, qw_token_logprobs *out);
/* The result; finish is QW_FINISH_NONE until the job ended. */
void qw_job_get_result(qw_job *j, qw_job_result *out);
const qw_job_params *qw_job_params_of(const qw_job *j);

/* Producer side, for schedulers only. */
void qw_job_mark_started(qw_job *j);
/* Appends a token; returns false when the job was stopped or cancelled. */
bool qw_job_push(qw_job *j, int32_t id);
/* The same, given the logits row the token was drawn from: records its
 * logprobs first when the job asked for them (params.logprobs). */
bool qw_job_push_logits(qw_job *j, int32_t id, const float *logits, int32_t n_vocab);
bool qw_job_should_end(const qw_job *j);
bool qw_job_is_cancelled(const qw_job *j);
bool qw_job_is_stopped(const qw_job *j);
/* Publishes the result (finish != NONE) and wakes readers. */
void qw_job_finish(qw_job *j, const qw_job_result *r);

/* ---- schedulers ---- */

typedef struct qw_sched_stats {
    int32_t queued;       /* waiting to start */
    int32_t running;      /* started, not finished */
    uint64_t submitted, completed, cancelled, failed;
    uint64_t cancelled_in_prompt; /* of the cancelled: cut short during their prefill */
    uint64_t prompt_tokens, gen_tokens; /* of finished jobs */
    double prefill_s, decode_s;         /* summed over finished jobs */
    double last_prefill_tok_s, last_decode_tok_s; /* of the last finished job that had them */
    int64_t kv_used_tokens;     /* KV positions held by running jobs (all sequences) */
    int64_t kv_capacity_tokens; /* KV positions the path can hold (n_ctx x sequences) */
    bool prefix_reuse;          /* the path has a prefix cache (QWISP_PREFIX_CACHE_MB) */
    uint64_t prefix_queried_tokens, prefix_hit_tokens; /* prompt tokens of started jobs / of those reused */
    uint64_t prefix_bytes, prefix_budget_bytes;        /* KV bytes the cache's entries hold / may hold */
    int32_t prefix_entries, prefix_snapshots;          /* idle entries; recurrent-state snapshots they hold */
    uint64_t prefix_evictions, prefix_block_evictions; /* entries dropped / tail blocks cut for the budget */
    uint64_t prefix_shared_tokens;                     /* prompt tokens copied from another entry's prefix */
} qw_sched_stats;

typedef struct qw_sched qw_sched;

typedef struct qw_sched_ops {
    const char *name; /* "serialize", "lanes" */
    /* Takes a reference on success.  -1 + err when the queue is full or the
     * scheduler is draining (err says which). */
    int (*submit)(qw_sched *s, qw_job *j, qw_error *err);
    /* Stops admitting; returns when every admitted job has finished. */
    void (*drain)(qw_sched *s);
    void (*stats)(qw_sched *s, qw_sched_stats *out);
    void (*free)(qw_sched *s); /* drains first */
} qw_sched_ops;

/* Implementations embed this as their first member. */
struct qw_sched {
    const qw_sched_ops *ops;
};

typedef struct qw_sched_config {
    qw_model *model;   /* experts placed by the constructor for its real contexts
                        * (n_ctx, times n_lanes for lanes) unless already placed */
    const qw_tokenizer *tok;
    int32_t n_ctx;     /* context of the (each) sequence */
    int n_threads;
    int32_t max_queue; /* jobs waiting beyond the running ones; submit refuses more */
} qw_sched_config;

/* The serialize path: one worker thread, one context.  Applies the serialize
 * path's pool policy (qw_pool_apply_path) at start.  NULL + err. */
qw_sched *qw_sched_serialize_new(const qw_sched_config *cfg, qw_error *err);

/* The lanes path: n_lanes sequences batched per step (qw_batch_eval), one
 * worker thread.  Applies the lanes path's pool policy at start.  NULL + err. */
qw_sched *qw_sched_lanes_new(const qw_sched_config *cfg, int n_lanes, qw_error *err);

/* submit's err messages start with these words so callers can map them. */
#define QW_SCHED_BUSY "busy:"
#define QW_SCHED_DRAINING "draining:"

static inline int qw_sched_submit(qw_sched *s, qw_job *j, qw_error *err) { return s->ops->submit(s, j, err); }
static inline void qw_sched_drain(qw_sched *s) { s->ops->drain(s); }
static inline void qw_sched_get_stats(qw_sched *s, qw_sched_stats *o) { s->ops->stats(s, o); }
static inline void qw_sched_free(qw_sched *s) { if (s) s->ops->free(s); }

#endif
