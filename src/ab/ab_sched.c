/* ab_sched.c — how long this process's threads waited for a CPU
 * (ab.h, qw_ab_sched): the run-queue delay of every thread, from
 * /proc/self/task/TID/schedstat (second field: nanoseconds spent runnable but
 * not running).  Index 0 is the calling thread.
 *
 * Why: on a machine shared with other work, a compute thread that another
 * process preempts for a few milliseconds holds up the whole token (the other
 * threads wait for it at the layer's barrier).  That time is the neighbour's,
 * not the arm's; perf's task-clock would show it, but no VM here lets perf
 * count, while schedstat needs nothing.  The token-paired decode records, per
 * token, the calling thread's delay — the thread that runs the step and
 * returns when it is done: time it sat preempted is time the step did not
 * advance — and the largest of any thread's (the workers' includes time they
 * yielded while idle, so it overstates).  A cost the arm itself causes (a
 * page fault, zeroing, an OS call, a wait on I/O) is not run-queue delay:
 * it stays in the time.
 * The files are opened once and re-read with pread: a read costs
 * microseconds against a token's ~100 ms.
 */
#include "qwisp/ab.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void qw_ab_sched_open(qw_ab_sched *s) {
    memset(s, 0, sizeof *s);
    char self[32];
    snprintf(self, sizeof self, "%d", (int)gettid());
    char path0[64];
    snprintf(path0, sizeof path0, "/proc/self/task/%s/schedstat", self);
    int fd0 = open(path0, O_RDONLY | O_CLOEXEC);
    if (fd0 < 0) return; /* no schedstat: nothing is measured (n = 0) */
    s->fd[s->n++] = fd0;  /* [0]: the calling thread, the one that runs the step */
    DIR *d = opendir("/proc/self/task");
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) && s->n < QW_AB_MAX_THREADS) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9' || !strcmp(de->d_name, self)) continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", de->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) s->fd[s->n++] = fd;
    }
    closedir(d);
}

void qw_ab_sched_read(const qw_ab_sched *s, double *delay_ns) {
    for (int i = 0; i < s->n; i++) {
        char buf[128];
        ssize_t r = pread(s->fd[i], buf, sizeof buf - 1, 0);
        double run = 0, wait = 0;
        if (r > 0) {
            buf[r] = 0;
            if (sscanf(buf, "%lf %lf", &run, &wait) != 2) wait = 0;
        }
        delay_ns[i] = wait;
    }
}

double qw_ab_sched_self_ms(const qw_ab_sched *s, const double *before, const double *after) {
    return s->n > 0 ? (after[0] - before[0]) / 1e6 : 0;
}

double qw_ab_sched_max_ms(const double *before, const double *after, int n) {
    double m = 0;
    for (int i = 0; i < n; i++)
        if (after[i] - before[i] > m) m = after[i] - before[i];
    return m / 1e6;
}

void qw_ab_sched_close(qw_ab_sched *s) {
    for (int i = 0; i < s->n; i++) close(s->fd[i]);
    s->n = 0;
}
