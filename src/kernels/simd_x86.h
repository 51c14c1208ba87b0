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
 *             as floats, picked out with word permutes (the decode row loops' chunks).
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
/* Lane j (j < m = the mask's count of set bits, which are its low ones; 0
 * elsewhere): the fp16 at p + j * stride (even, at most 34: scale 15 then
 * lies in the first 512 bytes), a block's scale at its start, as a float.
 * The scales' words are picked out of the chunk's bytes with 16-bit
 * two-register permutes, 128 bytes a permute, instead of a 16-lane gather:
 * a gather cost the decode loops a third of their speed from cache
 * (bench/RESULTS.md, session 24), and Intel's microcode for Gather Data
 * Sampling slows gathers further.  Reads only the m blocks' bytes. */
static inline __attribute__((always_inline)) __mmask32 words_mask(int n) {
    return n >= 32 ? (__mmask32)0xffffffffu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1);
}
/* The words needed from a chunk of m blocks: up to block m - 1's scale. */
static inline __attribute__((always_inline)) int scales16_words(const int stride, __mmask16 mask) {
    return stride / 2 * (__builtin_popcount(mask) - 1) + 1;
}
/* scales16 from the chunk's bytes already loaded: piece[i] = bytes 64i ..
 * 64i + 63 (zero or anything past the blocks), as many pieces as the
 * scales' words reach (2 per 128-byte window; 8 for stride 34). */
static inline __attribute__((always_inline)) __m512 scales16_picked(const __m512i *piece, const int stride,
                                                                     __mmask16 mask) {
    const int w = stride / 2, nwords = scales16_words(stride, mask);
    /* 16-bit lane j (j = 0..15; the pairs 0x10000 … are lanes 2i, 2i + 1): scale
     * j's word index within its 64-word (128-byte) window */
    const __m512i idx = _mm512_and_si512(
        _mm512_mullo_epi16(_mm512_setr_epi32(0x10000, 0x30002, 0x50004, 0x70006, 0x90008, 0xb000a, 0xd000c, 0xf000e, 0,
                                             0, 0, 0, 0, 0, 0, 0),
                           _mm512_set1_epi16((short)w)),
        _mm512_set1_epi16(63));
    __m512i words = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        if (64 * q >= nwords) break;
        __mmask32 in_q = 0; /* the lanes whose scale lies in window q */
        for (int j = 0; j < 16; j++)
            if (w * j / 64 == q) in_q |= (__mmask32)1 << j;
        words = _mm512_mask_blend_epi16(in_q, words, _mm512_permutex2var_epi16(piece[2 * q], idx, piece[2 * q + 1]));
    }
    return _mm512_maskz_cvtph_ps(mask, _mm512_castsi512_si256(words));
}
static inline __attribute__((always_inline)) __m512 scales16(const void *p, const int stride, __mmask16 mask) {
    const int nwords = scales16_words(stride, mask);
    const char *c = p;
    __m512i piece[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) /* the windows scales16_picked reads, whole */
        piece[i] = 64 * (i / 2) < nwords ? _mm512_maskz_loadu_epi16(words_mask(nwords - 32 * i), c + 64 * i)
                                         : _mm512_setzero_si512();
    return scales16_picked(piece, stride, mask);
}
#endif

static inline int32_t sum8_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

#endif
