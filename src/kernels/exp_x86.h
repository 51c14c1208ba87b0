/* exp_x86.h — the constants of the double-precision e^x the x86 levels'
 * softmax exponentials use (exp_avx2.c, exp_avx512.c): x = n ln2 + r with
 * |r| <= ln2/2 (ln2 split in two, Cody and Waite, so n ln2 is exact enough),
 * e^r by its Taylor polynomial to r^13 (the first term left out is below
 * 5e-18 relative), times 2^n.  One table, so both levels give the same bits.
 */
#ifndef QWISP_KERNELS_EXP_X86_H
#define QWISP_KERNELS_EXP_X86_H

/* inputs clamped to [LO, HI]: e^LO is below half the smallest float
 * subnormal and e^HI above the largest float, so the float results are those
 * of the unclamped inputs, and 2^n stays a normal double */
#define QW_EXP_LO (-120.0)
#define QW_EXP_HI 100.0
#define QW_EXP_LOG2E 1.4426950408889634
#define QW_EXP_LN2_HI 0.6931471805599453     /* ln 2 rounded to double */
#define QW_EXP_LN2_LO 2.3190468138462996e-17 /* ln 2 - LN2_HI */
enum { QW_EXP_TERMS = 14 };
/* 1/13!, 1/12!, ..., 1/1!, 1/0!: Horner's order */
static const double qw_exp_poly[QW_EXP_TERMS] = {
    1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
    1.0 / 40320.0,      1.0 / 5040.0,      1.0 / 720.0,      1.0 / 120.0,     1.0 / 24.0,
    1.0 / 6.0,          0.5,               1.0,              1.0,
};

#endif
