/* test_exp.c — the x86 levels' exponentials (quant_impl.h exp_row, exp_f32:
 * exp_avx2.c, exp_avx512.c) against libm.
 *
 * Each result is e^(x - mx) rounded to float: it must equal the correctly
 * rounded value, (float)exp((double)d), but for the rare inputs within about
 * a double ulp of a float rounding boundary (here: none in a million), and
 * glibc's expf to within one float ulp.  The special inputs: d = 0 gives 1,
 * -inf gives 0, NaN stays NaN, below the float range gives 0 and above it
 * infinity.  The returned sum is the sum of the stored results (to double
 * rounding), and every row length 1..40 (the tails) writes exactly its n
 * elements.  exp_f32 (SwiGLU's e^-g) is the same evaluation: the same bits
 * as exp_row for the same inputs, in place or not, tails included.  Each
 * level this CPU runs is checked; the scalar level has neither (NULL: the
 * callers use expf).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/quant_impl.h"
#include "levels.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static double urand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}

static int32_t ulps_apart(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return ia > ib ? ia - ib : ib - ia; /* both >= 0 here */
}

static void check_level(const char *level) {
    if (!use_level(level)) return;
    const qw_kernel_table *kt = qw_kernels_active();
    if (!kt->exp_row) {
        printf("INFO: %s: no exp_row (expf an element)\n", level);
        return;
    }
    enum { N = 1000003 };
    float *x = malloc(N * sizeof(float)), *d = malloc(N * sizeof(float));
    assert_non_null(x), assert_non_null(d);
    const float mx = 3.25f;
    for (int i = 0; i < N; i++) {
        x[i] = (float)(mx - 110.0 * urand() * urand()); /* d in (-110, 0], dense near 0 */
        d[i] = x[i] - mx;
    }
    /* exp_f32 of the same d: the same evaluation, so the same bits */
    float *y = malloc(N * sizeof(float));
    assert_non_null(y);
    assert_non_null(kt->exp_f32);
    kt->exp_f32(d, y, N);
    const double sum = kt->exp_row(x, N, mx);
    assert_memory_equal(x, y, N * sizeof(float));
    free(y);
    double want_sum = 0.0;
    int off_correct = 0, worst = 0;
    for (int i = 0; i < N; i++) {
        const float correct = (float)exp((double)d[i]);
        if (x[i] != correct) off_correct++;
        const int32_t u = ulps_apart(x[i], expf(d[i]));
        worst = u > worst ? u : worst;
        want_sum += (double)x[i];
    }
    printf("INFO: %s: %d of %d results not the correctly rounded value; at most %d ulp from expf\n", level,
           off_correct, N, worst);
    assert_true(off_correct <= 1);
    assert_true(worst <= 1);
    assert_true(fabs(sum - want_sum) <= 1e-12 * want_sum);

    /* special inputs, in a row long enough for a full step and a tail */
    const float special[] = {0.0f, -0.0f, -INFINITY, NAN, -1000.0f, -103.0f, -104.0f, -150.0f,
                             88.0f, 89.0f, 1000.0f, INFINITY, 1e-30f, -1e-30f, -87.3f, -0.5f, -1.0f};
    enum { S = sizeof special / sizeof special[0] };
    float row[S];
    for (int i = 0; i < S; i++) row[i] = special[i];
    float row2[S];
    kt->exp_row(row, S, 0.0f);
    kt->exp_f32(special, row2, S);
    for (int i = 0; i < S; i++) {
        const float want = (float)exp((double)special[i]);
        if (isnan(want)) assert_true(isnan(row[i]) && isnan(row2[i]));
        else if (row[i] != want || row2[i] != want)
            fail_msg("%s: e^%g gave %a and %a, want %a", level, (double)special[i], (double)row[i], (double)row2[i],
                     (double)want);
    }

    /* tails: exactly n elements written, the sum theirs */
    for (int n = 1; n <= 40; n++) {
        float buf[48];
        for (int i = 0; i < 48; i++) buf[i] = i < n ? (float)(-0.37 * i) : 12345.0f;
        const double s = kt->exp_row(buf, n, 0.0f);
        double w = 0.0;
        for (int i = 0; i < n; i++) {
            assert_true(ulps_apart(buf[i], expf((float)(-0.37 * i))) <= 1);
            w += (double)buf[i];
        }
        for (int i = n; i < 48; i++) assert_true(buf[i] == 12345.0f);
        assert_true(fabs(s - w) <= 1e-13 * w);
        float in[48], out[48]; /* exp_f32 in place and not, n elements written */
        for (int i = 0; i < 48; i++) in[i] = out[i] = i < n ? (float)(-0.37 * i) : 777.0f;
        kt->exp_f32(in, out, n);
        kt->exp_f32(in, in, n);
        for (int i = 0; i < n; i++) assert_true(out[i] == buf[i] && in[i] == buf[i]);
        for (int i = n; i < 48; i++) assert_true(out[i] == 777.0f && in[i] == 777.0f);
    }
    free(x), free(d);
}

static void test_exp_rows(void **state) {
    (void)state;
    for (int i = 0; i < N_LEVELS; i++) check_level(k_levels[i]);
    restore_best();
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_exp_rows)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
