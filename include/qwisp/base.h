/* base.h — errors, logging and small helpers shared by every layer.
 *
 * Error convention (SQLite/gguf-tools style): library functions never exit and
 * never print on failure.  They return NULL or -1 and fill a caller-owned
 * qw_error with one line that names what was wrong and where (file, field,
 * offset, value seen).  Only cli/ turns an error into a message + exit code.
 *
 *     qw_error err = {0};
 *     qw_gguf *g = qw_gguf_open(path, &err);
 *     if (!g) { fprintf(stderr, "qwisp: %s\n", err.msg); return 1; }
 */
#ifndef QWISP_BASE_H
#define QWISP_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define QW_ERROR_MAX 512

typedef struct qw_error {
    char msg[QW_ERROR_MAX]; /* NUL-terminated; empty when no error */
} qw_error;

/* Formats into err (if non-NULL) and returns -1, so `return qw_fail(err, …)` reads well. */
int qw_fail(qw_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int qw_vfail(qw_error *err, const char *fmt, va_list ap);

/* Logging to stderr; level from QWISP_LOG (error|warn|info|debug), default warn. */
typedef enum { QW_LOG_ERROR = 0, QW_LOG_WARN = 1, QW_LOG_INFO = 2, QW_LOG_DEBUG = 3 } qw_log_level;
void qw_log_set_level(qw_log_level lvl);
qw_log_level qw_log_get_level(void);
void qw_log(qw_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Broken invariants (never bad input): abort with file:line.  Always on. */
#define QW_ASSERT(cond)                                                              \
    do {                                                                             \
        if (!(cond)) qw_assert_fail(__FILE__, __LINE__, #cond);                      \
    } while (0)
void qw_assert_fail(const char *file, int line, const char *expr) __attribute__((noreturn));

/* Monotonic clock in seconds. */
double qw_time_s(void);

/* Allocation that aborts on OOM — only for small, bounded bookkeeping
 * (tables, names).  Large dynamic buffers go through memory/ (the pool). */
void *qw_xmalloc(size_t n);
void *qw_xcalloc(size_t n, size_t sz);
void *qw_xrealloc(void *p, size_t n);
char *qw_xstrdup(const char *s);

/* Reads a whole file into a malloc'd NUL-terminated buffer (caller frees).
 * Files larger than max_bytes (0 = no limit) are refused.  NULL + err naming
 * the path and the reason (open error, read error, too large, OOM). */
char *qw_read_file(const char *path, size_t max_bytes, size_t *len, qw_error *err);

/* Writing a file so that a failure never leaves a half-written one at `path`:
 * qw_atomic_open creates "<path>.tmp.<pid>" (its name kept in *w);
 * qw_atomic_commit checks every write succeeded, closes and renames it over
 * path, or removes it and fails (-1 + err naming the path).  qw_atomic_abort
 * drops it.  Usage: FILE *f = qw_atomic_open(&w, path, err); ...fprintf(f…);
 * if (qw_atomic_commit(&w, err)) ... */
typedef struct qw_atomic_file {
    FILE *f;
    char path[4096], tmp[4160];
} qw_atomic_file;
FILE *qw_atomic_open(qw_atomic_file *w, const char *path, qw_error *err);
int qw_atomic_commit(qw_atomic_file *w, qw_error *err);
void qw_atomic_abort(qw_atomic_file *w);

/* mkdir -p: dir and every folder above it (0755); existing ones are fine.
 * With parent_only, the last path component is a file name and is left out.
 * -1 + err naming the folder that could not be made. */
int qw_mkdir_p(const char *dir, bool parent_only, qw_error *err);

/* Parses an amount of GB ("16", "0.25", "2G", "2gb"; decimal GB) into bytes:
 * QWISP_DEVICE_RAM, QWISP_SSD_THROTTLE_GBS, `qwisp simulate NGB`.  0, or -1 +
 * err naming `what` and the text. */
int qw_parse_gb(const char *what, const char *text, uint64_t *bytes, qw_error *err);

/* Scalar conversions of the 16-bit float formats (base/half.c), bit-exact
 * with ggml (round to nearest even, NaN kept and quieted). */
float qw_fp16_to_f32(uint16_t h);
uint16_t qw_f32_to_fp16(float f);
float qw_bf16_to_f32(uint16_t h);
uint16_t qw_f32_to_bf16(float f);

/* v[0..n) sorted ascending (qsort; NaNs compare equal to everything), and
 * the median of values already sorted (the mean of the middle two for even n). */
void qw_sort_doubles(double *v, size_t n);
double qw_median_sorted(const double *v, size_t n);

/* FNV-1a 64-bit, for logits hashes and summary lines. */
uint64_t qw_hash64(const void *data, size_t n, uint64_t seed);

#endif
