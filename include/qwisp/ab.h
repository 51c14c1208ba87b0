/* ab.h — paired A/B experiments with pre-registered kill criteria
 * (`qwisp ab`, docs/ab.md).
 *
 * An experiment runs the same qwisp binary as a fresh child process per trial
 * (`qwisp run --prompt-tokens N -n D --json --ignore-eos`); the arms differ
 * only by their environment.  Trials are interleaved in a balanced order
 * (ABC CBA ABC …, one warm-up trial discarded), so drift and page-cache
 * warmth hit every arm alike; trials of one round are paired.  The verdict per
 * arm (against the first arm, the baseline) is computed from a criteria file
 * read and parsed before the first trial:
 *
 *     # comment
 *     decode_tok_s.delta_pct < -2 => close
 *     footprint_peak_mb.delta < -4096 and abs(decode_tok_s.delta_pct) <= 2 => ship
 *     else => keep
 *
 * Each quantity is an interval of the median paired difference (bootstrap
 * widened to the sign-test interval; ab_stats.c says why), and
 * a comparison is three-valued: true when the whole interval satisfies it,
 * false when none of it does, unknown when it straddles the threshold.  Rules
 * are tried in order; the first true rule gives the verdict unless an
 * earlier rule was unknown — then the verdict is "inconclusive" (with the
 * reps that would settle it).  No true and no unknown rule → the `else` verdict
 * ("none" when absent).
 *
 * Pieces (src/ab/): ab_criteria.c (parse, evaluate), ab_stats.c (median,
 * quantiles, bootstrap, order, reps), ab_trial.c (spawn + measure one trial),
 * ab_report.c (report.md / report.json), ab_svg.c (footprint plot),
 * ab_sys.c (perf counters, pinning, page-cache check), ab_sha256.c; the
 * in-process speed trials run in cli/cmd_ab_worker.c.  Library code; only cli/cmd_ab.c prints.
 */
#ifndef QWISP_AB_H
#define QWISP_AB_H

#include "qwisp/base.h"

#include <stdio.h>
#include <sys/types.h>

/* ---- metrics: X(id, name, unit, help) ------------------------------------- */
#define QW_AB_METRICS(X)                                                                          \
    X(DECODE_TOK_S, "decode_tok_s", "tok/s", "decode tokens / their total time (token-paired: minus run-queue delay)") \
    X(DECODE_TOK_S_WALL, "decode_tok_s_wall", "tok/s", "token-paired: tokens / wall time, run-queue delay included") \
    X(DECODE_WAIT_MS, "decode_wait_ms", "ms", "token-paired: run-queue delay of the step's thread per token (others' share)") \
    X(DECODE_TOK_S_TRIM, "decode_tok_s_trim", "tok/s", "1000 / 10% trimmed mean ms per decode token (in-process)") \
    X(DECODE_MS_MEDIAN, "decode_ms_median", "ms", "median wall ms per decode token (in-process)")  \
    X(DECODE_CPU_MS, "decode_cpu_ms", "ms", "CPU ms (all threads) per decode token, trimmed mean (in-process)") \
    X(DECODE_MCYCLES, "decode_mcycles", "Mcycles", "CPU cycles per decode token, trimmed mean (perf_event_open)") \
    X(PREFILL_TOK_S, "prefill_tok_s", "tok/s", "prefill tokens per second (child --json)")        \
    X(TTFT_MS, "ttft_ms", "ms", "time to first token (child --json)")                             \
    X(WALL_MS, "wall_ms", "ms", "child wall time, fork to exit (includes model load)")            \
    X(FOOTPRINT_PEAK_MB, "footprint_peak_mb", "MiB", "footprint peak: sampled from outside, or the child's own if larger")       \
    X(CHILD_FOOTPRINT_PEAK_MB, "child_footprint_peak_mb", "MiB", "footprint peak the child saw")  \
    X(RSS_PEAK_MB, "rss_peak_mb", "MiB", "RSS peak sampled from outside (misleads; see memory.md)") \
    X(CHILD_RSS_PEAK_MB, "child_rss_peak_mb", "MiB", "RSS peak the child saw")                 \
    X(POOL_ACTIVE_MB, "pool_active_mb", "MiB", "pool active at the end of the run")              \
    X(POOL_CACHE_MB, "pool_cache_mb", "MiB", "pool cache at the end of the run")                 \
    X(POOL_PEAK_MB, "pool_peak_mb", "MiB", "pool peak active")                                   \
    X(POOL_PEAK_HELD_MB, "pool_peak_held_mb", "MiB", "pool peak active + cache")                 \
    X(POOL_OS_CALLS, "pool_os_calls", "calls", "pool calls to the OS allocator")                 \
    X(POOL_EVICTED_MB, "pool_evicted_mb", "MiB", "cached bytes the bound gave back (0: it never acted)") \
    X(MAJFLT, "majflt", "faults", "major page faults (wait4 rusage)")                            \
    X(EXPERT_HITS, "expert_hits", "count", "expert cache hits (streaming tier)")                 \
    X(EXPERT_MISSES, "expert_misses", "count", "expert cache misses (streaming tier)")           \
    X(EXPERT_READ_MB, "expert_read_mb", "MiB", "expert bytes read from disk (streaming tier)")   \
    X(FOOTPRINT_DEVICE_PEAK_MB, "footprint_with_device_peak_mb", "MiB", "GPU backend: host footprint peak + the device pool's held peak (child --json)") \
    X(DEVICE_HELD_PEAK_MB, "device_held_peak_mb", "MiB", "GPU backend: device pool peak active + cache (weights included)") \
    X(DEVICE_CACHE_PEAK_MB, "device_cache_peak_mb", "MiB", "GPU backend: device pool cache peak") \
    X(DEVICE_EVICTED_MB, "device_evicted_mb", "MiB", "GPU backend: cached device bytes the bound gave back")

typedef enum {
#define QW_AB_M_ENUM(id, ...) QW_AB_M_##id,
    QW_AB_METRICS(QW_AB_M_ENUM)
#undef QW_AB_M_ENUM
        QW_AB_N_METRICS
} qw_ab_metric;

const char *qw_ab_metric_name(int m);
const char *qw_ab_metric_unit(int m);
/* -1 when unknown. */
int qw_ab_metric_find(const char *name, size_t len);

/* ---- criteria --------------------------------------------------------------- */
typedef enum { QW_AB_DELTA, QW_AB_DELTA_PCT } qw_ab_kind;
typedef enum { QW_AB_LT, QW_AB_LE, QW_AB_GT, QW_AB_GE } qw_ab_op;

#define QW_AB_MAX_CONDS 8
#define QW_AB_MAX_RULES 32
#define QW_AB_WORD 32

typedef struct {
    int metric;
    qw_ab_kind kind;
    bool absval; /* abs(metric.kind) */
    qw_ab_op op;
    double threshold;
    int line, col;
} qw_ab_cond;

typedef struct {
    qw_ab_cond conds[QW_AB_MAX_CONDS]; /* conjunction */
    int n_conds;
    char verdict[QW_AB_WORD];
    int line;
    char text[256]; /* the rule's line, trimmed */
} qw_ab_rule;

typedef struct {
    qw_ab_rule rules[QW_AB_MAX_RULES];
    int n_rules;
    char otherwise[QW_AB_WORD]; /* "else => WORD"; "none" when absent */
    char sha256[65];            /* of the file's bytes */
    char *text;                 /* the file, verbatim (owned) */
} qw_ab_criteria;

/* Parses criteria text.  -1 + err "criteria:LINE:COL: expected …, saw '…'"
 * on a syntax error or an unknown metric / quantity / verdict word. */
int qw_ab_criteria_parse(qw_ab_criteria *c, const char *text, qw_error *err);
/* Reads and parses a file (text and its SHA-256 kept in c). */
int qw_ab_criteria_load(qw_ab_criteria *c, const char *path, qw_error *err);
void qw_ab_criteria_free(qw_ab_criteria *c);

/* An interval for one quantity (metric × kind) of one arm vs the baseline. */
typedef struct {
    bool valid;     /* enough paired trials with the metric present */
    double est;     /* median paired difference */
    double lo, hi;  /* bootstrap percentile interval of the median (widened by floor) */
    int n;          /* pairs */
    double floor;   /* the A/A noise floor added to both sides (0 = none; INFINITY = the A/A
                       pair has no interval, so nothing can be called) */
} qw_ab_interval;

/* Three-valued result of a comparison on an interval. */
typedef enum { QW_AB_FALSE = 0, QW_AB_TRUE = 1, QW_AB_UNKNOWN = 2 } qw_ab_tri;
qw_ab_tri qw_ab_cond_eval(const qw_ab_cond *c, qw_ab_interval iv);

/* Looks up the interval for (metric, kind); the evaluator's only input. */
typedef qw_ab_interval (*qw_ab_lookup)(void *user, int metric, qw_ab_kind kind);

typedef struct {
    char verdict[64];   /* a rule's word, the else word, or "inconclusive" */
    int rule;           /* index of the deciding rule, -1 for else/inconclusive */
    int unknown_rule;   /* first straddling rule (inconclusive), else -1 */
    char why[512];      /* which quantity straddled which threshold, or what matched */
    int suggest_reps;   /* inconclusive: reps estimated to settle it (0 = unknown) */
} qw_ab_verdict;

void qw_ab_criteria_eval(const qw_ab_criteria *c, qw_ab_lookup look, void *user, qw_ab_verdict *out);

/* ---- statistics ----------------------------------------------------------- */
double qw_ab_median(const double *x, int n);
/* Linear-interpolated quantile q in [0,1] (type 7). */
double qw_ab_quantile(const double *x, int n, double q);
/* Interval (level, e.g. 0.95) for the median of x: the percentile bootstrap
 * (`resamples` draws, fixed seed) widened to the distribution-free sign-test
 * interval; unbounded (±INFINITY) when n is too small for one (n < 6 at 95%). */
qw_ab_interval qw_ab_bootstrap_median(const double *x, int n, int resamples, double level, uint64_t seed);
/* The Hodges–Lehmann estimate (median of the Walsh averages) of x's centre
 * and its Wilcoxon signed-rank interval at this level (ab_signrank.c):
 * distribution-free for x symmetric about its centre, ~1.5x narrower than
 * the sign-test interval for near-normal x.  Unbounded (±INFINITY) when n is
 * too small (n < 6 at 95 %).  The token-paired speed trials' statistic. */
qw_ab_interval qw_ab_signrank(const double *x, int n, double level);
/* Its order statistic k ([W_(k), W_(N-k+1)], N = n(n+1)/2); 0 = none. */
int qw_ab_signrank_k(int n, double level);
/* The sign-test order statistic k (interval [x_(k), x_(n-k+1)]); 0 = none. */
int qw_ab_sign_k(int n, double level);
/* The fewest values giving a bounded interval at this level (6 at 0.95). */
int qw_ab_min_pairs(double level);
/* Reps to shrink an interval of half-width `half` (at n pairs) until it no
 * longer reaches `threshold` from `est`, scaling as 1/sqrt(n); 0 if est sits
 * on the threshold. */
int qw_ab_suggest_reps(int n, double est, double half, double threshold);

/* Mean of x without the lowest and highest `trim` fraction (0.1 = 10 % each
 * side); trim 0 is the mean, trim >= 0.5 the median.  NaN for n = 0. */
double qw_ab_trimmed_mean(const double *x, int n, double trim);

/* Summary of one trial's per-token samples (ms per decode token, …). */
typedef struct {
    int n;
    double median, trimmed_mean, q1, q3, min, max;
} qw_ab_tokstats;
qw_ab_tokstats qw_ab_token_stats(const double *x, int n);

/* The in-process schedule, every other arm bracketed by the baseline: one
 * warm-up trial of arm 0, one opening trial of arm 0, then per round the
 * other arms (forward in even rounds, backward in odd ones), each followed by
 * arm 0:  0 0 | 1 0 2 0 | 2 0 1 0 | …  Each non-baseline trial is compared
 * with the mean of the baseline trials right before and after it, which
 * cancels any drift that is linear over the two neighbours (ab_stats.c).
 * Returns the length, 2 + 2*reps*(n_arms-1); sched may be NULL to ask. */
int qw_ab_schedule(int n_arms, int reps, int *sched);
/* Rounds of a schedule: the warm-up (index 0) is -1, every other trial the
 * number of earlier trials of its arm after the warm-up (0, 1, …). */
void qw_ab_schedule_rounds(const int *sched, int n, int *rounds);

/* Token-paired mode (`--speed tokens`, ab_worker_tokens.c): every decode
 * position is decoded once per arm from the same saved state, the arms one
 * right after the other.  The order at position t rotates the arms by t and
 * reverses every n_arms positions, so over 2*n_arms consecutive positions
 * every arm holds every slot exactly twice (a slot's cost — the first arm
 * after the next token's save, say — is shared alike).  order[i] = arm. */
void qw_ab_token_order(int n_arms, int t, int *order);

/* Balanced order: round r runs arms 0..k-1 forward when r is even, backward
 * when odd (ABC CBA ABC …).  order[r*k + i] = arm index. */
void qw_ab_order(int n_arms, int reps, int *order);

/* ---- run-queue delay (ab_sched.c) -------------------------------------------- */
#define QW_AB_MAX_THREADS 256
/* Every thread now in this process: its /proc/self/task/TID/schedstat, kept
 * open (call after the compute threads exist); fd[0] is the calling thread. */
typedef struct {
    int n;
    int fd[QW_AB_MAX_THREADS];
} qw_ab_sched;
void qw_ab_sched_open(qw_ab_sched *s);
/* Each thread's total run-queue delay so far (ns; 0 where unreadable). */
void qw_ab_sched_read(const qw_ab_sched *s, double *delay_ns);
/* The calling thread's (index 0) delay growth between two reads, in ms; 0
 * when schedstat is unreadable. */
double qw_ab_sched_self_ms(const qw_ab_sched *s, const double *before, const double *after);
/* The largest growth of any thread's delay between two reads, in ms: how
 * long a barrier-synchronised step was held up by other processes. */
double qw_ab_sched_max_ms(const double *before, const double *after, int n);
void qw_ab_sched_close(qw_ab_sched *s);

/* ---- measurement hygiene (ab_sys.c) ----------------------------------------- */
#define QW_AB_PERF_MAX_THREADS 256
typedef struct {
    bool available;
    int n;                                  /* threads counted */
    int fd_cycles[QW_AB_PERF_MAX_THREADS];  /* one per thread */
    int fd_task[QW_AB_PERF_MAX_THREADS];
    char reason[256];                       /* what is counted, or why nothing is */
} qw_ab_perf;
/* Opens cycles + task-clock counters on every thread now in this process
 * (so call it after the compute threads exist).  Never fails: when the kernel
 * refuses, p->available = false and p->reason says why (errno text and
 * kernel.perf_event_paranoid). */
void qw_ab_perf_open(qw_ab_perf *p);
/* The same with another event in place of cycles (tests use an invalid one to
 * exercise the fallback). */
void qw_ab_perf_open_events(qw_ab_perf *p, uint32_t type, uint64_t config);
/* Sums over threads; NaN when unavailable. */
void qw_ab_perf_read(const qw_ab_perf *p, double *cycles, double *task_ns);
void qw_ab_perf_close(qw_ab_perf *p);
/* Pins every thread of this process to one CPU of the allowed set (thread i
 * to the i-th allowed CPU, wrapping); returns how many were pinned and
 * describes the mapping (or why none was) in desc. */
int qw_ab_pin_threads(char *desc, size_t cap);
/* Fraction [0,1] of the file's pages in the page cache (mincore); NaN if it
 * cannot be read. */
double qw_ab_pagecache_fraction(const char *path);

/* ---- trials --------------------------------------------------------------- */
typedef struct {
    int arm, round;  /* round -1 = warm-up */
    bool ok;
    int exit_code;   /* -1 if killed by a signal */
    int term_signal;
    char error[256]; /* why not ok: exit status + last stderr line */
    double m[QW_AB_N_METRICS]; /* NaN = not reported */
    double start_s;  /* since the experiment began */
    float *t_s, *fp_mb; /* footprint series (seconds since fork, MiB) */
    int n_series, cap_series;
    char *knobs_json; /* the child's "knobs" object, compact JSON (owned) */
} qw_ab_trial;

typedef struct {
    const char *exe;          /* binary to exec (e.g. /proc/self/exe) */
    char *const *argv;        /* its argv (argv[0] included), NULL-terminated */
    char *const *envp;        /* the child's whole environment */
    const char *stdout_path;  /* the child's stdout (its --json) goes here */
    const char *stderr_path;
    int sample_ms;            /* footprint sampling interval */
} qw_ab_spawn;

/* Runs one trial: fork/exec, samples the footprint of the deepest descendant
 * (so a wrapper such as `qwisp simulate` is seen through) every sample_ms from
 * outside, wait4 for exit (rusage: major faults), then parses the child's JSON.
 * A child that fails is a trial with ok=false and the reason, not an error:
 * -1 + err only when the trial could not be run at all (fork failed). */
int qw_ab_trial_run(const qw_ab_spawn *sp, qw_ab_trial *t, qw_error *err);
/* Runs n trials at once (sp[i] -> t[i]), each watched by its own thread, and
 * returns when all have exited; -1 + the first harness error, as above.  For
 * footprint trials only: concurrent processes perturb each other's speed,
 * not their own memory. */
int qw_ab_trial_run_group(const qw_ab_spawn *sp, qw_ab_trial *t, int n, qw_error *err);
/* Fills t->m from a `qwisp run --json` object's text; false if not JSON. */
bool qw_ab_trial_parse_json(qw_ab_trial *t, const char *json);
void qw_ab_trial_free(qw_ab_trial *t);

/* ---- an experiment and its report -------------------------------------------- */
typedef struct {
    char name[QW_AB_WORD];
    char **set;   /* "K=V" the arm sets (malloc'd strings) */
    char **unset; /* "K" the arm removes */
    int n_set, n_unset;
    char spec[512]; /* as given on the command line */
} qw_ab_arm;

typedef struct {
    qw_ab_arm *arms;
    int n_arms, reps;
    qw_ab_trial *trials; /* [0] the warm-up, then reps*n_arms in run order */
    int n_trials;
    const qw_ab_criteria *crit;
    const char *criteria_path;
    char criteria_read_at[40], first_trial_at[40], finished_at[40]; /* UTC ISO 8601 */
    const char *exe_path;
    char exe_sha256[65];
    const char *model, *tier, *command; /* command: the ab invocation, for the report */
    char child_cmd[512];                /* what each trial ran */
    double simulate_gb;                 /* 0 = not under simulate */
    /* the backend settings every arm inherits ("QWISP_BACKEND=cuda QWISP_DEVICE_VRAM=8"; "" = none
     * set): `tier` is the host's; on a GPU the device's tier comes from these */
    char backend_env[160];
    int prompt_tokens, decode;
    int resamples;   /* bootstrap draws (2000) */
    double level;    /* interval level (0.95) */
    uint64_t seed;   /* bootstrap seed */
    qw_ab_verdict *verdicts; /* per arm; [0] (the baseline) unused; filled by qw_ab_analyze */
    /* Speed side measured in one process (`qwisp ab-worker`, arms alternated
     * inside it, qw_ab_schedule): when n_speed_trials > 0, the speed metrics
     * (qw_ab_is_speed_metric) come from these trials, each non-baseline trial
     * paired with the mean of its two bracketing baseline trials; the other
     * metrics from `trials` (separate processes: footprint). */
    qw_ab_trial *speed_trials;
    int n_speed_trials;
    int aa_arm;        /* index of the A/A arm (the baseline's settings again), -1 = none */
    char speed_mode[32];   /* "in-process" or "separate processes" */
    int footprint_jobs;    /* footprint trials run at once (--footprint-jobs; 1 = one after another) */
    char perf_desc[256];   /* what perf_event_open counted, or why not */
    char pin_desc[512];    /* thread pinning */
    char cpu_model[128];
    double pagecache_before, pagecache_after; /* model file fraction in page cache */
    int replay_tokens;     /* in-process: prompt tokens re-run per trial */
    int footprint_decode;  /* decode tokens of the footprint (process) trials */
    /* Token-paired speed trials (`--speed tokens`): speed_trials hold, per
     * block of token_block decode positions, one trial per arm (round = the
     * block, -1 for the first: a warm-up); a trial is paired with arm 0's
     * trial of the same block (same tokens, interleaved token by token), not
     * bracketed.  Prefill and TTFT are then not speed metrics: they come from
     * the separate processes.  speed_rounds = the blocks after the warm-up
     * (bracketed mode: = reps). */
    bool speed_tokens;
    int token_block, speed_rounds;
    int decode_threads; /* token-paired: threads of the decode (0 = the prompt's) */
    bool prime;         /* token-paired: an untimed pass at each position before the arms' (streaming tiers) */
} qw_ab_experiment;

/* Metrics measured by the in-process trials when there are any. */
bool qw_ab_is_speed_metric(int metric);
/* Whether e's interval for this metric comes from its speed trials. */
bool qw_ab_uses_speed_trials(const qw_ab_experiment *e, int metric);
/* The paired interval before the A/A noise floor is added. */
qw_ab_interval qw_ab_paired_raw(const qw_ab_experiment *e, int arm, int metric, qw_ab_kind kind);
/* The A/A noise floor of (metric, kind): the largest |difference| inside
 * the A/A pair's interval; 0 when there is no A/A arm, INFINITY when it has no
 * interval (too few pairs), NaN when the metric is missing. */
double qw_ab_noise_floor(const qw_ab_experiment *e, int metric, qw_ab_kind kind);

/* The paired interval of arm vs arm 0 for (metric, kind): pairs are rounds in
 * which both trials succeeded and report the metric; for any arm but the A/A
 * arm its ends are moved out by the A/A noise floor, so a difference the A/A
 * pair could show by chance is never called (ab_stats.c). */
qw_ab_interval qw_ab_paired(const qw_ab_experiment *e, int arm, int metric, qw_ab_kind kind);
/* Number of failed (non-warm-up) trials of an arm. */
int qw_ab_failed(const qw_ab_experiment *e, int arm);
/* Computes the verdict of every arm but the baseline: "failed" when any of
 * its or the baseline's trials failed, else from the criteria. */
void qw_ab_analyze(qw_ab_experiment *e);
/* Writes DIR/report.md, DIR/report.json, DIR/footprint.svg.  -1 + err. */
int qw_ab_report_write(const qw_ab_experiment *e, const char *dir, qw_error *err);
/* The footprint-over-time plot alone (ab_svg.c). */
int qw_ab_svg_write(const qw_ab_experiment *e, const char *path, qw_error *err);

/* ---- hashing ---------------------------------------------------------------- */
void qw_ab_sha256(const void *data, size_t n, char hex[65]);
/* SHA-256 of a file; -1 + err if unreadable. */
int qw_ab_sha256_file(const char *path, char hex[65], qw_error *err);

#endif
