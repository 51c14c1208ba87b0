/* quant_ref.c — the scalar reference of every conversion, quantizer and dot.
 *
 * This file is the oracle the SIMD variants are tested against, and the code
 * that runs when the CPU has no AVX2.  It is written for obviousness, not
 * speed, and compiled for baseline x86-64 (no F16C, no FMA), so every float
 * operation here is a plain IEEE single operation in program order
 * (-std=c11 keeps GCC from contracting a*b+c into an FMA).
 *
 * Semantics, fixed by what llama.cpp's CPU backend computes on x86 (facts read
 * from its source, not its code):
 *
 *  - fp16 <-> f32: IEEE binary16, round to nearest even, exactly what the F16C
 *    instructions do (ggml-cpu uses them on x86).  A NaN keeps its sign and
 *    the top 10 payload bits and gets its quiet bit set, as VCVTPS2PH /
 *    VCVTPH2PS do.  (ggml's portable software path maps every NaN to 0x7E00
 *    instead; only NaN payloads differ, which no model relies on.)
 *  - f32 -> bf16: round to nearest even on the bit pattern; a NaN is
 *    truncated and forced quiet (bit 6 of the bf16).  Subnormals are kept,
 *    not flushed — ggml's CPU from_float for BF16 is this scalar rule, not
 *    the VCVTNEPS2BF16 instruction (which flushes subnormals).
 *  - Q8_0 activations: per block amax = max |x|, d = amax / 127 (f32
 *    division), stored as fp16(d) rounded to nearest even; the multiplier is
 *    id = 127 / amax (NOT 1/d; the two differ in the last bit), 0 when
 *    amax == 0; q = round(x * id) with round-half-to-EVEN.  ggml's x86 path
 *    (quantize_row_q8_0 under __AVX2__) rounds with _mm256_round_ps(…,
 *    _MM_ROUND_NEAREST), i.e. half-to-even, while its portable reference
 *    (quantize_row_q8_0_ref) uses roundf (half away from zero) and 1/d.  We
 *    match the x86 SIMD path because that is what llama.cpp runs here; the
 *    two disagree only when x*id lands exactly on k+0.5.
 *  - Q4_0 quantizer: ggml's reference: m = the element of largest |x| (first
 *    one wins on ties) with its sign, d = m / -8, id = 1/d (0 if d == 0),
 *    q = min(15, (int8_t)(x*id + 8.5f)) — truncation, not rounding.
 *  - Q8_0 / Q4_0 dots: exact int32 dot per block, times (d_w * d_x) in f32,
 *    summed in f32.  Q4_0 elements are (nibble - 8).
 *  - Float dots: products in f32 (exact for fp16/bf16 inputs), summed in
 *    double here so the oracle is as accurate as cheaply possible.
 *
 * NaN/Inf inputs to the quantizers give unspecified (but memory-safe) bytes.
 */
#include <math.h>
#include <string.h>

#include "kernels/quant_impl.h"

/* (the scalar f16 / bf16 conversions these rows use: base/half.c) */

/* ---- row conversions --------------------------------------------------- */

void qw_ref_f32_to_fp16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = qw_f32_to_fp16(x[i]);
}

void qw_ref_fp16_to_f32(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = qw_fp16_to_f32(x[i]);
}

void qw_ref_f32_to_bf16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = qw_f32_to_bf16(x[i]);
}

void qw_ref_bf16_to_f32(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = qw_bf16_to_f32(x[i]);
}

/* ---- quantizers -------------------------------------------------------- */

/* What CVTPS2DQ + saturating packs do to a rounded value: out-of-int32 and
 * NaN give the "integer indefinite" INT32_MIN, which saturates to -128; the
 * rest saturates to [-128, 127].  Only reachable when id overflows to inf
 * (amax < ~3.7e-37: then x*id is +-inf, or NaN for x == 0), where ggml's x86
 * path produces exactly these bytes. */
static inline int8_t q8_narrow(float r) {
    if (!(fabsf(r) < 2147483648.0f)) return INT8_MIN;
    if (r > 127.0f) return 127;
    if (r < -128.0f) return INT8_MIN;
    return (int8_t)r;
}

void qw_ref_quantize_q8_0(const float *x, void *dst, int64_t n) {
    qw_block_q8_0 *y = dst;
    const int64_t nb = n / QW_QK8_0;
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * QW_QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QW_QK8_0; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = qw_f32_to_fp16(d);
        for (int j = 0; j < QW_QK8_0; j++) {
            /* nearbyintf rounds half to even in the default rounding mode,
             * like the x86 path's _mm256_round_ps(…, _MM_ROUND_NEAREST). */
            const float r = nearbyintf(xb[j] * id);
            y[b].qs[j] = q8_narrow(r);
        }
    }
}

void qw_ref_quantize_q4_0(const float *x, void *dst, int64_t n) {
    qw_block_q4_0 *y = dst;
    const int64_t nb = n / QW_QK4_0;
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * QW_QK4_0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QW_QK4_0; j++) {
            if (amax < fabsf(xb[j])) { /* strict: the first maximum wins */
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = qw_f32_to_fp16(d);
        for (int j = 0; j < QW_QK4_0 / 2; j++) {
            const float x0 = xb[j] * id;
            const float x1 = xb[j + QW_QK4_0 / 2] * id;
            /* x*id lies in [-8, 8] so +8.5 is in [0.5, 16.5]: the int8
             * conversion truncates and 16 is clamped to 15. */
            int q0 = (int8_t)(x0 + 8.5f);
            int q1 = (int8_t)(x1 + 8.5f);
            if (q0 > 15) q0 = 15;
            if (q1 > 15) q1 = 15;
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void qw_ref_dequantize_q8_0(const void *src, float *y, int64_t n) {
    const qw_block_q8_0 *x = src;
    const int64_t nb = n / QW_QK8_0;
    for (int64_t b = 0; b < nb; b++) {
        const float d = qw_fp16_to_f32(x[b].d);
        for (int j = 0; j < QW_QK8_0; j++) y[b * QW_QK8_0 + j] = (float)x[b].qs[j] * d;
    }
}

void qw_ref_dequantize_q4_0(const void *src, float *y, int64_t n) {
    const qw_block_q4_0 *x = src;
    const int64_t nb = n / QW_QK4_0;
    for (int64_t b = 0; b < nb; b++) {
        const float d = qw_fp16_to_f32(x[b].d);
        float *yb = y + b * QW_QK4_0;
        for (int j = 0; j < QW_QK4_0 / 2; j++) {
            yb[j] = (float)((x[b].qs[j] & 0x0f) - 8) * d;
            yb[j + QW_QK4_0 / 2] = (float)((x[b].qs[j] >> 4) - 8) * d;
        }
    }
}

/* ---- dots -------------------------------------------------------------- */

void qw_ref_vec_dot_f32(int64_t n, float *s, const void *w, const void *x) {
    const float *a = w, *b = x;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(a[i] * b[i]);
    *s = (float)sum;
}

void qw_ref_vec_dot_f16(int64_t n, float *s, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(qw_fp16_to_f32(a[i]) * qw_fp16_to_f32(b[i]));
    *s = (float)sum;
}

void qw_ref_vec_dot_bf16(int64_t n, float *s, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(qw_bf16_to_f32(a[i]) * qw_bf16_to_f32(b[i]));
    *s = (float)sum;
}

void qw_ref_vec_dot_q8_0(int64_t n, float *s, const void *w, const void *x) {
    const qw_block_q8_0 *a = w, *b = x;
    const int64_t nb = n / QW_QK8_0;
    float sum = 0.0f;
    for (int64_t k = 0; k < nb; k++) {
        int32_t isum = 0;
        for (int j = 0; j < QW_QK8_0; j++) isum += (int32_t)a[k].qs[j] * (int32_t)b[k].qs[j];
        const float d = qw_fp16_to_f32(a[k].d) * qw_fp16_to_f32(b[k].d);
        sum += (float)isum * d;
    }
    *s = sum;
}

void qw_ref_vec_dot_q4_0(int64_t n, float *s, const void *w, const void *x) {
    const qw_block_q4_0 *a = w;
    const qw_block_q8_0 *b = x;
    const int64_t nb = n / QW_QK8_0;
    float sum = 0.0f;
    for (int64_t k = 0; k < nb; k++) {
        int32_t isum = 0;
        for (int j = 0; j < QW_QK4_0 / 2; j++) {
            isum += ((a[k].qs[j] & 0x0f) - 8) * (int32_t)b[k].qs[j];
            isum += ((a[k].qs[j] >> 4) - 8) * (int32_t)b[k].qs[j + QW_QK4_0 / 2];
        }
        const float d = qw_fp16_to_f32(a[k].d) * qw_fp16_to_f32(b[k].d);
        sum += (float)isum * d;
    }
    *s = sum;
}

float qw_ref_dot_f32v(const float *a, const float *b, int64_t n) {
    float s;
    qw_ref_vec_dot_f32(n, &s, a, b);
    return s;
}

void qw_ref_axpy_f32(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

void qw_ref_axpy_f16(float *y, float a, const uint16_t *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * qw_fp16_to_f32(x[i]);
}

const qw_kernel_table qw_kernels_ref = {
    .name = "scalar",
    .isa = QW_ISA_SCALAR,
    .dot_f32 = qw_ref_vec_dot_f32,
    .dot_f16 = qw_ref_vec_dot_f16,
    .dot_bf16 = qw_ref_vec_dot_bf16,
    .dot_q8_0 = qw_ref_vec_dot_q8_0,
    .dot_q4_0 = qw_ref_vec_dot_q4_0,
    .quantize_q8_0 = qw_ref_quantize_q8_0,
    .f32_to_fp16 = qw_ref_f32_to_fp16,
    .fp16_to_f32 = qw_ref_fp16_to_f32,
    .f32_to_bf16 = qw_ref_f32_to_bf16,
    .bf16_to_f32 = qw_ref_bf16_to_f32,
    .dot_f32v = qw_ref_dot_f32v,
    .axpy_f32 = qw_ref_axpy_f32,
    .axpy_f16 = qw_ref_axpy_f16,
    .kq = &qw_kq_dots_ref,
    .delta_step = qw_ref_delta_step,
};
