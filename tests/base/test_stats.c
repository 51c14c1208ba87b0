/* test_stats.c — the counter lists (pool.h's QW_POOL_STATS, experts.h's
 * QW_EXPERTS_STATS) reach every output: each row of each list must appear in
 * `qwisp run --json` (qw_run_memory_json, the function run calls), in
 * /metrics (qw_metrics_render) with its HELP and TYPE lines, and as a key of a
 * MEMDBG line (qw_memdbg_report as the serialize path wires it in
 * qw_run_memory_begin).  It also holds the lists to stats.h's naming rules
 * (counters end in _total, ns are _ms / _seconds, unique keys and names) and
 * checks that the struct has exactly the list's fields.  A counter added to a
 * list but dropped by an output fails here by name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/experts.h"
#include "qwisp/options.h"
#include "qwisp/pool.h"
#include "qwisp/run_memory.h"
#include "qwisp/stats.h"
#include "serve/metrics.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const qw_stat_group *groups[] = {&qw_pool_stat_group, &qw_experts_stat_group};
#define N_GROUPS 2

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

static int failures;
static void miss(const char *where, const qw_stat_group *g, const qw_stat *r) {
    print_message("FAIL: %s row %s (key \"%s\", /metrics qwisp_%s) missing from %s\n", g->name, r->field,
                  r->key, r->prom, where);
    failures++;
}

static void test_struct_matches_list(void **state) {
    (void)state;
    /* every X row is a uint64_t field, every D row a table row without one */
    const int n_pool = 0 QW_POOL_STATS(QW_STAT_COUNT_ONE, QW_STAT_COUNT_ONE);
    const int x_pool = 0 QW_POOL_STATS(QW_STAT_COUNT_ONE, QW_STAT_NONE);
    assert_int_equal(qw_pool_stat_group.n, n_pool);
    assert_int_equal(sizeof(qw_pool_stats), (size_t)x_pool * sizeof(uint64_t));
    const int n_x = 0 QW_EXPERTS_STATS(QW_STAT_COUNT_ONE, QW_STAT_COUNT_ONE);
    assert_int_equal(qw_experts_stat_group.n, n_x);
}

static void test_naming_rules(void **state) {
    (void)state;
    for (int gi = 0; gi < N_GROUPS; gi++) {
        const qw_stat_group *g = groups[gi];
        for (int i = 0; i < g->n; i++) {
            const qw_stat *r = &g->rows[i];
            assert_true(r->help && r->help[0]);
            if (r->kind == QW_STAT_TOTAL && !ends_with(r->prom, "_total")) fail_msg("%s: counter without _total", r->prom);
            if (r->kind != QW_STAT_TOTAL && ends_with(r->prom, "_total")) fail_msg("%s: gauge named _total", r->prom);
            if (r->unit == QW_STAT_NS && !(ends_with(r->key, "_ms") && strstr(r->prom, "_seconds")))
                fail_msg("%s/%s: ns row must be KEY_ms and NAME_seconds", r->key, r->prom);
            if (r->unit == QW_STAT_BYTES && !strstr(r->prom, "bytes")) fail_msg("%s: bytes row without 'bytes'", r->prom);
            for (int j = 0; j < i; j++)
                if (!strcmp(g->rows[j].key, r->key)) fail_msg("%s: key \"%s\" twice", g->name, r->key);
            for (int gj = 0; gj <= gi; gj++)
                for (int j = 0; j < (gj == gi ? i : groups[gj]->n); j++)
                    if (!strcmp(groups[gj]->rows[j].prom, r->prom)) fail_msg("qwisp_%s twice", r->prom);
        }
    }
}

static void test_run_json_carries_every_row(void **state) {
    (void)state;
    qw_run_memory rm = {0};
    cJSON *o = cJSON_CreateObject();
    qw_run_memory_json(&rm, o);
    const char *obj[N_GROUPS] = {"pool", "experts"};
    failures = 0;
    for (int gi = 0; gi < N_GROUPS; gi++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, obj[gi]);
        assert_true(cJSON_IsObject(x));
        for (int i = 0; i < groups[gi]->n; i++)
            if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(x, groups[gi]->rows[i].key)))
                miss("run --json", groups[gi], &groups[gi]->rows[i]);
    }
    /* the non-counter members kept beside the lists */
    assert_true(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "pool"), "fit")));
    assert_true(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "experts"), "tier")));
    cJSON_Delete(o);
    assert_int_equal(failures, 0);
}

static void test_metrics_carry_every_row(void **state) {
    (void)state;
    qw_metrics m;
    qw_metrics_init(&m);
    qw_strbuf b = {0};
    qw_metrics_render(&m, NULL, "serialize", true, &b);
    qw_strbuf_add(&b, "", 1); /* NUL */
    failures = 0;
    char want[256];
    for (int gi = 0; gi < N_GROUPS; gi++)
        for (int i = 0; i < groups[gi]->n; i++) {
            const qw_stat *r = &groups[gi]->rows[i];
            snprintf(want, sizeof want, "# HELP qwisp_%s ", r->prom);
            bool ok = strstr(b.p, want) != NULL;
            snprintf(want, sizeof want, "# TYPE qwisp_%s %s\n", r->prom, qw_stat_prom_type(r));
            ok = ok && strstr(b.p, want);
            snprintf(want, sizeof want, "\nqwisp_%s ", r->prom);
            ok = ok && strstr(b.p, want);
            if (!ok) miss("/metrics", groups[gi], r);
        }
    qw_strbuf_free(&b);
    assert_int_equal(failures, 0);
}

/* " KEY=" occurs exactly once in the line. */
static int count_key(const char *line, const char *prefix, const char *key) {
    char want[128];
    snprintf(want, sizeof want, " %s%s=", prefix, key);
    int n = 0;
    for (const char *p = line; (p = strstr(p, want)); p++) n++;
    return n;
}

static void test_memdbg_line_carries_every_row(void **state) {
    (void)state;
    qw_error err = {0};
    qw_run_memory rm;
    assert_int_equal(qw_run_memory_begin(&rm, NULL, false, &err), 0); /* mode 0: no ctx needed */
    char *line = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&line, &len);
    assert_non_null(f);
    rm.dbg.out = f; /* the serialize path's reporter, wired as run wires it, into memory */
    qw_memdbg_report(&rm.dbg, 5, 10, 0);
    fclose(f);
    failures = 0;
    for (int gi = 0; gi < N_GROUPS; gi++)
        for (int i = 0; i < groups[gi]->n; i++)
            if (count_key(line, groups[gi]->line_prefix, groups[gi]->rows[i].key) != 1)
                miss("the MEMDBG line", groups[gi], &groups[gi]->rows[i]);
    /* the historical head that tests/memory/t_prefill_bound.sh reads */
    double a, c, p, fp;
    assert_int_equal(sscanf(line, "[prefill-memdbg] pos=5/10 active=%lf cache=%lf peak=%lf footprint=%lf", &a, &c, &p, &fp), 4);
    assert_non_null(strstr(line, " hits="));
    free(line);
    assert_int_equal(failures, 0);
}

int main(void) {
    qw_error err = {0};
    if (qw_options_init(&err)) {
        fprintf(stderr, "options: %s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_struct_matches_list),
        cmocka_unit_test(test_naming_rules),
        cmocka_unit_test(test_run_json_carries_every_row),
        cmocka_unit_test(test_metrics_carry_every_row),
        cmocka_unit_test(test_memdbg_line_carries_every_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
