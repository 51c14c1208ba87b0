/* kquant_blocks_x86.h — private to the x86 K-quant kernels (kquant_avx2.c,
 * kquant_avx512.c, amx_kquant_avx512.c): the block pieces they share, so that
 * the levels read a Q8_K block and a Q4_K chunk the same way.  The 512-bit
 * ones exist where the including file is built for AVX-512. */
#ifndef QWISP_KERNELS_KQUANT_BLOCKS_X86_H
#define QWISP_KERNELS_KQUANT_BLOCKS_X86_H

#include <immintrin.h>
#include <string.h>

#include "kernels/kquant_impl.h"

/* A Q8_K block's scale (a float; Q8_K rows are only 4-byte aligned). */
static inline float q8k_d(const qw_block_q8_K *y) {
    float d;
    memcpy(&d, &y->d, sizeof d);
    return d;
}

/* A Q8_K block's sixteen group sums added in pairs: the sums over the 32
 * elements each Q4_K scale and min covers. */
static inline __m128i q8k_pair_sums(const qw_block_q8_K *y) {
    const __m256i bs = _mm256_loadu_si256((const __m256i *)y->bsums);
    return _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
}

/* pshufb control selecting int16 element g in every position of a lane. */
static inline __m256i q4k_pick(int g) { return _mm256_set1_epi16((short)(0x0100 * (2 * g + 1) + 2 * g)); }

#ifdef __AVX512F__
/* Per chunk j of 32 bytes: group 2j's scale in the low half of a 512-bit
 * register, group 2j+1's in the high half (pshufb controls). */
static inline __m512i q4k_pick_zmm(int j) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(q4k_pick(2 * j)), q4k_pick(2 * j + 1), 1);
}

/* Chunk j of a Q4_K super-block as 64 levels in element order: the 32
 * bytes' low nibbles, then their high nibbles. */
static inline __m512i q4k_chunk_zmm(const qw_block_q4_K *b, int j) {
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * j)));
    return _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), _mm512_set1_epi8(0x0F));
}
#endif

#endif
