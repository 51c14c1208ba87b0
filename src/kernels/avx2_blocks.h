/* avx2_blocks.h — the AVX2 level's exact int32 lanes of one Q8_0 / Q4_0
 * block against a Q8_0 token block, shared by its dots (quant_avx2.c) and
 * its tiles and row loops (gemm_avx2.c), so both compute the same integers
 * the same way.  Include only from files built with AVX2 (*_avx2.c).
 *
 * int8 x int8 without VNNI: maddubs multiplies unsigned by signed bytes, so
 * the weight is made non-negative (|w|) and its sign moved to the token
 * (sign(x, w)); pair sums fit int16 (2 * 128 * 127).  Q4_0 nibbles are
 * unsigned already: sum(nib * x) - 8 * sum(x), both with maddubs. */
#ifndef QWISP_KERNELS_AVX2_BLOCKS_H
#define QWISP_KERNELS_AVX2_BLOCKS_H

#include <immintrin.h>
#include <stdint.h>

/* 8 int32 lanes, each the sum of 4 products w*x of int8; aw = |w|
 * (sign(w, w)), passed in so a tile computes it once for its tokens. */
static inline __m256i dot_i8x32_abs(__m256i aw, __m256i w, __m256i x) {
    const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

static inline __m256i dot_i8x32(__m256i w, __m256i x) { return dot_i8x32_abs(_mm256_sign_epi8(w, w), w, x); }

/* The 32 nibbles of a Q4_0 block in element order: low nibbles (elements
 * 0..15) in bytes 0..15, high nibbles (16..31) in bytes 16..31. */
static inline __m256i q4_nibbles(const uint8_t *qs) {
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

/* maddubs(8, x): the token's "8 * x" pair sums, which depend on it alone. */
static inline __m256i q4_e8(__m256i x) { return _mm256_maddubs_epi16(_mm256_set1_epi8(8), x); }

/* 8 int32 lanes of sum((nib - 8) * x), exact; e8 = q4_e8(x). */
static inline __m256i dot_q4x32_e8(__m256i nib, __m256i x, __m256i e8) {
    return _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(nib, x), e8), _mm256_set1_epi16(1));
}

static inline __m256i dot_q4x32(__m256i nib, __m256i x) { return dot_q4x32_e8(nib, x, q4_e8(x)); }

#endif
