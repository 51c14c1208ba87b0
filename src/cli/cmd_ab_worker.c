/* cmd_ab_worker.c — `qwisp ab-worker`: the speed side of `qwisp ab`, every
 * arm alternated inside ONE process (docs/ab.md, "Speed: in-process
 * trials").  Not for direct use: `qwisp ab` starts it and reads its JSON.
 *
 * Why one process: between separate processes the speed of identical arms
 * varied ±20–40 % (bench/step0): each process gets its own address space,
 * its own page-table and first-touch costs, its own thread placement, and
 * meets a different moment of the machine's other load.  Here the model is
 * mapped once, the threads are created once (and pinned), and the arms take
 * turns in a balanced order (one inproc_arm-up, then ABC CBA …) so the shared
 * page cache and any drift hit them alike.
 *
 * Each trial puts the pool in the state its arm would have in a process of
 * its own: the context is rewound to a saved position (qw_ctx_mark: n_past +
 * recurrent states), the pool's cache is emptied, the arm's pool knobs
 * (QWISP_PREFILL_CACHE_MB, QWISP_POOL_FIT, QWISP_POOL_DECAY_MS) are set and
 * applied through the serialize path's own qw_pool_apply_path, the
 * context's growing buffers are released (qw_ctx_release_growth: attention
 * scratch, activation buffer, and with a whole-prompt replay the KV cache),
 * then the last `replay` prompt tokens are prefilled under that policy (so
 * the cache fills as that arm's prefill would fill it) and `decode` tokens
 * are generated
 * greedily, each forward pass timed alone: wall (CLOCK_MONOTONIC), CPU time
 * of all threads (CLOCK_PROCESS_CPUTIME_ID) and, where the kernel allows,
 * cycles and task-clock (perf_event_open, ab_sys.c).  --replay = the whole
 * prompt reproduces a separate process's prefill exactly; a shorter replay
 * re-runs only the prompt's tail (the largest buffers) and is said so.
 *
 * Output: one JSON object on stdout — the hygiene facts (perf, pinning,
 * page cache before/after) and per trial its arm, round, the per-token
 * summary and the pool's numbers, plus a hash of the generated ids (every arm
 * must generate the same tokens: a pool policy must not change the output).
 */
#include "ab_worker.h"
#include "cli_common.h"
#include "commands.h"
#include "qwisp/ab.h"
#include "qwisp/footprint.h"
#include "qwisp/model.h"
#include "qwisp/options.h"
#include "qwisp/place.h"
#include "qwisp/pool.h"
#include "qwisp/tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The knobs an in-process arm may switch: the pool's policy, nothing else
 * (anything else needs a process of its own). */
static const qw_opt k_switchable[] = {QW_OPT_PREFILL_CACHE_MB, QW_OPT_POOL_FIT, QW_OPT_POOL_DECAY_MS};
#define N_SWITCHABLE ((int)(sizeof k_switchable / sizeof *k_switchable))

int qw_ab_worker_switchable(const char *name, size_t len) {
    for (int i = 0; i < N_SWITCHABLE; i++) {
        const char *n = qw_opt_name(k_switchable[i]);
        if (strlen(n) == len && !strncmp(n, name, len)) return 1;
    }
    /* the seed's alias of QWISP_PREFILL_CACHE_MB */
    return len == 26 && !strncmp(name, "QWISP_PREFILL_MLX_CACHE_MB", 26);
}

double qw_abw_mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

double qw_abw_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}
#define mono_s qw_abw_mono_s
#define cpu_s qw_abw_cpu_s

static int parse_warm(const char *spec, inproc_arm *a) {
    memset(a, 0, sizeof *a);
    const char *colon = strchr(spec, ':');
    size_t nl = colon ? (size_t)(colon - spec) : strlen(spec);
    if (nl == 0 || nl >= QW_AB_WORD) return -1;
    memcpy(a->name, spec, nl);
    const char *p = colon ? colon + 1 : "";
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (!eq || a->n == 8) return -1;
        if (!qw_ab_worker_switchable(p, (size_t)(eq - p))) {
            fprintf(stderr, "qwisp ab-worker: --arm '%s': '%.*s' is not a pool knob; only QWISP_PREFILL_CACHE_MB, "
                            "QWISP_POOL_FIT and QWISP_POOL_DECAY_MS can be switched inside one process\n",
                    spec, (int)(eq - p), p);
            return -1;
        }
        a->kv[a->n++] = strndup(p, n);
        p += n;
        if (*p == ',') p++;
    }
    return 0;
}

/* The arm's pool state, as a process of its own would start it: every
 * switchable knob back to the environment's value (the worker's env carries
 * none that an arm touches: `qwisp ab` removed them, as for its separate
 * processes), then the arm's, then the serialize path's policy applied. */
int qw_abw_apply_arm(const inproc_arm *a, bool clear, qw_error *err) {
    for (int i = 0; i < N_SWITCHABLE; i++) qw_opt_reset(k_switchable[i]);
    for (int i = 0; i < a->n; i++) {
        const char *eq = strchr(a->kv[i], '=');
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(eq - a->kv[i]), a->kv[i]);
        qw_opt id = QW_OPT_PREFILL_CACHE_MB;
        for (int j = 0; j < N_SWITCHABLE; j++)
            if (!strcmp(qw_opt_name(k_switchable[j]), name)) id = k_switchable[j];
        if (!eq[1]) continue; /* K= : not set (the env holds no value for it) */
        if (qw_opt_set(id, eq + 1, "ab arm", err)) return -1;
    }
    if (clear) qw_pool_clear_cache();
    return qw_pool_apply_path(QW_POOL_PATH_SERIALIZE, err);
}

static int apply_arm(const inproc_arm *a, qw_error *err) { return qw_abw_apply_arm(a, true, err); }

int32_t qw_abw_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

typedef struct {
    double *ms, *cpu_ms, *mcyc;
    int n;
} tok_series;

/* The shared prefix's progress on stderr (speed-worker.stderr, which
 * bench/step0/run.sh tails): a line at every tenth of the prompt, so a slow
 * or stuck prefill shows where it is. */
typedef struct {
    double t0;
    int32_t next;
} prefix_progress;

static void prefix_progress_cb(void *user, const qw_ctx *c, int32_t n_done, int32_t n_total) {
    (void)c;
    prefix_progress *pp = user;
    if (n_done < pp->next && n_done < n_total) return;
    fprintf(stderr, "[ab-worker] prefix %d/%d tokens, %.1f s\n", (int)n_done, (int)n_total, mono_s() - pp->t0);
    pp->next = n_done + (n_total + 9) / 10;
}

/* One trial: rewind, the arm's pool state, replay, timed decode.  Adds its
 * object to `arr`.  -1 + err when the model fails (the run ends). */
static int trial(qw_ctx *c, const qw_ctx_mark *mk, const int32_t *tail, int32_t n_tail, int32_t decode,
                 int32_t n_vocab, const inproc_arm *a, int arm, int round, const qw_ab_perf *perf, tok_series *ts,
                 cJSON *arr, qw_error *err) {
    if (qw_ctx_mark_restore(c, mk)) return qw_fail(err, "rewinding to the saved prompt position failed");
    qw_ctx_release_growth(c); /* regrown under the arm's policy, as in a new process */
    if (apply_arm(a, err)) return -1;
    qw_pool_reset_peak();
    qw_pool_reset_counters();
    double t0 = mono_s();
    if (qw_ctx_eval(c, tail, n_tail, QW_LOGITS_LAST, err)) return -1;
    double prefill_s = mono_s() - t0;
    uint64_t h = 1469598103934665603ull;
    ts->n = 0;
    for (int32_t i = 0; i < decode; i++) {
        int32_t id = qw_abw_argmax(qw_ctx_logits(c), n_vocab);
        h = (h ^ (uint64_t)(uint32_t)id) * 1099511628211ull;
        if (i == decode - 1) break;
        double cyc0, tk0, cyc1, tk1;
        qw_ab_perf_read(perf, &cyc0, &tk0);
        double c0 = cpu_s(), w0 = mono_s();
        if (qw_ctx_eval(c, &id, 1, QW_LOGITS_LAST, err)) return -1;
        double w1 = mono_s(), c1 = cpu_s();
        qw_ab_perf_read(perf, &cyc1, &tk1);
        ts->ms[ts->n] = (w1 - w0) * 1e3;
        ts->cpu_ms[ts->n] = (c1 - c0) * 1e3;
        ts->mcyc[ts->n] = (cyc1 - cyc0) / 1e6;
        ts->n++;
    }
    qw_pool_stats ps = qw_pool_get_stats();
    qw_ab_tokstats w = qw_ab_token_stats(ts->ms, ts->n), cp = qw_ab_token_stats(ts->cpu_ms, ts->n);
    qw_ab_tokstats cy = qw_ab_token_stats(ts->mcyc, ts->n);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "arm_name", a->name);
    cJSON_AddNumberToObject(o, "arm", arm);
    cJSON_AddNumberToObject(o, "round", round);
    cJSON_AddStringToObject(o, "fit", qw_pool_get_fit() == QW_POOL_FIT_EXACT ? "exact" : "classes");
    cJSON_AddNumberToObject(o, "limit_mb", (double)qw_pool_get_cache_limit() / 1048576.0);
    cJSON_AddNumberToObject(o, "decode_tokens", ts->n);
    double total_ms = 0;
    for (int i = 0; i < ts->n; i++) total_ms += ts->ms[i];
    cJSON_AddNumberToObject(o, "decode_tok_s", total_ms > 0 ? ts->n * 1e3 / total_ms : 0);
    cJSON_AddNumberToObject(o, "decode_tok_s_trim", w.trimmed_mean > 0 ? 1e3 / w.trimmed_mean : 0);
    cJSON_AddNumberToObject(o, "decode_ms_median", w.median);
    cJSON_AddNumberToObject(o, "decode_ms_q1", w.q1);
    cJSON_AddNumberToObject(o, "decode_ms_q3", w.q3);
    cJSON_AddNumberToObject(o, "decode_ms_max", w.max);
    cJSON_AddNumberToObject(o, "decode_cpu_ms", cp.trimmed_mean);
    if (!isnan(cy.trimmed_mean) && perf->available) cJSON_AddNumberToObject(o, "decode_mcycles", cy.trimmed_mean);
    cJSON_AddNumberToObject(o, "prefill_tok_s", prefill_s > 0 ? n_tail / prefill_s : 0);
    cJSON_AddNumberToObject(o, "ttft_ms", prefill_s * 1e3);
    cJSON_AddNumberToObject(o, "pool_cache_mb", (double)ps.cache_bytes / 1048576.0);
    cJSON_AddNumberToObject(o, "pool_active_mb", (double)ps.active_bytes / 1048576.0);
    cJSON_AddNumberToObject(o, "pool_peak_mb", (double)ps.peak_bytes / 1048576.0);
    cJSON_AddNumberToObject(o, "pool_peak_held_mb", (double)ps.peak_held_bytes / 1048576.0);
    cJSON_AddNumberToObject(o, "pool_os_calls", (double)ps.os_alloc_calls);
    /* 0 for a bounded arm = its bound never acted: it ran the baseline's allocations */
    cJSON_AddNumberToObject(o, "pool_evicted_mb", (double)ps.evicted_bytes / 1048576.0);
    char hx[24];
    snprintf(hx, sizeof hx, "%016llx", (unsigned long long)h);
    cJSON_AddStringToObject(o, "tokens_hash", hx);
    cJSON_AddItemToArray(arr, o);
    fprintf(stderr, "[ab-worker] round %2d arm %-8s decode %.3f tok/s (trimmed %.3f, median %.3f ms, cpu %.3f ms/tok) "
                    "prefill %.1f tok/s\n",
            round, a->name, total_ms > 0 ? ts->n * 1e3 / total_ms : 0, w.trimmed_mean > 0 ? 1e3 / w.trimmed_mean : 0,
            w.median, cp.trimmed_mean,
            prefill_s > 0 ? n_tail / prefill_s : 0);
    return 0;
}

int qw_cmd_ab_worker(int argc, char **argv) {
    const char *C = "ab-worker", *model_flag = NULL;
    long prompt = 512, decode = 64, replay = -1, reps = 6, threads = 0, pair_tokens = 0, decode_threads = 0;
    bool pin = true, use_perf = true, prime = false;
    inproc_arm arms[16];
    int n_arms = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            puts("usage: qwisp ab-worker -m MODEL --prompt-tokens N --decode D [--replay R] [--reps K] [--threads T]\n"
                 "         [--pair-tokens K] [--no-pin] [--no-perf] --arm NAME:K=V[,K=V…] --arm …\n"
                 "  --pair-tokens K: the token-paired decode (ab_worker_tokens.c) instead of replay trials\n"
                 "  --decode-threads N: with --pair-tokens, decode on N threads (the prompt on --threads)\n"
                 "  --prime: with --pair-tokens, an untimed pass at every position before the arms' (streaming tiers)\n"
                 "  started by `qwisp ab` for its in-process speed trials (docs/ab.md); arms may set only\n"
                 "  QWISP_PREFILL_CACHE_MB, QWISP_POOL_FIT, QWISP_POOL_DECAY_MS; prints one JSON object");
            return 0;
        }
        if (!strcmp(argv[i], "--no-pin")) pin = false;
        else if (!strcmp(argv[i], "--prime")) prime = true;
        else if (!strcmp(argv[i], "--no-perf")) use_perf = false;
        else if (QW_CLI_FLAG("-m")) { if (r < 0) return 2; model_flag = v; }
        else if (QW_CLI_FLAG("--prompt-tokens")) { if (r < 0 || qw_cli_long(C, "--prompt-tokens", v, 1, 1 << 22, &prompt)) return 2; }
        else if (QW_CLI_FLAG("--decode")) { if (r < 0 || qw_cli_long(C, "--decode", v, 2, 1 << 20, &decode)) return 2; }
        else if (QW_CLI_FLAG("--replay")) { if (r < 0 || qw_cli_long(C, "--replay", v, 1, 1 << 22, &replay)) return 2; }
        else if (QW_CLI_FLAG("--decode-threads")) { if (r < 0 || qw_cli_long(C, "--decode-threads", v, 1, 1024, &decode_threads)) return 2; }
        else if (QW_CLI_FLAG("--pair-tokens")) { if (r < 0 || qw_cli_long(C, "--pair-tokens", v, 1, 1 << 16, &pair_tokens)) return 2; }
        else if (QW_CLI_FLAG("--reps")) { if (r < 0 || qw_cli_long(C, "--reps", v, 1, 1000, &reps)) return 2; }
        else if (QW_CLI_FLAG("--threads")) { if (r < 0 || qw_cli_long(C, "--threads", v, 1, 1024, &threads)) return 2; }
        else if (QW_CLI_FLAG("--arm")) {
            if (r < 0) return 2;
            if (n_arms == 16 || parse_warm(v, &arms[n_arms])) {
                fprintf(stderr, "qwisp ab-worker: bad --arm '%s'\n", v);
                return 2;
            }
            n_arms++;
        } else {
            fprintf(stderr, "qwisp ab-worker: unknown option '%s' (started by `qwisp ab`; see docs/ab.md)\n", argv[i]);
            return 2;
        }
    }
    if (n_arms < 2) {
        fprintf(stderr, "qwisp ab-worker: need at least two --arm\n");
        return 2;
    }
    if (replay < 0 || replay > prompt) replay = prompt;
    if (pair_tokens > 0) replay = 0; /* the whole prompt is the shared prefix */
    const char *path = qw_cli_model_path(C, model_flag);
    if (!path) return 2;
    qw_error err = {0};
    int rc = 1;
    qw_model *m = qw_model_load(path, &err);
    qw_tokenizer *tok = m ? qw_tokenizer_from_gguf(m->gguf, &err) : NULL;
    int32_t *ids = tok ? qw_cli_natural_prompt(tok, (int32_t)prompt) : NULL;
    qw_ctx *c = NULL;
    qw_ctx_mark *mk = NULL;
    qw_ab_perf perf = {0};
    cJSON *out = cJSON_CreateObject();
    tok_series ts = {0};
    int *sched = NULL;
    if (!m || !tok || !ids) {
        fprintf(stderr, "qwisp ab-worker: %s\n", err.msg[0] ? err.msg : "could not build the prompt");
        goto done;
    }
    c = qw_ctx_new_placed(m, (int32_t)(prompt + decode + 16), qw_cli_threads(threads), &err);
    if (!c || apply_arm(&arms[0], &err)) {
        fprintf(stderr, "qwisp ab-worker: %s\n", err.msg);
        goto done;
    }
    char pin_desc[512] = "not pinned (--no-pin)";
    if (pin) qw_ab_pin_threads(pin_desc, sizeof pin_desc);
    if (use_perf) qw_ab_perf_open(&perf);
    else snprintf(perf.reason, sizeof perf.reason, "perf events not used (--no-perf): wall time and CPU time only");
    /* the shared prefix, once, under the baseline's policy */
    int32_t n_pre = (int32_t)(prompt - replay);
    double t0 = mono_s();
    prefix_progress pp = {t0, 0};
    qw_ctx_set_chunk_cb(c, prefix_progress_cb, &pp);
    if (n_pre > 0 && qw_ctx_eval(c, ids, n_pre, QW_LOGITS_LAST, &err)) {
        fprintf(stderr, "qwisp ab-worker: prefix: %s\n", err.msg);
        goto done;
    }
    qw_ctx_set_chunk_cb(c, NULL, NULL);
    double prefix_s = mono_s() - t0;
    mk = qw_ctx_mark_save(c);
    if (!mk) {
        fprintf(stderr, "qwisp ab-worker: saving the context's position failed (out of memory, or the device refused)\n");
        goto done;
    }
    cJSON_AddStringToObject(out, "perf", perf.reason);
    cJSON_AddBoolToObject(out, "perf_available", perf.available);
    cJSON_AddStringToObject(out, "pin", pin_desc);
    cJSON_AddNumberToObject(out, "pagecache_before", qw_ab_pagecache_fraction(path));
    cJSON_AddNumberToObject(out, "replay", (double)replay);
    cJSON_AddNumberToObject(out, "prefix_tokens", n_pre);
    cJSON_AddNumberToObject(out, "prefix_s", prefix_s);
    {   /* the pool after the shared prefix: its prefill under the baseline's policy */
        qw_pool_stats ps = qw_pool_get_stats();
        cJSON_AddNumberToObject(out, "prefix_pool_active_mb", (double)ps.active_bytes / 1048576.0);
        cJSON_AddNumberToObject(out, "prefix_pool_cache_mb", (double)ps.cache_bytes / 1048576.0);
        cJSON_AddNumberToObject(out, "prefix_pool_peak_held_mb", (double)ps.peak_held_bytes / 1048576.0);
        cJSON_AddNumberToObject(out, "state_mb", (double)qw_ctx_state_bytes(c) / 1048576.0);
        qw_footprint fp;
        qw_error fe = {0};
        if (!qw_footprint_read_fast(0, &fp, &fe)) /* the process after the prefix: anon + shmem + swap */
            cJSON_AddNumberToObject(out, "prefix_footprint_mb", (double)fp.footprint / 1048576.0);
        fprintf(stderr, "[ab-worker] prefix %d tokens in %.1f s; pool active %.1f MiB, cache %.1f MiB, peak held %.1f MiB\n",
                (int)n_pre, prefix_s, ps.active_bytes / 1048576.0, ps.cache_bytes / 1048576.0,
                ps.peak_held_bytes / 1048576.0);
    }
    cJSON *arr = cJSON_AddArrayToObject(out, "trials");
    const int32_t n_vocab0 = qw_tokenizer_n_vocab(tok) < m->hp.n_vocab ? qw_tokenizer_n_vocab(tok) : m->hp.n_vocab;
    if (pair_tokens > 0) {
        if (decode_threads > 0) { /* the prefix ran on all threads; the paired decode on these */
            qw_ctx_set_threads(c, (int)decode_threads);
            if (pin) qw_ab_pin_threads(pin_desc, sizeof pin_desc);
            qw_ab_perf_close(&perf); /* the counters followed the old threads */
            if (use_perf) {
                qw_ab_perf_open(&perf);
                cJSON_ReplaceItemInObject(out, "perf", cJSON_CreateString(perf.reason));
                cJSON_ReplaceItemInObject(out, "perf_available", cJSON_CreateBool(perf.available));
            }
            cJSON_ReplaceItemInObject(out, "pin", cJSON_CreateString(pin_desc));
            cJSON_AddNumberToObject(out, "decode_threads", (double)decode_threads);
        }
        cJSON_AddBoolToObject(out, "prime", prime);
        if (qw_abw_tokens(c, (int32_t)decode, (int32_t)pair_tokens, prime, n_vocab0, arms, n_arms, &perf, arr, &err)) {
            fprintf(stderr, "qwisp ab-worker: %s\n", err.msg);
            goto done;
        }
        goto finish;
    }
    ts.ms = qw_xcalloc((size_t)decode, sizeof(double));
    ts.cpu_ms = qw_xcalloc((size_t)decode, sizeof(double));
    ts.mcyc = qw_xcalloc((size_t)decode, sizeof(double));
    int n_sched = qw_ab_schedule(n_arms, (int)reps, NULL);
    sched = qw_xcalloc((size_t)n_sched * 2, sizeof *sched);
    int *rounds = sched + n_sched;
    qw_ab_schedule(n_arms, (int)reps, sched);
    qw_ab_schedule_rounds(sched, n_sched, rounds);
    const int32_t n_vocab = qw_tokenizer_n_vocab(tok) < m->hp.n_vocab ? qw_tokenizer_n_vocab(tok) : m->hp.n_vocab;
    for (int i = 0; i < n_sched; i++) {
        if (trial(c, mk, ids + n_pre, (int32_t)replay, (int32_t)decode, n_vocab, &arms[sched[i]], sched[i], rounds[i], &perf,
                  &ts, arr, &err)) {
            fprintf(stderr, "qwisp ab-worker: trial %d (arm %s): %s\n", i, arms[sched[i]].name, err.msg);
            goto done;
        }
    }
finish:
    cJSON_AddNumberToObject(out, "pagecache_after", qw_ab_pagecache_fraction(path));
    char *s = cJSON_PrintUnformatted(out);
    puts(s);
    free(s);
    rc = 0;
done:
    qw_ab_perf_close(&perf);
    cJSON_Delete(out);
    free(ts.ms), free(ts.cpu_ms), free(ts.mcyc);
    free(sched);
    qw_ctx_mark_free(mk);
    qw_ctx_free(c);
    free(ids);
    qw_tokenizer_free(tok);
    qw_model_free(m);
    for (int a = 0; a < n_arms; a++)
        for (int j = 0; j < arms[a].n; j++) free(arms[a].kv[j]);
    return rc;
}
