/* stats.h — counters declared once: the row every counter list becomes, and
 * the outputs that iterate rows (STYLE.md habit 9).
 *
 * A group of counters (the pool's in pool.h, the expert source's in
 * experts.h) is one X-macro list next to its struct:
 *
 *     #define QW_POOL_STATS(X, D)                                              \
 *         X(active_bytes, CURRENT, BYTES, "active", "pool_active_bytes", "…")    \
 *         D(os_ns, TOTAL, NS, "os_ms", "pool_os_seconds_total", "…",             \
 *           s->os_alloc_ns + s->os_free_ns)
 *
 * X(field, kind, unit, key, prom, help) is a counter: a uint64_t field of the
 * struct.  D(name, kind, unit, key, prom, help, expr) is a value derived from
 * the struct `s` (no field).  From the one list come the struct's fields
 * (QW_STAT_FIELD) and a table of qw_stat rows (QW_STAT_ROW / QW_STAT_DROW in
 * the owner's .c); every output iterates the table: `--json` (qw_stats_json),
 * /metrics (serve/metrics.c), the MEMDBG lines (qw_stats_line).  Storage
 * that differs by kind comes from the list too (QW_STAT_IF_TOTAL below: the
 * expert source's atomic totals, the pool's counter reset).  Adding a
 * counter is one line in its list (plus the code that counts it); tests/base/test_stats.c fails when a row
 * is missing from an output or breaks the naming rules below.
 *
 * kind  CURRENT (a gauge), PEAK (max of a gauge since a reset), TOTAL (counts
 *       up; a Prometheus counter, its name ends in _total).
 * unit  decides the conversions: BYTES raw in JSON and /metrics, MiB on lines;
 *       NS as ms in JSON and on lines (key ends in _ms), as seconds in /metrics
 *       (name ends in _seconds_total or _seconds); COUNT and RATIO (0..1) as is.
 * key   the --json key inside the group's object, and the MEMDBG key (after
 *       the group's line prefix).
 * prom  the /metrics name without the qwisp_ prefix; HELP is the group's help
 *       prefix + help.
 * Keys and names are the outputs' contract (tests, `qwisp ab`, dashboards
 * parse them): rename one only with its readers.
 */
#ifndef QWISP_STATS_H
#define QWISP_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { QW_STAT_CURRENT, QW_STAT_PEAK, QW_STAT_TOTAL } qw_stat_kind;
typedef enum { QW_STAT_COUNT, QW_STAT_BYTES, QW_STAT_NS, QW_STAT_RATIO } qw_stat_unit;

typedef struct qw_stat {
    const char *field; /* the struct member, or the derived value's name */
    const char *key;   /* --json / MEMDBG key */
    const char *prom;  /* /metrics name, without "qwisp_" */
    const char *help;
    qw_stat_kind kind;
    qw_stat_unit unit;
    size_t offset;                         /* of the uint64_t field (derive == NULL) */
    double (*derive)(const void *stats);   /* derived rows: the value, raw unit */
} qw_stat;

typedef struct qw_stat_group {
    const char *name;        /* the --json object: "pool", "experts" */
    const char *line_prefix; /* before each MEMDBG key: "", "expert_" */
    const char *help_prefix; /* before each HELP text: "buffer pool: " */
    const qw_stat *rows;
    int n;
} qw_stat_group;

/* ---- building a group from its list ---- */
#define QW_STAT_NONE(...)
#define QW_STAT_FIELD(field, ...) uint64_t field;
#define QW_STAT_COUNT_ONE(...) +1
/* T is the struct; used as X(…) through a one-line wrapper in the owner. */
#define QW_STAT_ROW(T, field, kind, unit, key, prom, help)                                          \
    {#field, key, prom, help, QW_STAT_##kind, QW_STAT_##unit, offsetof(T, field), NULL},
#define QW_STAT_DERIVE_FN(T, name, expr)                                                            \
    static double qw_stat_derive_##name(const void *p_) {                                          \
        const T *s = p_;                                                                            \
        return (double)(expr);                                                                      \
    }
#define QW_STAT_DROW(name, kind, unit, key, prom, help)                                             \
    {#name, key, prom, help, QW_STAT_##kind, QW_STAT_##unit, 0, qw_stat_derive_##name},

/* Kind dispatch inside a list's X: QW_STAT_IF_TOTAL(kind, text) is text for
 * TOTAL rows and nothing otherwise; QW_STAT_IF_GAUGE for CURRENT and PEAK rows.
 * (Storage that differs by kind — atomics for totals — comes from the list too.) */
#define QW_STAT_IF_TOTAL(kind, ...) QW_STAT_IF_TOTAL_##kind(__VA_ARGS__)
#define QW_STAT_IF_TOTAL_TOTAL(...) __VA_ARGS__
#define QW_STAT_IF_TOTAL_CURRENT(...)
#define QW_STAT_IF_TOTAL_PEAK(...)
#define QW_STAT_IF_GAUGE(kind, ...) QW_STAT_IF_GAUGE_##kind(__VA_ARGS__)
#define QW_STAT_IF_GAUGE_TOTAL(...)
#define QW_STAT_IF_GAUGE_CURRENT(...) __VA_ARGS__
#define QW_STAT_IF_GAUGE_PEAK(...) __VA_ARGS__

/* ---- values ---- */
/* The raw value (bytes, ns, count, ratio) of row r in the struct stats. */
double qw_stat_value(const qw_stat *r, const void *stats);
/* As --json shows it: ns -> ms, the rest raw. */
double qw_stat_json_value(const qw_stat *r, const void *stats);
/* As /metrics shows it: ns -> seconds, the rest raw. */
double qw_stat_prom_value(const qw_stat *r, const void *stats);
/* "gauge" or "counter". */
const char *qw_stat_prom_type(const qw_stat *r);

/* ---- outputs ---- */
/* Adds rows [from, to) of g as numbers to a cJSON object (void * keeps cJSON
 * out of this header); to = -1: to the end. */
void qw_stats_json(const qw_stat_group *g, const void *stats, void *cjson_object, int from, int to);
/* Writes rows [from, to) as " KEY=VALUE" (prefixed keys; bytes in MiB %.1f,
 * ns in ms %.1f, counts %llu, ratios %.3f); to = -1: to the end. */
void qw_stats_line(FILE *f, const qw_stat_group *g, const void *stats, int from, int to);

#endif
