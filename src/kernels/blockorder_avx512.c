/* blockorder_avx512.c — Q8_0 and Q4_0 dots and decode row loops (AVX-512 VNNI)
 * in the scalar reference's order: the kernels of the "avx512-amx" level
 * beside its AMX prefill tiles (amx_avx512.c).
 *
 * Why a second order: an AMX tile multiply gives one exact int32 per (row,
 * token, block) — the block's whole 32-element sum — not the 8 partial lanes
 * the AVX-512 Q8_0 dot (llama.cpp's order) scales one by one.  So the AMX
 * level computes every Q8_0/Q4_0 dot as the reference does (quant_ref.c):
 *     sum = 0;  for each block b:  sum = sum + (float)isum_b * (d_w * d_x)
 * — the int32 exact, each float operation a separate IEEE single rounding
 * (no FMA).  Its dot, row loop and tiles all do exactly that, so within the
 * level prefill and decode agree bit for bit (the tile contract, quant.h),
 * and every Q8_0/Q4_0 result equals the scalar level's bits — only the other
 * AVX-512 levels differ from it (by their lane order, as they always did).
 * (The level's Q4_0 takes these only with QWISP_AMX_Q4_0=1: by default it
 * runs the AVX-512 level's Q4_0 kernels, faster on the Xeon measured; quant.c.)
 *
 * Decode (one token): 16 rows at a time, one f32 lane per row, so the
 * serial float chain of each row runs 16-wide.  Per block, the 16 rows' int8
 * weights are multiplied with VPDPBUSD two rows per zmm (x + 128 unsigned,
 * corrected by -128 * sum4(w)), the 8 lanes of each row summed by an unpack
 * tree into one zmm of 16 block sums, the 16 fp16 scales fetched with one
 * gather.  Rows left over (n_rows % 16) go through the dot.  Q4_0 blocks are
 * widened to int8 (nibble - 8) first; from there both types share the code.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/quant_impl.h"
#include "kernels/simd_x86.h"

enum { STRIP = 16 };

/* Block b of a row as 32 signed bytes, and its fp16 scale's byte offset. */
static inline __attribute__((always_inline)) __m256i w8_q8(const uint8_t *row, int64_t b) {
    return _mm256_loadu_si256((const __m256i *)(row + b * (int64_t)sizeof(qw_block_q8_0) + 2));
}
static inline __attribute__((always_inline)) __m256i w8_q4(const uint8_t *row, int64_t b) {
    const __m128i q = _mm_loadu_si128((const __m128i *)(row + b * (int64_t)sizeof(qw_block_q4_0) + 2));
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    return _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}

/* The exact int32 sum of 32 products w[i] * x[i] (xu = x ^ 0x80), as 8 lanes. */
static inline __attribute__((always_inline)) __m256i lanes8(__m256i w, __m256i xu) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i nw = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, _mm256_set1_epi8((char)0x80), w));
    return _mm256_dpbusd_epi32(nw, xu, w);
}

/* One row's dot in the reference order (the integer sum is exact in any order). */
static inline __attribute__((always_inline)) float dot_row(int64_t nb, const uint8_t *w, const qw_block_q8_0 *x,
                                                           const bool q4) {
    const size_t bw = q4 ? sizeof(qw_block_q4_0) : sizeof(qw_block_q8_0);
    const __m256i k80 = _mm256_set1_epi8((char)0x80);
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const __m256i xu = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x[b].qs), k80);
        const int32_t isum = sum8_epi32(lanes8(q4 ? w8_q4(w, b) : w8_q8(w, b), xu));
        const float d = _cvtsh_ss(load_u16(w + (size_t)b * bw)) * _cvtsh_ss(x[b].d);
        const float p = (float)isum * d;
        sum = sum + p;
    }
    return sum;
}

static void dot_q8_0(int64_t n, float *s, const void *w, const void *x) {
    *s = dot_row(n / QW_QK8_0, w, x, false);
}
static void dot_q4_0(int64_t n, float *s, const void *w, const void *x) {
    *s = dot_row(n / QW_QK8_0, w, x, true);
}

/* 16 rows × one token: acc lane r = row r's reference-order chain. */
static inline __attribute__((always_inline)) void strip16(int64_t nb, const uint8_t *w, size_t rb, const __m256i *xu,
                                                          const float *dx, float *y, const bool q4) {
    const int64_t bw = q4 ? (int64_t)sizeof(qw_block_q4_0) : (int64_t)sizeof(qw_block_q8_0);
    /* the unpack tree below leaves row r's sum in element perm[r]; this puts it back */
    const __m512i unperm = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    const __m512i rowoff = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32((int)rb));
    const __m512i k80 = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m512i x2 = _mm512_broadcast_i64x4(xu[b]);
        __m512i z[8];
        for (int i = 0; i < 8; i++) {
            const uint8_t *r0 = w + (size_t)(2 * i) * rb, *r1 = r0 + rb;
            const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(q4 ? w8_q4(r0, b) : w8_q8(r0, b)),
                                                  q4 ? w8_q4(r1, b) : w8_q8(r1, b), 1);
            const __m512i nw = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k80, wv));
            z[i] = _mm512_dpbusd_epi32(nw, x2, wv);
        }
        /* 8 rows-pairs of 8 lanes -> 16 sums: pairwise unpack-adds, then across 128-bit lanes */
        __m512i u[4], s[2];
        for (int i = 0; i < 4; i++)
            u[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]),
                                    _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]));
        for (int i = 0; i < 2; i++)
            s[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(u[2 * i], u[2 * i + 1]),
                                    _mm512_unpackhi_epi64(u[2 * i], u[2 * i + 1]));
        const __m512i t = _mm512_add_epi32(_mm512_shuffle_i32x4(s[0], s[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                           _mm512_shuffle_i32x4(s[0], s[1], _MM_SHUFFLE(3, 1, 3, 1)));
        const __m512i isum = _mm512_permutexvar_epi32(unperm, t);
        /* the 16 rows' scales: 4 bytes at each block start, the low 2 are d */
        const __m512i d32 = _mm512_i32gather_epi32(rowoff, (const void *)(w + b * bw), 1);
        const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d32));
        const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(dx[b]));
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(isum), d));
    }
    _mm512_storeu_ps(y, acc);
}

static inline __attribute__((always_inline)) void gemv_rows(int64_t n, const void *wv, size_t rb, int64_t n_rows,
                                                            const void *const *xv, float *const *yv, const bool q4) {
    const int64_t nb = n / QW_QK8_0;
    const qw_block_q8_0 *x = xv[0];
    __m256i xu[QW_GEMM_K_MAX / QW_QK8_0];
    float dx[QW_GEMM_K_MAX / QW_QK8_0];
    for (int64_t b = 0; b < nb; b++) {
        xu[b] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x[b].qs), _mm256_set1_epi8((char)0x80));
        dx[b] = _cvtsh_ss(x[b].d);
    }
    const uint8_t *w = wv;
    float *y = yv[0];
    const int64_t ahead = qw_decode_ahead_rows(rb);
    qw_prefetch_decode(w, (size_t)(n_rows < ahead + STRIP ? n_rows : ahead + STRIP) * rb);
    int64_t r = 0;
    for (; r + STRIP <= n_rows; r += STRIP) {
        const int64_t pf0 = r + STRIP + ahead, pf1 = pf0 + STRIP < n_rows ? pf0 + STRIP : n_rows;
        if (pf0 < pf1) qw_prefetch_decode(w + (size_t)pf0 * rb, (size_t)(pf1 - pf0) * rb);
        strip16(nb, w + (size_t)r * rb, rb, xu, dx, y + r, q4);
    }
    for (; r < n_rows; r++) y[r] = dot_row(nb, w + (size_t)r * rb, x, q4);
}

static void gemv_q8_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    gemv_rows(n, w, rb, n_rows, x, y, false);
}
static void gemv_q4_0(int64_t n, const void *w, size_t rb, int64_t n_rows, const void *const *x, float *const *y) {
    gemv_rows(n, w, rb, n_rows, x, y, true);
}

const qw_blockorder_kernels qw_blockorder_avx512 = {
    .dot_q8_0 = dot_q8_0,
    .dot_q4_0 = dot_q4_0,
    .gemv_q8_0 = gemv_q8_0,
    .gemv_q4_0 = gemv_q4_0,
};
