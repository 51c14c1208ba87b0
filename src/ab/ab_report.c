/* ab_report.c — the report of a `qwisp ab` experiment (ab.h): report.md for
 * people, report.json for tools, footprint.svg (ab_svg.c) for the memory
 * curves.  Everything in them is computed from the trials and the criteria
 * (qw_ab_analyze must have run); nothing is hand-written.
 *
 * report.md: setup (binary + hash, criteria + hash + when it was read vs the
 * first trial), the verdict per arm, per-arm medians and spreads, paired
 * differences with their intervals (and the A/A noise floor each was widened
 * by), the criteria verbatim, every trial — the in-process speed trials and
 * the separate-process footprint trials each in their own table.
 */
#include "qwisp/ab.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The trials a metric is read from: the in-process ones for the speed
 * metrics when there are any, else the separate processes. */
static const qw_ab_trial *trials_for(const qw_ab_experiment *e, int m, int *n) {
    if (qw_ab_uses_speed_trials(e, m)) {
        *n = e->n_speed_trials;
        return e->speed_trials;
    }
    *n = e->n_trials;
    return e->trials;
}

/* Metrics shown in the tables: those with at least one value in any trial. */
static bool metric_present(const qw_ab_experiment *e, int m) {
    int nt;
    const qw_ab_trial *tr = trials_for(e, m, &nt);
    for (int i = 0; i < nt; i++)
        if (tr[i].ok && !isnan(tr[i].m[m])) return true;
    return false;
}

/* The arms table shows these (and the expert stats when streaming); the
 * paired table and report.json have every metric. */
static bool metric_in_arms_table(const qw_ab_experiment *e, int m) {
    switch (m) {
    case QW_AB_M_CHILD_FOOTPRINT_PEAK_MB:
    case QW_AB_M_CHILD_RSS_PEAK_MB:
    case QW_AB_M_RSS_PEAK_MB:
    case QW_AB_M_POOL_ACTIVE_MB:
    case QW_AB_M_POOL_OS_CALLS: return false;
    case QW_AB_M_EXPERT_HITS:
    case QW_AB_M_EXPERT_MISSES:
    case QW_AB_M_EXPERT_READ_MB: return strcmp(e->tier, "streaming") == 0 && metric_present(e, m);
    default: return metric_present(e, m);
    }
}

/* Values of one metric over an arm's successful, non-warm-up trials. */
static int arm_values(const qw_ab_experiment *e, int arm, int m, double *out) {
    int n = 0, nt;
    const qw_ab_trial *tr = trials_for(e, m, &nt);
    for (int i = 0; i < nt; i++) {
        const qw_ab_trial *t = &tr[i];
        if (t->arm == arm && t->round >= 0 && t->ok && !isnan(t->m[m])) out[n++] = t->m[m];
    }
    return n;
}

static const char *arm_env_text(const qw_ab_arm *a, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < a->n_set && o < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s`%s`", o ? " " : "", a->set[i]);
    for (int i = 0; i < a->n_unset && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s`%s` unset", o ? " " : "", a->unset[i]);
    if (!buf[0]) snprintf(buf, cap, "(nothing set)");
    return buf;
}

/* Where the footprint side came from: separate processes, or not measured. */
static void footprint_line(FILE *f, const qw_ab_experiment *e, const char *what) {
    if (e->n_trials > 0 && e->footprint_jobs > 1)
        fprintf(f, "- %s: separate processes, %d decode tokens each, %d at a time after the warm-up (a process's "
                   "footprint is its own memory; their wall, prefill and fault figures are not measurements) "
                   "(table below)\n", what, e->footprint_decode, e->footprint_jobs);
    else if (e->n_trials > 0)
        fprintf(f, "- %s: separate processes, %d decode tokens each (table below)\n", what, e->footprint_decode);
    else
        fprintf(f, "- footprint and pool metrics: **not measured** (`--footprint-reps 0`: a speed-only run); "
                   "rules that need them cannot hold\n");
}

static void write_hygiene_md(FILE *f, const qw_ab_experiment *e) {
    fprintf(f, "## Measurement\n\n");
    fprintf(f, "- machine: %s\n", e->cpu_model[0] ? e->cpu_model : "(CPU model unknown)");
    if (e->n_speed_trials > 0 && e->speed_tokens) {
        fprintf(f, "- speed (decode metrics): **in one process, token-paired** (`qwisp ab-worker --pair-tokens`): the "
                   "%d-token prompt prefilled once under the baseline's policy; then at every decode position the "
                   "recurrent state is saved and the same token decoded once per arm (state restored and the arm's "
                   "pool policy applied before each, the arms' order rotated and reversed so every arm holds every "
                   "slot alike), each forward pass timed alone; every arm must pick the same next token.  Blocks of "
                   "%d positions are the pairs (%d blocks after a warm-up block): a block's decode_tok_s = its tokens "
                   "/ their total time (untrimmed) less the time other processes held the step's thread (its "
                   "run-queue delay from schedstat, decode_wait_ms; the raw view is decode_tok_s_wall), and arm X's block is compared with the baseline's same block, "
                   "whose tokens ran interleaved with X's, milliseconds apart — so the machine's slow-downs (another "
                   "tenant's burst, clocks, page cache) fall on both members of a pair and cancel.  Prefill and TTFT "
                   "come from the separate processes.  What this does not replay: each arm's own prefill (the KV and "
                   "scratch were allocated under the baseline's policy; a bound applies from its first token on — "
                   "pool_evicted_mb says whether it ever acted)\n",
                e->prompt_tokens, e->token_block, e->speed_rounds);
        if (e->decode_threads > 0) fprintf(f, "- decode threads: %d (the prompt's prefill on QWISP_THREADS)\n", e->decode_threads);
        fprintf(f, "- priming pass: %s\n",
                e->prime ? "yes (`--prime`): at every position one untimed pass under the baseline's policy ran before "
                           "the arms', so a streaming tier's expert cache held that position's experts for every "
                           "timed pass"
                         : "no: on a streaming tier the first arm at a position pays its expert copies (the order "
                           "rotates, so this is noise, not bias)");
        footprint_line(f, e, "footprint, pool, prefill metrics");
    } else if (e->n_speed_trials > 0) {
        fprintf(f, "- speed (decode/prefill/ttft metrics): **in one process** (`qwisp ab-worker`), one warm-up, then "
                   "every other arm's trial bracketed by two baseline trials (A B A C A | C A B A …) and compared with "
                   "their mean, so a linear drift cancels; before each trial the context is rewound, the pool's cache "
                   "emptied and the arm's pool policy applied, then %d prompt tokens are re-prefilled%s and %d tokens "
                   "decoded, each forward pass timed alone; per trial: decode_tok_s = tokens / total time (untrimmed: a cost on a few "
                   "tokens counts), decode_tok_s_trim = 1000 / 10 %% trimmed mean ms per token\n",
                e->replay_tokens, e->replay_tokens < e->prompt_tokens ? " (the prompt's tail; the prefix before it is "
                                                                         "shared)" : " (the whole prompt)",
                e->decode);
        footprint_line(f, e, "footprint and pool metrics");
    } else {
        fprintf(f, "- speed and footprint: separate processes (one per trial)\n");
    }
    fprintf(f, "- %s\n- threads: %s\n", e->perf_desc[0] ? e->perf_desc : "perf events: not used",
            e->pin_desc[0] ? e->pin_desc : "not pinned");
    if (!isnan(e->pagecache_before))
        fprintf(f, "- page cache: %.1f %% of the model file resident before the first trial, %.1f %% after the last%s\n",
                e->pagecache_before * 100, e->pagecache_after * 100,
                e->pagecache_before < 0.99 ? " (**not warm at the start**: the warm-up trial paid for it)" : "");
    if (e->aa_arm >= 0) {
        double fl = qw_ab_noise_floor(e, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT);
        double ff = qw_ab_noise_floor(e, QW_AB_M_FOOTPRINT_PEAK_MB, QW_AB_DELTA);
        char fp[64];
        if (isnan(ff)) snprintf(fp, sizeof fp, "not measured");
        else if (isinf(ff)) snprintf(fp, sizeof fp, "unbounded (too few pairs)");
        else snprintf(fp, sizeof fp, "±%.3g MiB", ff);
        fprintf(f, "- **noise floor** (A/A arm '%s' = the baseline's settings again): decode_tok_s ±%.3g %%, "
                   "footprint_peak_mb %s; every other arm's interval is widened by its metric's floor, so no "
                   "difference smaller than it is called\n",
                e->arms[e->aa_arm].name, fl, fp);
    } else {
        fprintf(f, "- noise floor: not measured (no A/A arm: --no-aa)\n");
    }
    fprintf(f, "\n");
}

static void write_md(FILE *f, const qw_ab_experiment *e) {
    double *v = qw_xmalloc((size_t)(e->n_trials + e->n_speed_trials + 1) * sizeof *v);
    char env[600];
    fprintf(f, "# qwisp ab report\n\n");
    fprintf(f, "- command: `%s`\n", e->command ? e->command : "");
    fprintf(f, "- each trial: `%s` (a fresh process; arms differ only by their environment)\n", e->child_cmd);
    fprintf(f, "- binary: `%s`, sha256 `%s`\n", e->exe_path, e->exe_sha256);
    fprintf(f, "- model: `%s`; tier: %s%s", e->model, e->tier, e->simulate_gb > 0 ? "; under `qwisp simulate " : "");
    if (e->simulate_gb > 0) fprintf(f, "%gGB`", e->simulate_gb);
    if (e->backend_env[0]) fprintf(f, " (the host's); backend settings of every arm: `%s`", e->backend_env);
    fprintf(f, "\n- prompt tokens %d, decode tokens %d, %d reps per arm, order balanced (ABC CBA …), 1 warm-up trial "
               "(arm '%s') discarded\n",
            e->prompt_tokens, e->decode, e->reps, e->arms[0].name);
    fprintf(f, "- criteria: `%s`, sha256 `%s`, read and parsed at %s; first trial started at %s "
               "(criteria read before the first trial: %s); finished %s\n",
            e->criteria_path, e->crit->sha256, e->criteria_read_at, e->first_trial_at,
            strcmp(e->criteria_read_at, e->first_trial_at) <= 0 ? "yes" : "NO", e->finished_at);
    if (e->speed_tokens)
        fprintf(f, "- statistic, speed metrics (token-paired blocks): Hodges-Lehmann estimate of the paired block "
                   "differences (the median of their Walsh averages) with its %.0f%% Wilcoxon signed-rank interval "
                   "(distribution-free for differences symmetric about their centre, as an A/A pair's are; "
                   "ab_signrank.c); other metrics as below\n", e->level * 100);
    fprintf(f, "- statistic: median of the paired differences (trials paired by round); %.0f%% interval = percentile "
               "bootstrap (%d resamples, seed %llu) widened to the distribution-free sign-test interval (unbounded "
               "below 6 pairs); a criterion holds only if its whole interval satisfies it\n\n",
            e->level * 100, e->resamples, (unsigned long long)e->seed);
    write_hygiene_md(f, e);

    fprintf(f, "## Verdict\n\n| arm | vs | verdict | why | reps to settle |\n|---|---|---|---|---|\n");
    for (int a = 1; a < e->n_arms; a++) {
        const qw_ab_verdict *vd = &e->verdicts[a];
        fprintf(f, "| %s | %s | **%s** | %s | ", e->arms[a].name, e->arms[0].name, vd->verdict, vd->why);
        if (!strcmp(vd->verdict, "inconclusive"))
            !vd->suggest_reps ? fprintf(f, "unknown (estimate on the threshold) |\n")
            : e->speed_tokens ? fprintf(f, "%d blocks (%d decode positions; speed rules) |\n", vd->suggest_reps,
                                        vd->suggest_reps * e->token_block)
                              : fprintf(f, "%d |\n", vd->suggest_reps);
        else
            fprintf(f, "– |\n");
    }

    fprintf(f, "\n## Arms (median, [min, max] over successful trials)\n\n| arm | env | ok |");
    for (int m = 0; m < QW_AB_N_METRICS; m++)
        if (metric_in_arms_table(e, m)) fprintf(f, " %s (%s) |", qw_ab_metric_name(m), qw_ab_metric_unit(m));
    fprintf(f, "\n|---|---|---|");
    for (int m = 0; m < QW_AB_N_METRICS; m++)
        if (metric_in_arms_table(e, m)) fprintf(f, "---|");
    fprintf(f, "\n");
    for (int a = 0; a < e->n_arms; a++) {
        int failed = qw_ab_failed(e, a);
        fprintf(f, "| %s | %s | %d/%d%s |", e->arms[a].name, arm_env_text(&e->arms[a], env, sizeof env), e->reps - failed,
                e->reps, failed ? " **FAILED**" : "");
        for (int m = 0; m < QW_AB_N_METRICS; m++) {
            if (!metric_in_arms_table(e, m)) continue;
            int n = arm_values(e, a, m, v);
            if (n == 0) fprintf(f, " – |");
            else fprintf(f, " %.4g [%.4g, %.4g] |", qw_ab_median(v, n), qw_ab_quantile(v, n, 0), qw_ab_quantile(v, n, 1));
        }
        fprintf(f, "\n");
    }

    fprintf(f, "\n## Paired differences vs '%s' (median [interval]; \"0 in interval\" = no difference detected)\n",
            e->arms[0].name);
    for (int a = 1; a < e->n_arms; a++) {
        fprintf(f, "\n### %s − %s\n\n| metric | delta | delta_pct | pairs | A/A floor (pct) | 0 in interval |\n"
                   "|---|---|---|---|---|---|\n",
                e->arms[a].name, e->arms[0].name);
        for (int m = 0; m < QW_AB_N_METRICS; m++) {
            if (!metric_present(e, m)) continue;
            qw_ab_interval d = qw_ab_paired(e, a, m, QW_AB_DELTA), p = qw_ab_paired(e, a, m, QW_AB_DELTA_PCT);
            if (!d.valid) {
                fprintf(f, "| %s | – | – | 0 | – | – |\n", qw_ab_metric_name(m));
                continue;
            }
            fprintf(f, "| %s | %+.4g [%+.4g, %+.4g] %s | ", qw_ab_metric_name(m), d.est, d.lo, d.hi, qw_ab_metric_unit(m));
            if (p.valid) fprintf(f, "%+.3g%% [%+.3g, %+.3g] | ", p.est, p.lo, p.hi);
            else fprintf(f, "– | ");
            if (a == e->aa_arm || e->aa_arm < 0) fprintf(f, "%d | – | ", d.n);
            else fprintf(f, "%d | ±%.3g | ", d.n, p.floor);
            fprintf(f, "%s |\n", d.lo <= 0 && d.hi >= 0 ? "yes" : "no");
        }
    }

    fprintf(f, "\n## Criteria (`%s`, sha256 `%s`, fixed before the first trial)\n\n```\n%s%s```\n", e->criteria_path,
            e->crit->sha256, e->crit->text, e->crit->text[0] && e->crit->text[strlen(e->crit->text) - 1] == '\n' ? "" : "\n");

    fprintf(f, "\n## Footprint over time\n\n![footprint per trial, coloured by arm](footprint.svg)\n");

    if (e->n_speed_trials > 0 && e->speed_tokens) {
        /* one row per arm: the per-block rows are in report.json */
        fprintf(f, "\n## Speed blocks (one process, token-paired; every block in report.json)\n\n| arm | blocks ok | decode "
                   "tok/s median [min, max] | CPU ms/tok median | pool evicted MiB (sum) |\n|---|---|---|---|---|\n");
        for (int a = 0; a < e->n_arms; a++) {
            int n = 0, ok = 0;
            double ev = 0;
            double *c = qw_xmalloc((size_t)e->n_speed_trials * sizeof *c);
            for (int i = 0; i < e->n_speed_trials; i++) {
                const qw_ab_trial *t = &e->speed_trials[i];
                if (t->arm != a || t->round < 0) continue;
                if (t->ok) ok++;
                if (!isnan(t->m[QW_AB_M_POOL_EVICTED_MB])) ev += t->m[QW_AB_M_POOL_EVICTED_MB];
                if (t->ok && !isnan(t->m[QW_AB_M_DECODE_TOK_S])) v[n] = t->m[QW_AB_M_DECODE_TOK_S], c[n++] = t->m[QW_AB_M_DECODE_CPU_MS];
            }
            double lo = n ? v[0] : NAN, hi = lo;
            for (int i = 1; i < n; i++) lo = fmin(lo, v[i]), hi = fmax(hi, v[i]);
            fprintf(f, "| %s | %d/%d | %.4g [%.4g, %.4g] | %.4g | %.4g |\n", e->arms[a].name, ok, e->speed_rounds,
                    qw_ab_median(v, n), lo, hi, qw_ab_median(c, n), ev);
            free(c);
        }
    } else if (e->n_speed_trials > 0) {
        fprintf(f, "\n## Speed trials (one process, run order)\n\n| # | round | arm | status | decode tok/s | median ms/tok "
                   "| CPU ms/tok | Mcycles/tok | prefill tok/s |\n|---|---|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < e->n_speed_trials; i++) {
            const qw_ab_trial *t = &e->speed_trials[i];
            char r[16];
            snprintf(r, sizeof r, "%d", t->round);
            fprintf(f, "| %d | %s | %s | %s | %.4f | %.4f | %.4f | %.4f | %.4g | %.4g | %.4g |\n", i, t->round < 0 ? "warm-up" : r,
                    e->arms[t->arm].name, t->ok ? "ok" : t->error, t->m[QW_AB_M_DECODE_TOK_S], t->m[QW_AB_M_DECODE_TOK_S_TRIM],
                    t->m[QW_AB_M_DECODE_MS_MEDIAN], t->m[QW_AB_M_DECODE_CPU_MS], t->m[QW_AB_M_DECODE_MCYCLES],
                    t->m[QW_AB_M_PREFILL_TOK_S], t->m[QW_AB_M_POOL_EVICTED_MB]);
        }
    }
    fprintf(f, "\n## %s (run order)\n\n| # | round | arm | status | decode tok/s | prefill tok/s | footprint peak MiB "
               "| pool peak held MiB | wall ms | majflt |\n|---|---|---|---|---|---|---|---|---|---|\n",
            e->n_speed_trials > 0 ? "Footprint trials (separate processes)" : "Trials");
    for (int i = 0; i < e->n_trials; i++) {
        const qw_ab_trial *t = &e->trials[i];
        char r[16];
        snprintf(r, sizeof r, "%d", t->round);
        fprintf(f, "| %d | %s | %s | %s | %.4g | %.4g | %.4g | %.4g | %.0f | %.0f |\n", i, t->round < 0 ? "warm-up" : r,
                e->arms[t->arm].name, t->ok ? "ok" : t->error, t->m[QW_AB_M_DECODE_TOK_S], t->m[QW_AB_M_PREFILL_TOK_S],
                t->m[QW_AB_M_FOOTPRINT_PEAK_MB], t->m[QW_AB_M_POOL_PEAK_HELD_MB], t->m[QW_AB_M_WALL_MS],
                t->m[QW_AB_M_MAJFLT]);
    }
    free(v);
}

static cJSON *num_or_null(double x) { return isnan(x) ? cJSON_CreateNull() : cJSON_CreateNumber(x); }

static cJSON *interval_json(qw_ab_interval iv) {
    cJSON *o = cJSON_CreateObject();
    if (!iv.valid) {
        cJSON_AddNullToObject(o, "est");
        cJSON_AddNumberToObject(o, "n", 0);
        return o;
    }
    cJSON_AddNumberToObject(o, "est", iv.est);
    cJSON_AddNumberToObject(o, "lo", iv.lo);
    cJSON_AddNumberToObject(o, "hi", iv.hi);
    if (iv.floor != 0)
        cJSON_AddItemToObject(o, "noise_floor", isinf(iv.floor) ? cJSON_CreateString("unbounded") : cJSON_CreateNumber(iv.floor));
    cJSON_AddNumberToObject(o, "n", iv.n);
    cJSON_AddBoolToObject(o, "contains_zero", iv.lo <= 0 && iv.hi >= 0);
    return o;
}

static char *build_json(const qw_ab_experiment *e) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "command", e->command ? e->command : "");
    cJSON_AddStringToObject(o, "child_command", e->child_cmd);
    cJSON_AddStringToObject(o, "binary", e->exe_path);
    cJSON_AddStringToObject(o, "binary_sha256", e->exe_sha256);
    cJSON_AddStringToObject(o, "model", e->model);
    cJSON_AddStringToObject(o, "tier", e->tier);
    cJSON_AddStringToObject(o, "backend_env", e->backend_env);
    cJSON_AddNumberToObject(o, "simulate_gb", e->simulate_gb);
    cJSON_AddNumberToObject(o, "prompt_tokens", e->prompt_tokens);
    cJSON_AddNumberToObject(o, "decode", e->decode);
    cJSON_AddNumberToObject(o, "reps", e->reps);
    cJSON *hy = cJSON_AddObjectToObject(o, "measurement");
    cJSON_AddStringToObject(hy, "cpu", e->cpu_model);
    cJSON_AddStringToObject(hy, "speed", e->n_speed_trials > 0 ? (e->speed_tokens ? "in-process, token-paired" : "in-process")
                                                              : "separate processes");
    if (e->speed_tokens) {
        cJSON_AddNumberToObject(hy, "token_block", e->token_block);
        cJSON_AddNumberToObject(hy, "speed_rounds", e->speed_rounds);
        cJSON_AddBoolToObject(hy, "prime", e->prime);
    }
    cJSON_AddNumberToObject(hy, "replay_tokens", e->replay_tokens);
    cJSON_AddNumberToObject(hy, "footprint_decode", e->footprint_decode);
    cJSON_AddNumberToObject(hy, "footprint_jobs", e->footprint_jobs > 1 ? e->footprint_jobs : 1);
    cJSON_AddStringToObject(hy, "perf", e->perf_desc);
    cJSON_AddStringToObject(hy, "pin", e->pin_desc);
    cJSON_AddItemToObject(hy, "pagecache_before", num_or_null(e->pagecache_before));
    cJSON_AddItemToObject(hy, "pagecache_after", num_or_null(e->pagecache_after));
    if (e->aa_arm >= 0) {
        cJSON_AddStringToObject(hy, "aa_arm", e->arms[e->aa_arm].name);
        cJSON *nf = cJSON_AddObjectToObject(hy, "noise_floor");
        for (int m = 0; m < QW_AB_N_METRICS; m++) {
            double d = qw_ab_noise_floor(e, m, QW_AB_DELTA), p = qw_ab_noise_floor(e, m, QW_AB_DELTA_PCT);
            if (isnan(d)) continue;
            cJSON *mo = cJSON_AddObjectToObject(nf, qw_ab_metric_name(m));
            cJSON_AddItemToObject(mo, "delta", isinf(d) ? cJSON_CreateString("unbounded") : cJSON_CreateNumber(d));
            cJSON_AddItemToObject(mo, "delta_pct", isinf(p) || isnan(p) ? cJSON_CreateString("unbounded") : cJSON_CreateNumber(p));
        }
    }
    cJSON *st = cJSON_AddObjectToObject(o, "statistic");
    cJSON_AddStringToObject(st, "estimate", "median of paired differences (paired by round)");
    if (e->speed_tokens)
        cJSON_AddStringToObject(st, "speed_estimate", "token-paired blocks: Hodges-Lehmann + Wilcoxon signed-rank interval");
    cJSON_AddStringToObject(st, "interval", "percentile bootstrap of the median, widened to the sign-test interval");
    cJSON_AddNumberToObject(st, "level", e->level);
    cJSON_AddNumberToObject(st, "resamples", e->resamples);
    cJSON_AddNumberToObject(st, "seed", (double)e->seed);
    cJSON *cr = cJSON_AddObjectToObject(o, "criteria");
    cJSON_AddStringToObject(cr, "path", e->criteria_path);
    cJSON_AddStringToObject(cr, "sha256", e->crit->sha256);
    cJSON_AddStringToObject(cr, "text", e->crit->text);
    cJSON_AddStringToObject(cr, "read_at", e->criteria_read_at);
    cJSON_AddStringToObject(cr, "first_trial_at", e->first_trial_at);
    cJSON_AddBoolToObject(cr, "read_before_first_trial", strcmp(e->criteria_read_at, e->first_trial_at) <= 0);
    cJSON_AddStringToObject(o, "finished_at", e->finished_at);
    cJSON *arms = cJSON_AddArrayToObject(o, "arms");
    double *v = qw_xmalloc((size_t)(e->n_trials + e->n_speed_trials + 1) * sizeof *v);
    for (int a = 0; a < e->n_arms; a++) {
        cJSON *ao = cJSON_CreateObject();
        cJSON_AddItemToArray(arms, ao);
        cJSON_AddStringToObject(ao, "name", e->arms[a].name);
        cJSON_AddStringToObject(ao, "spec", e->arms[a].spec);
        cJSON *set = cJSON_AddArrayToObject(ao, "set");
        for (int i = 0; i < e->arms[a].n_set; i++) cJSON_AddItemToArray(set, cJSON_CreateString(e->arms[a].set[i]));
        cJSON *uns = cJSON_AddArrayToObject(ao, "unset");
        for (int i = 0; i < e->arms[a].n_unset; i++) cJSON_AddItemToArray(uns, cJSON_CreateString(e->arms[a].unset[i]));
        cJSON_AddNumberToObject(ao, "failed_trials", qw_ab_failed(e, a));
        cJSON *ms = cJSON_AddObjectToObject(ao, "metrics");
        for (int m = 0; m < QW_AB_N_METRICS; m++) {
            int n = arm_values(e, a, m, v);
            if (n == 0) continue;
            cJSON *mo = cJSON_AddObjectToObject(ms, qw_ab_metric_name(m));
            cJSON_AddNumberToObject(mo, "median", qw_ab_median(v, n));
            cJSON_AddNumberToObject(mo, "min", qw_ab_quantile(v, n, 0));
            cJSON_AddNumberToObject(mo, "q1", qw_ab_quantile(v, n, 0.25));
            cJSON_AddNumberToObject(mo, "q3", qw_ab_quantile(v, n, 0.75));
            cJSON_AddNumberToObject(mo, "max", qw_ab_quantile(v, n, 1));
            cJSON_AddNumberToObject(mo, "n", n);
        }
        if (a == 0) continue;
        cJSON *pd = cJSON_AddObjectToObject(ao, "paired");
        for (int m = 0; m < QW_AB_N_METRICS; m++) {
            if (!metric_present(e, m)) continue;
            cJSON *mo = cJSON_AddObjectToObject(pd, qw_ab_metric_name(m));
            cJSON_AddItemToObject(mo, "delta", interval_json(qw_ab_paired(e, a, m, QW_AB_DELTA)));
            cJSON_AddItemToObject(mo, "delta_pct", interval_json(qw_ab_paired(e, a, m, QW_AB_DELTA_PCT)));
        }
        const qw_ab_verdict *vd = &e->verdicts[a];
        cJSON *vo = cJSON_AddObjectToObject(ao, "verdict");
        cJSON_AddStringToObject(vo, "verdict", vd->verdict);
        cJSON_AddStringToObject(vo, "why", vd->why);
        if (vd->rule >= 0) cJSON_AddNumberToObject(vo, "rule_line", e->crit->rules[vd->rule].line);
        if (vd->unknown_rule >= 0) cJSON_AddNumberToObject(vo, "straddling_rule_line", e->crit->rules[vd->unknown_rule].line);
        if (!strcmp(vd->verdict, "inconclusive")) cJSON_AddNumberToObject(vo, "suggest_reps", vd->suggest_reps);
    }
    free(v);
    cJSON *sp = cJSON_AddArrayToObject(o, "speed_trials");
    for (int i = 0; i < e->n_speed_trials; i++) {
        const qw_ab_trial *t = &e->speed_trials[i];
        cJSON *to = cJSON_CreateObject();
        cJSON_AddItemToArray(sp, to);
        cJSON_AddNumberToObject(to, "index", i);
        cJSON_AddStringToObject(to, "arm", e->arms[t->arm].name);
        cJSON_AddNumberToObject(to, "round", t->round);
        cJSON_AddBoolToObject(to, "warmup", t->round < 0);
        cJSON_AddBoolToObject(to, "ok", t->ok);
        if (!t->ok) cJSON_AddStringToObject(to, "error", t->error);
        cJSON *mo = cJSON_AddObjectToObject(to, "metrics");
        for (int m = 0; m < QW_AB_N_METRICS; m++)
            if (!isnan(t->m[m])) cJSON_AddNumberToObject(mo, qw_ab_metric_name(m), t->m[m]);
    }
    cJSON *tr = cJSON_AddArrayToObject(o, "trials");
    for (int i = 0; i < e->n_trials; i++) {
        const qw_ab_trial *t = &e->trials[i];
        cJSON *to = cJSON_CreateObject();
        cJSON_AddItemToArray(tr, to);
        cJSON_AddNumberToObject(to, "index", i);
        cJSON_AddStringToObject(to, "arm", e->arms[t->arm].name);
        cJSON_AddNumberToObject(to, "round", t->round);
        cJSON_AddBoolToObject(to, "warmup", t->round < 0);
        cJSON_AddBoolToObject(to, "ok", t->ok);
        cJSON_AddNumberToObject(to, "exit_code", t->exit_code);
        cJSON_AddNumberToObject(to, "signal", t->term_signal);
        if (!t->ok) cJSON_AddStringToObject(to, "error", t->error);
        cJSON_AddNumberToObject(to, "start_s", t->start_s);
        cJSON *mo = cJSON_AddObjectToObject(to, "metrics");
        for (int m = 0; m < QW_AB_N_METRICS; m++) cJSON_AddItemToObject(mo, qw_ab_metric_name(m), num_or_null(t->m[m]));
        cJSON *k = t->knobs_json ? cJSON_Parse(t->knobs_json) : NULL;
        cJSON_AddItemToObject(to, "knobs", k ? k : cJSON_CreateNull());
        /* the footprint series, thinned to <= 400 points (the peak is kept in metrics) */
        cJSON *ts = cJSON_AddArrayToObject(to, "footprint_t_s"), *fs = cJSON_AddArrayToObject(to, "footprint_mb");
        int step = t->n_series > 400 ? (t->n_series + 399) / 400 : 1;
        for (int j = 0; j < t->n_series; j += step) {
            cJSON_AddItemToArray(ts, cJSON_CreateNumber(round(t->t_s[j] * 1000) / 1000));
            cJSON_AddItemToArray(fs, cJSON_CreateNumber(round(t->fp_mb[j] * 100) / 100));
        }
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

int qw_ab_report_write(const qw_ab_experiment *e, const char *dir, qw_error *err) {
    char path[4096];
    qw_atomic_file w;
    snprintf(path, sizeof path, "%s/report.md", dir);
    FILE *f = qw_atomic_open(&w, path, err);
    if (!f) return -1;
    write_md(f, e);
    if (qw_atomic_commit(&w, err)) return -1;
    snprintf(path, sizeof path, "%s/report.json", dir);
    if (!(f = qw_atomic_open(&w, path, err))) return -1;
    char *s = build_json(e);
    fputs(s, f);
    fputc('\n', f);
    free(s);
    if (qw_atomic_commit(&w, err)) return -1;
    snprintf(path, sizeof path, "%s/footprint.svg", dir);
    return qw_ab_svg_write(e, path, err);
}
