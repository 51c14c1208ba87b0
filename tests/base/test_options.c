/* test_options.c — the knob table (options.h) read before and after
 * qw_options_init: a library caller that never loads the table gets the
 * declared defaults, the environment then overrides them, a bad value is an
 * error naming the variable, and reset goes back to the environment's value.
 *
 * The first test must run before anything calls qw_options_init, so this
 * program never calls it in main.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qwisp/options.h"

static void test_defaults_before_init(void **state) {
    (void)state;
    setenv("QWISP_CHUNK", "97", 1); /* not read: the table was never loaded from the environment */
    assert_int_equal(qw_opt_int(QW_OPT_CHUNK), 512);
    assert_int_equal(qw_opt_int(QW_OPT_CTX), 4096);
    assert_int_equal(qw_opt_int(QW_OPT_LANE_CACHE_MB), 2048);
    assert_string_equal(qw_opt_str(QW_OPT_POOL_FIT), "classes");
    assert_string_equal(qw_opt_str(QW_OPT_KV_TYPE), "f16");
    assert_null(qw_opt_str(QW_OPT_PREFILL_CACHE_MB)); /* no default: unset */
    assert_false(qw_opt_is_set(QW_OPT_CHUNK));
    unsetenv("QWISP_CHUNK");
}

static void test_env_then_flag_then_reset(void **state) {
    (void)state;
    qw_error err = {0};
    setenv("QWISP_CHUNK", "97", 1);
    setenv("QWISP_PREFILL_MLX_CACHE_MB", "512", 1); /* the seed's alias */
    assert_int_equal(qw_options_init(&err), 0);
    assert_int_equal(qw_opt_int(QW_OPT_CHUNK), 97);
    assert_true(qw_opt_is_set(QW_OPT_CHUNK));
    assert_int_equal(qw_opt_int(QW_OPT_PREFILL_CACHE_MB), 512);
    assert_int_equal(qw_opt_set(QW_OPT_CHUNK, "1024", "flag", &err), 0);
    assert_int_equal(qw_opt_int(QW_OPT_CHUNK), 1024);
    qw_opt_reset(QW_OPT_CHUNK);
    assert_int_equal(qw_opt_int(QW_OPT_CHUNK), 97);
    unsetenv("QWISP_CHUNK");
    qw_opt_reset(QW_OPT_CHUNK);
    assert_int_equal(qw_opt_int(QW_OPT_CHUNK), 512);
    assert_false(qw_opt_is_set(QW_OPT_CHUNK));
    unsetenv("QWISP_PREFILL_MLX_CACHE_MB");
}

static void test_bad_values_name_the_variable(void **state) {
    (void)state;
    qw_error err = {0};
    assert_int_equal(qw_opt_set(QW_OPT_CHUNK, "0", "flag", &err), -1);
    assert_non_null(strstr(err.msg, "QWISP_CHUNK"));
    memset(&err, 0, sizeof err);
    assert_int_equal(qw_opt_set(QW_OPT_POOL_FIT, "loose", "flag", &err), -1);
    assert_non_null(strstr(err.msg, "QWISP_POOL_FIT"));
    assert_string_equal(qw_opt_str(QW_OPT_POOL_FIT), "classes"); /* the old value kept */
    setenv("QWISP_CTX", "12abc", 1);
    memset(&err, 0, sizeof err);
    assert_int_equal(qw_options_init(&err), -1);
    assert_non_null(strstr(err.msg, "QWISP_CTX"));
    unsetenv("QWISP_CTX");
    assert_int_equal(qw_options_init(&err), 0);
    assert_int_equal(qw_opt_int(QW_OPT_CTX), 4096);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_before_init),
        cmocka_unit_test(test_env_then_flag_then_reset),
        cmocka_unit_test(test_bad_values_name_the_variable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
