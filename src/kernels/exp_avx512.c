/* exp_avx512.c — the exponentials of attention's softmax, 16 a step, for
 * the AVX-512 levels: x[i] = e^(x[i] - mx) over a row, and the row's sum.
 *
 * Each e^d is evaluated in double (exp_x86.h: |error| about 1 double ulp)
 * and rounded once to float: the correctly rounded value except for inputs
 * within ~1e-16 of a float rounding boundary (none in test_exp's million),
 * as the CUDA backend's cu_expf gives it.  glibc's expf, which the scalar
 * level calls, is one float ulp off that in about 5 of 10,000 inputs
 * (measured over (-110, 0]), so there the levels differ.  The sum runs in
 * two 8-lane double accumulators (reduced at the end), not in row order: its
 * last bit may differ from a sequential sum, and 1/sum rounded to float with
 * it, rarely.  The scalar loop it replaces called expf once an element (~20
 * cycles) and kept one chain of dependent double adds.
 */
#include "kernels/exp_x86.h"
#include "kernels/quant_impl.h"

#include <immintrin.h>
#include <math.h>

static inline __m512d exp8(__m512d x) {
    /* clamped (NaN kept: VMAXPD/VMINPD return the second operand when one is
     * NaN) so that 2^n stays a normal double: e^-120 rounds to float 0 and
     * e^100 to float infinity, as the unclamped values would */
    x = _mm512_min_pd(_mm512_set1_pd(QW_EXP_HI), _mm512_max_pd(_mm512_set1_pd(QW_EXP_LO), x));
    const __m512d n = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(QW_EXP_LOG2E)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(QW_EXP_LN2_HI), x);
    r = _mm512_fnmadd_pd(n, _mm512_set1_pd(QW_EXP_LN2_LO), r);
    __m512d p = _mm512_set1_pd(qw_exp_poly[0]);
    for (int k = 1; k < QW_EXP_TERMS; k++) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(qw_exp_poly[k]));
    return _mm512_scalef_pd(p, n);
}

void qw_avx512_exp_f32(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        const __m256 lo = _mm512_cvtpd_ps(exp8(_mm512_cvtps_pd(_mm512_castps512_ps256(v))));
        const __m256 hi = _mm512_cvtpd_ps(exp8(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))));
        _mm512_mask_storeu_ps(y + i, k, _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1)));
    }
}

double qw_avx512_exp_row(float *x, int64_t n, float mx) {
    const __m512 m = _mm512_set1_ps(mx);
    __m512d acc_lo = _mm512_setzero_pd(), acc_hi = acc_lo;
    for (int64_t i = 0; i < n; i += 16) {
        /* the tail's missing lanes read -inf: e^-inf = 0 adds nothing to the sum */
        const __mmask16 k = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 d = _mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, x + i), m);
        const __m256 lo = _mm512_cvtpd_ps(exp8(_mm512_cvtps_pd(_mm512_castps512_ps256(d))));
        const __m256 hi = _mm512_cvtpd_ps(exp8(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)))));
        _mm512_mask_storeu_ps(x + i, k, _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1)));
        acc_lo = _mm512_add_pd(acc_lo, _mm512_cvtps_pd(lo));
        acc_hi = _mm512_add_pd(acc_hi, _mm512_cvtps_pd(hi));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(acc_lo, acc_hi));
}
