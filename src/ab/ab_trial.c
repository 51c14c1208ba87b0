/* ab_trial.c — one trial of `qwisp ab` (ab.h): fork/exec a child with a
 * given environment, watch it from outside, collect what it reports.
 *
 * Not perturbing the child: the parent only reads /proc/PID/status of the
 * child's deepest descendant every sample_ms (qw_footprint_read_fast, O(1),
 * as `qwisp footprint --watch` does) — nothing is injected into the child,
 * whose stdout (its --json) and stderr go to files, so no pipe can fill and
 * stall it.  The deepest descendant is followed so a wrapper (`qwisp simulate
 * N -- qwisp run …`) is seen through.  Major page faults come from wait4's
 * rusage, which on Linux includes the child's own waited-for children.
 *
 * A child that exits non-zero, dies on a signal or prints no JSON is a failed
 * trial carrying its reason (exit status + last stderr line) — reported, never
 * averaged away.  Only a failed fork is an error of the harness itself.
 */
#include "qwisp/ab.h"
#include "qwisp/footprint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The first child listed in /proc/P/task/P/children, following down a few
 * levels; pid itself when it has none (or the file is unavailable). */
static pid_t deepest(pid_t pid) {
    for (int depth = 0; depth < 4; depth++) {
        char path[96];
        snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
        FILE *f = fopen(path, "r");
        if (!f) break;
        int c = 0;
        int got = fscanf(f, "%d", &c);
        fclose(f);
        if (got != 1 || c <= 0) break;
        pid = (pid_t)c;
    }
    return pid;
}

static void push_sample(qw_ab_trial *t, float ts, float mb) {
    if (t->n_series == t->cap_series) {
        t->cap_series = t->cap_series ? t->cap_series * 2 : 256;
        t->t_s = qw_xrealloc(t->t_s, (size_t)t->cap_series * sizeof *t->t_s);
        t->fp_mb = qw_xrealloc(t->fp_mb, (size_t)t->cap_series * sizeof *t->fp_mb);
    }
    t->t_s[t->n_series] = ts;
    t->fp_mb[t->n_series] = mb;
    t->n_series++;
}

/* The last non-empty line of a file, for a failed trial's reason. */
static void last_line(const char *path, char *out, size_t cap) {
    out[0] = 0;
    char *s = qw_read_file(path, 0, NULL, NULL);
    if (!s) return;
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) s[--n] = 0;
    char *nl = strrchr(s, '\n');
    snprintf(out, cap, "%s", nl ? nl + 1 : s);
    free(s);
}

static double num(const cJSON *o, const char *k, double scale) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble * scale : NAN;
}

/* First number found under any of the given keys. */
static double num_any(const cJSON *o, const char *const *keys, double scale) {
    for (; o && *keys; keys++) {
        double v = num(o, *keys, scale);
        if (!isnan(v)) return v;
    }
    return NAN;
}

bool qw_ab_trial_parse_json(qw_ab_trial *t, const char *json) {
    cJSON *o = cJSON_Parse(json);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return false;
    }
    const double MB = 1.0 / 1048576.0;
    t->m[QW_AB_M_DECODE_TOK_S] = num(o, "decode_tok_s", 1);
    t->m[QW_AB_M_PREFILL_TOK_S] = num(o, "prefill_tok_s", 1);
    t->m[QW_AB_M_TTFT_MS] = num(o, "ttft_ms", 1);
    t->m[QW_AB_M_CHILD_FOOTPRINT_PEAK_MB] = num(o, "footprint_peak_mb", 1);
    t->m[QW_AB_M_CHILD_RSS_PEAK_MB] = num(o, "rss_peak_mb", 1);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pool");
    if (cJSON_IsObject(p)) {
        t->m[QW_AB_M_POOL_ACTIVE_MB] = num(p, "active", MB);
        t->m[QW_AB_M_POOL_CACHE_MB] = num(p, "cache", MB);
        t->m[QW_AB_M_POOL_PEAK_MB] = num(p, "peak", MB);
        t->m[QW_AB_M_POOL_PEAK_HELD_MB] = num(p, "peak_held", MB);
        t->m[QW_AB_M_POOL_OS_CALLS] = num(p, "os_calls", 1);
        t->m[QW_AB_M_POOL_EVICTED_MB] = num(p, "evicted_bytes", MB);
    }
    /* the GPU backend's device pool: a "device" object when present */
    t->m[QW_AB_M_FOOTPRINT_DEVICE_PEAK_MB] = num(o, "footprint_with_device_peak_mb", 1);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "device");
    if (cJSON_IsObject(d)) {
        t->m[QW_AB_M_DEVICE_HELD_PEAK_MB] = num(d, "peak_held", MB);
        t->m[QW_AB_M_DEVICE_CACHE_PEAK_MB] = num(d, "cache_peak", MB);
        t->m[QW_AB_M_DEVICE_EVICTED_MB] = num(d, "evicted_bytes", MB);
    }
    /* streaming tier stats (issue #6): an "experts" object when present */
    static const char *const hits[] = {"hits", "cache_hits", NULL};
    static const char *const misses[] = {"misses", "cache_misses", NULL};
    static const char *const bytes[] = {"bytes_read", "read_bytes", NULL};
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "experts");
    if (!cJSON_IsObject(x)) x = cJSON_GetObjectItemCaseSensitive(o, "expert_cache");
    if (cJSON_IsObject(x)) {
        t->m[QW_AB_M_EXPERT_HITS] = num_any(x, hits, 1);
        t->m[QW_AB_M_EXPERT_MISSES] = num_any(x, misses, 1);
        t->m[QW_AB_M_EXPERT_READ_MB] = num_any(x, bytes, MB);
    }
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "knobs");
    free(t->knobs_json);
    t->knobs_json = cJSON_IsObject(k) ? cJSON_PrintUnformatted(k) : NULL;
    cJSON_Delete(o);
    return true;
}

int qw_ab_trial_run(const qw_ab_spawn *sp, qw_ab_trial *t, qw_error *err) {
    for (int i = 0; i < QW_AB_N_METRICS; i++) t->m[i] = NAN;
    t->ok = false;
    t->exit_code = -1;
    t->term_signal = 0;
    t->error[0] = 0;
    int out = open(sp->stdout_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) return qw_fail(err, "%s: %s", sp->stdout_path, strerror(errno));
    int errfd = open(sp->stderr_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (errfd < 0) {
        close(out);
        return qw_fail(err, "%s: %s", sp->stderr_path, strerror(errno));
    }
    /* closed by a successful exec: sampling starts only then, so no sample
     * reads the forked copy of this process instead of the trial */
    int exec_gate[2];
    if (pipe2(exec_gate, O_CLOEXEC)) {
        close(out), close(errfd);
        return qw_fail(err, "pipe: %s", strerror(errno));
    }
    fflush(NULL);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        close(out), close(errfd), close(exec_gate[0]), close(exec_gate[1]);
        return qw_fail(err, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        dup2(out, 1);
        dup2(errfd, 2);
        execve(sp->exe, sp->argv, sp->envp);
        dprintf(2, "qwisp ab: exec %s: %s\n", sp->exe, strerror(errno));
        _exit(127);
    }
    close(out);
    close(errfd);
    close(exec_gate[1]);
    char gate;
    while (read(exec_gate[0], &gate, 1) < 0 && errno == EINTR) {
    }
    close(exec_gate[0]);
    int status = 0;
    struct rusage ru = {0};
    double peak_fp = 0, peak_rss = 0;
    struct timespec nap = {sp->sample_ms / 1000, (long)(sp->sample_ms % 1000) * 1000000L};
    for (;;) {
        pid_t r = wait4(pid, &status, WNOHANG, &ru);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) {
            snprintf(t->error, sizeof t->error, "wait4: %s", strerror(errno));
            return 0;
        }
        qw_footprint f;
        if (qw_footprint_read_fast(deepest(pid), &f, NULL) == 0 && f.rss > 0) {
            double mb = (double)f.footprint / 1048576.0, rss = (double)f.rss / 1048576.0;
            push_sample(t, (float)(now_s() - t0), (float)mb);
            if (mb > peak_fp) peak_fp = mb;
            if (rss > peak_rss) peak_rss = rss;
        }
        nanosleep(&nap, NULL);
    }
    t->m[QW_AB_M_WALL_MS] = (now_s() - t0) * 1e3;
    t->m[QW_AB_M_MAJFLT] = (double)ru.ru_majflt;
    if (WIFSIGNALED(status)) {
        t->term_signal = WTERMSIG(status);
        char last[160];
        last_line(sp->stderr_path, last, sizeof last);
        snprintf(t->error, sizeof t->error, "killed by signal %d (%s)%s%s", t->term_signal, strsignal(t->term_signal),
                 last[0] ? ": " : "", last);
        return 0;
    }
    t->exit_code = WEXITSTATUS(status);
    if (t->exit_code != 0) {
        char last[200];
        last_line(sp->stderr_path, last, sizeof last);
        snprintf(t->error, sizeof t->error, "exit %d: %s", t->exit_code, last[0] ? last : "(no stderr)");
        return 0;
    }
    char *json = qw_read_file(sp->stdout_path, 0, NULL, NULL);
    bool parsed = json && qw_ab_trial_parse_json(t, json);
    free(json);
    if (!parsed) {
        snprintf(t->error, sizeof t->error, "exit 0 but no JSON object on stdout (%s)", sp->stdout_path);
        return 0;
    }
    /* A trial shorter than a sample period can slip between the samples
     * taken from outside; the child's own sampler (every 10 ms and once at
     * the end of its run) saw the same process, so the peak is the larger of
     * the two lower bounds. */
    const double child_fp = t->m[QW_AB_M_CHILD_FOOTPRINT_PEAK_MB], child_rss = t->m[QW_AB_M_CHILD_RSS_PEAK_MB];
    if (!isnan(child_fp) && child_fp > peak_fp) peak_fp = child_fp;
    if (!isnan(child_rss) && child_rss > peak_rss) peak_rss = child_rss;
    if (peak_fp > 0) {
        t->m[QW_AB_M_FOOTPRINT_PEAK_MB] = peak_fp;
        t->m[QW_AB_M_RSS_PEAK_MB] = peak_rss;
    }
    t->ok = true;
    return 0;
}

/* One trial of a concurrent group, on its own thread (each thread forks,
 * samples and waits for its own child: wait4 names the pid). */
typedef struct {
    const qw_ab_spawn *sp;
    qw_ab_trial *t;
    int rc;
    qw_error err;
} trial_job;

static void *trial_thread(void *p) {
    trial_job *j = p;
    j->rc = qw_ab_trial_run(j->sp, j->t, &j->err);
    return NULL;
}

int qw_ab_trial_run_group(const qw_ab_spawn *sp, qw_ab_trial *t, int n, qw_error *err) {
    if (n == 1) return qw_ab_trial_run(sp, t, err);
    trial_job *jobs = qw_xcalloc((size_t)n, sizeof *jobs);
    pthread_t *th = qw_xcalloc((size_t)n, sizeof *th);
    bool *started = qw_xcalloc((size_t)n, sizeof *started);
    for (int i = 0; i < n; i++) {
        jobs[i] = (trial_job){.sp = &sp[i], .t = &t[i]};
        if (pthread_create(&th[i], NULL, trial_thread, &jobs[i]) == 0) started[i] = true;
        else jobs[i].rc = qw_fail(&jobs[i].err, "could not start a thread for a concurrent trial");
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        if (jobs[i].rc && !rc) {
            *err = jobs[i].err;
            rc = -1;
        }
    }
    free(started);
    free(th);
    free(jobs);
    return rc;
}

void qw_ab_trial_free(qw_ab_trial *t) {
    free(t->t_s);
    free(t->fp_mb);
    free(t->knobs_json);
    t->t_s = t->fp_mb = NULL;
    t->knobs_json = NULL;
    t->n_series = t->cap_series = 0;
}
