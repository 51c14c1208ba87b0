/* cmd_footprint.c — `qwisp footprint PID [--watch MS]`: a process's footprint
 * (anonymous + shmem + swap: what the OS cannot drop for free) next to RSS
 * and its parts, from /proc/PID/smaps_rollup.  --watch samples every MS
 * milliseconds (cheap /proc/PID/status counters) until the process exits,
 * then prints the peaks.  docs/memory.md explains why RSS misleads. */
#include "cli_common.h"
#include "commands.h"
#include "qwisp/footprint.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *k_usage =
    "usage: qwisp footprint PID [--watch MS]\n"
    "  prints footprint (anon + shmem + swap) beside RSS and its parts, in MiB\n"
    "  --watch MS   sample every MS ms until PID exits, then print the peaks\n";

#define MIB(x) ((double)(x) / 1048576.0)

static void print_one(pid_t pid, const qw_footprint *f) {
    printf("pid=%d footprint=%.1f rss=%.1f anon=%.1f file=%.1f shmem=%.1f swap=%.1f pss=%.1f "
           "private_dirty=%.1f rss_hwm=%.1f (MiB)\n",
           (int)pid, MIB(f->footprint), MIB(f->rss), MIB(f->anon), MIB(f->file), MIB(f->shmem),
           MIB(f->swap), MIB(f->pss), MIB(f->private_dirty), MIB(f->rss_hwm));
}

int qw_cmd_footprint(int argc, char **argv) {
    const char *C = "footprint";
    long pid = -1, watch = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(k_usage, stdout);
            return 0;
        } else if ((r = qw_cli_flag(C, argc, argv, &i, "--watch", &v)) != 0) {
            if (r < 0 || qw_cli_long(C, "--watch", v, 1, 3600000, &watch)) return 2;
        } else if (argv[i][0] != '-' && pid < 0) {
            if (qw_cli_long(C, "PID", argv[i], 1, 1L << 30, &pid)) return 2;
        } else {
            fprintf(stderr, "qwisp footprint: unexpected argument '%s' (see qwisp footprint --help)\n",
                    argv[i]);
            return 2;
        }
    }
    if (pid < 0) {
        fputs(k_usage, stderr);
        return 2;
    }
    qw_error err = {0};
    qw_footprint f;
    if (qw_footprint_read((pid_t)pid, &f, &err)) {
        fprintf(stderr, "qwisp footprint: %s\n", err.msg);
        return 1;
    }
    print_one((pid_t)pid, &f);
    if (!watch) return 0;
    uint64_t peak_fp = f.footprint, peak_rss = f.rss;
    long n = 1;
    for (;;) {
        struct timespec ts = {watch / 1000, (watch % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        if (qw_footprint_read_fast((pid_t)pid, &f, NULL)) break; /* the process is gone */
        n++;
        if (f.footprint > peak_fp) peak_fp = f.footprint;
        if (f.rss > peak_rss) peak_rss = f.rss;
    }
    printf("pid=%d exited: footprint_peak=%.1f rss_peak=%.1f (MiB, %ld samples every %ld ms)\n",
           (int)pid, MIB(peak_fp), MIB(peak_rss), n, watch);
    return 0;
}
