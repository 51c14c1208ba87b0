/* lanes.c — the lanes execution path (QWISP_LANES=B): up to B requests
 * decode together, one batched forward per step.
 *
 * Each lane owns a sequence context (its own KV cache, grown on demand) and a
 * sampler; one workspace context owns the activations and the thread pool.
 * A step gathers, for every busy lane, either its last sampled token
 * (decoding) or the next slice of its prompt (prefilling), and runs them all
 * through qw_batch_eval: every weight is read once per step for all lanes and
 * MoE tokens are grouped by expert across lanes.  The step's token budget is
 * the workspace chunk (512): decode rows go first, so a long prompt being
 * admitted is chunked and interleaved with the other lanes' decoding instead
 * of stalling them.  New jobs are admitted between steps into free lanes.
 *
 * Rows are computed independently, so a lane's tokens are exactly those the
 * serialize path gives for the same request (tested for greedy decoding).
 *
 * Memory: the lanes path applies its own pool policy at start
 * (QWISP_LANE_CACHE_MB, default 2048) and reports QWISP_LANE_MEMDBG lines at
 * idle points, i.e. whenever every lane has been released.
 *
 * With QWISP_PREFIX_CACHE_MB > 0 a lane has no context of its own: admit
 * takes a prefix-cache entry (prefix_cache.h) whose KV already holds the
 * longest token prefix the prompt shares with it, so the lane starts
 * prefilling after it; release hands the entry back with what its KV now
 * holds.  Entries are computed by the workspace like lane contexts.  For a
 * model with recurrent layers a prompt slice never crosses a multiple of the
 * cache's block, and the state is snapshotted at each (the positions a later
 * prompt can resume from).
 *
 * Invariants: only the worker thread touches lanes, contexts and samplers; a
 * lane is busy iff job != NULL; a released lane's KV is truncated to 0 (its
 * own context), or handed back to the prefix cache (ctx NULL until the next
 * admit).
 */
#include "prefix_cache.h"
#include "job_queue.h"
#include "qwisp/threadpool.h"
#include "qwisp/experts.h"
#include "qwisp/memdbg.h"
#include "qwisp/place.h"
#include "qwisp/options.h"
#include "qwisp/pool.h"
#include "qwisp/run_memory.h"
#include "qwisp/sched.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEP_BUDGET = 512 };

typedef struct lane {
    qw_job *job; /* NULL: free */
    qw_ctx *ctx;
    qw_sampler *smp;
    int32_t n_fed; /* prompt tokens already in the KV cache */
    int32_t last;  /* last sampled token, fed at the next step */
    int32_t n_gen;
    double t_start, t_prompt, t_first;
} lane;

typedef struct lanes {
    qw_sched base;
    qw_sched_config cfg;
    int n_lanes;
    qw_ctx *ws;
    lane *lane;
    qw_batch_seq *seqs; /* [n_lanes] */
    int *seq_lane;      /* [n_lanes] lane index of each batch entry */
    pthread_t worker;
    qw_job_queue q;
    qw_memdbg md;
    qw_pcache *pc; /* QWISP_PREFIX_CACHE_MB > 0, else NULL */
} lanes;

static int n_busy(const lanes *s) {
    int n = 0;
    for (int i = 0; i < s->n_lanes; i++) n += s->lane[i].job != NULL;
    return n;
}

static void release(lanes *s, lane *l, qw_finish finish, const char *error) {
    const qw_job_params *p = qw_job_params_of(l->job);
    const double now = qw_time_s();
    qw_job_result r = {.finish = finish, .n_prompt = p->n_prompt, .n_gen = l->n_gen};
    r.in_prompt = finish == QW_FINISH_CANCELLED && l->t_start > 0 && l->n_fed < p->n_prompt;
    if (l->t_prompt > 0) r.prefill_s = l->t_prompt - l->t_start;
    if (l->t_first > 0) {
        r.ttft_s = l->t_first - l->t_start;
        r.decode_s = now - l->t_first;
    }
    if (error) snprintf(r.error, sizeof r.error, "%s", error);
    if (s->pc && l->ctx) {
        /* hand the entry back with the tokens its KV holds (the job has them all by now) */
        int32_t *gen = malloc((size_t)(l->n_gen > 0 ? l->n_gen : 1) * sizeof(int32_t)), cur = 0;
        bool done = false;
        int32_t n = gen ? qw_job_read(l->job, &cur, gen, l->n_gen, 0, &done) : 0;
        qw_pcache_record(s->pc, l->ctx, p->prompt, p->n_prompt, gen, n, gen && n == l->n_gen && finish != QW_FINISH_ERROR);
        free(gen);
    }
    qw_jq_finish(&s->q, l->job, &r);
    qw_sampler_free(l->smp);
    if (s->pc) *l = (lane){0};
    else {
        qw_ctx_truncate(l->ctx, 0);
        *l = (lane){.ctx = l->ctx};
    }
}

/* Puts job j into free lane l; a job cancelled while queued ends at once. */
static void admit(lanes *s, lane *l, qw_job *j) {
    l->job = j;
    const qw_job_params *p = qw_job_params_of(j);
    if (qw_job_is_cancelled(j)) {
        release(s, l, QW_FINISH_CANCELLED, NULL);
        return;
    }
    if (p->n_prompt > s->cfg.n_ctx) {
        release(s, l, QW_FINISH_ERROR, "the prompt is longer than the context");
        return;
    }
    if (s->pc) {
        qw_error err = {0};
        int32_t keep = 0;
        l->ctx = qw_pcache_acquire(s->pc, p->prompt, p->n_prompt, &keep, &err);
        if (!l->ctx) {
            release(s, l, QW_FINISH_ERROR, err.msg);
            return;
        }
        l->n_fed = keep; /* prefill resumes after the reused prefix */
        atomic_fetch_add(&s->q.prefix_queried, (uint64_t)p->n_prompt);
        atomic_fetch_add(&s->q.prefix_hit, (uint64_t)keep);
    }
    l->smp = qw_sampler_new(&p->sampler, qw_tokenizer_n_vocab(s->cfg.tok));
    if (!l->smp) {
        release(s, l, QW_FINISH_ERROR, "out of memory creating the sampler");
        return;
    }
    for (int32_t i = 0; i < p->n_prompt; i++) qw_sampler_accept(l->smp, p->prompt[i]);
    qw_job_mark_started(j);
    l->t_start = qw_time_s();
}

/* After a lane's logits are fresh: sample, publish, and end the job if it is done. */
static void sample_next(lanes *s, lane *l) {
    const qw_job_params *p = qw_job_params_of(l->job);
    if (p->max_tokens == 0) {
        release(s, l, QW_FINISH_LENGTH, NULL);
        return;
    }
    int32_t id = qw_sampler_sample(l->smp, qw_ctx_logits(l->ctx));
    qw_sampler_accept(l->smp, id);
    if (l->n_gen == 0) l->t_first = qw_time_s();
    l->n_gen++;
    l->last = id;
    bool more = qw_job_push_logits(l->job, id, qw_ctx_logits(l->ctx), qw_tokenizer_n_vocab(s->cfg.tok));
    if (qw_job_is_cancelled(l->job)) release(s, l, QW_FINISH_CANCELLED, NULL);
    else if (!more || qw_job_is_stopped(l->job)) release(s, l, QW_FINISH_STOPPED, NULL);
    else if (qw_tokenizer_is_eog(s->cfg.tok, id) && !p->ignore_eos) release(s, l, QW_FINISH_EOS, NULL);
    else if (l->n_gen >= p->max_tokens || qw_ctx_n_past(l->ctx) >= qw_ctx_n_ctx(l->ctx))
        release(s, l, QW_FINISH_LENGTH, NULL);
}

/* One batched forward over every busy lane. */
static void step(lanes *s) {
    int n_seqs = 0;
    int32_t budget = STEP_BUDGET;
    for (int pass = 0; pass < 2; pass++) { /* decoding lanes first, then prompt slices */
        for (int i = 0; i < s->n_lanes && budget > 0; i++) {
            lane *l = &s->lane[i];
            if (!l->job) continue;
            if (qw_job_is_cancelled(l->job)) {
                release(s, l, QW_FINISH_CANCELLED, NULL);
                continue;
            }
            const qw_job_params *p = qw_job_params_of(l->job);
            bool decoding = l->n_fed == p->n_prompt;
            if (decoding != (pass == 0)) continue;
            int32_t n = decoding ? 1 : p->n_prompt - l->n_fed;
            if (n > budget) n = budget;
            const int32_t B = s->pc ? qw_pcache_snap_block(s->pc) : 0;
            if (!decoding && B > 0 && n > B - l->n_fed % B) n = B - l->n_fed % B; /* stop at the boundary */
            s->seqs[n_seqs] = (qw_batch_seq){.ctx = l->ctx,
                                             .tokens = decoding ? &l->last : p->prompt + l->n_fed,
                                             .n = n,
                                             .logits = decoding || l->n_fed + n == p->n_prompt};
            s->seq_lane[n_seqs++] = i;
            budget -= n;
        }
    }
    if (n_seqs == 0) return;
    qw_error err = {0};
    if (qw_batch_eval(s->ws, s->seqs, n_seqs, &err)) {
        for (int k = 0; k < n_seqs; k++) release(s, &s->lane[s->seq_lane[k]], QW_FINISH_ERROR, err.msg);
        return;
    }
    for (int k = 0; k < n_seqs; k++) {
        lane *l = &s->lane[s->seq_lane[k]];
        const qw_job_params *p = qw_job_params_of(l->job);
        if (l->n_fed < p->n_prompt) {
            l->n_fed += s->seqs[k].n;
            if (l->n_fed < p->n_prompt) {
                if (s->pc) qw_pcache_snapshot(s->pc, l->ctx); /* no-op off a block boundary */
                continue; /* more prompt next step */
            }
            l->t_prompt = qw_time_s();
        }
        sample_next(s, l);
    }
}

/* KV positions the busy lanes hold, for the kv-cache gauge. */
static void publish_kv(lanes *s) {
    int64_t used = 0;
    for (int i = 0; i < s->n_lanes; i++)
        if (s->lane[i].job) used += qw_ctx_n_past(s->lane[i].ctx);
    qw_jq_set_kv(&s->q, used);
}

static uint64_t kv_bytes(const lanes *s) {
    uint64_t b = 0;
    for (int i = 0; i < s->n_lanes; i++)
        if (s->lane[i].ctx) b += qw_ctx_kv_bytes(s->lane[i].ctx) + qw_ctx_state_bytes(s->lane[i].ctx);
    return b;
}

static void *worker_main(void *arg) {
    lanes *s = arg;
    for (;;) {
        if (n_busy(s) == 0) {
            /* Idle point: every lane released. */
            if (s->md.mode) qw_memdbg_report(&s->md, 0, 0, kv_bytes(s));
            qw_job *j = qw_jq_pop(&s->q, true);
            if (!j) break; /* quit */
            admit(s, &s->lane[0], j);
        }
        for (int i = 0; i < s->n_lanes; i++) {
            if (s->lane[i].job) continue;
            qw_job *j = qw_jq_pop(&s->q, false);
            if (!j) break;
            admit(s, &s->lane[i], j);
        }
        step(s);
        publish_kv(s);
    }
    return NULL;
}

static int lanes_submit(qw_sched *b, qw_job *j, qw_error *err) { return qw_jq_submit(&((lanes *)b)->q, j, err); }
static void lanes_drain(qw_sched *b) { qw_jq_drain(&((lanes *)b)->q); }
static void lanes_stats(qw_sched *b, qw_sched_stats *out) {
    lanes *s = (lanes *)b;
    qw_jq_stats(&s->q, out);
    qw_pcache_sched_stats(s->pc, out);
}

static void free_lanes(lanes *s) {
    for (int i = 0; s->lane && !s->pc && i < s->n_lanes; i++) qw_ctx_free(s->lane[i].ctx); /* with a cache, entries own them */
    qw_pcache_free(s->pc);
    free(s->lane);
    free(s->seqs);
    free(s->seq_lane);
    qw_ctx_free(s->ws);
    free(s);
}

static void lanes_free(qw_sched *b) {
    lanes *s = (lanes *)b;
    qw_jq_drain(&s->q);
    qw_jq_quit(&s->q);
    pthread_join(s->worker, NULL);
    qw_jq_destroy(&s->q);
    free_lanes(s);
}

static const qw_sched_ops k_lanes_ops = {
    .name = "lanes", .submit = lanes_submit, .drain = lanes_drain, .stats = lanes_stats, .free = lanes_free};

qw_sched *qw_sched_lanes_new(const qw_sched_config *cfg, int n_lanes, qw_error *err) {
    if (n_lanes < 1) {
        qw_fail(err, "lanes path: need at least 1 lane, got %d", n_lanes);
        return NULL;
    }
    int64_t pc_mb = qw_opt_int(QW_OPT_PREFIX_CACHE_MB);
    if (pc_mb > 0 && n_lanes > 32) {
        /* the cache has 64 entries; running lanes hold one each */
        qw_fail(err, "QWISP_PREFIX_CACHE_MB with QWISP_LANES=%d: the prefix cache serves at most 32 lanes", n_lanes);
        return NULL;
    }
    if (qw_pool_apply_path(QW_POOL_PATH_LANES, err)) return NULL;
    /* the tier sees every lane's context and the workspace's */
    if (qw_place_experts(cfg->model, (int64_t)n_lanes * cfg->n_ctx + 16, err)) return NULL;
    lanes *s = calloc(1, sizeof *s);
    if (!s) {
        qw_fail(err, "out of memory creating the lanes scheduler");
        return NULL;
    }
    s->base.ops = &k_lanes_ops;
    s->cfg = *cfg;
    s->n_lanes = n_lanes;
    s->lane = calloc((size_t)n_lanes, sizeof(lane));
    s->seqs = calloc((size_t)n_lanes, sizeof(qw_batch_seq));
    s->seq_lane = calloc((size_t)n_lanes, sizeof(int));
    s->ws = qw_ctx_new(cfg->model, 16, cfg->n_threads, err);
    if (!s->lane || !s->seqs || !s->seq_lane || !s->ws) {
        if (s->ws) qw_fail(err, "out of memory creating %d lanes", n_lanes);
        free_lanes(s);
        return NULL;
    }
    qw_ctx_set_chunk_size(s->ws, STEP_BUDGET);
    if (pc_mb > 0) {
        s->pc = qw_pcache_new(cfg->model, cfg->n_ctx, (uint64_t)pc_mb << 20, (int32_t)qw_opt_int(QW_OPT_PREFIX_BLOCK),
                              qw_opt_str(QW_OPT_PREFIX_CACHE_DIR), err);
        if (!s->pc) {
            free_lanes(s);
            return NULL;
        }
    }
    for (int i = 0; !s->pc && i < n_lanes; i++) {
        /* One thread each: lane contexts never compute, the workspace does. */
        s->lane[i].ctx = qw_ctx_new(cfg->model, cfg->n_ctx, 1, err);
        if (!s->lane[i].ctx) {
            free_lanes(s);
            return NULL;
        }
    }
    qw_memdbg_init(&s->md, "lane", (int)qw_opt_int(QW_OPT_LANE_MEMDBG), 1, stderr);
    s->md.tail = qw_run_memdbg_tail; /* memory/ cannot see experts/ or the device */
    qw_jq_init(&s->q, cfg->max_queue, n_lanes);
    s->q.prefix_reuse = s->pc != NULL;
    s->q.kv_capacity = (int64_t)cfg->n_ctx * n_lanes;
    if (qw_thread_start(&s->worker, worker_main, s)) {
        qw_jq_destroy(&s->q);
        free_lanes(s);
        qw_fail(err, "cannot start the lanes worker thread");
        return NULL;
    }
    return &s->base;
}
