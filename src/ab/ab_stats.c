/* ab_stats.c — the statistics of `qwisp ab` (ab.h): medians, quantiles, a
 * percentile bootstrap of the median paired difference, the reps an
 * inconclusive interval would need, the balanced trial order, and the paired
 * intervals of an experiment.
 *
 * Why the median and a bootstrap: timings on a shared machine have heavy
 * tails (another process's build stalls one trial by 2×); the median of the
 * paired differences ignores a few such trials, and the bootstrap needs no
 * normality assumption.  The generator is a fixed-seed splitmix64, so the same
 * trials always give the same interval.
 *
 * Why it is widened: for few pairs the percentile bootstrap of a median is
 * far too narrow — with n=3 it is about [min, max], which holds the true
 * median only 75% of the time, not 95%.  So the interval is the union of the
 * bootstrap interval and the distribution-free order-statistic (sign-test)
 * interval [x_(k), x_(n-k+1)], k the largest with 2·P(Bin(n,½) < k) ≤ 1−level,
 * whose coverage is at least `level` for any distribution.  When no such k
 * exists (n < 6 at 95%) the interval is unbounded: a verdict needs ≥ 6 pairs.
 *
 * The noise floor: an experiment may carry an A/A arm (the baseline's
 * settings run again as if they were another arm).  Its interval is what
 * "no difference" looks like on this machine today; the floor is the largest
 * |difference| inside it, and every other arm's interval is widened by it on
 * both sides.  So no arm is ever called different by less than the A/A pair
 * differed — and when the A/A pair has no interval, nothing is called.
 *
 * Bracketing (the in-process speed trials, qw_ab_schedule): the machine
 * drifts (other tenants' memory traffic, clocks, a neighbour's build) on the
 * scale of seconds to minutes, so two trials of a round run seconds apart
 * differ by the drift between them.  Every non-baseline trial runs between
 * two baseline trials and is compared with their mean: a drift that is
 * linear over those three trials cancels exactly.
 *
 * Per-token statistics (the in-process speed trials time every decode token):
 * a trial's decode_tok_s is its tokens / their total time, as `qwisp run`
 * reports it — untrimmed, because a cost the arm itself causes on a few
 * tokens (an eviction, an mmap) must count; decode_tok_s_trim = 1000 / the
 * 10 % trimmed mean and decode_ms_median are the robust views beside it.
 */
#include "qwisp/ab.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double qw_ab_quantile(const double *x, int n, double q) {
    if (n <= 0) return NAN;
    double *s = qw_xmalloc((size_t)n * sizeof *s);
    memcpy(s, x, (size_t)n * sizeof *s);
    qw_sort_doubles(s, (size_t)n);
    double h = (n - 1) * q;
    int i = (int)floor(h);
    double v = i + 1 < n ? s[i] + (h - i) * (s[i + 1] - s[i]) : s[n - 1];
    free(s);
    return v;
}

double qw_ab_median(const double *x, int n) { return qw_ab_quantile(x, n, 0.5); }

static uint64_t splitmix64(uint64_t *st) {
    uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

qw_ab_interval qw_ab_bootstrap_median(const double *x, int n, int resamples, double level, uint64_t seed) {
    qw_ab_interval iv = {.valid = n > 0, .n = n};
    if (n <= 0) return iv;
    iv.est = qw_ab_median(x, n);
    if (n == 1 || resamples < 1) {
        iv.lo = -INFINITY; /* one value has no spread */
        iv.hi = INFINITY;
        return iv;
    }
    double *meds = qw_xmalloc((size_t)resamples * sizeof *meds);
    double *draw = qw_xmalloc((size_t)n * sizeof *draw);
    uint64_t st = seed;
    for (int b = 0; b < resamples; b++) {
        for (int i = 0; i < n; i++) draw[i] = x[splitmix64(&st) % (uint64_t)n];
        meds[b] = qw_ab_median(draw, n);
    }
    double a = (1.0 - level) / 2.0;
    iv.lo = qw_ab_quantile(meds, resamples, a);
    iv.hi = qw_ab_quantile(meds, resamples, 1.0 - a);
    free(draw);
    free(meds);
    /* widen to the sign-test interval (see the header) */
    int k = qw_ab_sign_k(n, level);
    if (k == 0) {
        iv.lo = -INFINITY;
        iv.hi = INFINITY;
    } else {
        double *s = qw_xmalloc((size_t)n * sizeof *s);
        memcpy(s, x, (size_t)n * sizeof *s);
        qw_sort_doubles(s, (size_t)n);
        iv.lo = fmin(iv.lo, s[k - 1]);
        iv.hi = fmax(iv.hi, s[n - k]);
        free(s);
    }
    return iv;
}

int qw_ab_sign_k(int n, double level) {
    /* cdf = P(Bin(n, 1/2) <= j) accumulated term by term */
    double term = pow(0.5, n), cdf = 0;
    int k = 0;
    for (int j = 0; j < n; j++) {
        cdf += term;                    /* P(B <= j) = P(B < j+1) */
        if (2 * cdf > 1.0 - level) break;
        k = j + 1;
        term = term * (n - j) / (j + 1);
    }
    return k;
}

int qw_ab_min_pairs(double level) {
    for (int n = 1; n < 64; n++)
        if (qw_ab_sign_k(n, level) > 0) return n;
    return 64;
}

int qw_ab_suggest_reps(int n, double est, double half, double threshold) {
    if (isinf(half)) return qw_ab_min_pairs(0.95); /* no interval yet: the fewest pairs that give one */
    double gap = fabs(est - threshold);
    if (n <= 0 || gap <= 0 || !(half > 0)) return 0;
    double need = n * (half / gap) * (half / gap);
    if (need > 1e6) return 0;
    int r = (int)ceil(need);
    return r > n ? r : n + 1;
}

double qw_ab_trimmed_mean(const double *x, int n, double trim) {
    if (n <= 0) return NAN;
    if (trim >= 0.5) return qw_ab_median(x, n);
    double *s = qw_xmalloc((size_t)n * sizeof *s);
    memcpy(s, x, (size_t)n * sizeof *s);
    qw_sort_doubles(s, (size_t)n);
    int cut = trim > 0 ? (int)floor(trim * n) : 0;
    double sum = 0;
    for (int i = cut; i < n - cut; i++) sum += s[i];
    free(s);
    return sum / (n - 2 * cut);
}

qw_ab_tokstats qw_ab_token_stats(const double *x, int n) {
    qw_ab_tokstats t = {.n = n, .median = NAN, .trimmed_mean = NAN, .q1 = NAN, .q3 = NAN, .min = NAN, .max = NAN};
    if (n <= 0) return t;
    t.median = qw_ab_median(x, n);
    t.trimmed_mean = qw_ab_trimmed_mean(x, n, 0.1);
    t.q1 = qw_ab_quantile(x, n, 0.25);
    t.q3 = qw_ab_quantile(x, n, 0.75);
    t.min = qw_ab_quantile(x, n, 0);
    t.max = qw_ab_quantile(x, n, 1);
    return t;
}

int qw_ab_schedule(int n_arms, int reps, int *sched) {
    int n = 0;
    if (sched) sched[n] = 0, sched[n + 1] = 0;
    n = 2;
    for (int r = 0; r < reps; r++)
        for (int i = 1; i < n_arms; i++) {
            int a = (r % 2 == 0) ? i : n_arms - i;
            if (sched) sched[n] = a, sched[n + 1] = 0;
            n += 2;
        }
    return n;
}

void qw_ab_schedule_rounds(const int *sched, int n, int *rounds) {
    int seen[64] = {0};
    for (int i = 0; i < n; i++) rounds[i] = i == 0 ? -1 : seen[sched[i] & 63]++;
}

void qw_ab_token_order(int n_arms, int t, int *order) {
    bool back = (t / n_arms) % 2 == 1;
    for (int i = 0; i < n_arms; i++) {
        int a = (i + t) % n_arms;
        order[back ? n_arms - 1 - i : i] = a;
    }
}

void qw_ab_order(int n_arms, int reps, int *order) {
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < n_arms; i++) order[r * n_arms + i] = (r % 2 == 0) ? i : n_arms - 1 - i;
}

/* ---- an experiment's paired differences ------------------------------------- */

bool qw_ab_is_speed_metric(int m) {
    return m == QW_AB_M_DECODE_TOK_S || m == QW_AB_M_DECODE_TOK_S_TRIM || m == QW_AB_M_PREFILL_TOK_S || m == QW_AB_M_TTFT_MS ||
           m == QW_AB_M_DECODE_MS_MEDIAN || m == QW_AB_M_DECODE_CPU_MS || m == QW_AB_M_DECODE_MCYCLES ||
           m == QW_AB_M_DECODE_TOK_S_WALL || m == QW_AB_M_DECODE_WAIT_MS;
}

bool qw_ab_uses_speed_trials(const qw_ab_experiment *e, int m) {
    if (e->n_speed_trials <= 0 || !qw_ab_is_speed_metric(m)) return false;
    /* token-paired trials decode only: their prefill is the shared prefix */
    return !(e->speed_tokens && (m == QW_AB_M_PREFILL_TOK_S || m == QW_AB_M_TTFT_MS));
}

static const qw_ab_trial *find_trial(const qw_ab_trial *tr, int n_tr, int arm, int round) {
    for (int i = 0; i < n_tr; i++)
        if (tr[i].arm == arm && tr[i].round == round) return &tr[i];
    return NULL;
}

/* The baseline value a trial is compared with: in-process trials are
 * bracketed (the mean of the baseline trials right before and after it);
 * separate processes are paired by round. */
static bool reference(const qw_ab_experiment *e, const qw_ab_trial *tr, int n_tr, const qw_ab_trial *a, int metric,
                      double *vb) {
    if (tr == e->speed_trials && !e->speed_tokens) {
        long i = a - tr;
        if (i < 1 || i + 1 >= n_tr) return false;
        const qw_ab_trial *p = &tr[i - 1], *q = &tr[i + 1];
        if (p->arm != 0 || q->arm != 0 || !p->ok || !q->ok) return false;
        *vb = (p->m[metric] + q->m[metric]) / 2;
        return true;
    }
    const qw_ab_trial *b = find_trial(tr, n_tr, 0, a->round);
    if (!b || !b->ok) return false;
    *vb = b->m[metric];
    return true;
}

qw_ab_interval qw_ab_paired_raw(const qw_ab_experiment *e, int arm, int metric, qw_ab_kind kind) {
    const qw_ab_trial *tr = e->trials;
    int n_tr = e->n_trials;
    int rounds = e->reps;
    if (qw_ab_uses_speed_trials(e, metric)) {
        tr = e->speed_trials, n_tr = e->n_speed_trials;
        if (e->speed_rounds > 0) rounds = e->speed_rounds;
    }
    double *d = qw_xmalloc((size_t)(rounds > 0 ? rounds : 1) * sizeof *d);
    int n = 0;
    for (int r = 0; r < rounds; r++) {
        const qw_ab_trial *a = find_trial(tr, n_tr, arm, r);
        double va, vb;
        if (!a || !a->ok || !reference(e, tr, n_tr, a, metric, &vb)) continue;
        va = a->m[metric];
        if (isnan(va) || isnan(vb)) continue;
        if (kind == QW_AB_DELTA_PCT) {
            if (vb == 0) {
                if (va == 0) d[n++] = 0;
                continue; /* a change from 0 has no percentage */
            }
            d[n++] = (va - vb) / fabs(vb) * 100.0;
        } else {
            d[n++] = va - vb;
        }
    }
    /* token-paired blocks: many exchangeable pairs, so the signed-rank interval (ab_signrank.c) */
    qw_ab_interval iv = tr == e->speed_trials && e->speed_tokens
                            ? qw_ab_signrank(d, n, e->level)
                            : qw_ab_bootstrap_median(d, n, e->resamples, e->level,
                                                     e->seed ^ ((uint64_t)arm << 32) ^ (uint64_t)metric);
    free(d);
    if (iv.n < 2) iv.valid = false; /* one pair has no spread: never a verdict */
    return iv;
}

double qw_ab_noise_floor(const qw_ab_experiment *e, int metric, qw_ab_kind kind) {
    if (e->aa_arm < 0 || e->aa_arm >= e->n_arms) return 0;
    qw_ab_interval aa = qw_ab_paired_raw(e, e->aa_arm, metric, kind);
    if (aa.n == 0) return NAN;
    if (!aa.valid) return INFINITY;
    return fmax(fabs(aa.lo), fabs(aa.hi));
}

qw_ab_interval qw_ab_paired(const qw_ab_experiment *e, int arm, int metric, qw_ab_kind kind) {
    qw_ab_interval iv = qw_ab_paired_raw(e, arm, metric, kind);
    if (arm == e->aa_arm || e->aa_arm < 0 || !iv.valid) return iv;
    double f = qw_ab_noise_floor(e, metric, kind);
    if (isnan(f)) return iv;
    iv.floor = f;
    iv.lo -= f;
    iv.hi += f;
    return iv;
}

/* Counts an arm's timed trials (warm-ups excluded), process and in-process
 * speed trials together: all of them, or only the failed ones. */
static int count_trials(const qw_ab_experiment *e, int arm, bool failed_only) {
    int f = 0;
    for (int i = 0; i < e->n_trials; i++)
        if (e->trials[i].arm == arm && e->trials[i].round >= 0 && !(failed_only && e->trials[i].ok)) f++;
    for (int i = 0; i < e->n_speed_trials; i++)
        if (e->speed_trials[i].arm == arm && e->speed_trials[i].round >= 0 && !(failed_only && e->speed_trials[i].ok))
            f++;
    return f;
}

int qw_ab_failed(const qw_ab_experiment *e, int arm) { return count_trials(e, arm, true); }

typedef struct {
    const qw_ab_experiment *e;
    int arm;
} lookup_ctx;

static qw_ab_interval lookup(void *user, int metric, qw_ab_kind kind) {
    lookup_ctx *lc = user;
    return qw_ab_paired(lc->e, lc->arm, metric, kind);
}

void qw_ab_analyze(qw_ab_experiment *e) {
    free(e->verdicts);
    e->verdicts = qw_xcalloc((size_t)e->n_arms, sizeof *e->verdicts);
    int base_failed = qw_ab_failed(e, 0);
    for (int a = 1; a < e->n_arms; a++) {
        qw_ab_verdict *v = &e->verdicts[a];
        int f = qw_ab_failed(e, a);
        if (a == e->aa_arm && !f && !base_failed) {
            *v = (qw_ab_verdict){.rule = -1, .unknown_rule = -1};
            snprintf(v->verdict, sizeof v->verdict, "noise-floor");
            double fl = qw_ab_noise_floor(e, QW_AB_M_DECODE_TOK_S, QW_AB_DELTA_PCT);
            snprintf(v->why, sizeof v->why,
                     "A/A pair (the baseline's settings twice): decode_tok_s differs by up to %.2f %% by chance; "
                     "every other arm's interval is widened by its A/A floor", fl);
            continue;
        }
        if (f || base_failed) {
            *v = (qw_ab_verdict){.rule = -1, .unknown_rule = -1};
            snprintf(v->verdict, sizeof v->verdict, "failed");
            snprintf(v->why, sizeof v->why, "%d of %d trials of '%s' failed%s%s (see the trials table)", f ? f : base_failed,
                     count_trials(e, f ? a : 0, false), f ? e->arms[a].name : e->arms[0].name, f ? "" : " (the baseline)",
                     f && base_failed ? "; the baseline failed too" : "");
            continue;
        }
        lookup_ctx lc = {e, a};
        qw_ab_criteria_eval(e->crit, lookup, &lc, v);
    }
}
