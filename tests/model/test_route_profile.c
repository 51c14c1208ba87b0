/* test_route_profile.c — a routing trace ranked into each layer's most used
 * experts (qwisp/route_profile.h, QWISP_DEVICE_FIXED): counts over every
 * line of a layer, ties by the lower index, empty lines skipped; and a
 * missing or empty file, a malformed line, a layer or expert out of range
 * each refused with the file and line named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/route_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_path[64];

static const char *write_trace(const char *text) {
    snprintf(g_path, sizeof g_path, "/tmp/qwisp-route-profile-%d.txt", (int)getpid());
    FILE *f = fopen(g_path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return g_path;
}

static void test_ranks_by_count_then_index(void **state) {
    (void)state;
    /* layer 0: 3 three times, 1 twice, 5 twice; layer 1: a prefill line and two decode lines */
    const char *p = write_trace("0 3 1 5\n1 0 1 2 3 4 5\n\n0 3 5\n1 2 2\n0 3 1\n1 4\n");
    int32_t order[2 * 6];
    qw_error err = {{0}};
    assert_int_equal(qw_route_profile_order(p, 2, 6, order, &err), 0);
    const int32_t want0[6] = {3, 1, 5, 0, 2, 4}, want1[6] = {2, 4, 0, 1, 3, 5};
    assert_memory_equal(order, want0, sizeof want0);
    assert_memory_equal(order + 6, want1, sizeof want1);
    /* a layer never named keeps index order */
    int32_t o3[3 * 6];
    assert_int_equal(qw_route_profile_order(p, 3, 6, o3, &err), 0);
    for (int e = 0; e < 6; e++) assert_int_equal(o3[12 + e], e);
    unlink(p);
}

static void refused(const char *text, int n_layer, int n_expert, const char *want) {
    const char *p = write_trace(text);
    int32_t order[64];
    qw_error err = {{0}};
    assert_int_equal(qw_route_profile_order(p, n_layer, n_expert, order, &err), -1);
    if (!strstr(err.msg, want)) fail_msg("'%s': got '%s', want '%s'", text, err.msg, want);
    unlink(p);
}

static void test_bad_traces_refused(void **state) {
    (void)state;
    refused("", 2, 4, "no routing lines");
    refused("\n\n", 2, 4, "no routing lines");
    refused("0 1 2\n2 1\n", 2, 4, ":2: expected a layer in [0, 2)");
    refused("0 1 4\n", 2, 4, ":1: expected experts in [0, 4)");
    refused("0 1 -1\n", 2, 4, ":1: expected experts");
    refused("x 1\n", 2, 4, ":1: expected a layer");
    refused("0 1x\n", 2, 4, ":1: expected experts");
    refused("1 2 99999999999999999999\n", 2, 4, ":1: expected experts");
    int32_t order[8];
    qw_error err = {{0}};
    assert_int_equal(qw_route_profile_order("/nonexistent/trace.txt", 2, 4, order, &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/trace.txt: cannot open"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks_by_count_then_index),
        cmocka_unit_test(test_bad_traces_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
