/* route_profile.c — a routing trace's expert counts, ranked per layer
 * (qwisp/route_profile.h).  The parser is strict: a trace is written by
 * qwisp itself, so anything else in it means the wrong file was given. */
#include "qwisp/route_profile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One number of a line at *p (after blanks), in [0, limit); advances *p. */
static int next_index(const char **p, long limit, long *out) {
    const char *s = *p;
    while (*s == ' ' || *s == '\t') s++;
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    char *end;
    const long v = strtol(s, &end, 10);
    if (errno || v >= limit || (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')) return -1;
    *p = end, *out = v;
    return 0;
}

/* qsort_r order: arg is the layer's counts */
static int by_count(const void *a, const void *b, void *arg) {
    const uint32_t *count = arg;
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (count[x] != count[y]) return count[x] > count[y] ? -1 : 1;
    return (x > y) - (x < y); /* ties: the lower index first */
}

int qw_route_profile_order(const char *path, int n_layer, int n_expert, int32_t *order, qw_error *err) {
    FILE *f = fopen(path, "r");
    if (!f) return qw_fail(err, "route profile %s: cannot open: %s", path, strerror(errno));
    const int rc = qw_route_profile_read(f, path, n_layer, n_expert, order, err);
    fclose(f);
    return rc;
}

int qw_route_profile_read(FILE *f, const char *path, int n_layer, int n_expert, int32_t *order, qw_error *err) {
    if (n_layer <= 0 || n_expert <= 0) return qw_fail(err, "route profile %s: a model without experts", path);
    uint32_t *count = qw_xcalloc((size_t)n_layer * (size_t)n_expert, sizeof *count);
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0, used = 0;
    int rc = 0;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '\n' || *p == '\r' || !*p) continue;
        long il, e;
        if (next_index(&p, n_layer, &il)) {
            rc = qw_fail(err, "route profile %s:%ld: expected a layer in [0, %d) first", path, lineno, n_layer);
            break;
        }
        while (rc == 0) {
            while (*p == ' ' || *p == '\t') p++;
            if (*p == '\n' || *p == '\r' || !*p) break;
            if (next_index(&p, n_expert, &e))
                rc = qw_fail(err, "route profile %s:%ld: expected experts in [0, %d) after the layer", path, lineno,
                             n_expert);
            else
                count[(size_t)il * n_expert + e]++;
        }
        if (rc) break;
        used++;
    }
    if (rc == 0 && ferror(f)) rc = qw_fail(err, "route profile %s: read error: %s", path, strerror(errno));
    if (rc == 0 && used == 0) rc = qw_fail(err, "route profile %s: no routing lines (QWISP_ROUTE_TRACE writes them)", path);
    free(line);
    for (int il = 0; rc == 0 && il < n_layer; il++) {
        int32_t *o = order + (size_t)il * n_expert;
        for (int e = 0; e < n_expert; e++) o[e] = e;
        qsort_r(o, (size_t)n_expert, sizeof *o, by_count, count + (size_t)il * n_expert);
    }
    free(count);
    return rc;
}
