/* quant.h — tensor element types and their block layouts (identical to
 * GGUF/ggml), conversions, and the dot-product kernels the matmuls are built on.
 *
 * Every kernel has a scalar reference (`*_ref`, kernels/quant_ref.c) that is the
 * oracle; SIMD variants (kernels/quant_avx2.c, quant_avx512.c) are chosen at run time by
 * CPU feature detection and tested against the reference.
 *
 * A matmul y = W x for a weight row of type T first converts the activations x
 * to qw_vec_dot_type(T) once (qw_quantize_row), then calls qw_vec_dot for each
 * row.  This mirrors llama.cpp's CPU backend so results agree with it:
 *   F32 -> F32,  F16 -> F16,  BF16 -> BF16,  Q8_0 -> Q8_0,  Q4_0 -> Q8_0.
 *   Q2_K..Q6_K (and Q8_K) -> Q8_K (256-element rows: n % 256 == 0).
 */
#ifndef QWISP_QUANT_H
#define QWISP_QUANT_H

#include "qwisp/base.h"

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum qw_type {
    QW_TYPE_F32 = 0,
    QW_TYPE_F16 = 1,
    QW_TYPE_Q4_0 = 2,
    QW_TYPE_Q8_0 = 8,
    QW_TYPE_Q2_K = 10, /* K-quants: 256-element super-blocks (kernels/kquant*.c) */
    QW_TYPE_Q3_K = 11,
    QW_TYPE_Q4_K = 12,
    QW_TYPE_Q5_K = 13,
    QW_TYPE_Q6_K = 14,
    QW_TYPE_Q8_K = 15, /* activations only: the dot partner of every K-quant */
    QW_TYPE_BF16 = 30,
} qw_type;

#define QW_QK8_0 32
#define QW_QK4_0 32

/* Q8_0: 32 weights = d * qs[i]. */
typedef struct {
    uint16_t d;           /* fp16 scale */
    int8_t qs[QW_QK8_0];  /* quants */
} qw_block_q8_0;
static_assert(sizeof(qw_block_q8_0) == 34, "q8_0 block must be 34 bytes");

/* Q4_0: 32 weights = d * (q - 8); byte i holds element i (low nibble) and
 * element i+16 (high nibble). */
typedef struct {
    uint16_t d;               /* fp16 scale */
    uint8_t qs[QW_QK4_0 / 2]; /* nibbles */
} qw_block_q4_0;
static_assert(sizeof(qw_block_q4_0) == 18, "q4_0 block must be 18 bytes");

/* ---- K-quants (ggml's k_quants): QW_QK_K = 256 weights per super-block.
 * Below, element i of a block belongs to 16-group g = i/16 (32-group j = i/32).
 * fp16 fields are raw half bits (qw_fp16_to_f32). */
#define QW_QK_K 256

/* Q2_K: w = d*(scales[g]&15)*q - dmin*(scales[g]>>4), q in 0..3.  Element i:
 * h = i/128, s = (i%128)/32, l = i%32; q = (qs[32h + l] >> 2s) & 3. */
typedef struct {
    uint8_t scales[QW_QK_K / 16]; /* 4-bit scale (low) | 4-bit min (high) per 16-group */
    uint8_t qs[QW_QK_K / 4];      /* 2-bit quants */
    uint16_t d;                   /* fp16 super-scale of the scales */
    uint16_t dmin;                /* fp16 super-scale of the mins */
} qw_block_q2_K;
static_assert(sizeof(qw_block_q2_K) == 84, "q2_K block must be 84 bytes");

/* Q3_K: w = d*(sc[g]-32)*(q-4), q in 0..7.  Element i (h, s, l as Q2_K):
 * low bits (qs[32h + l] >> 2s) & 3, bit 2 = (hmask[l] >> (4h + s)) & 1.
 * sc[g] is 6 bits: low nibble scales[g] & 15 (g < 8) or scales[g-8] >> 4,
 * high 2 bits (scales[8 + g%4] >> 2*(g/4)) & 3. */
typedef struct {
    uint8_t hmask[QW_QK_K / 8]; /* high bit of each quant */
    uint8_t qs[QW_QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];         /* 16 6-bit scales, packed as above */
    uint16_t d;                 /* fp16 super-scale */
} qw_block_q3_K;
static_assert(sizeof(qw_block_q3_K) == 110, "q3_K block must be 110 bytes");

/* Q4_K: w = d*sc[j]*q - dmin*m[j], q in 0..15, 6-bit sc/m per 32-group j.
 * Element i: c = i/64; q = qs[32c + i%32] low nibble if i%64 < 32, else high.
 * sc/m packing (12 bytes): j < 4: sc = s[j]&63, m = s[j+4]&63; j >= 4:
 * sc = (s[j+4]&15) | (s[j-4]>>6)<<4, m = (s[j+4]>>4) | (s[j]>>6)<<4. */
typedef struct {
    uint16_t d;                 /* fp16 super-scale of the scales */
    uint16_t dmin;              /* fp16 super-scale of the mins */
    uint8_t scales[12];         /* 8 scales + 8 mins, 6 bits each */
    uint8_t qs[QW_QK_K / 2];    /* 4-bit quants */
} qw_block_q4_K;
static_assert(sizeof(qw_block_q4_K) == 144, "q4_K block must be 144 bytes");

/* Q5_K: Q4_K plus a fifth bit, q in 0..31: bit 4 of element i is
 * (qh[i%32] >> (i/32)) & 1. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[QW_QK_K / 8];    /* fifth bits */
    uint8_t qs[QW_QK_K / 2];    /* low 4 bits */
} qw_block_q5_K;
static_assert(sizeof(qw_block_q5_K) == 176, "q5_K block must be 176 bytes");

/* Q6_K: w = d*scales[g]*(q-32), q in 0..63.  Element i: h = i/128, r = i%128,
 * k = r/32, l = r%32: low 4 bits from ql[64h + 32(k&1) + l] (low nibble for
 * k < 2, high for k >= 2), high 2 bits (qh[32h + l] >> 2k) & 3. */
typedef struct {
    uint8_t ql[QW_QK_K / 2];     /* low 4 bits */
    uint8_t qh[QW_QK_K / 4];     /* high 2 bits */
    int8_t scales[QW_QK_K / 16]; /* 8-bit scale per 16-group */
    uint16_t d;                  /* fp16 super-scale */
} qw_block_q6_K;
static_assert(sizeof(qw_block_q6_K) == 210, "q6_K block must be 210 bytes");

/* Q8_K (activations): x = d*qs[i]; bsums[g] = sum of qs over 16-group g. */
typedef struct {
    float d;                      /* f32 scale */
    int8_t qs[QW_QK_K];           /* quants */
    int16_t bsums[QW_QK_K / 16];  /* group sums, for the K-quants' mins/offsets */
} qw_block_q8_K;
static_assert(sizeof(qw_block_q8_K) == 292, "q8_K block must be 292 bytes");

/* True for the types qwisp can compute with. */
bool qw_type_supported(uint32_t type);
/* Name as ggml spells it ("f32", "q8_0", …); "unknown" otherwise. */
const char *qw_type_name(uint32_t type);
/* Parses a name (case-insensitive); -1 if unknown. */
int qw_type_from_name(const char *name);
/* Elements per block (1 for float types); 0 for unknown types. */
size_t qw_type_block_elems(uint32_t type);
/* Bytes per block; 0 for unknown types. */
size_t qw_type_block_bytes(uint32_t type);
/* Bytes for a row of n elements (n must be a multiple of the block size). */
size_t qw_row_bytes(uint32_t type, int64_t n);
/* The activation type that qw_vec_dot pairs with a weight of this type. */
qw_type qw_vec_dot_type(qw_type type);

/* Scalar f16 / bf16 conversions: qw_fp16_to_f32 and friends, base.h. */

/* x[n] (f32) -> dst in `type`.  n must be a multiple of the block size.
 * Q8_0 matches ggml's quantize_row_q8_0 results; Q4_0 matches ggml's reference
 * quantizer (used by the writer). */
void qw_quantize_row(qw_type type, const float *x, void *dst, int64_t n);
/* src (n elements of `type`) -> y[n] f32. */
void qw_dequantize_row(qw_type type, const void *src, float *y, int64_t n);

/* *s = dot(w_row, x) for n elements; w_row of type `type`, x already converted
 * to qw_vec_dot_type(type).  Dispatches to the best SIMD variant.  Rows need
 * only their element's alignment (2 bytes for block and 16-bit types, 4 for
 * f32), never vector alignment.  Block rows: n % 32 == 0; float rows: any n. */
void qw_vec_dot(qw_type type, int64_t n, float *s, const void *w_row, const void *x);
/* The scalar reference of the same contract. */
void qw_vec_dot_ref(qw_type type, int64_t n, float *s, const void *w_row, const void *x);

/* The dispatched kernel itself, for matmul loops that call it once per row and
 * want to skip the per-call type switch: qw_vec_dot_get(T)(n, s, w_row, x) is
 * qw_vec_dot(T, n, s, w_row, x).  NULL for unsupported types.  The pointer is
 * valid until the next qw_simd_force. */
typedef void (*qw_vec_dot_fn)(int64_t n, float *s, const void *w_row, const void *x);
qw_vec_dot_fn qw_vec_dot_get(qw_type type);

/* Register-blocked tiles for prefill matmuls: for r < n_rows (a multiple of
 * QW_GEMM_ROWS = 2) and t < QW_GEMM_TOKS (4), y[t][r] = dot(n, w + r *
 * w_row_bytes, x[t]) with EXACTLY the bits qw_vec_dot_get(type) would give.
 * n % QW_GEMM_K == 0 and n <= QW_GEMM_K_MAX.
 * qw_gemm_get returns NULL when the active SIMD level has no tile for the
 * type (callers then use the dot).  Valid until the next qw_simd_force. */
#define QW_GEMM_ROWS 2
#define QW_GEMM_TOKS 4
#define QW_GEMM_K 128
#define QW_GEMM_K_MAX 8192
typedef void (*qw_gemm_fn)(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows,
                           const void *const *x, float *const *y);
qw_gemm_fn qw_gemm_get(qw_type type);
/* The form that takes any number of tokens (n_tok >= 1, outputs y[0..n_tok)),
 * for kernels that lay the weights out once per call whatever its token count
 * and serve every token from it (the AMX K-quant tiles); the dot's bits, as
 * every tile.  NULL where the level has none for the type.  The matmul gives
 * it up to QW_GEMM_N_TOKS tokens a call. */
#define QW_GEMM_N_TOKS 64
typedef void (*qw_gemm_n_fn)(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                             float *const *y, int64_t n_tok);
qw_gemm_n_fn qw_gemm_n_get(qw_type type);
/* The wide form: qw_gemm_wide_toks(type) tokens per call (at most
 * QW_GEMM_WIDE_TOKS), any n_rows, same bit-exact contract and limits; NULL
 * unless the level has one (avx512-amx, Q8_0, Q4_0 and the K-quants on AMX,
 * Q4_0 unless qw_simd_amx_q4_0(false):
 * one AMX tile multiply holds 16 tokens; avx512, the K-quants: 8 tokens
 * share each unpacked weight block). */
#define QW_GEMM_WIDE_TOKS 16
qw_gemm_fn qw_gemm_wide_get(qw_type type);
int qw_gemm_wide_toks(qw_type type);
/* The one-token form for decode: x[0], y[0] only; any n_rows (a multiple of
 * QW_GEMV_ROWS = 1); same bit-exact contract and limits. */
#define QW_GEMV_ROWS 1
qw_gemm_fn qw_gemv_get(qw_type type);

/* y[i] += a * (float)x[i] for an f16 row x (attention's V accumulation);
 * multiply then add, so every level gives the reference's bits. */
void qw_axpy_f16(float *y, float a, const uint16_t *x, int64_t n);

/* Small f32 vector helpers used by the model (SIMD-dispatched). */
float qw_dot_f32(const float *a, const float *b, int64_t n);
void qw_axpy_f32(float *y, float a, const float *x, int64_t n); /* y += a*x */

/* Which SIMD level the dispatcher picked: "avx512", "avx2" or "scalar"; an
 * AVX-512 CPU without VBMI and/or BF16 (Cascade Lake, Cooper Lake, Ice Lake)
 * runs "avx512-novbmi", "avx512-nobf16" or "avx512-novbmi-nobf16": the
 * AVX-512 table with those kernels taken from the AVX2 level. */
const char *qw_simd_level(void);
/* The instruction set of the active level, for kernels outside the table
 * (attention, the DeltaNet step) that pick their own variant. */
typedef enum { QW_ISA_SCALAR = 0, QW_ISA_AVX2 = 1, QW_ISA_AVX512 = 2 } qw_isa;
qw_isa qw_simd_isa(void);
/* Lowers the level to one of the names above (case-insensitive); never
 * raises it above what the CPU supports: "avx512" on a CPU without VBMI gives
 * "avx512-novbmi", and "avx512-novbmi" on one with VBMI gives the patched
 * table, so every table a CPU family would run can be tested on a bigger one.
 * Returns 0, or -1 for an unknown name.  (The QWISP_SIMD knob in the options
 * table calls this; kernels never read the environment.) */
int qw_simd_force(const char *level);
/* Every name qw_simd_force takes, best first, NULL-terminated (tests walk it). */
extern const char *const qw_simd_levels[];
/* The avx512-amx level's Q4_K and Q6_K: true (the default) = AMX tiles with
 * the dot and the decode row loop in the K-quant reference order (the scalar
 * level's bits); false = the AVX-512 level's kernels.  Call before any
 * matmul runs (the QWISP_AMX_KQUANT knob does, at start-up); other levels
 * are unaffected. */
void qw_simd_amx_kquants(bool on);
/* The avx512-amx level's Q4_0: true (the default) = AMX tiles with the dot
 * and the decode row loop in the reference order (the scalar level's bits);
 * false = the AVX-512 level's kernels.  Call before any matmul runs (the
 * QWISP_AMX_Q4_0 knob does, at start-up). */
void qw_simd_amx_q4_0(bool on);

#endif
