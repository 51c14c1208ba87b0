/* tune_first_use.c — calibration at first use: when QWISP_TUNE=auto and no
 * calibration is cached for this CPU, SIMD level and binary, a command that
 * runs a model measures the kernel parameters once (what `qwisp tune` does),
 * caches them, and goes on with them.
 *
 * Why at first use and not only by `qwisp tune`: the best decode kernel is a
 * property of the core, not of the code — on a Zen 4 the row dots decode
 * 2.7x faster than the multi-row GEMV loop, on a Sapphire Rapids Xeon the
 * loop decodes 1.4-1.9x faster than the row dots — and a user who never runs
 * `qwisp tune` would otherwise get whichever one the defaults name.
 *
 * The measurement runs in a child process: its 512 MiB probe buffer and its
 * threads must not count in this process's peak footprint, which qwisp
 * reports as a measured quantity.  Result bits never depend on it (tune.h). */
#include "cli_common.h"
#include "qwisp/base.h"
#include "qwisp/options.h"
#include "qwisp/quant.h"
#include "qwisp/sysmem.h"
#include "qwisp/threadpool.h"
#include "qwisp/tune.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { PROBE_MB = 512, PROBE_PASSES = 3 };

/* The child: measure with the run's thread count, save, exit status 0 on success. */
static int measure_and_save(const char *path) {
    const int nt = qw_cli_tune_threads();
    qw_threadpool *tp = qw_threadpool_new(nt);
    if (!tp) return 1;
    qw_tune_opts o = {.mb = PROBE_MB, .passes = PROBE_PASSES, .log = NULL};
    qw_tune_result res;
    qw_error err = {0};
    int rc = qw_tune_measure(tp, &o, &res, &err);
    qw_threadpool_free(tp);
    if (!rc) rc = qw_tune_save(path, res.vals, nt, &err);
    if (rc) fprintf(stderr, "qwisp: calibration: %s\n", err.msg);
    else fprintf(stderr, "qwisp: calibrated: decode_gemv %lld, decode_rows %lld, prefill_rows %lld; decode probe "
                         "%.1f -> %.1f GB/s; cached in %s\n",
                 (long long)res.vals[QW_TUNE_DECODE_GEMV], (long long)res.vals[QW_TUNE_DECODE_ROWS],
                 (long long)res.vals[QW_TUNE_PREFILL_ROWS], res.decode_gbs[0], res.decode_gbs[1], path);
    return rc ? 1 : 0;
}

/* Whether the cache file's folder exists (made if need be) and is writable:
 * where it is not (a read-only home), measuring would be redone, 4 s, by
 * every run. */
static bool cache_dir_writable(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    return qw_mkdir_p(path, true, NULL) == 0 && access(slash ? (*dir ? dir : "/") : ".", W_OK) == 0;
}

void qw_cli_tune_first_use(void) {
    const char *state = qw_cli_tune_state();
    if (strcmp(qw_opt_str(QW_OPT_TUNE), "auto") != 0) return;
    /* absent, or stale (another binary's: every rebuild or upgrade) — a
     * corrupt file is left for a person to look at */
    if (strcmp(state, "absent") != 0 && strncmp(state, "stale", 5) != 0) return;
    const char *path = qw_cli_tune_path();
    /* The probe must stream from DRAM; where that much memory is not there
     * to spare, the defaults are the safer choice. */
    const uint64_t limit = qw_ram_cgroup_limit(), ram = qw_ram_physical();
    const uint64_t have = limit && limit < ram ? limit : ram, need = (uint64_t)PROBE_MB << 22; /* 4x the probe */
    if (have && have < need) {
        fprintf(stderr, "qwisp: not calibrating (needs %llu MiB of RAM to spare); built-in kernel defaults\n",
                (unsigned long long)(need >> 20));
        return;
    }
    if (!cache_dir_writable(path)) {
        fprintf(stderr, "qwisp: not calibrating: the folder of %s is not writable (set QWISP_TUNE_FILE, or "
                        "QWISP_TUNE=cached to silence this); built-in kernel defaults\n", path);
        return;
    }
    fprintf(stderr, "qwisp: first use on this CPU, SIMD level, binary and thread count (%d): calibrating the kernels "
                    "(a few seconds, once; `qwisp tune` redoes it, QWISP_TUNE=cached skips it)\n", qw_cli_tune_threads());
    fflush(NULL);
    const double t0 = qw_time_s();
    const pid_t pid = fork();
    if (pid < 0) {
        perror("qwisp: calibration: fork");
        return;
    }
    if (pid == 0) _exit(measure_and_save(path));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "qwisp: calibration failed; built-in kernel defaults\n");
        return;
    }
    qw_cli_tune_init(qw_cli_tune_threads()); /* load what the child cached, knobs over it */
    fprintf(stderr, "qwisp: calibration took %.1f s\n", qw_time_s() - t0);
}
