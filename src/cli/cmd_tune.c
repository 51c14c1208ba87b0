/* cmd_tune.c — `qwisp tune`: measures the kernels' machine-dependent
 * parameters (include/qwisp/tune.h) on this machine and writes them to the
 * calibration cache, which every later run reads (keyed by CPU model and
 * binary build id).  `qwisp config` shows each value and its source.  The
 * measurement itself is kernels/tune_measure.c; no value it picks changes a
 * result bit, only the speed. */
#include "cli_common.h"
#include "commands.h"
#include "qwisp/options.h"
#include "qwisp/threadpool.h"
#include "qwisp/tune.h"

#include <stdio.h>
#include <string.h>

static const char *k_usage =
    "usage: qwisp tune [--threads K] [--mb M] [--passes P] [--dry-run]\n"
    "Measures this machine's best decode work-item size, prefetch distance and prefill rows per\n"
    "work item on synthetic Q8_0 matrices, and writes them to the calibration cache\n"
    "($QWISP_TUNE_FILE, else $XDG_CACHE_HOME/qwisp/tune-<SIMD level>.txt or ~/.cache/qwisp/tune-<level>.txt).\n"
    "  --threads K   threads to measure with (default: $QWISP_THREADS or all CPUs)\n"
    "  --mb M        MiB of weights the decode probe streams per pass (default 512; keep >> LLC)\n"
    "  --passes P    timed passes per candidate, the best counts (default 3)\n"
    "  --dry-run     measure and print, write nothing\n"
    "Knobs (QWISP_DECODE_ITEM_BYTES, QWISP_DECODE_AHEAD_BYTES, QWISP_PREFILL_ROWS) still override\n"
    "the cache; QWISP_TUNE=off ignores it.  Results never change a logit bit, only speed.\n";

int qw_cmd_tune(int argc, char **argv) {
    const char *C = "tune";
    long threads = 0, mb = 512, passes = 3;
    bool dry = false;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(k_usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--dry-run")) dry = true;
        else if (QW_CLI_FLAG("--threads") || QW_CLI_FLAG("-t")) {
            if (r < 0 || qw_cli_long(C, "--threads", v, 1, 1024, &threads)) return 2;
        } else if (QW_CLI_FLAG("--mb")) {
            if (r < 0 || qw_cli_long(C, "--mb", v, 1, 1 << 20, &mb)) return 2;
        } else if (QW_CLI_FLAG("--passes")) {
            if (r < 0 || qw_cli_long(C, "--passes", v, 1, 100, &passes)) return 2;
        } else {
            fprintf(stderr, "qwisp tune: unknown option '%s' (see qwisp tune --help)\n", argv[i]);
            return 2;
        }
    }
    const char *path = qw_cli_tune_path();
    if (!dry && !path[0]) {
        fprintf(stderr, "qwisp tune: no cache path (%s); set QWISP_TUNE_FILE\n", qw_cli_tune_state());
        return 1;
    }
    const int nt = qw_cli_threads(threads);
    qw_threadpool *tp = qw_threadpool_new(nt);
    printf("machine: %s\nthreads: %d\n", qw_tune_machine_key(), nt);
    qw_tune_opts o = {.mb = mb, .passes = (int)passes, .log = stdout};
    qw_tune_result res;
    qw_error err = {0};
    const int rc = qw_tune_measure(tp, &o, &res, &err);
    qw_threadpool_free(tp);
    if (rc) {
        fprintf(stderr, "qwisp tune: %s\n", err.msg);
        return 1;
    }
    printf("decode probe:  %.2f GB/s with the defaults, %.2f GB/s calibrated\n", res.decode_gbs[0], res.decode_gbs[1]);
    printf("prefill probe: %.2f GMAC/s with the defaults, %.2f GMAC/s calibrated\n", res.prefill_gops[0],
           res.prefill_gops[1]);
    for (int i = 0; i < QW_TUNE_COUNT; i++)
        printf("%-20s %lld\n", qw_tune_key_name((qw_tune_id)i), (long long)res.vals[i]);
    if (dry) return 0;
    if (qw_tune_save(path, res.vals, nt, &err)) {
        fprintf(stderr, "qwisp tune: %s\n", err.msg);
        return 1;
    }
    printf("written: %s\n", path);
    return 0;
}
