/* test_delta.c — the gated delta rule step (kernels/delta.c): the form of
 * every SIMD level this CPU runs (AVX2, AVX-512) against the scalar reference
 * over several state sizes (multiples of 32 / 64 take the vector paths,
 * others the tails too), and against the rule written out in double
 * precision. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/ops.h"
#include "qwisp/quant.h"

#include <stdio.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void check_size(int64_t S) {
    uint64_t seed = 1234 + (uint64_t)S;
    float *M1 = malloc(sizeof(float) * S * S), *M2 = malloc(sizeof(float) * S * S);
    double *Md = malloc(sizeof(double) * S * S);
    float *q = malloc(sizeof(float) * S), *k = malloc(sizeof(float) * S), *v = malloc(sizeof(float) * S);
    float *o1 = malloc(sizeof(float) * S), *o2 = malloc(sizeof(float) * S);
    for (int64_t i = 0; i < S * S; i++) Md[i] = M1[i] = M2[i] = 0.3f * frand(&seed);
    for (int step = 0; step < 5; step++) {
        for (int64_t i = 0; i < S; i++) q[i] = frand(&seed), k[i] = frand(&seed) / sqrtf((float)S), v[i] = frand(&seed);
        const float decay = 0.5f + 0.4f * fabsf(frand(&seed)), beta = 0.5f + 0.5f * fabsf(frand(&seed));
        const float scale = 1.0f / sqrtf((float)S);
        qw_delta_step(M1, q, k, v, decay, beta, scale, S, o1);
        qw_delta_step_scalar(M2, q, k, v, decay, beta, scale, S, o2);
        for (int64_t j = 0; j < S; j++) {
            double *m = Md + j * S, s = 0, a = 0;
            for (int64_t i = 0; i < S; i++) m[i] *= decay;
            for (int64_t i = 0; i < S; i++) s += m[i] * k[i];
            const double d = (v[j] - s) * beta;
            for (int64_t i = 0; i < S; i++) m[i] += k[i] * d;
            for (int64_t i = 0; i < S; i++) a += m[i] * q[i];
            const double ref = a * scale;
            if (fabs(o1[j] - ref) > 1e-4 || fabs(o2[j] - ref) > 1e-4)
                fail_msg("S=%ld step %d o[%ld]: dispatched %g scalar %g double %g", (long)S, step, (long)j, o1[j],
                         o2[j], ref);
        }
    }
    for (int64_t i = 0; i < S * S; i++)
        if (fabsf(M1[i] - M2[i]) > 1e-5f) fail_msg("S=%ld state[%ld]: %g vs %g", (long)S, (long)i, M1[i], M2[i]);
    free(M1), free(M2), free(Md), free(q), free(k), free(v), free(o1), free(o2);
}

static void test_sizes(void **state) {
    (void)state;
    const int64_t sizes[] = {1, 16, 32, 40, 64, 100, 128, 256};
    const char *levels[] = {"avx512", "avx2"}; /* from the best down: qw_simd_force only lowers */
    int ran = 0;
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        if (qw_simd_force(levels[l]) || strcmp(qw_simd_level(), levels[l]) != 0) {
            printf("SKIP: the delta step at level %s: this CPU runs %s\n", levels[l], qw_simd_level());
            continue;
        }
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) check_size(sizes[i]);
        ran++;
    }
    assert_true(ran > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_sizes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
