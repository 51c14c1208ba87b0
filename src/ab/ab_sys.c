/* ab_sys.c — what `qwisp ab` asks of the operating system to take noise out
 * of a speed measurement (ab.h, "measurement hygiene"):
 *
 *   - CPU cycles and task-clock of every thread of this process from
 *     perf_event_open (one counter per thread, user space only so that
 *     kernel.perf_event_paranoid=2 still allows it).  Cycles do not change
 *     with the clock frequency the way wall time does, and task-clock counts
 *     only time the threads ran, so a trial slowed by another process's load
 *     shows up as wall > task-clock.  When the kernel refuses (paranoid 3, a
 *     container without the syscall, no PMU in a VM) the counters are marked
 *     unavailable with the reason, and reads give NaN: never a made-up zero.
 *   - pinning each thread of the process to its own CPU of the allowed set,
 *     so the scheduler cannot migrate a compute thread mid-token;
 *   - the fraction of a file held in the page cache (mincore over a mapping),
 *     the warm-cache check made before the first and after the last trial.
 */
#include "qwisp/ab.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The thread ids of this process, in /proc/self/task order; n returned. */
static int list_tids(pid_t *tids, int cap) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < cap) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
        tids[n++] = (pid_t)atoi(de->d_name);
    }
    closedir(d);
    /* sort: the main thread (lowest id) first, workers in creation order */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && tids[j] < tids[j - 1]; j--) {
            pid_t t = tids[j];
            tids[j] = tids[j - 1];
            tids[j - 1] = t;
        }
    return n;
}

static int perf_open(uint32_t type, uint64_t config, pid_t tid) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = type;
    a.config = config;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, 0);
}

static int paranoid_level(void) {
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
    int v = -99;
    if (f) {
        if (fscanf(f, "%d", &v) != 1) v = -99;
        fclose(f);
    }
    return v;
}

void qw_ab_perf_open_events(qw_ab_perf *p, uint32_t cyc_type, uint64_t cyc_config) {
    memset(p, 0, sizeof *p);
    pid_t tids[QW_AB_PERF_MAX_THREADS];
    int n = list_tids(tids, QW_AB_PERF_MAX_THREADS);
    if (n == 0) {
        snprintf(p->reason, sizeof p->reason, "perf events unavailable: /proc/self/task unreadable");
        return;
    }
    for (int i = 0; i < n; i++) {
        int fc = perf_open(cyc_type, cyc_config, tids[i]);
        int e = errno;
        int ft = fc >= 0 ? perf_open(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, tids[i]) : -1;
        if (fc < 0 || ft < 0) {
            if (ft < 0 && fc >= 0) e = errno;
            if (fc >= 0) close(fc);
            qw_ab_perf_close(p);
            snprintf(p->reason, sizeof p->reason,
                     "perf events unavailable: perf_event_open: %s (kernel.perf_event_paranoid=%d); cycles and "
                     "task-clock not measured, wall time and CPU time only",
                     strerror(e), paranoid_level());
            return;
        }
        p->fd_cycles[p->n] = fc;
        p->fd_task[p->n] = ft;
        p->n++;
    }
    p->available = true;
    snprintf(p->reason, sizeof p->reason, "perf events: cycles + task-clock on %d threads (user space)", p->n);
}

void qw_ab_perf_open(qw_ab_perf *p) { qw_ab_perf_open_events(p, PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES); }

static double sum_fds(const int *fds, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) {
        uint64_t v = 0;
        if (read(fds[i], &v, sizeof v) != (ssize_t)sizeof v) return NAN;
        s += (double)v;
    }
    return s;
}

void qw_ab_perf_read(const qw_ab_perf *p, double *cycles, double *task_ns) {
    if (!p->available) {
        *cycles = NAN;
        *task_ns = NAN;
        return;
    }
    *cycles = sum_fds(p->fd_cycles, p->n);
    *task_ns = sum_fds(p->fd_task, p->n);
}

void qw_ab_perf_close(qw_ab_perf *p) {
    for (int i = 0; i < p->n; i++) {
        close(p->fd_cycles[i]);
        close(p->fd_task[i]);
    }
    p->n = 0;
    p->available = false;
}

int qw_ab_pin_threads(char *desc, size_t cap) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed)) {
        snprintf(desc, cap, "not pinned: sched_getaffinity: %s", strerror(errno));
        return 0;
    }
    int cpus[CPU_SETSIZE], nc = 0;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &allowed)) cpus[nc++] = i;
    pid_t tids[QW_AB_PERF_MAX_THREADS];
    int n = list_tids(tids, QW_AB_PERF_MAX_THREADS), pinned = 0;
    size_t o = (size_t)snprintf(desc, cap, "pinned");
    for (int i = 0; i < n && nc > 0; i++) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[i % nc], &one);
        if (sched_setaffinity(tids[i], sizeof one, &one) == 0) {
            pinned++;
            if (o < cap) o += (size_t)snprintf(desc + o, cap - o, " %d->cpu%d", (int)tids[i], cpus[i % nc]);
        }
    }
    if (n > nc && o < cap) snprintf(desc + o, cap - o, " (%d threads on %d CPUs: some share)", n, nc);
    if (!pinned) snprintf(desc, cap, "not pinned: sched_setaffinity refused for all %d threads", n);
    return pinned;
}

double qw_ab_pagecache_fraction(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NAN;
    struct stat st;
    if (fstat(fd, &st) || st.st_size <= 0) {
        close(fd);
        return NAN;
    }
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), step = (size_t)1 << 30;
    size_t size = (size_t)st.st_size, resident = 0, pages = (size + pg - 1) / pg;
    unsigned char *vec = malloc(step / pg);
    bool ok = vec != NULL;
    for (size_t off = 0; ok && off < size; off += step) {
        size_t len = size - off < step ? size - off : step;
        void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
        if (p == MAP_FAILED) {
            ok = false;
            break;
        }
        if (mincore(p, len, vec) == 0) {
            for (size_t i = 0; i < (len + pg - 1) / pg; i++) resident += vec[i] & 1;
        } else {
            ok = false;
        }
        munmap(p, len);
    }
    free(vec);
    close(fd);
    return ok ? (double)resident / (double)pages : NAN;
}
