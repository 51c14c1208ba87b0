/* quant_impl.h — private to kernels/: the per-ISA kernel table.
 *
 * One table per SIMD level holds every kernel whose code depends on the
 * level: the dots of every type (the K-quants' through their own per-level
 * table, kquant_impl.h), conversions, the GEMM/GEMV tiles, the attention
 * inner loops and the gated-delta step.  Each ISA file (quant_ref.c,
 * quant_avx2.c, quant_avx512.c) exports one constant table; quant.c picks one
 * at run time by level (an enum, qw_simd_levels' order) and every public
 * qw_* entry point — and attention.c / delta.c, through qw_kernels_active —
 * goes through it: no kernel tests the CPU or a level's name itself.  A new
 * ISA (or a backend's CPU-side twin) is one more table and one more level.
 * A table never points at code the CPU it was selected for cannot run, with
 * one exception resolved in quant.c: the AVX-512 table's bf16 dot needs
 * AVX512_BF16 and its Q4_0 kernels AVX512_VBMI, and when those are missing
 * the AVX2 entries are patched in (the "avx512-no…" levels).
 *
 * Contracts (same at every level):
 *   vec_dot[T](n, s, w, x): *s = dot of n elements; w is a row of type T, x a
 *     row of qw_vec_dot_type(T).  Block types need n % 32 == 0; float types
 *     take any n >= 0.  Pointers need only the element type's alignment
 *     (2 bytes for f16/bf16/q8_0/q4_0 rows, 4 for f32): no vector alignment.
 *   quantize_q8_0: n % 32 == 0; bytes identical at every level.
 *   f32_to_fp16 / fp16_to_f32 / f32_to_bf16 / bf16_to_f32: any n; bit
 *     identical at every level (round to nearest even, NaN kept and quieted).
 */
#ifndef QWISP_KERNELS_QUANT_IMPL_H
#define QWISP_KERNELS_QUANT_IMPL_H

#include "qwisp/quant.h"
#include "qwisp/tune.h"
#include "kernels/kquant_impl.h"

#include <stdbool.h>

typedef struct qw_kernel_table {
    const char *name; /* "scalar", "avx2", "avx512" (or a patched "avx512-no…", quant.c) */
    qw_isa isa;       /* the instruction set its own kernels need */
    qw_vec_dot_fn dot_f32;
    qw_vec_dot_fn dot_f16;
    qw_vec_dot_fn dot_bf16;
    qw_vec_dot_fn dot_q8_0;
    qw_vec_dot_fn dot_q4_0;
    void (*quantize_q8_0)(const float *x, void *dst, int64_t n);
    void (*f32_to_fp16)(const float *x, uint16_t *y, int64_t n);
    void (*fp16_to_f32)(const uint16_t *x, float *y, int64_t n);
    void (*f32_to_bf16)(const float *x, uint16_t *y, int64_t n);
    void (*bf16_to_f32)(const uint16_t *x, float *y, int64_t n);
    float (*dot_f32v)(const float *a, const float *b, int64_t n);
    void (*axpy_f32)(float *y, float a, const float *x, int64_t n);
    /* 4-token × (2-row) tiles, bit-identical to this table's dot (gemm_*.c);
     * NULL where the level has none (matmul then uses the dot). */
    qw_gemm_fn gemm_q8_0;
    qw_gemm_fn gemm_q4_0;
    qw_gemm_fn gemv_q8_0; /* one token, rows in multiples of 4 */
    qw_gemm_fn gemv_q4_0;
    /* wide_toks_q8-token tiles (<= QW_GEMM_WIDE_TOKS), same contract; NULL
     * where the level has none: 16 tokens at avx512-amx (Q4_0 only with
     * qw_simd_amx_q4_0(true)), 8 (Q8_0 only) at avx512 */
    qw_gemm_fn gemm_wide_q8_0;
    qw_gemm_fn gemm_wide_q4_0;
    int wide_toks_q8;
    /* any number of tokens a call (QW_GEMM_N_TOKS at most), same contract;
     * NULL where the level has none: avx512-amx only (Q4_0 as above) */
    qw_gemm_n_fn gemm_n_q8_0;
    qw_gemm_n_fn gemm_n_q4_0;
    /* y[i] += a * f16(x[i]), as mul then add (two roundings, like the reference). */
    void (*axpy_f16)(float *y, float a, const uint16_t *x, int64_t n);
    /* Q2_K..Q6_K (+ Q8_K) dots and the Q4_K/Q6_K tiles of this level (complete:
     * a level without its own kernel for a type points at a lower level's) */
    const qw_kq_dots *kq;
    /* attention over an f16 cache, one query row's score and value loops
     * (attention.c); NULL = the generic per-position loop; false from the
     * kernel = this head_dim has no specialised form */
    bool (*attn_scores_f16)(const uint16_t *q16, const char *k, size_t kv_stride, int64_t n_pos, int64_t D,
                            float *scores);
    bool (*attn_values_f16)(const float *p, const char *v, size_t kv_stride, int64_t n_pos, int64_t D, float *out);
    /* the same for four query rows sharing one KV head (each row's bits as
     * above); NULL = run the heads one by one */
    bool (*attn_scores4_f16)(const uint16_t *const *q16, const char *k, size_t kv_stride, int64_t n_pos, int64_t D,
                             float *const *scores);
    bool (*attn_values4_f16)(const float *const *p, const char *v, size_t kv_stride, int64_t n_pos, int64_t D,
                             float *const *out);
    /* x[i] = e^(x[i] - mx) over a row, returning the sum of the results in
     * double (attention's softmax; exp_avx512.c says what the bits are); NULL
     * = expf an element, summed in row order */
    double (*exp_row)(float *x, int64_t n, float mx);
    /* y[i] = e^x[i], the same evaluation (x == y allowed); NULL = expf */
    void (*exp_f32)(const float *x, float *y, int64_t n);
    /* one token of the gated delta rule for one head (delta.c, ops.h) */
    void (*delta_step)(float *M, const float *q, const float *k, const float *v, float decay, float beta,
                       float scale, int64_t S, float *o);
} qw_kernel_table;

/* The table every kernel runs from now (quant.c; detects the CPU on first use). */
const qw_kernel_table *qw_kernels_active(void);

/* The softmax exponentials of the x86 levels (exp_avx2.c, exp_avx512.c). */
double qw_avx2_exp_row(float *x, int64_t n, float mx);
double qw_avx512_exp_row(float *x, int64_t n, float mx);
void qw_avx2_exp_f32(const float *x, float *y, int64_t n);
void qw_avx512_exp_f32(const float *x, float *y, int64_t n);

/* The AVX2 level's 4-token tiles (gemm_avx2.c), bit-identical with its dots. */
void qw_avx2_gemm_q8_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                       float *const *y);
void qw_avx2_gemm_q4_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                       float *const *y);
/* Its decode row loops (one token, any n_rows), the same contract. */
void qw_avx2_gemv_q8_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                       float *const *y);
void qw_avx2_gemv_q4_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                       float *const *y);
void qw_avx512_gemm_q8_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                         float *const *y);
void qw_avx512_gemm_q4_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                         float *const *y);
void qw_avx512_gemv_q8_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                         float *const *y);
void qw_avx512_gemm_wide_q8_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                              float *const *y);
void qw_avx512_dot_q4_0(int64_t n, float *s, const void *w, const void *x);
void qw_avx512_gemv_q4_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                         float *const *y);
bool qw_avx512_attn_scores_f16(const uint16_t *q16, const char *k, size_t kv_stride, int64_t n_pos, int64_t D,
                               float *scores);
bool qw_avx512_attn_values_f16(const float *p, const char *v, size_t kv_stride, int64_t n_pos, int64_t D,
                               float *out);
bool qw_avx512_attn_scores4_f16(const uint16_t *const *q16, const char *k, size_t kv_stride, int64_t n_pos, int64_t D,
                                float *const *scores);
bool qw_avx512_attn_values4_f16(const float *const *p, const char *v, size_t kv_stride, int64_t n_pos, int64_t D,
                                float *const *out);
void qw_avx2_delta_step(float *M, const float *q, const float *k, const float *v, float decay, float beta,
                        float scale, int64_t S, float *o);
void qw_avx512_delta_step(float *M, const float *q, const float *k, const float *v, float decay, float beta,
                          float scale, int64_t S, float *o);

/* The avx512-amx level (quant.c): its Q8_0 dots and row loops (Q4_0's with
 * qw_simd_amx_q4_0(true)) compute in the scalar reference's order
 * (blockorder_avx512vbmi.c), its prefill tiles
 * with AMX-INT8 (amx_avx512.c); qw_amx_usable says whether this CPU and
 * kernel allow AMX (and requests the permission, once). */
typedef struct {
    qw_vec_dot_fn dot_q8_0, dot_q4_0;
    qw_gemm_fn gemv_q8_0, gemv_q4_0;
} qw_blockorder_kernels;
extern const qw_blockorder_kernels qw_blockorder_avx512;
bool qw_amx_usable(void);
void qw_amx_gemm_q8_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                      float *const *y);
void qw_amx_gemm_q4_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                      float *const *y);
void qw_amx_gemm_wide_q8_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                           float *const *y);
void qw_amx_gemm_wide_q4_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                           float *const *y);
/* the tiles for any number of tokens, each strip's weights laid out once a call (qw_gemm_n_get) */
void qw_amx_gemm_n_q8_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                        float *const *y, int64_t n_tok);
void qw_amx_gemm_n_q4_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                        float *const *y, int64_t n_tok);
/* The same tiles through a software model of the tile instructions, on any
 * AVX-512 VNNI + VBMI CPU: for tests; false when out of memory or outside the
 * tiles' limits (nt 1..QW_GEMM_N_TOKS, n % QW_GEMM_K == 0, n <= QW_GEMM_K_MAX). */
bool qw_amx_emulated_q8_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                          float *const *y, int nt);
bool qw_amx_emulated_q4_0(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                          float *const *y, int nt);

/* The avx512-amx level's K-quants on AMX (Q4_K, Q5_K: amx_kquant_avx512.c;
 * Q6_K: amx_q6k_avx512.c): each a dot in the K-quant reference order, the
 * decode row loop with its bits, and AMX tiles with its bits (4, 16, and
 * any number of tokens: gemm_n); dot and gemv NULL where the AVX-512 level's
 * already keep that order (Q5_K).
 * `emulated` runs those tiles (nt = 1..QW_GEMM_N_TOKS tokens) through a software model
 * of the tile instructions, on any AVX-512 CPU: for tests; false when out of
 * memory or outside the tiles' limits. */
typedef struct {
    qw_vec_dot_fn dot;
    qw_gemm_fn gemm, gemm_wide;
    qw_gemm_fn gemv; /* decode: the dot over a run of rows (its bits) */
    qw_gemm_n_fn gemm_n; /* any number of tokens, the weights laid out once per call */
    bool (*emulated)(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                     float *const *y, int nt);
} qw_amx_kq_kernels;
extern const qw_amx_kq_kernels qw_amx_q4_K, qw_amx_q5_K, qw_amx_q6_K;

/* Decode streams weight rows from DRAM once, in order; with the hardware
 * prefetcher alone a row loop read at a third of the bandwidth on a Zen 5
 * (7 vs 22 GB/s, one thread), so the row loops prefetch the rows about
 * qw_tune_get(QW_TUNE_DECODE_AHEAD) bytes ahead (at least two rows): 8 KiB
 * by default, calibrated per machine by `qwisp tune` (tune.h). */

/* One prefetch instruction that the compiler must keep.  GCC (12, -O2) treats
 * __builtin_prefetch as free of side effects, and its dead-code pass deletes
 * a loop made only of them once it can prove the loop finite — which it did
 * for every decode row loop here (the object code had no prefetch at all, so
 * the calibrated distance changed nothing).  A volatile asm cannot be
 * deleted.  hint: 0 = prefetcht0 (L1), 1 = prefetcht1 (L2). */
static inline void qw_prefetch_line(const void *p, int l2) {
#if defined(__x86_64__) || defined(__i386__)
    if (l2) __asm__ volatile("prefetcht1 %0" : : "m"(*(const char *)p));
    else __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p));
#else
    if (l2) __builtin_prefetch(p, 0, 2);
    else __builtin_prefetch(p, 0, 3);
#endif
}

static inline void qw_prefetch_bytes(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) qw_prefetch_line((const char *)p + o, 0);
}

/* The decode row loops' prefetch: into L1 (prefetcht0) or, where `qwisp
 * tune` found it faster, into L2 (prefetcht1), whose miss queue is deeper
 * than L1's fill buffers: more DRAM misses in flight per core. */
static inline void qw_prefetch_decode(const void *p, size_t bytes) {
    const int l2 = qw_tune_get(QW_TUNE_DECODE_PREFETCH_L2) != 0;
    for (size_t o = 0; o < bytes; o += 64) qw_prefetch_line((const char *)p + o, l2);
}

/* The lines of one block of `bytes` (a constant: unrolled) at p, for the
 * decode row loops that prefetch block by block. */
static inline __attribute__((always_inline)) void qw_prefetch_block(const void *p, size_t bytes, int l2) {
    const char *c = p;
    if (l2) {
#pragma GCC unroll 8
        for (size_t o = 0; o < bytes; o += 64) qw_prefetch_line(c + o, 1);
    } else {
#pragma GCC unroll 8
        for (size_t o = 0; o < bytes; o += 64) qw_prefetch_line(c + o, 0);
    }
    if (bytes % 64) qw_prefetch_line(c + bytes - 1, l2); /* its last line, where it straddles one more */
}

/* Decode's streams.  A decode row loop that reads R rows at once (the Q8_0
 * and Q4_0 loops of the AVX-512 levels) takes rows r, r + gap, ... r + (R-1)
 * gap with gap = n_rows / R, for r = 0 .. gap - 1: R streams that each run on
 * in memory from one step to the next, which the hardware prefetchers follow
 * without software prefetches.  Rows side by side (r .. r + R - 1) start R
 * short streams every step: the prefetchers lost them (bench/RESULTS.md, "decode
 * streams": one thread read DRAM 20-40 % slower so on an AMD EPYC and an Intel
 * Xeon).  Which rows go together never changes a row's bits. */
static inline int64_t qw_decode_stream_gap(int64_t n_rows, int streams) { return n_rows / streams; }

/* Rows of `row_bytes` to prefetch ahead of the one being read in decode. */
static inline int64_t qw_decode_ahead_rows(size_t row_bytes) {
    const size_t ahead = (size_t)qw_tune_get(QW_TUNE_DECODE_AHEAD);
    const int64_t rows = (int64_t)((ahead + row_bytes - 1) / row_bytes);
    return rows > 2 ? rows : 2;
}

extern const qw_kernel_table qw_kernels_ref;
extern const qw_kernel_table qw_kernels_avx2;
extern const qw_kernel_table qw_kernels_avx512;

/* Scalar reference pieces other files reuse (tails, non-hot conversions). */
void qw_ref_vec_dot_f32(int64_t n, float *s, const void *w, const void *x);
void qw_ref_vec_dot_f16(int64_t n, float *s, const void *w, const void *x);
void qw_ref_vec_dot_bf16(int64_t n, float *s, const void *w, const void *x);
void qw_ref_vec_dot_q8_0(int64_t n, float *s, const void *w, const void *x);
void qw_ref_vec_dot_q4_0(int64_t n, float *s, const void *w, const void *x);
void qw_ref_quantize_q8_0(const float *x, void *dst, int64_t n);
void qw_ref_quantize_q4_0(const float *x, void *dst, int64_t n);
void qw_ref_dequantize_q8_0(const void *src, float *y, int64_t n);
void qw_ref_dequantize_q4_0(const void *src, float *y, int64_t n);
void qw_ref_f32_to_fp16(const float *x, uint16_t *y, int64_t n);
void qw_ref_fp16_to_f32(const uint16_t *x, float *y, int64_t n);
void qw_ref_f32_to_bf16(const float *x, uint16_t *y, int64_t n);
void qw_ref_bf16_to_f32(const uint16_t *x, float *y, int64_t n);
float qw_ref_dot_f32v(const float *a, const float *b, int64_t n);
void qw_ref_axpy_f32(float *y, float a, const float *x, int64_t n);
void qw_ref_axpy_f16(float *y, float a, const uint16_t *x, int64_t n);
void qw_ref_delta_step(float *M, const float *q, const float *k, const float *v, float decay, float beta,
                       float scale, int64_t S, float *o);

#endif
