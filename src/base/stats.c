/* stats.c — the outputs of stats.h over a group's table of rows: the value
 * conversions (one place decides that ns are ms in JSON and seconds in
 * /metrics) and the --json / MEMDBG writers.  /metrics is written by
 * serve/metrics.c from the same rows (it owns the Prometheus text helpers).
 */
#include "qwisp/stats.h"

#include <cjson/cJSON.h>
#include <string.h>

double qw_stat_value(const qw_stat *r, const void *stats) {
    if (r->derive) return r->derive(stats);
    uint64_t v;
    memcpy(&v, (const char *)stats + r->offset, sizeof v);
    return (double)v;
}

double qw_stat_json_value(const qw_stat *r, const void *stats) {
    double v = qw_stat_value(r, stats);
    return r->unit == QW_STAT_NS ? v / 1e6 : v;
}

double qw_stat_prom_value(const qw_stat *r, const void *stats) {
    double v = qw_stat_value(r, stats);
    return r->unit == QW_STAT_NS ? v / 1e9 : v;
}

const char *qw_stat_prom_type(const qw_stat *r) { return r->kind == QW_STAT_TOTAL ? "counter" : "gauge"; }

static int end_of(const qw_stat_group *g, int to) { return to < 0 || to > g->n ? g->n : to; }

void qw_stats_json(const qw_stat_group *g, const void *stats, void *cjson_object, int from, int to) {
    for (int i = from; i < end_of(g, to); i++)
        cJSON_AddNumberToObject(cjson_object, g->rows[i].key, qw_stat_json_value(&g->rows[i], stats));
}

void qw_stats_line(FILE *f, const qw_stat_group *g, const void *stats, int from, int to) {
    for (int i = from; i < end_of(g, to); i++) {
        const qw_stat *r = &g->rows[i];
        const double v = qw_stat_value(r, stats);
        fprintf(f, " %s%s=", g->line_prefix, r->key);
        switch (r->unit) {
        case QW_STAT_BYTES: fprintf(f, "%.1f", v / 1048576.0); break;
        case QW_STAT_NS: fprintf(f, "%.1f", v / 1e6); break;
        case QW_STAT_RATIO: fprintf(f, "%.3f", v); break;
        case QW_STAT_COUNT: fprintf(f, "%llu", (unsigned long long)v); break;
        }
    }
}
