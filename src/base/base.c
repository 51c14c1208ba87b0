/* base.c — qw_error formatting, stderr logging, the monotonic clock, checked
 * small allocations and the FNV-1a hash.  See include/qwisp/base.h. */
#include "qwisp/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

int qw_vfail(qw_error *err, const char *fmt, va_list ap) {
    if (err) vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    return -1;
}

int qw_fail(qw_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    qw_vfail(err, fmt, ap);
    va_end(ap);
    return -1;
}

static qw_log_level g_level = (qw_log_level)-1;

static qw_log_level level_from_env(void) {
    /* QWISP_LOG is read here rather than via the options table because logging
     * must work before options are parsed (and inside the options parser). */
    const char *s = getenv("QWISP_LOG");
    if (!s) return QW_LOG_WARN;
    if (!strcmp(s, "error")) return QW_LOG_ERROR;
    if (!strcmp(s, "info")) return QW_LOG_INFO;
    if (!strcmp(s, "debug")) return QW_LOG_DEBUG;
    return QW_LOG_WARN;
}

void qw_log_set_level(qw_log_level lvl) { g_level = lvl; }

qw_log_level qw_log_get_level(void) {
    if ((int)g_level < 0) g_level = level_from_env();
    return g_level;
}

void qw_log(qw_log_level lvl, const char *fmt, ...) {
    if (lvl > qw_log_get_level()) return;
    static const char *names[] = {"error", "warn", "info", "debug"};
    fprintf(stderr, "qwisp[%s]: ", names[lvl]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void qw_assert_fail(const char *file, int line, const char *expr) {
    fprintf(stderr, "qwisp: internal error at %s:%d: assertion '%s' failed\n", file, line, expr);
    abort();
}

double qw_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void oom(size_t n) {
    fprintf(stderr, "qwisp: out of memory allocating %zu bytes\n", n);
    abort();
}

void *qw_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *qw_xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) oom(n * sz);
    return p;
}

void *qw_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *qw_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = qw_xmalloc(n);
    memcpy(p, s, n);
    return p;
}

char *qw_read_file(const char *path, size_t max_bytes, size_t *len, qw_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        qw_fail(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = (n + 65536 + 1) * 2;
            char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                qw_fail(err, "%s: out of memory reading %zu bytes", path, n);
                return NULL;
            }
            buf = p;
        }
        size_t r = fread(buf + n, 1, 65536, f);
        n += r;
        if (max_bytes && n > max_bytes) {
            free(buf);
            fclose(f);
            qw_fail(err, "%s: larger than the %zu bytes allowed here", path, max_bytes);
            return NULL;
        }
        if (r < 65536) break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        qw_fail(err, "%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

FILE *qw_atomic_open(qw_atomic_file *w, const char *path, qw_error *err) {
    memset(w, 0, sizeof *w);
    if (strlen(path) >= sizeof w->path) {
        qw_fail(err, "%.64s…: path too long", path);
        return NULL;
    }
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%ld", path, (long)getpid());
    w->f = fopen(w->tmp, "w");
    if (!w->f) qw_fail(err, "%s: cannot create: %s", w->tmp, strerror(errno));
    return w->f;
}

int qw_atomic_commit(qw_atomic_file *w, qw_error *err) {
    if (!w->f) return qw_fail(err, "%s: not open", w->path);
    bool bad = fflush(w->f) != 0 || ferror(w->f);
    int saved = errno;
    bad |= fclose(w->f) != 0;
    w->f = NULL;
    if (bad) {
        unlink(w->tmp);
        return qw_fail(err, "%s: write failed: %s", w->path, strerror(saved ? saved : errno));
    }
    if (rename(w->tmp, w->path) != 0) {
        saved = errno;
        unlink(w->tmp);
        return qw_fail(err, "%s: cannot rename into place: %s", w->path, strerror(saved));
    }
    return 0;
}

void qw_atomic_abort(qw_atomic_file *w) {
    if (w->f) fclose(w->f);
    w->f = NULL;
    if (w->tmp[0]) unlink(w->tmp);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
void qw_sort_doubles(double *v, size_t n) { qsort(v, n, sizeof *v, cmp_double); }
double qw_median_sorted(const double *v, size_t n) {
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

uint64_t qw_hash64(const void *data, size_t n, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ULL ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

int qw_parse_gb(const char *what, const char *text, uint64_t *bytes, qw_error *err) {
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    while (*end == ' ') end++;
    if (end != text && (*end == 'g' || *end == 'G')) end++;
    if (end != text && (*end == 'b' || *end == 'B')) end++;
    if (end == text || *end || errno || !isfinite(v) || v <= 0 || v > 1e6)
        return qw_fail(err, "%s='%s': expected a positive number of GB (e.g. 16 or 0.5)", what, text);
    *bytes = (uint64_t)(v * 1e9);
    return 0;
}

int qw_mkdir_p(const char *dir, bool parent_only, qw_error *err) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return qw_fail(err, "path too long: %.64s...", dir);
    if (parent_only) {
        char *slash = strrchr(buf, '/');
        if (!slash || slash == buf) return 0; /* the current folder or / */
        *slash = 0;
    }
    for (char *p = buf + 1;; p++) {
        const bool end = *p == 0;
        if (!end && *p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) return qw_fail(err, "mkdir %s: %s", buf, strerror(errno));
        if (end) return 0;
        *p = '/';
    }
}
