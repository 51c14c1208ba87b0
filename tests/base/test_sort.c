/* test_sort.c — base.h's qw_sort_doubles and qw_median_sorted, the one sort
 * and median that `qwisp bench`'s summaries, the decode-loop trial and the
 * A/B statistics share: ascending order with repeats and negatives, the
 * middle value for odd counts and the mean of the middle two for even ones.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/base.h"

static void test_sort_ascending(void **state) {
    (void)state;
    double v[] = {3.5, -1.0, 2.0, 3.5, 0.0, -7.25, 10.0};
    const double want[] = {-7.25, -1.0, 0.0, 2.0, 3.5, 3.5, 10.0};
    qw_sort_doubles(v, 7);
    for (int i = 0; i < 7; i++) assert_true(v[i] == want[i]);
    qw_sort_doubles(v, 0); /* nothing to sort: no access */
}

static void test_median(void **state) {
    (void)state;
    const double odd[] = {1.0, 2.0, 9.0};
    const double even[] = {1.0, 2.0, 4.0, 9.0};
    const double one[] = {5.5};
    assert_true(qw_median_sorted(odd, 3) == 2.0);
    assert_true(qw_median_sorted(even, 4) == 3.0);
    assert_true(qw_median_sorted(one, 1) == 5.5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sort_ascending),
        cmocka_unit_test(test_median),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
