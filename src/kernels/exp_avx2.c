/* exp_avx2.c — the exponentials of attention's softmax at the AVX2 level,
 * 8 a step: x[i] = e^(x[i] - mx) over a row, and the row's sum.  The same
 * evaluation as exp_avx512.c (exp_x86.h; its header says what the bits are)
 * with four double lanes and 2^n built in the exponent field (no VSCALEFPD
 * here: the clamp keeps n within a normal double's exponents).
 */
#include "kernels/exp_x86.h"
#include "kernels/quant_impl.h"

#include <immintrin.h>
#include <math.h>

static inline __m256d exp4(__m256d x) {
    /* VMAXPD/VMINPD return the second operand when one is NaN: NaN stays */
    x = _mm256_min_pd(_mm256_set1_pd(QW_EXP_HI), _mm256_max_pd(_mm256_set1_pd(QW_EXP_LO), x));
    const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(QW_EXP_LOG2E)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(QW_EXP_LN2_HI), x);
    r = _mm256_fnmadd_pd(n, _mm256_set1_pd(QW_EXP_LN2_LO), r);
    __m256d p = _mm256_set1_pd(qw_exp_poly[0]);
    for (int k = 1; k < QW_EXP_TERMS; k++) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(qw_exp_poly[k]));
    /* 2^n: n + 1023 in the exponent field (a NaN's n converts to garbage, but p is NaN then) */
    const __m256i e = _mm256_slli_epi64(
        _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n)), _mm256_set1_epi64x(1023)), 52);
    return _mm256_mul_pd(p, _mm256_castsi256_pd(e));
}

void qw_avx2_exp_f32(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        _mm_storeu_ps(y + i, _mm256_cvtpd_ps(exp4(_mm256_cvtps_pd(_mm256_castps256_ps128(v)))));
        _mm_storeu_ps(y + i + 4, _mm256_cvtpd_ps(exp4(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)))));
    }
    if (i < n) { /* the tail through a padded copy: the same lanes' arithmetic */
        float in[8] = {0}, out[8];
        for (int64_t j = i; j < n; j++) in[j - i] = x[j];
        qw_avx2_exp_f32(in, out, 8);
        for (int64_t j = i; j < n; j++) y[j] = out[j - i];
    }
}

double qw_avx2_exp_row(float *x, int64_t n, float mx) {
    const __m256 m = _mm256_set1_ps(mx);
    __m256d acc_lo = _mm256_setzero_pd(), acc_hi = acc_lo;
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t k = n - i < 8 ? n - i : 8;
        float in[8];
        /* the tail's missing lanes read -inf: e^-inf = 0 adds nothing to the sum */
        for (int j = 0; j < 8; j++) in[j] = j < k ? x[i + j] : -INFINITY;
        const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(in), m);
        const __m128 lo = _mm256_cvtpd_ps(exp4(_mm256_cvtps_pd(_mm256_castps256_ps128(d))));
        const __m128 hi = _mm256_cvtpd_ps(exp4(_mm256_cvtps_pd(_mm256_extractf128_ps(d, 1))));
        if (k == 8) {
            _mm_storeu_ps(x + i, lo);
            _mm_storeu_ps(x + i + 4, hi);
        } else {
            float out[8];
            _mm_storeu_ps(out, lo);
            _mm_storeu_ps(out + 4, hi);
            for (int j = 0; j < k; j++) x[i + j] = out[j];
        }
        acc_lo = _mm256_add_pd(acc_lo, _mm256_cvtps_pd(lo));
        acc_hi = _mm256_add_pd(acc_hi, _mm256_cvtps_pd(hi));
    }
    const __m256d s = _mm256_add_pd(acc_lo, acc_hi);
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}
