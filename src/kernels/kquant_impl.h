/* kquant_impl.h — private to kernels/kquant*.c and quant.c: the K-quant
 * ("super-block") types Q2_K..Q6_K and their activation partner Q8_K.
 *
 * Block structs and their layouts live in qwisp/quant.h (they are part of the
 * file format); this header holds what the kernels share:
 *
 *   - qw_kq_unpack_*: a block -> its 256 integer weights q[i] (offsets already
 *     removed, so the weight is d*sc[g]*q[i] - dmin*mn[g] with g = i/16), the
 *     16 per-16-element scales sc[g] and mins mn[g] (0 for symmetric types),
 *     d and dmin.  Every K-quant's scales are in element order once expanded
 *     to groups of 16, which is what lets one dot formula serve all five.
 *   - the dot contract shared by every level: for each super-block b,
 *       sumi = sum_g sc[g] * sum_{i in g} q[i]*y[i]          (exact int32)
 *       summ = sum_g mn[g] * bsums[g]                          (exact int32)
 *       acc += y.d * (d * (float)sumi - dmin * (float)summ)    (this order)
 *     starting from acc = 0, so SIMD levels (which only compute sumi and
 *     summ differently, in integers) give the reference's bits exactly.  The
 *     build is ISO C11 (-ffp-contract=off), so no FMA sneaks into the float
 *     expression in one file and not another.
 *
 * qw_kq_dots is the per-level K-quant part of a level's qw_kernel_table
 * (its .kq); each is complete, a level pointing at a lower level's kernel
 * where it has none of its own (Q8_K x Q8_K: the reference everywhere).
 */
#ifndef QWISP_KERNELS_KQUANT_IMPL_H
#define QWISP_KERNELS_KQUANT_IMPL_H

#include <stdbool.h>
#include <string.h>

#include "qwisp/quant.h"

/* Tokens per call of the wide K-quant tile (qw_gemm_wide_toks). */
#define QW_KQ_WIDE_TOKS 8

typedef struct qw_kq_dots {
    qw_vec_dot_fn q2_K, q3_K, q4_K, q5_K, q6_K, q8_K;
    qw_gemm_fn gemm_q4_K, gemm_q6_K; /* prefill tiles (NULL: the matmul uses the dot) */
    qw_gemm_fn gemm_wide_q4_K, gemm_wide_q6_K; /* QW_KQ_WIDE_TOKS tokens a call, same contract; NULL: none */
    /* activations to Q8_K: the reference's bytes at every level */
    void (*quantize_q8_K)(const float *x, void *dst, int64_t n);
    qw_gemm_fn gemm_q5_K, gemm_wide_q5_K; /* Q5_K tiles, 4 and QW_KQ_WIDE_TOKS tokens; NULL: none */
    qw_gemm_fn gemm_q2_K, gemm_wide_q2_K, gemm_q3_K, gemm_wide_q3_K; /* the same for Q2_K, Q3_K */
    /* the AMX tiles for any number of tokens (qw_gemm_n_get); NULL: none.
     * A type that has one is on AMX: the matmul hands it every token of a
     * task, and its wide tile takes QW_GEMM_WIDE_TOKS tokens a call */
    qw_gemm_n_fn gemm_n_q4_K, gemm_n_q5_K, gemm_n_q6_K;
    /* decode: the Q4_K / Q6_K / Q5_K dot over a run of rows, the token
     * prepared once (qw_gemv_get's contract: the dot's bits); NULL: none */
    qw_gemm_fn gemv_q4_K, gemv_q6_K, gemv_q5_K;
} qw_kq_dots;

extern const qw_kq_dots qw_kq_dots_ref;
extern const qw_kq_dots qw_kq_dots_avx2;
extern const qw_kq_dots qw_kq_dots_avx512;

static inline qw_vec_dot_fn qw_kq_dot_pick(const qw_kq_dots *t, qw_type type) {
    switch ((int)type) {
    case QW_TYPE_Q2_K: return t->q2_K;
    case QW_TYPE_Q3_K: return t->q3_K;
    case QW_TYPE_Q4_K: return t->q4_K;
    case QW_TYPE_Q5_K: return t->q5_K;
    case QW_TYPE_Q6_K: return t->q6_K;
    case QW_TYPE_Q8_K: return t->q8_K;
    default: return NULL;
    }
}

/* True for Q2_K..Q6_K and Q8_K. */
static inline bool qw_is_kquant(qw_type type) { return type >= QW_TYPE_Q2_K && type <= QW_TYPE_Q8_K; }

/* Scalar references (kquant_ref.c).  n % 256 == 0 everywhere. */
void qw_kq_quantize(qw_type type, const float *x, void *dst, int64_t n);
void qw_kq_dequantize(qw_type type, const void *src, float *y, int64_t n);
void qw_ref_quantize_q8_K(const float *x, void *dst, int64_t n);
void qw_ref_dot_q8_K(int64_t n, float *s, const void *w, const void *x);

/* One block's integer form; see the header comment. */
typedef struct {
    int8_t q[QW_QK_K];
    int16_t sc[QW_QK_K / 16];
    int16_t mn[QW_QK_K / 16];
    float d, dmin;
} qw_kq_unpacked;
void qw_kq_unpack(qw_type type, const void *block, qw_kq_unpacked *u);

/* 6-bit scale and min j (0..7) of a Q4_K/Q5_K block's 12 packed bytes. */
static inline void qw_kq_scale_min_k4(int j, const uint8_t *s, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *mn = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* All eight 6-bit scales and mins of a Q4_K/Q5_K block's 12 packed bytes at
 * once, as bytes: u's bytes 0-7 are scales 0-7, bytes 8-15 mins 0-7 (the
 * same values as qw_kq_scale_min_k4, word by word). */
static inline void qw_kq_scales_mins_k4(const uint8_t *packed, uint32_t u[4]) {
    memcpy(u, packed, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    const uint32_t mins_lo = u[1] & 0x3f3f3f3fu;
    u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    u[2] = mins_lo;
    u[0] &= 0x3f3f3f3fu;
}

/* 6-bit scale j (0..15) of a Q3_K block's 12 packed bytes, offset removed. */
static inline int qw_kq_scale_q3(int j, const uint8_t *s) {
    const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    const int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}

#endif
