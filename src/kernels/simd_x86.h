/* simd_x86.h — private to the x86 SIMD kernel files (*_avx2.c, *_avx512.c):
 * the small helpers more than one of them needs, written once.  Include only
 * from files compiled with AVX2 or better (the Makefile's ISA flags).
 *
 *   hsum8     the sum of 8 f32 lanes in one fixed order ((lo + hi) pairwise,
 *             then the last two), the order llama.cpp's AVX2 dots reduce in, so
 *             every level that ends a chain with it gives the same bits;
 *   load_u16  an unaligned 16-bit load (a block's f16 scale);
 *   sum8_epi32  the sum of 8 int32 lanes (exact in any order);
 *   q4_0_i8   a Q4_0 block's 32 quants as int8 (nibble - 8), in element order;
 *   scales16  (AVX-512 files) the fp16 scales of up to 16 consecutive blocks
 *             as floats, one gather (the decode row loops' chunks).
 */
#ifndef QWISP_KERNELS_SIMD_X86_H
#define QWISP_KERNELS_SIMD_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline uint16_t load_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* qs: a Q4_0 block's 16 bytes; element i < 16 is byte i's low nibble, 16 + i its high one. */
static inline __m256i q4_0_i8(const void *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    return _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}

#ifdef __AVX512F__
/* Lane j (j < 16, mask bit j set; 0 elsewhere): the fp16 at p + j * stride,
 * a block's scale at its start, as a float.  Reads 4 bytes a lane. */
static inline __m512 scales16(const void *p, int stride, __mmask16 mask) {
    const __m512i off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(stride));
    const __m512i d32 = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, off, p, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d32));
}
#endif

static inline int32_t sum8_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

#endif
