/* cmd_ab.c — `qwisp ab`: a paired A/B experiment with pre-registered kill
 * criteria (docs/ab.md; the library is src/ab/, include/qwisp/ab.h).  Like
 * every subcommand it lives in src/cli/cmd_<name>.c; the reusable parts are
 * their own layer (src/ab/).
 *
 * Order of work, which is the point of the tool:
 *   1. parse flags and arms; reject unknown QWISP_* names (a typo would make
 *      two arms identical and the experiment silently meaningless);
 *   2. read + parse the criteria file (errors here end the run: no child has
 *      been started) and note the time;
 *   3. hash the binary, build each arm's environment = the parent's minus every
 *      variable any arm touches (and its alias), plus the arm's settings;
 *   4. the speed side: one `qwisp ab-worker` process runs every arm in turn
 *      (warm-up + balanced rounds, cmd_ab_worker.c) when every arm only
 *      switches the pool's policy (--speed inproc, the default); else the
 *      speed comes from the separate processes of step 5 (--speed process);
 *   5. the footprint side: a warm-up trial (discarded), then rounds in
 *      balanced order, each trial a fresh process;
 *   6. check that each child saw exactly its arm's knobs (its --json "knobs");
 *   7. analyse — every arm's intervals widened by the A/A arm's (the
 *      baseline's settings again, added unless --no-aa) — write report.md /
 *      report.json / footprint.svg, print verdicts and the noise floor.
 */
#include "cli_common.h"
#include "commands.h"
#include "qwisp/ab.h"
#include "qwisp/options.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

extern char **environ;


static const char *const g_knob_names[][2] = {
#define QW_AB_KNOB(id, name, alias, ...) {name, alias},
    QW_OPTIONS(QW_AB_KNOB)
#undef QW_AB_KNOB
};
#define N_KNOBS ((int)(sizeof g_knob_names / sizeof g_knob_names[0]))

static const char *usage_text =
    "usage: qwisp ab --criteria FILE --arm NAME:K=V[,K=V…] --arm NAME:… [options]\n"
    "  --criteria FILE      kill criteria, parsed before any trial (docs/ab.md)\n"
    "  --arm NAME:K=V,…     an arm: environment settings; K= removes K; the first arm is the baseline\n"
    "  -m MODEL             model (default: $QWISP_MODEL, else models/default.gguf)\n"
    "  --prompt-tokens N    prefill length (default 512)\n"
    "  --decode N           decode tokens (default 64)\n"
    "  --reps R             rounds; each arm runs R times, balanced order (default 6)\n"
    "  --tier resident|streaming   resident sets QWISP_RAW_C=0; streaming needs --raw-c or --simulate\n"
    "  --raw-c N            streaming: QWISP_RAW_C=N for every arm\n"
    "  --simulate NGB       run each trial under `qwisp simulate NGB --` (docs/tiers.md)\n"
    "  --sample-ms MS       footprint sampling interval from outside (default 25)\n"
    "  --out DIR            report directory (default ab-report)\n"
    "  --speed inproc|tokens|process  where decode/prefill speed is measured: one process alternating\n"
    "                       the arms trial by trial (default), one process alternating them token by\n"
    "                       token from the same state (tokens: the precise one; decode only), or the\n"
    "                       footprint trials' separate processes.  inproc and tokens: arms may only set\n"
    "                       QWISP_PREFILL_CACHE_MB, QWISP_POOL_FIT, QWISP_POOL_DECAY_MS\n"
    "  --block K            tokens: decode positions per paired block (default 2 x the arms, A/A included: every\n"
    "                       arm then holds every slot of the order equally often; the first block is a warm-up)\n"
    "  --decode-threads N   tokens: decode on N threads, the prompt on QWISP_THREADS (default: the same)\n"
    "  --prime              tokens: an untimed pass at every position before the arms', so a streaming tier's\n"
    "                       expert cache holds that position's experts for every timed pass (default with\n"
    "                       --tier streaming; --no-prime turns it off)\n"
    "  --replay N           inproc: prompt tokens re-prefilled per trial (default: the whole prompt)\n"
    "  --footprint-decode N decode tokens of the footprint trials (default: --decode)\n"
    "  --footprint-reps R   rounds of footprint trials (default: --reps; 0 = none, speed only)\n"
    "  --footprint-jobs J   inproc/tokens: run J footprint trials at once (default 1); a trial's footprint is\n"
    "                       its own process's memory, which its neighbours do not change, but their speed\n"
    "                       figures then mean nothing, so criteria on prefill_tok_s or ttft_ms refuse it\n"
    "  --no-aa              no A/A arm (default: arm 'aa' = the baseline's settings again; its spread is\n"
    "                       the noise floor every other arm's interval is widened by)\n"
    "  --no-pin, --no-perf  inproc: do not pin threads / do not read perf_event_open counters\n";

/* Metrics a footprint trial measures with the clock or the page cache: their
 * neighbours change them when trials run at once (--footprint-jobs).  With
 * token-paired speed, prefill and TTFT come from those trials too. */
static bool timed_by_footprint_trials(int m, bool tokens) {
    return m == QW_AB_M_WALL_MS || m == QW_AB_M_MAJFLT ||
           (tokens && (m == QW_AB_M_PREFILL_TOK_S || m == QW_AB_M_TTFT_MS));
}

static int knob_index(const char *name, size_t len) {
    for (int i = 0; i < N_KNOBS; i++)
        for (int j = 0; j < 2; j++)
            if (g_knob_names[i][j] && strlen(g_knob_names[i][j]) == len && !strncmp(g_knob_names[i][j], name, len))
                return i;
    return -1;
}

static bool valid_var(const char *s, size_t n) {
    if (n == 0 || !(s[0] == '_' || (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z'))) return false;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '_' || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
            return false;
    return true;
}

/* "NAME:K=V,K=,…" → arm.  Prints and returns -1 on junk. */
static int parse_arm(const char *spec, qw_ab_arm *a) {
    memset(a, 0, sizeof *a);
    snprintf(a->spec, sizeof a->spec, "%s", spec);
    const char *colon = strchr(spec, ':');
    size_t nl = colon ? (size_t)(colon - spec) : strlen(spec);
    if (nl == 0 || nl >= QW_AB_WORD) {
        fprintf(stderr, "qwisp ab: --arm '%s': expected NAME:K=V[,K=V…] with a name of 1..%d characters\n", spec, QW_AB_WORD - 1);
        return -1;
    }
    for (size_t i = 0; i < nl; i++)
        if (!(spec[i] == '_' || spec[i] == '-' || spec[i] == '.' || (spec[i] >= '0' && spec[i] <= '9') ||
              (spec[i] >= 'a' && spec[i] <= 'z') || (spec[i] >= 'A' && spec[i] <= 'Z'))) {
            fprintf(stderr, "qwisp ab: --arm '%s': name may hold letters, digits, '_', '-', '.'\n", spec);
            return -1;
        }
    memcpy(a->name, spec, nl);
    if (!colon || !colon[1]) return 0;
    a->set = qw_xcalloc(64, sizeof *a->set);
    a->unset = qw_xcalloc(64, sizeof *a->unset);
    const char *p = colon + 1;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (!eq || !valid_var(p, (size_t)(eq - p))) {
            fprintf(stderr, "qwisp ab: --arm '%s': expected K=V (K an environment variable name), saw '%.*s'\n", spec,
                    (int)n, p);
            return -1;
        }
        size_t kl = (size_t)(eq - p);
        if (!strncmp(p, "QWISP_", 6) && knob_index(p, kl) < 0) {
            fprintf(stderr, "qwisp ab: --arm '%s': unknown knob '%.*s' (see `qwisp config`)\n", spec, (int)kl, p);
            return -1;
        }
        if (a->n_set + a->n_unset >= 64) {
            fprintf(stderr, "qwisp ab: --arm '%s': too many settings\n", spec);
            return -1;
        }
        if (eq + 1 == p + n) a->unset[a->n_unset++] = strndup(p, kl);
        else a->set[a->n_set++] = strndup(p, n);
        p += n;
        if (*p == ',') p++;
    }
    return 0;
}

static void free_arm(qw_ab_arm *a) {
    for (int i = 0; i < a->n_set; i++) free(a->set[i]);
    for (int i = 0; i < a->n_unset; i++) free(a->unset[i]);
    free(a->set);
    free(a->unset);
}

static void utc_now(char out[40]) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 40 - n, ".%06dZ", (int)(ts.tv_nsec / 1000) % 1000000);
}

/* Name of a "K=V" or "K" entry, as (pointer, length). */
static size_t var_len(const char *kv) {
    const char *eq = strchr(kv, '=');
    return eq ? (size_t)(eq - kv) : strlen(kv);
}

/* Is the variable (name, len) touched by any arm or the tier settings?  A
 * knob's alias counts as the knob. */
static bool touched(const char *name, size_t len, qw_ab_arm *arms, int n_arms, char **common, int n_common) {
    int k = knob_index(name, len);
    for (int a = 0; a <= n_arms; a++) {
        char **lists[2];
        int counts[2];
        if (a < n_arms) lists[0] = arms[a].set, counts[0] = arms[a].n_set, lists[1] = arms[a].unset, counts[1] = arms[a].n_unset;
        else lists[0] = common, counts[0] = n_common, lists[1] = NULL, counts[1] = 0;
        for (int l = 0; l < 2; l++)
            for (int i = 0; i < counts[l]; i++) {
                size_t vl = var_len(lists[l][i]);
                if (vl == len && !strncmp(lists[l][i], name, len)) return true;
                if (k >= 0 && knob_index(lists[l][i], vl) == k) return true;
            }
    }
    return false;
}

/* The arm's environment: base (parent minus touched), then common, then arm. */
static char **arm_env(char **base, int n_base, char **common, int n_common, const qw_ab_arm *a) {
    char **env = qw_xcalloc((size_t)(n_base + n_common + a->n_set + 1), sizeof *env);
    int n = 0;
    for (int i = 0; i < n_base; i++) env[n++] = base[i];
    for (int i = 0; i < n_common; i++) {
        bool overridden = false;
        size_t cl = var_len(common[i]);
        for (int j = 0; j < a->n_set; j++)
            if (var_len(a->set[j]) == cl && !strncmp(a->set[j], common[i], cl)) overridden = true;
        for (int j = 0; j < a->n_unset; j++)
            if (strlen(a->unset[j]) == cl && !strncmp(a->unset[j], common[i], cl)) overridden = true;
        if (!overridden) env[n++] = common[i];
    }
    for (int i = 0; i < a->n_set; i++) env[n++] = a->set[i];
    env[n] = NULL;
    return env;
}

/* Checks the child's reported knobs against what its env should give: every
 * QWISP_* knob the env sets appears with that value, and no other knob is set
 * that the env does not set.  Fills why and returns false on a mismatch. */
static bool knobs_match(const qw_ab_trial *t, char **env, bool simulated, char *why, size_t cap) {
    if (!t->knobs_json) {
        snprintf(why, cap, "child reported no knobs");
        return false;
    }
    cJSON *k = cJSON_Parse(t->knobs_json);
    bool ok = true;
    int expected = 0;
    for (int i = 0; env[i] && ok; i++) {
        size_t vl = var_len(env[i]);
        int ki = knob_index(env[i], vl);
        if (ki < 0) continue;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(k, g_knob_names[ki][0]);
        expected++;
        if (!cJSON_IsString(v)) {
            snprintf(why, cap, "child did not see %.*s", (int)vl, env[i]);
            ok = false;
        } else if (strcmp(v->valuestring, env[i] + vl + 1) != 0 && strcmp(v->valuestring, "(hidden)") != 0) {
            snprintf(why, cap, "child saw %s=%s, its env says %s", g_knob_names[ki][0], v->valuestring, env[i]);
            ok = false;
        }
    }
    /* `qwisp simulate` exports QWISP_DEVICE_RAM to its command */
    if (simulated && cJSON_GetObjectItemCaseSensitive(k, "QWISP_DEVICE_RAM")) {
        bool in_env = false;
        for (int i = 0; env[i]; i++)
            if (!strncmp(env[i], "QWISP_DEVICE_RAM=", 17)) in_env = true;
        if (!in_env) expected++;
    }
    if (ok && cJSON_GetArraySize(k) > expected) {
        snprintf(why, cap, "child saw knobs its env did not set: %s", t->knobs_json);
        ok = false;
    }
    cJSON_Delete(k);
    return ok;
}

static void add_arg(char **argv, int *n, const char *s) { argv[(*n)++] = (char *)s; }

static void cpu_model(char *out, size_t cap) {
    snprintf(out, cap, "(unknown CPU)");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "processor", 9)) n++;
        if (!strncmp(line, "model name", 10) && !strcmp(out, "(unknown CPU)")) {
            char *c = strchr(line, ':');
            if (c) {
                c += 1 + (c[1] == ' ');
                c[strcspn(c, "\n")] = 0;
                snprintf(out, cap, "%s", c);
            }
        }
    }
    fclose(f);
    size_t o = strlen(out);
    snprintf(out + o, cap - o, ", %d logical CPUs", n);
}

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* The speed side in one process (cmd_ab_worker.c): runs it (under `qwisp
 * simulate` when asked), then turns its JSON into e->speed_trials.  A worker
 * that fails makes every speed trial a failed one, with its reason. */
static void speed_phase(qw_ab_experiment *e, char **base, int n_base, char **common, int n_common, const char *simulate,
                        const char *trial_dir, int sample_ms, int reps, bool pin, bool use_perf) {
    int n_arms = e->n_arms, n = qw_ab_schedule(n_arms, reps, NULL);
    int n_blocks = e->speed_tokens ? (e->decode - 1) / e->token_block : 0;
    if (e->speed_tokens) n = n_blocks * n_arms; /* per block, every arm once, in arm order */
    e->speed_rounds = e->speed_tokens ? n_blocks - 1 : reps;
    e->speed_trials = qw_xcalloc((size_t)n, sizeof *e->speed_trials);
    e->n_speed_trials = n;
    int *sched = qw_xcalloc((size_t)n, sizeof *sched), *rounds = qw_xcalloc((size_t)n, sizeof *rounds);
    if (e->speed_tokens) {
        for (int i = 0; i < n; i++) sched[i] = i % n_arms, rounds[i] = i / n_arms - 1;
    } else {
        qw_ab_schedule(n_arms, reps, sched);
        qw_ab_schedule_rounds(sched, n, rounds);
    }
    for (int i = 0; i < n; i++) {
        e->speed_trials[i].arm = sched[i];
        e->speed_trials[i].round = rounds[i];
        for (int m = 0; m < QW_AB_N_METRICS; m++) e->speed_trials[i].m[m] = NAN;
    }
    free(sched);
    free(rounds);
    /* argv: [simulate N --] ab-worker -m M --prompt-tokens N --decode D --replay R --reps K --arm … */
    char np[32], nd[32], nr[32], nk[32], nb[32];
    snprintf(nb, sizeof nb, "%d", e->token_block);
    snprintf(np, sizeof np, "%d", e->prompt_tokens);
    snprintf(nd, sizeof nd, "%d", e->decode);
    snprintf(nr, sizeof nr, "%d", e->replay_tokens);
    snprintf(nk, sizeof nk, "%d", reps);
    char **argv = qw_xcalloc((size_t)(32 + 2 * n_arms), sizeof *argv);
    char **specs = qw_xcalloc((size_t)n_arms, sizeof *specs);
    int c = 0;
    add_arg(argv, &c, "qwisp");
    if (simulate) {
        add_arg(argv, &c, "simulate");
        add_arg(argv, &c, simulate);
        add_arg(argv, &c, "--");
        add_arg(argv, &c, "/proc/self/exe");
    }
    const char *fixed[] = {"ab-worker", "-m", e->model, "--prompt-tokens", np, "--decode", nd, "--replay", nr, "--reps", nk};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) add_arg(argv, &c, fixed[i]);
    if (!pin) add_arg(argv, &c, "--no-pin");
    if (!use_perf) add_arg(argv, &c, "--no-perf");
    if (e->speed_tokens) add_arg(argv, &c, "--pair-tokens"), add_arg(argv, &c, nb);
    char ndt[32];
    snprintf(ndt, sizeof ndt, "%d", e->decode_threads);
    if (e->speed_tokens && e->decode_threads > 0) add_arg(argv, &c, "--decode-threads"), add_arg(argv, &c, ndt);
    if (e->speed_tokens && e->prime) add_arg(argv, &c, "--prime");
    for (int a = 0; a < n_arms; a++) {
        specs[a] = qw_xcalloc(2048, 1);
        size_t o = (size_t)snprintf(specs[a], 2048, "%s:", e->arms[a].name);
        for (int j = 0; j < e->arms[a].n_set + e->arms[a].n_unset && o < 2048; j++) {
            const char *kv = j < e->arms[a].n_set ? e->arms[a].set[j] : e->arms[a].unset[j - e->arms[a].n_set];
            o += (size_t)snprintf(specs[a] + o, 2048 - o, "%s%s%s", j ? "," : "", kv, j >= e->arms[a].n_set ? "=" : "");
        }
        add_arg(argv, &c, "--arm");
        add_arg(argv, &c, specs[a]);
    }
    argv[c] = NULL;
    /* the worker's env: the parent's minus every touched variable, plus the tier's */
    qw_ab_arm none = {0};
    char **env = arm_env(base, n_base, common, n_common, &none);
    char so[4200], se[4200];
    snprintf(so, sizeof so, "%s/speed-worker.json", trial_dir);
    snprintf(se, sizeof se, "%s/speed-worker.stderr", trial_dir);
    /* the worker's footprint is not a metric (arms share it): sample rarely, to perturb it less */
    qw_ab_spawn sp = {.exe = "/proc/self/exe", .argv = argv, .envp = env, .stdout_path = so, .stderr_path = se,
                      .sample_ms = sample_ms > 1000 ? sample_ms : 1000};
    qw_ab_trial w = {0};
    qw_error err = {0};
    if (e->speed_tokens)
        fprintf(stderr, "[ab] speed: one process, token-paired: prompt %d once, then %d decode positions x %d arms, "
                        "%d blocks of %d (1 warm-up)\n", e->prompt_tokens, n_blocks * e->token_block, n_arms, n_blocks,
                e->token_block);
    else
        fprintf(stderr, "[ab] speed: one process, %d trials (1 warm-up, %d rounds of %d arms each bracketed by the baseline), "
                        "replay %d + decode %d tokens each\n", n, reps, n_arms - 1, e->replay_tokens, e->decode);
    int rc = qw_ab_trial_run(&sp, &w, &err);
    cJSON *o = NULL;
    if (rc == 0 && (w.ok || w.exit_code == 0)) {
        char *json = qw_read_file(so, 0, NULL, NULL);
        o = json ? cJSON_Parse(json) : NULL;
        free(json);
    }
    const cJSON *arr = o ? cJSON_GetObjectItemCaseSensitive(o, "trials") : NULL;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n) {
        const char *why = rc ? err.msg : w.error[0] ? w.error : "no trials in its JSON";
        for (int i = 0; i < n; i++) snprintf(e->speed_trials[i].error, sizeof e->speed_trials[i].error, "speed worker: %.200s", why);
        fprintf(stderr, "[ab] speed worker FAILED: %s\n", why);
    } else {
        const cJSON *s;
        snprintf(e->perf_desc, sizeof e->perf_desc, "%s",
                 cJSON_IsString(s = cJSON_GetObjectItemCaseSensitive(o, "perf")) ? s->valuestring : "");
        snprintf(e->pin_desc, sizeof e->pin_desc, "%s",
                 cJSON_IsString(s = cJSON_GetObjectItemCaseSensitive(o, "pin")) ? s->valuestring : "");
        const char *hash0 = NULL;
        int i = 0;
        cJSON_ArrayForEach(s, arr) {
            qw_ab_trial *t = &e->speed_trials[i++];
            t->ok = (int)jnum(s, "arm") == t->arm && (int)jnum(s, "round") == t->round;
            if (!t->ok) snprintf(t->error, sizeof t->error, "speed worker ran its trials in another order");
            static const int ms[] = {QW_AB_M_DECODE_TOK_S, QW_AB_M_DECODE_TOK_S_TRIM, QW_AB_M_DECODE_MS_MEDIAN, QW_AB_M_DECODE_CPU_MS,
                                     QW_AB_M_DECODE_MCYCLES, QW_AB_M_PREFILL_TOK_S, QW_AB_M_TTFT_MS,
                                     QW_AB_M_DECODE_TOK_S_WALL, QW_AB_M_DECODE_WAIT_MS};
            for (size_t k = 0; k < sizeof ms / sizeof *ms; k++) t->m[ms[k]] = jnum(s, qw_ab_metric_name(ms[k]));
            t->m[QW_AB_M_POOL_EVICTED_MB] = jnum(s, "pool_evicted_mb"); /* shown per trial, paired from processes */
            if (e->speed_tokens) t->m[QW_AB_M_PREFILL_TOK_S] = t->m[QW_AB_M_TTFT_MS] = NAN; /* from the processes */
            const cJSON *h = cJSON_GetObjectItemCaseSensitive(s, "tokens_hash");
            if (cJSON_IsString(h) && !e->speed_tokens) { /* tokens mode: the worker checked every position */
                if (!hash0) hash0 = h->valuestring;
                else if (strcmp(hash0, h->valuestring) && t->ok) {
                    t->ok = false;
                    snprintf(t->error, sizeof t->error, "generated other tokens than the first trial (%s vs %s)",
                             h->valuestring, hash0);
                }
            }
        }
        double fb = jnum(o, "pagecache_before");
        if (!isnan(fb)) e->pagecache_before = fb;
        fprintf(stderr, "[ab] speed: %s; %s\n", e->perf_desc, e->pin_desc);
    }
    cJSON_Delete(o);
    qw_ab_trial_free(&w);
    free(env);
    for (int a = 0; a < n_arms; a++) free(specs[a]);
    free(specs);
    free(argv);
}

int qw_cmd_ab(int argc, char **argv) {
    const char *C = "ab";
    const char *crit_path = NULL, *model_flag = NULL, *out_dir = "ab-report", *tier = "resident", *simulate = NULL;
    long prompt = 512, decode = 64, reps = 6, sample_ms = 25, raw_c = -1, replay = -1, fp_decode = -1, fp_reps = -1, fp_jobs = 1, block = 0,
         decode_threads = 0;
    bool aa = true, pin = true, use_perf = true;
    int prime = -1; /* --prime / --no-prime; -1: on for the streaming tier */
    const char *speed = "inproc";
    qw_ab_arm arms[17];
    int n_arms = 0, rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--no-aa")) { aa = false; continue; }
        if (!strcmp(argv[i], "--prime")) { prime = 1; continue; }
        if (!strcmp(argv[i], "--no-prime")) { prime = 0; continue; }
        if (!strcmp(argv[i], "--no-pin")) { pin = false; continue; }
        if (!strcmp(argv[i], "--no-perf")) { use_perf = false; continue; }
        if (QW_CLI_FLAG("--criteria")) { if (r < 0) goto out; crit_path = v; }
        else if (QW_CLI_FLAG("--speed")) {
            if (r < 0) goto out;
            if (strcmp(v, "inproc") && strcmp(v, "tokens") && strcmp(v, "process")) {
                fprintf(stderr, "qwisp ab: --speed '%s': expected inproc, tokens or process\n", v);
                goto out;
            }
            speed = v;
        }
        else if (QW_CLI_FLAG("--decode-threads")) { if (r < 0 || qw_cli_long("ab", "--decode-threads", v, 1, 1024, &decode_threads)) goto out; }
        else if (QW_CLI_FLAG("--block")) { if (r < 0 || qw_cli_long("ab", "--block", v, 1, 1 << 16, &block)) goto out; }
        else if (QW_CLI_FLAG("--replay")) { if (r < 0 || qw_cli_long("ab", "--replay", v, 1, 1 << 22, &replay)) goto out; }
        else if (QW_CLI_FLAG("--footprint-decode")) { if (r < 0 || qw_cli_long("ab", "--footprint-decode", v, 1, 1 << 20, &fp_decode)) goto out; }
        else if (QW_CLI_FLAG("--footprint-jobs")) { if (r < 0 || qw_cli_long("ab", "--footprint-jobs", v, 1, 64, &fp_jobs)) goto out; }
        else if (QW_CLI_FLAG("--footprint-reps")) { if (r < 0 || qw_cli_long("ab", "--footprint-reps", v, 0, 1000, &fp_reps)) goto out; }
        else if (QW_CLI_FLAG("-m")) { if (r < 0) goto out; model_flag = v; }
        else if (QW_CLI_FLAG("--out")) { if (r < 0) goto out; out_dir = v; }
        else if (QW_CLI_FLAG("--tier")) {
            if (r < 0) goto out;
            if (strcmp(v, "resident") && strcmp(v, "streaming")) {
                fprintf(stderr, "qwisp ab: --tier '%s': expected resident or streaming\n", v);
                goto out;
            }
            tier = v;
        } else if (QW_CLI_FLAG("--simulate")) { if (r < 0) goto out; simulate = v; }
        else if (QW_CLI_FLAG("--prompt-tokens")) { if (r < 0 || qw_cli_long("ab", "--prompt-tokens", v, 1, 1 << 22, &prompt)) goto out; }
        else if (QW_CLI_FLAG("--decode") || QW_CLI_FLAG("-n")) { if (r < 0 || qw_cli_long("ab", "--decode", v, 1, 1 << 20, &decode)) goto out; }
        else if (QW_CLI_FLAG("--reps")) { if (r < 0 || qw_cli_long("ab", "--reps", v, 1, 1000, &reps)) goto out; }
        else if (QW_CLI_FLAG("--sample-ms")) { if (r < 0 || qw_cli_long("ab", "--sample-ms", v, 1, 10000, &sample_ms)) goto out; }
        else if (QW_CLI_FLAG("--raw-c")) { if (r < 0 || qw_cli_long("ab", "--raw-c", v, 0, 1 << 20, &raw_c)) goto out; }
        else if (QW_CLI_FLAG("--arm")) {
            if (r < 0) goto out;
            if (n_arms == 16) {
                fprintf(stderr, "qwisp ab: at most 16 arms\n");
                goto out;
            }
            if (parse_arm(v, &arms[n_arms])) {
                n_arms++; /* so its partial settings are freed */
                goto out;
            }
            for (int j = 0; j < n_arms; j++)
                if (!strcmp(arms[j].name, arms[n_arms].name)) {
                    fprintf(stderr, "qwisp ab: two arms named '%s'\n", arms[j].name);
                    n_arms++;
                    goto out;
                }
            n_arms++;
        } else {
            fprintf(stderr, "qwisp ab: unknown option '%s'\n%s", argv[i], usage_text);
            goto out;
        }
    }
    if (!crit_path || n_arms < 2) {
        fprintf(stderr, "qwisp ab: need --criteria FILE and at least two --arm\n%s", usage_text);
        goto out;
    }
    bool tokens = !strcmp(speed, "tokens"), inproc = tokens || !strcmp(speed, "inproc");
    if (!tokens && (block || decode_threads || prime == 1)) {
        fprintf(stderr, "qwisp ab: --block, --decode-threads and --prime need --speed tokens\n");
        goto out;
    }
    if (tokens && !block) block = 2L * (n_arms + (aa ? 1 : 0));
    if (tokens && (decode - 1) / block < 2) {
        fprintf(stderr, "qwisp ab: --speed tokens: --decode %ld with --block %ld gives fewer than 2 blocks (a warm-up "
                        "and one pair); raise --decode or lower --block\n", decode, block);
        goto out;
    }
    for (int a = 0; inproc && a < n_arms; a++) {
        for (int j = 0; j < arms[a].n_set + arms[a].n_unset; j++) {
            const char *kv = j < arms[a].n_set ? arms[a].set[j] : arms[a].unset[j - arms[a].n_set];
            if (!qw_ab_worker_switchable(kv, var_len(kv))) {
                fprintf(stderr, "qwisp ab: --arm '%s': %.*s cannot be switched inside one process (only the pool's "
                                "policy can); use --speed process\n", arms[a].spec, (int)var_len(kv), kv);
                goto out;
            }
        }
    }
    int aa_arm = -1;
    if (aa) { /* the baseline's settings again, as one more arm */
        qw_ab_arm *b = &arms[0], *x = &arms[n_arms];
        memset(x, 0, sizeof *x);
        for (int j = 0; j < n_arms; j++)
            if (!strcmp(arms[j].name, "aa")) {
                fprintf(stderr, "qwisp ab: an arm is named 'aa', the name of the A/A arm; rename it or pass --no-aa\n");
                goto out;
            }
        snprintf(x->name, sizeof x->name, "aa");
        char bname[QW_AB_WORD];
        memcpy(bname, b->name, sizeof bname);
        snprintf(x->spec, sizeof x->spec, "aa: A/A, the settings of '%s' again", bname);
        x->set = qw_xcalloc(64, sizeof *x->set);
        x->unset = qw_xcalloc(64, sizeof *x->unset);
        for (int j = 0; j < b->n_set; j++) x->set[x->n_set++] = qw_xstrdup(b->set[j]);
        for (int j = 0; j < b->n_unset; j++) x->unset[x->n_unset++] = qw_xstrdup(b->unset[j]);
        aa_arm = n_arms++;
    }
    if (fp_decode < 0) fp_decode = decode;
    if (fp_reps < 0) fp_reps = reps;
    if (!inproc) fp_reps = reps; /* the speed comes from these trials: one count of rounds */
    /* tier settings, common to every arm */
    char *common[4];
    int n_common = 0;
    char rawc_buf[48];
    bool have_rawc = knob_index("QWISP_RAW_C", 11) >= 0;
    if (!strcmp(tier, "resident")) {
        if (simulate) {
            fprintf(stderr, "qwisp ab: --simulate needs --tier streaming\n");
            goto out;
        }
        if (have_rawc) common[n_common++] = "QWISP_RAW_C=0";
    } else {
        if (!have_rawc) {
            fprintf(stderr, "qwisp ab: --tier streaming: this build has no streaming tier (no QWISP_RAW_C knob)\n");
            goto out;
        }
        if (raw_c < 0 && !simulate) {
            fprintf(stderr, "qwisp ab: --tier streaming needs --raw-c N or --simulate NGB\n");
            goto out;
        }
        if (raw_c >= 0) {
            snprintf(rawc_buf, sizeof rawc_buf, "QWISP_RAW_C=%ld", raw_c);
            common[n_common++] = rawc_buf;
        }
    }

    /* 2. the criteria, before anything runs */
    qw_ab_criteria crit;
    qw_error err = {0};
    if (qw_ab_criteria_load(&crit, crit_path, &err)) {
        fprintf(stderr, "qwisp ab: %s\n", err.msg);
        qw_ab_criteria_free(&crit);
        goto out;
    }
    if (fp_jobs > 1 && fp_reps > 0) {
        if (!inproc) {
            fprintf(stderr, "qwisp ab: --footprint-jobs %ld needs --speed inproc or tokens: with --speed process the "
                            "footprint trials are the speed measurement, one at a time\n", fp_jobs);
            qw_ab_criteria_free(&crit);
            goto out;
        }
        for (int r = 0; r < crit.n_rules; r++)
            for (int k = 0; k < crit.rules[r].n_conds; k++) {
                const int m = crit.rules[r].conds[k].metric;
                if (timed_by_footprint_trials(m, tokens)) {
                    fprintf(stderr, "qwisp ab: --footprint-jobs %ld: criteria rule '%s' uses %s, which comes from the "
                                    "footprint trials; run them one at a time (--footprint-jobs 1)\n",
                            fp_jobs, crit.rules[r].text, qw_ab_metric_name(m));
                    qw_ab_criteria_free(&crit);
                    goto out;
                }
            }
    }
    qw_ab_experiment e = {.arms = arms, .n_arms = n_arms, .reps = (int)reps, .crit = &crit, .criteria_path = crit_path,
                          .tier = tier, .prompt_tokens = (int)prompt, .decode = (int)decode, .resamples = 2000,
                          .level = 0.95, .seed = 20260101, .aa_arm = aa_arm,
                          .replay_tokens = (int)(replay < 0 || replay > prompt ? prompt : replay),
                          .footprint_decode = (int)fp_decode, .speed_tokens = tokens, .token_block = (int)block,
                          .decode_threads = (int)decode_threads, .footprint_jobs = (int)fp_jobs,
                          .prime = tokens && (prime == 1 || (prime < 0 && !strcmp(tier, "streaming")))};
    if (fp_reps > e.reps) e.reps = (int)fp_reps;
    cpu_model(e.cpu_model, sizeof e.cpu_model);
    utc_now(e.criteria_read_at);
    rc = 1;
    const char *model = qw_cli_model_path("ab", model_flag);
    if (!model) goto out_crit;
    e.model = model;
    e.simulate_gb = simulate ? strtod(simulate, NULL) : 0;
    {
        const char *names[] = {"QWISP_BACKEND", "QWISP_DEVICE_VRAM", "QWISP_DEVICE_SLOTS", "QWISP_DEVICE_PIN", "QWISP_DEVICE_STAGE_MB", "QWISP_CHUNK"};
        size_t o = 0;
        for (size_t i = 0; i < sizeof names / sizeof *names && o < sizeof e.backend_env; i++) {
            const char *v = getenv(names[i]);
            if (v) o += (size_t)snprintf(e.backend_env + o, sizeof e.backend_env - o, "%s%s=%s", o ? " " : "", names[i], v);
        }
    }
    char exe[4096];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el <= 0) {
        fprintf(stderr, "qwisp ab: /proc/self/exe: %s\n", strerror(errno));
        goto out_crit;
    }
    exe[el] = 0;
    e.exe_path = exe;
    /* Children exec /proc/self/exe, not the path: a rebuild during the
     * experiment cannot swap the binary under it (the hash stays true). */
    if (qw_ab_sha256_file("/proc/self/exe", e.exe_sha256, &err)) {
        fprintf(stderr, "qwisp ab: %s\n", err.msg);
        goto out_crit;
    }
    char cmdline[2048];
    size_t co = (size_t)snprintf(cmdline, sizeof cmdline, "qwisp ab");
    for (int i = 1; i < argc && co < sizeof cmdline; i++)
        co += (size_t)snprintf(cmdline + co, sizeof cmdline - co, " %s", argv[i]);
    e.command = cmdline;
    qw_error derr = {0};
    if (qw_mkdir_p(out_dir, false, &derr)) {
        fprintf(stderr, "qwisp ab: --out %s: %s\n", out_dir, derr.msg);
        goto out_crit;
    }
    char trial_dir[4096];
    snprintf(trial_dir, sizeof trial_dir, "%s/trials", out_dir);
    if (qw_mkdir_p(trial_dir, false, &derr)) {
        fprintf(stderr, "qwisp ab: %s: %s\n", trial_dir, derr.msg);
        goto out_crit;
    }

    /* 3. environments and the child's argv */
    int n_env = 0;
    while (environ[n_env]) n_env++;
    char **base = qw_xcalloc((size_t)n_env + 1, sizeof *base);
    int n_base = 0;
    for (int i = 0; i < n_env; i++)
        if (!touched(environ[i], var_len(environ[i]), arms, n_arms, common, n_common)) base[n_base++] = environ[i];
    char ***envs = qw_xcalloc((size_t)n_arms, sizeof *envs);
    for (int a = 0; a < n_arms; a++) envs[a] = arm_env(base, n_base, common, n_common, &arms[a]);
    char np[32], nd[32];
    snprintf(np, sizeof np, "%ld", prompt);
    snprintf(nd, sizeof nd, "%ld", fp_decode);
    char *cargv[24];
    int cn = 0;
    add_arg(cargv, &cn, "qwisp");
    if (simulate) {
        add_arg(cargv, &cn, "simulate");
        add_arg(cargv, &cn, simulate);
        add_arg(cargv, &cn, "--");
        add_arg(cargv, &cn, "/proc/self/exe");
    }
    int run_at = cn;
    const char *run_args[] = {"run", "-m", model, "--prompt-tokens", np, "-n", nd, "--json", "--ignore-eos"};
    for (size_t i = 0; i < sizeof run_args / sizeof *run_args; i++) add_arg(cargv, &cn, run_args[i]);
    cargv[cn] = NULL;
    co = (size_t)snprintf(e.child_cmd, sizeof e.child_cmd, "qwisp");
    for (int i = 1; i < cn && co < sizeof e.child_cmd; i++)
        co += (size_t)snprintf(e.child_cmd + co, sizeof e.child_cmd - co, " %s", i == run_at - 1 && simulate ? "qwisp" : cargv[i]);

    /* 4. warm-up + balanced rounds */
    int n_trials = fp_reps > 0 ? 1 + (int)fp_reps * n_arms : 0; /* 0: speed only */
    int *order = qw_xcalloc((size_t)(fp_reps > 0 ? fp_reps : 1) * (size_t)n_arms, sizeof *order);
    qw_ab_order(n_arms, (int)fp_reps, order);
    e.trials = qw_xcalloc((size_t)(n_trials ? n_trials : 1), sizeof *e.trials);
    e.n_trials = n_trials;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    utc_now(e.first_trial_at);
    fprintf(stderr, "[ab] criteria %s sha256 %.16s… parsed (%d rules); %d trials (1 warm-up + %ld rounds x %d arms) -> %s\n",
            crit_path, crit.sha256, crit.n_rules, n_trials, fp_reps, n_arms, out_dir);
    e.pagecache_before = qw_ab_pagecache_fraction(model);
    if (inproc) {
        snprintf(e.speed_mode, sizeof e.speed_mode, tokens ? "in-process, token-paired" : "in-process");
        speed_phase(&e, base, n_base, common, n_common, simulate, trial_dir, (int)sample_ms, (int)reps, pin, use_perf);
    } else {
        snprintf(e.speed_mode, sizeof e.speed_mode, "separate processes");
        snprintf(e.perf_desc, sizeof e.perf_desc, "perf events: not used (speed from separate processes)");
    }
    /* the warm-up alone (it fills the page cache), then groups of fp_jobs trials at once */
    qw_ab_spawn *sps = qw_xcalloc((size_t)fp_jobs, sizeof *sps);
    char (*paths)[2][4200] = qw_xcalloc((size_t)fp_jobs, sizeof *paths);
    for (int i0 = 0; i0 < n_trials;) {
        const int g = i0 == 0 ? 1 : (n_trials - i0 < fp_jobs ? n_trials - i0 : (int)fp_jobs);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        for (int j = 0; j < g; j++) {
            const int i = i0 + j;
            qw_ab_trial *t = &e.trials[i];
            t->arm = i == 0 ? 0 : order[i - 1];
            t->round = i == 0 ? -1 : (i - 1) / n_arms;
            t->start_s = (double)(ts.tv_sec - t0.tv_sec) + (ts.tv_nsec - t0.tv_nsec) / 1e9;
            if (snprintf(paths[j][0], sizeof paths[j][0], "%s/%02d-%s.json", trial_dir, i, arms[t->arm].name) >=
                    (int)sizeof paths[j][0] ||
                snprintf(paths[j][1], sizeof paths[j][1], "%s/%02d-%s.stderr", trial_dir, i, arms[t->arm].name) >=
                    (int)sizeof paths[j][1]) {
                fprintf(stderr, "qwisp ab: --out %s: the trial file names are too long\n", out_dir);
                free(sps);
                free(paths);
                goto out_trials;
            }
            sps[j] = (qw_ab_spawn){.exe = "/proc/self/exe", .argv = cargv, .envp = envs[t->arm],
                                   .stdout_path = paths[j][0], .stderr_path = paths[j][1], .sample_ms = (int)sample_ms};
        }
        if (qw_ab_trial_run_group(sps, &e.trials[i0], g, &err)) {
            fprintf(stderr, "qwisp ab: trials %d..%d: %s\n", i0, i0 + g - 1, err.msg);
            free(sps);
            free(paths);
            goto out_trials;
        }
        for (int i = i0; i < i0 + g; i++) {
            qw_ab_trial *t = &e.trials[i];
            char why[200];
            if (t->ok && !knobs_match(t, envs[t->arm], simulate != NULL, why, sizeof why)) {
                t->ok = false;
                snprintf(t->error, sizeof t->error, "env check: %s", why);
            }
            if (t->ok)
                fprintf(stderr, "[ab] %2d/%d %-8s arm %-10s decode %.2f tok/s prefill %.1f tok/s footprint peak %.1f MiB wall %.0f ms\n",
                        i, n_trials - 1, t->round < 0 ? "warm-up" : "", arms[t->arm].name, t->m[QW_AB_M_DECODE_TOK_S],
                        t->m[QW_AB_M_PREFILL_TOK_S], t->m[QW_AB_M_FOOTPRINT_PEAK_MB], t->m[QW_AB_M_WALL_MS]);
            else
                fprintf(stderr, "[ab] %2d/%d %-8s arm %-10s FAILED: %s\n", i, n_trials - 1, t->round < 0 ? "warm-up" : "",
                        arms[t->arm].name, t->error);
        }
        i0 += g;
    }
    free(sps);
    free(paths);
    utc_now(e.finished_at);
    e.pagecache_after = qw_ab_pagecache_fraction(model);

    /* 7. verdicts and the report */
    qw_ab_analyze(&e);
    if (qw_ab_report_write(&e, out_dir, &err)) {
        fprintf(stderr, "qwisp ab: %s\n", err.msg);
        goto out_trials;
    }
    for (int a = 1; a < n_arms; a++) {
        printf("verdict %s vs %s: %s", arms[a].name, arms[0].name, e.verdicts[a].verdict);
        if (!strcmp(e.verdicts[a].verdict, "inconclusive") && e.verdicts[a].suggest_reps)
            e.speed_tokens ? printf(" (about %d blocks = %d decode positions would settle it)", e.verdicts[a].suggest_reps,
                                    e.verdicts[a].suggest_reps * e.token_block)
                           : printf(" (about %d reps would settle it)", e.verdicts[a].suggest_reps);
        printf(" — %s\n", e.verdicts[a].why);
    }
    if (aa_arm >= 0) {
        double fl = qw_ab_noise_floor(&e, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT);
        qw_ab_interval iv = qw_ab_paired_raw(&e, aa_arm, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT);
        if (iv.n == 0)
            printf("noise floor (A/A, %s): not measured (no A/A pair succeeded): nothing is called\n", e.speed_mode);
        else
            printf("noise floor (A/A, %s): decode_tok_s %+.3f %% [%+.3f, %+.3f] over %d pairs -> differences within "
                   "±%.3f %% are not called\n", e.speed_mode, iv.est, iv.lo, iv.hi, iv.n, fl);
    }
    printf("report: %s/report.md (+ report.json, footprint.svg)\n", out_dir);
    rc = 0;
out_trials:
    for (int i = 0; i < e.n_trials; i++) qw_ab_trial_free(&e.trials[i]);
    free(e.trials);
    for (int i = 0; i < e.n_speed_trials; i++) qw_ab_trial_free(&e.speed_trials[i]);
    free(e.speed_trials);
    free(e.verdicts);
    free(order);
    for (int a = 0; a < n_arms; a++) free(envs[a]);
    free(envs);
    free(base);
out_crit:
    qw_ab_criteria_free(&crit);
out:
    for (int a = 0; a < n_arms; a++) free_arm(&arms[a]);
    return rc;
}
