/* footprint.c — process footprint from /proc (see footprint.h for the
 * definition and why RSS misleads), and a sampling thread for peaks.
 *
 * Parsing uses open/read into a stack buffer — no stdio, no malloc — so the
 * sampler can run beside a forward pass that is checked for stray mallocs.
 * smaps_rollup gives Rss, Pss, Anonymous, Swap, Private_Dirty; status gives
 * RssFile, RssShmem and VmHWM (smaps_rollup has no resident-shmem total).
 */
#include "qwisp/footprint.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Reads a whole /proc file into buf (NUL-terminated). */
static int read_proc(pid_t pid, const char *name, char *buf, size_t cap, qw_error *err) {
    char path[64];
    if (pid) snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
    else snprintf(path, sizeof path, "/proc/self/%s", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return qw_fail(err, "%s: %s", path, strerror(errno));
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return qw_fail(err, "%s: %s", path, strerror(e));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    return 0;
}

/* Value in bytes of a "Key:   123 kB" line; false when the key is absent. */
static bool field_kb(const char *text, const char *key, uint64_t *out) {
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (!strncmp(p, key, kl) && p[kl] == ':') {
            *out = strtoull(p + kl + 1, NULL, 10) * 1024;
            return true;
        }
    }
    return false;
}

static int read_status(pid_t pid, qw_footprint *f, qw_error *err) {
    char buf[4096];
    if (read_proc(pid, "status", buf, sizeof buf, err)) return -1;
    if (!field_kb(buf, "VmRSS", &f->rss) || !field_kb(buf, "RssAnon", &f->anon))
        return qw_fail(err, "/proc/%d/status: no VmRSS/RssAnon line (kernel thread?)", (int)pid);
    field_kb(buf, "RssFile", &f->file);
    field_kb(buf, "RssShmem", &f->shmem);
    field_kb(buf, "VmSwap", &f->swap);
    field_kb(buf, "VmHWM", &f->rss_hwm);
    return 0;
}

int qw_footprint_read_fast(pid_t pid, qw_footprint *out, qw_error *err) {
    qw_footprint f = {0};
    if (read_status(pid, &f, err)) return -1;
    f.footprint = f.anon + f.shmem + f.swap;
    *out = f;
    return 0;
}

int qw_footprint_read(pid_t pid, qw_footprint *out, qw_error *err) {
    qw_footprint f = {0};
    if (read_status(pid, &f, err)) return -1;
    char buf[4096];
    if (read_proc(pid, "smaps_rollup", buf, sizeof buf, err)) return -1;
    uint64_t rss = 0, anon = 0;
    if (!field_kb(buf, "Rss", &rss) || !field_kb(buf, "Anonymous", &anon))
        return qw_fail(err, "/proc/%d/smaps_rollup: no Rss/Anonymous line", (int)pid);
    f.rss = rss;
    f.anon = anon;
    field_kb(buf, "Swap", &f.swap);
    field_kb(buf, "Pss", &f.pss);
    field_kb(buf, "Private_Dirty", &f.private_dirty);
    /* file = what is resident and neither anonymous nor shmem */
    f.file = rss > anon + f.shmem ? rss - anon - f.shmem : 0;
    f.footprint = f.anon + f.shmem + f.swap;
    *out = f;
    return 0;
}

/* ---- sampler ---- */

struct qw_footprint_sampler {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    int interval_ms;
    uint64_t peak_fp, peak_rss;
};

static void sample(qw_footprint_sampler *s) {
    qw_footprint f;
    if (qw_footprint_read_fast(0, &f, NULL)) return;
    if (f.footprint > s->peak_fp) s->peak_fp = f.footprint;
    if (f.rss > s->peak_rss) s->peak_rss = f.rss;
}

static void *sampler_main(void *arg) {
    qw_footprint_sampler *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        sample(s);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long long ns = ts.tv_nsec + (long long)s->interval_ms * 1000000LL;
        ts.tv_sec += ns / 1000000000LL;
        ts.tv_nsec = ns % 1000000000LL;
        while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

qw_footprint_sampler *qw_footprint_sampler_start(int interval_ms, qw_error *err) {
    qw_footprint probe;
    if (qw_footprint_read_fast(0, &probe, err)) return NULL;
    qw_footprint_sampler *s = calloc(1, sizeof *s);
    if (!s) {
        qw_fail(err, "out of memory starting the footprint sampler");
        return NULL;
    }
    s->interval_ms = interval_ms > 0 ? interval_ms : 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->th, NULL, sampler_main, s)) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        qw_fail(err, "could not start the footprint sampler thread");
        return NULL;
    }
    return s;
}

void qw_footprint_sampler_stop(qw_footprint_sampler *s, uint64_t *peak_footprint, uint64_t *peak_rss) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    sample(s);
    if (peak_footprint) *peak_footprint = s->peak_fp;
    if (peak_rss) *peak_rss = s->peak_rss;
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
