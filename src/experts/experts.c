/* experts.c — the expert source (experts.h): opening the tier the decision
 * names, the resident tier itself, dispatch to the streaming tier
 * (streaming.c), and the process-wide statistics.
 *
 * Resident.  get() returns base + e * matrix_bytes of the mmaped merged
 * tensors.  At open every tensor's pages are prefaulted — MADV_WILLNEED, then
 * one read per page so the first token does not pay the disk — and, with
 * QWISP_MLOCK=1, mlock'ed (an error naming the bytes and RLIMIT_MEMLOCK if the
 * kernel refuses).  With QWISP_WEIGHTS_COPY=1 the weights are first copied
 * into anonymous memory at the same addresses (anon_copy.c).  Prefaulting is
 * done here and not with MAP_POPULATE in the
 * GGUF reader because the streaming tier must NOT fault the expert tensors in.
 *
 * Statistics are process-wide (like the pool's): the most recently opened
 * source owns them; `qwisp run --json` and /metrics read them.
 */
#include "anon_copy.h"
#include "stream.h"

#include "qwisp/options.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct qw_experts {
    char path[256];                /* for messages */
    int32_t n_layer, n_expert;
    qw_expert_part (*parts)[3];    /* the layout's, copied: [n_layer][gate, up, down] */
    qw_tier tier;
    int32_t c;
    qw_stream *s; /* streaming only */
    int32_t ahead;  /* QWISP_LOOKAHEAD */
    int32_t near;   /* QWISP_NEAR_LOSSLESS (streaming) */
    FILE *trace;    /* QWISP_ROUTE_TRACE */
    void **locked; size_t *locked_len; size_t n_locked;
};

static qw_experts_counters g_ctr;
/* The gauges of QW_EXPERTS_STATS (set at open), beside g_ctr's totals. */
static struct {
    int tier;
    char line[192];
#define GAUGE(field, kind, ...) QW_STAT_IF_GAUGE(kind, uint64_t field;)
    QW_EXPERTS_STATS(GAUGE, QW_STAT_NONE)
#undef GAUGE
} g_info;

/* Prefaults [p, p+n) (page-aligned outward); mlocks it if lock.  -1 + err. */
static int prefault(qw_experts *x, const void *p, size_t n, bool lock, qw_error *err) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t a0 = (uintptr_t)p & ~(uintptr_t)(pg - 1), a1 = ((uintptr_t)p + n + pg - 1) & ~(uintptr_t)(pg - 1);
    madvise((void *)a0, a1 - a0, MADV_WILLNEED);
    volatile unsigned char sink = 0;
    for (uintptr_t q = a0; q < a1; q += pg) sink ^= *(const volatile unsigned char *)q;
    (void)sink;
    if (lock) {
        if (mlock((void *)a0, a1 - a0) != 0)
            return qw_fail(err, "QWISP_MLOCK=1: mlock of %zu bytes of %s failed: %s (raise RLIMIT_MEMLOCK, ulimit -l)",
                           (size_t)(a1 - a0), x->path, strerror(errno));
        x->locked = realloc(x->locked, (x->n_locked + 1) * sizeof *x->locked);
        x->locked_len = realloc(x->locked_len, (x->n_locked + 1) * sizeof *x->locked_len);
        if (!x->locked || !x->locked_len) return qw_fail(err, "out of memory");
        x->locked[x->n_locked] = (void *)a0;
        x->locked_len[x->n_locked++] = a1 - a0;
        g_info.locked_bytes += a1 - a0;
    }
    return 0;
}

static int open_resident(qw_experts *x, const qw_expert_layout *l, qw_error *err) {
    const bool lock = qw_opt_int(QW_OPT_MLOCK) == 1;
    /* the copy first: it reads every page, so the prefault below only
     * touches anonymous pages already there (and mlocks them if asked) */
    if (qw_opt_int(QW_OPT_WEIGHTS_COPY) == 1 &&
        qw_weights_copy_anon(l->weights, l->n_weights, l->path, &g_info.copied_bytes, err))
        return -1;
    for (size_t i = 0; i < l->n_weights; i++)
        if (l->weights[i].n && prefault(x, l->weights[i].p, l->weights[i].n, lock, err)) return -1;
    return 0;
}

qw_experts *qw_experts_open(const qw_expert_layout *l, const qw_tier_decision *d, qw_error *err) {
    qw_experts *x = qw_xcalloc(1, sizeof *x);
    snprintf(x->path, sizeof x->path, "%s", l->path);
    x->n_layer = l->n_layer;
    x->n_expert = l->n_expert;
    x->parts = qw_xcalloc((size_t)l->n_layer, sizeof *x->parts);
    memcpy(x->parts, l->parts, (size_t)l->n_layer * sizeof *x->parts);
    x->tier = d->tier;
    x->c = d->tier == QW_TIER_STREAMING ? d->c : l->n_expert;
    memset(&g_ctr, 0, sizeof g_ctr);
    g_info.tier = x->tier;
    g_info.c = x->c;
    g_info.n_expert = l->n_expert;
    g_info.arena_bytes = g_info.locked_bytes = g_info.copied_bytes = g_info.uring = 0;
    snprintf(g_info.line, sizeof g_info.line, "%s", d->line);
    const char *tp = qw_opt_str(QW_OPT_ROUTE_TRACE);
    if (tp && *tp && !(x->trace = fopen(tp, "a"))) {
        qw_fail(err, "QWISP_ROUTE_TRACE=%s: cannot open for appending: %s", tp, strerror(errno));
        goto fail;
    }
    if (x->tier == QW_TIER_RESIDENT) {
        if (open_resident(x, l, err)) goto fail;
        return x;
    }
    const char *io = qw_opt_str(QW_OPT_STREAM_IO) ? qw_opt_str(QW_OPT_STREAM_IO) : "auto"; /* tests skip init */
    qw_stream_config cfg = {.c = d->c,
                            .io = !strcmp(io, "uring")   ? QW_STREAM_IO_URING
                                  : !strcmp(io, "pread") ? QW_STREAM_IO_PREAD
                                                         : QW_STREAM_IO_AUTO,
                            .qd = (int)qw_opt_int(QW_OPT_STREAM_QD),
                            .lfu = !qw_opt_str(QW_OPT_EXPERT_POLICY) || strcmp(qw_opt_str(QW_OPT_EXPERT_POLICY), "lru"),
                            .readers = (int)qw_opt_int(QW_OPT_EXPERT_READERS),
                            .fault_read = qw_opt_int(QW_OPT_FAULT_READ)};
    const char *thr = qw_opt_str(QW_OPT_SSD_THROTTLE_GBS);
    if (thr && *thr) {
        uint64_t bps;
        if (qw_parse_gb("QWISP_SSD_THROTTLE_GBS", thr, &bps, err)) goto fail;
        cfg.throttle_bps = (double)bps;
    }
    x->s = qw_stream_open(l, &cfg, &g_ctr, err);
    if (!x->s) goto fail;
    g_info.arena_bytes = qw_stream_arena_bytes(x->s);
    g_info.uring = qw_stream_uses_uring(x->s);
    x->ahead = (int32_t)qw_opt_int(QW_OPT_LOOKAHEAD);
    x->near = (int32_t)qw_opt_int(QW_OPT_NEAR_LOSSLESS);
    return x;
fail:
    qw_experts_close(x);
    return NULL;
}

/* QWISP_LOG=info: the look-ahead's score per layer, at close. */
static void log_ahead_layers(const qw_experts *x) {
    if (!x->s || qw_log_get_level() < QW_LOG_INFO) return;
    for (int32_t il = 0; il < x->n_layer; il++) {
        uint64_t a[3];
        qw_stream_ahead_layer(x->s, il, a);
        if (a[0])
            qw_log(QW_LOG_INFO, "look-ahead layer %d: precision %.3f recall %.3f (%llu predicted, %llu needed)", il,
                   (double)a[1] / (double)a[0], a[2] ? (double)a[1] / (double)a[2] : 0.0,
                   (unsigned long long)a[0], (unsigned long long)a[2]);
    }
}

void qw_experts_close(qw_experts *x) {
    if (!x) return;
    log_ahead_layers(x);
    if (x->trace) fclose(x->trace);
    qw_stream_close(x->s);
    for (size_t i = 0; i < x->n_locked; i++) munlock(x->locked[i], x->locked_len[i]);
    free(x->locked);
    free(x->locked_len);
    free(x->parts);
    free(x);
}

qw_tier qw_experts_tier(const qw_experts *x) { return x->tier; }

int32_t qw_experts_max_pinned(const qw_experts *x) { return x->s ? x->c : INT32_MAX; }

void qw_experts_need(qw_experts *x, int32_t il, const int32_t *sel, int32_t n) {
    if (x->trace) {
        fprintf(x->trace, "%d", il);
        for (int32_t i = 0; i < n; i++) fprintf(x->trace, " %d", sel[i]);
        fputc('\n', x->trace);
    }
    if (x->s) qw_stream_need(x->s, il, sel, n);
}

bool qw_experts_ready(qw_experts *x, int32_t il, int32_t e) { return !x->s || qw_stream_ready(x->s, il, e); }

int32_t qw_experts_near_lossless(const qw_experts *x) { return x->s ? x->near : 0; }

int32_t qw_experts_substitute(qw_experts *x, int32_t il, int32_t *sel, int32_t k, const int32_t *ranked, int32_t r) {
    if (!x->s || x->near <= 0) return 0;
    int32_t n = 0;
    for (int32_t i = 0; i < k; i++) {
        if (qw_stream_cached(x->s, il, sel[i])) continue;
        for (int32_t j = k; j < r; j++) {
            const int32_t e = ranked[j];
            bool taken = false;
            for (int32_t u = 0; u < k; u++) taken |= sel[u] == e;
            if (!taken && qw_stream_cached(x->s, il, e)) {
                sel[i] = e;
                n++;
                break;
            }
        }
    }
    if (n) atomic_fetch_add_explicit(&g_ctr.substituted, (uint64_t)n, memory_order_relaxed);
    return n;
}

int qw_experts_get(qw_experts *x, int32_t il, int32_t e, const char **gate, const char **up,
                   const char **down, qw_error *err) {
    if (e < 0 || e >= x->n_expert) return qw_fail(err, "layer %d: expert %d out of range", il, e);
    if (!x->s) {
        const qw_expert_part *p = x->parts[il];
        *gate = (const char *)p[0].data + (size_t)e * p[0].matrix_bytes;
        *up = (const char *)p[1].data + (size_t)e * p[1].matrix_bytes;
        *down = (const char *)p[2].data + (size_t)e * p[2].matrix_bytes;
        atomic_fetch_add_explicit(&g_ctr.hits, 1, memory_order_relaxed);
        return 0;
    }
    const char *w[3];
    if (qw_stream_get(x->s, il, e, w, err)) return -1;
    *gate = w[0];
    *up = w[1];
    *down = w[2];
    return 0;
}

void qw_experts_release(qw_experts *x, int32_t il) {
    if (x->s) qw_stream_release(x->s, il);
}

void qw_experts_ahead(qw_experts *x, int32_t il, const int32_t *sel, int32_t n) {
    if (x->s) qw_stream_ahead(x->s, il, sel, n);
}

int32_t qw_experts_ahead_n(const qw_experts *x, int32_t k) {
    if (!x->s || x->ahead == 0) return 0;
    const int32_t n = x->ahead < 0 ? k : x->ahead;
    return n > x->n_expert ? x->n_expert : n;
}

qw_experts_stats qw_experts_get_stats(void) {
    qw_experts_stats s = {0};
    s.tier = g_info.tier;
#define LOAD(field, kind, ...)                                                                                         \
    QW_STAT_IF_TOTAL(kind, s.field = atomic_load(&g_ctr.field);) QW_STAT_IF_GAUGE(kind, s.field = g_info.field;)
    QW_EXPERTS_STATS(LOAD, QW_STAT_NONE)
#undef LOAD
    snprintf(s.line, sizeof s.line, "%s", g_info.line);
    return s;
}

void qw_experts_stats_json(void *cjson_object) {
    const qw_experts_stats s = qw_experts_get_stats();
    cJSON *o = cJSON_AddObjectToObject(cjson_object, "experts");
    cJSON_AddStringToObject(o, "tier", s.tier == QW_TIER_STREAMING ? "streaming" : "resident");
    qw_stats_json(&qw_experts_stat_group, &s, o, 0, -1);
    cJSON_AddStringToObject(o, "decision", s.line);
}

void qw_experts_stats_json_since(void *cjson_object, const char *key, const qw_experts_stats *since) {
    qw_experts_stats d = qw_experts_get_stats();
#define SUB(field, kind, ...) QW_STAT_IF_TOTAL(kind, d.field -= since->field;)
    QW_EXPERTS_STATS(SUB, QW_STAT_NONE)
#undef SUB
    cJSON *o = cJSON_AddObjectToObject(cjson_object, key);
    qw_stats_json(&qw_experts_stat_group, &d, o, 0, -1);
}

void qw_experts_stats_line(FILE *f) {
    const qw_experts_stats s = qw_experts_get_stats();
    qw_stats_line(f, &qw_experts_stat_group, &s, 0, -1);
}

/* ---- the counter list as a table (experts.h's QW_EXPERTS_STATS) ---- */
#define DERIVE(name, kind, unit, key, prom, help, expr) QW_STAT_DERIVE_FN(qw_experts_stats, name, expr)
QW_EXPERTS_STATS(QW_STAT_NONE, DERIVE)
#undef DERIVE
#define ROW(...) QW_STAT_ROW(qw_experts_stats, __VA_ARGS__)
#define DROW(name, kind, unit, key, prom, help, expr) QW_STAT_DROW(name, kind, unit, key, prom, help)
static const qw_stat k_rows[] = {QW_EXPERTS_STATS(ROW, DROW)};
#undef ROW
#undef DROW
const qw_stat_group qw_experts_stat_group = {"experts", "expert_", "expert source: ", k_rows,
                                             (int)(sizeof k_rows / sizeof *k_rows)};
