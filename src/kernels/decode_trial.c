/* decode_trial.c — decode_gemv chosen on the running model's own tokens.
 *
 * Why: one-token Q8_0/Q4_0 matmuls have two loops with the same bits, the
 * level's multi-row GEMV loop and one row dot at a time, and which one
 * decodes faster depends on the host, not only on the CPU model: two
 * "AMD EPYC (cpu family 26)" VMs of 2026-12-06 measured the loop 16-35 %
 * ahead on one and the row dots 8-12 % ahead on the other (bench/RESULTS.md),
 * while the first-use calibration's synthetic probe (tune_measure.c) timed the
 * two within a few percent either way.  So the probe's pick is only a prior:
 * the first decode tokens of a process alternate the two loops, token by
 * token (ABAB, so the machine's drift falls on both alike), and the loop with
 * the lower median token time is kept for the rest of the process.  The
 * output is the same either way, so the switch is invisible but for speed.
 *
 * Not run when QWISP_DECODE_GEMV pins the loop or QWISP_TUNE=off (the
 * built-in defaults, deterministic).  One step at a time: a thread that finds
 * another's step in flight just decodes with the value in place.
 */
#include "qwisp/ops.h"
#include "qwisp/options.h"
#include "qwisp/tune.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* steps: SKIP warm-up tokens (first touches), then PAIRS of (row dots, loop) */
enum { TRIAL_SKIP = 2, TRIAL_PAIRS = 8, TRIAL_STEPS = TRIAL_SKIP + 2 * TRIAL_PAIRS };

static atomic_int g_done;  /* 1: finished or not to run */
static atomic_flag g_busy = ATOMIC_FLAG_INIT;
static int g_step;         /* next step (under g_busy) */
static double g_sec[2][TRIAL_PAIRS];
static char g_report[160];

static bool trial_wanted(void) {
    if (qw_tune_source(QW_TUNE_DECODE_GEMV) == QW_TUNE_SRC_KNOB) return false;
    const char *t = qw_opt_str(QW_OPT_TUNE);
    return !(t && !strcmp(t, "off"));
}

int qw_decode_trial_begin(void) {
    if (atomic_load_explicit(&g_done, memory_order_acquire)) return -1;
    if (atomic_flag_test_and_set_explicit(&g_busy, memory_order_acquire)) return -1;
    if (!trial_wanted()) {
        atomic_store_explicit(&g_done, 1, memory_order_release);
        atomic_flag_clear_explicit(&g_busy, memory_order_release);
        return -1;
    }
    const int step = g_step;
    if (step >= TRIAL_SKIP) qw_tune_set(QW_TUNE_DECODE_GEMV, (step - TRIAL_SKIP) & 1, QW_TUNE_SRC_MEASURED);
    return step; /* g_busy stays set until qw_decode_trial_end */
}

static double median(double *v, int n) {
    qw_sort_doubles(v, (size_t)n);
    return qw_median_sorted(v, (size_t)n);
}

void qw_decode_trial_end(int step, double seconds) {
    if (step < 0) return;
    if (step >= TRIAL_SKIP) g_sec[(step - TRIAL_SKIP) & 1][(step - TRIAL_SKIP) >> 1] = seconds;
    g_step = step + 1;
    if (g_step == TRIAL_STEPS) {
        const double rows = median(g_sec[0], TRIAL_PAIRS), loop = median(g_sec[1], TRIAL_PAIRS);
        const int pick = loop < rows;
        qw_tune_set(QW_TUNE_DECODE_GEMV, pick, QW_TUNE_SRC_MEASURED);
        snprintf(g_report, sizeof g_report,
                 "decode_gemv %d, measured in decode: row dots %.2f ms, GEMV loop %.2f ms a token (medians of %d "
                 "alternated tokens each)",
                 pick, rows * 1e3, loop * 1e3, TRIAL_PAIRS);
        atomic_store_explicit(&g_done, 1, memory_order_release);
    }
    atomic_flag_clear_explicit(&g_busy, memory_order_release);
}

void qw_decode_trial_report(char *buf, size_t n) {
    if (n) snprintf(buf, n, "%s", atomic_load_explicit(&g_done, memory_order_acquire) ? g_report : "");
}

void qw_decode_trial_reset(void) {
    while (atomic_flag_test_and_set_explicit(&g_busy, memory_order_acquire)) {
    }
    g_step = 0;
    g_report[0] = 0;
    atomic_store_explicit(&g_done, 0, memory_order_release);
    atomic_flag_clear_explicit(&g_busy, memory_order_release);
}
