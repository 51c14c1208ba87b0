/* kquant_avx2.c — AVX2 dots of the K-quants (Q2_K..Q6_K) with Q8_K.
 *
 * Each super-block is expanded into eight 32-byte vectors of unsigned levels
 * (0..63, element order) and sixteen int16 group scales; one shared core
 * multiplies the levels with the Q8_K bytes (maddubs: pairs into int16, no
 * saturation since 63*128*2 < 2^15), weights each 16-group by its scale
 * (madd) and sums in int32.  Level offsets (Q6_K's 32, Q3_K's 4) and the
 * affine types' mins go through the Q8_K group sums (bsums) in scalar code.
 * The per-block float expression is the reference's (kquant_impl.h), so the
 * result is bit-identical with kquant_ref.c — except Q4_K and Q6_K (see dot_q4_K).
 *
 * Rows need only 2-byte alignment (Q8_K 4): all vector loads are unaligned.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/kquant_blocks_x86.h"
#include "kernels/kquant_impl.h"

/* acc + madd(p, s) (int16 pairs times scales, summed into int32 lanes): one
 * VPDPWSSD where the build has AVX512_VNNI (this file compiled for the
 * AVX-512 level, kquant_avx512.c), two instructions otherwise; the same int32
 * lanes either way. */
static inline __m256i add_madd(__m256i acc, __m256i p, __m256i s) {
#ifdef __AVX512VNNI__
    return _mm256_dpwssd_epi32(acc, p, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
#endif
}

/* sum_g sc[g] * sum_{i in g} q[i]*y[i] for one super-block, in 8 lanes. */
static inline __m256i block_sumi_v(const __m256i q[8], const int16_t sc[16], const int8_t *y) {
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 8; c++) {
        const __m256i yv = _mm256_loadu_si256((const __m256i *)(y + 32 * c));
        const __m256i p = _mm256_maddubs_epi16(q[c], yv);
        const __m256i s = _mm256_set_m128i(_mm_set1_epi16(sc[2 * c + 1]), _mm_set1_epi16(sc[2 * c]));
        acc = add_madd(acc, p, s);
    }
    return acc;
}

/* block_sumi_v with the 16 group scales given as int16 in one register
 * (groups 0-7 in the low lane, 8-15 in the high): each 32-element chunk c
 * needs scale 2c in its low half and 2c+1 in its high half, picked with one
 * in-lane pshufb from the low or high groups duplicated to both lanes. */
static inline __m256i block_sumi_vs(const __m256i q[8], __m256i sc16, const int8_t *y) {
    const __m256i lo_groups = _mm256_permute2x128_si256(sc16, sc16, 0x00);
    const __m256i hi_groups = _mm256_permute2x128_si256(sc16, sc16, 0x11);
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        const int g = (2 * c) & 7; /* position of group 2c within its 8 */
        const __m256i pick = _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 * (2 * g + 3) + 2 * g + 2)),
                                              _mm_set1_epi16((short)(0x0100 * (2 * g + 1) + 2 * g)));
        const __m256i s = _mm256_shuffle_epi8(c < 4 ? lo_groups : hi_groups, pick);
        const __m256i p = _mm256_maddubs_epi16(q[c], _mm256_loadu_si256((const __m256i *)(y + 32 * c)));
        acc = add_madd(acc, p, s);
    }
    return acc;
}

/* The same summed to one int32. */
static inline int32_t block_sumi(const __m256i q[8], const int16_t sc[16], const int8_t *y) {
    const __m256i acc = block_sumi_v(q, sc, y);
    __m128i v = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4E));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xB1));
    return _mm_cvtsi128_si32(v);
}

static inline __m256i lo_nib(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
static inline __m256i hi_nib(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }
/* Per byte: (v & m) ? val : 0, for a single-bit mask m. */
static inline __m256i bit_to(__m256i v, int m, int val) {
    const __m256i mm = _mm256_set1_epi8((char)m);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, mm), mm), _mm256_set1_epi8((char)val));
}

/* Q4_K is the bulk of real files (Q4_K_M), so it gets its own loop: scales
 * and mins unpacked in vector registers, the mins' correction as one
 * 8-lane madd against the paired group sums, and float accumulators carried
 * across super-blocks (one horizontal sum per row instead of one per block).
 * The float order therefore differs from the reference's per-block
 * expression (tests allow 1e-5 of the sum of |terms|); the integer sums per
 * group are the same.  The prefill tile (gemm_q4_K) does the dot's float
 * operations per token in the same order, so it gives the dot's bits.  The
 * packed scales are unpacked by kquant_blocks_x86.h's q4k_scales_mins. */

/* Sum of 8 float lanes minus 4 (the mins' correction; zero for Q6_K). */
static inline float hsum8_minus4(__m256 acc, __m128 sub) {
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    v = _mm_sub_ps(v, sub);
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

static inline float q4k_finish(__m256 acc, __m128 accm) { return hsum8_minus4(acc, accm); }

/* One block's mins correction for one token, in 4 lanes (q4k_finish
 * subtracts them): accm += d8 * dmin * (mins . pair sums). */
static inline __m128 q4k_mins_step(__m128i sm, const qw_block_q8_K *y, float d8, uint16_t dmin, __m128 accm) {
    const __m128i mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm));
    return _mm_fmadd_ps(_mm_set1_ps(d8 * _cvtsh_ss(dmin)), _mm_cvtepi32_ps(_mm_madd_epi16(mins, q8k_pair_sums(y))),
                        accm);
}

/* The dot does the tile's two steps fused, with nothing spilled: the same
 * int32 lanes (integer sums are exact in any order) and the same float
 * operations, so the same bits. */
#ifndef KQ_DOT_Q4_K /* the AVX-512 build brings its own (kquant_avx512.c) */
/* What the row loop prepares of the token once a call, per block: its Q8_K
 * scale and its group sums paired per 32 elements. */
typedef struct {
    float d8[QW_GEMM_K_MAX / QW_QK_K];
    __m128i pairs[QW_GEMM_K_MAX / QW_QK_K];
} q4k_token;

/* One Q4_K row of nb blocks: the dot (tok, pf NULL: the token read from y)
 * and the row loop's body (tok prepared, pf its prefetch).  Both run this
 * code, so both give its bits (d8*d and d8*dmin are the same products as
 * the tile's). */
static inline __attribute__((always_inline)) float q4k_row(const qw_block_q4_K *b, const qw_block_q8_K *y,
                                                           int64_t nb, const q4k_token *tok, const row_prefetch *pf) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++, b++) {
        if (pf && pf->row) qw_prefetch_block((const qw_block_q4_K *)pf->row + i, sizeof *b, pf->l2);
        __m128 dd;
        const __m128i sm = q4k_block_head(b, tok ? tok->d8[i] : q8k_d(&y[i]),
                                          tok ? tok->pairs[i] : q8k_pair_sums(&y[i]), &accm, &dd);
        const __m128i s16 = _mm_cvtepu8_epi16(sm);
        const __m256i scales = _mm256_set_m128i(s16, s16);
        const int8_t *yq = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m256i q4 = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * j));
            const __m256i lo = _mm256_and_si256(q4, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
            const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(yq + 64 * j)));
            const __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(yq + 64 * j + 32)));
            sumi = add_madd(sumi, pl, _mm256_shuffle_epi8(scales, q4k_pick(2 * j)));
            sumi = add_madd(sumi, ph, _mm256_shuffle_epi8(scales, q4k_pick(2 * j + 1)));
        }
        acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(sumi), acc);
    }
    return q4k_finish(acc, accm);
}

static void dot_q4_K(int64_t n, float *s, const void *w, const void *x) { *s = q4k_row(w, x, n / QW_QK_K, NULL, NULL); }
#define KQ_DOT_Q4_K dot_q4_K

/* What the row loop prepares of the token once a call. */
static inline void q4k_token_prep(const qw_block_q8_K *xt, int64_t nb, q4k_token *tok) {
    for (int64_t i = 0; i < nb; i++) tok->d8[i] = q8k_d(&xt[i]), tok->pairs[i] = q8k_pair_sums(&xt[i]);
}

/* Decode: the row loop (kquant_blocks_x86.h), the token prepared once a call. */
Q4K_GEMV_ROWS(gemv_q4_K, q4k_row)
#define KQ_GEMV_Q4_K gemv_q4_K
#endif

#ifndef KQ_GEMM_Q4_K /* the AVX-512 build brings its own (kquant_avx512.c) */
/* Prefill tile: each weight super-block is unpacked once for QW_GEMM_TOKS
 * tokens (qw_gemm_fn contract: the dot's bits — the integer sums are exact
 * in any order, the float steps are the dot's).  Everything stays in
 * registers when compiled with 32 of them (kquant_avx512.c). */
static void gemm_q4_K(int64_t n, const void *w, size_t w_row_bytes, int64_t n_rows, const void *const *x,
                      float *const *y) {
    _Static_assert(QW_GEMM_TOKS == 4, "the tile keeps four accumulators in registers");
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t r = 0; r < n_rows; r++) {
        const qw_block_q4_K *b = (const qw_block_q4_K *)((const char *)w + (size_t)r * w_row_bytes);
        __m256 acc[4];
        __m128 accm[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) acc[t] = _mm256_setzero_ps(), accm[t] = _mm_setzero_ps();
        for (int64_t i = 0; i < n / QW_QK_K; i++, b++) {
            const __m128i sm = q4k_scales_mins(b->scales);
            const __m128i s16 = _mm_cvtepu8_epi16(sm);
            const __m256i scales = _mm256_set_m128i(s16, s16);
            const float d = _cvtsh_ss(b->d);
            __m256i sumi[4];
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m256i q4 = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * j));
                const __m256i lo = _mm256_and_si256(q4, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
                const __m256i sa = _mm256_shuffle_epi8(scales, q4k_pick(2 * j));
                const __m256i sb = _mm256_shuffle_epi8(scales, q4k_pick(2 * j + 1));
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++) {
                    const int8_t *yq = ((const qw_block_q8_K *)x[t] + i)->qs + 64 * j;
                    const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)yq));
                    const __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(yq + 32)));
                    sumi[t] = add_madd(sumi[t], pl, sa);
                    sumi[t] = add_madd(sumi[t], ph, sb);
                }
            }
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                const qw_block_q8_K *yb = (const qw_block_q8_K *)x[t] + i;
                const float d8 = q8k_d(yb);
                accm[t] = q4k_mins_step(sm, yb, d8, b->dmin, accm[t]);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d8 * d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) y[t][r] = q4k_finish(acc[t], accm[t]);
    }
}
#define KQ_GEMM_Q4_K gemm_q4_K
#endif

#ifndef KQ_DOT_Q5_K /* the AVX-512 build brings its own (kquant_avx512.c) */
static void dot_q5_K(int64_t n, float *s, const void *w, const void *x) {
    const qw_block_q5_K *b = w;
    const qw_block_q8_K *y = x;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QW_QK_K; i++, b++, y++) {
        __m256i q[8];
        int16_t sc[16];
        int32_t summ = 0;
        const __m256i hv = _mm256_loadu_si256((const __m256i *)b->qh);
        for (int c = 0; c < 4; c++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
            q[2 * c] = _mm256_or_si256(lo_nib(v), bit_to(hv, 1 << (2 * c), 16));
            q[2 * c + 1] = _mm256_or_si256(hi_nib(v), bit_to(hv, 1 << (2 * c + 1), 16));
        }
        for (int j = 0; j < 8; j++) {
            uint8_t s6, m6;
            qw_kq_scale_min_k4(j, b->scales, &s6, &m6);
            sc[2 * j] = sc[2 * j + 1] = s6;
            summ += m6 * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
        }
        const int32_t sumi = block_sumi(q, sc, y->qs);
        acc += q8k_d(y) * (_cvtsh_ss(b->d) * (float)sumi - _cvtsh_ss(b->dmin) * (float)summ);
    }
    *s = acc;
}
#define KQ_DOT_Q5_K dot_q5_K
#endif

/* Q6_K carries float accumulators across super-blocks like Q4_K (the LM
 * head and embeddings of Q4_K_M files are Q6_K); the -32 offset goes through
 * one madd of the scales with the group sums. */
/* The 256 levels of a Q6_K super-block (0..63, element order) in 8 vectors. */
static inline __attribute__((always_inline)) void q6k_levels(const qw_block_q6_K *b, __m256i q[8]) {
    const __m256i m30 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i hv = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        q[4 * h + 0] = _mm256_or_si256(lo_nib(l0), _mm256_and_si256(_mm256_slli_epi16(hv, 4), m30));
        q[4 * h + 1] = _mm256_or_si256(lo_nib(l1), _mm256_and_si256(_mm256_slli_epi16(hv, 2), m30));
        q[4 * h + 2] = _mm256_or_si256(hi_nib(l0), _mm256_and_si256(hv, m30));
        q[4 * h + 3] = _mm256_or_si256(hi_nib(l1), _mm256_and_si256(_mm256_srli_epi16(hv, 2), m30));
    }
}

#ifndef KQ_DOT_Q6_K /* the AVX-512 build brings its own (kquant_avx512.c) */
/* One Q6_K row of nb blocks: the dot (pf NULL) and the row loop's body. */
static inline __attribute__((always_inline)) float q6k_row(const qw_block_q6_K *b, const qw_block_q8_K *y, int64_t nb,
                                                           const row_prefetch *pf) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++, b++, y++) {
        if (pf && pf->row) qw_prefetch_block((const qw_block_q6_K *)pf->row + i, sizeof *b, pf->l2);
        __m256i q[8];
        q6k_levels(b, q);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        const __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums));
        const __m256i sumi = _mm256_sub_epi32(block_sumi_vs(q, sc16, y->qs), _mm256_slli_epi32(off, 5));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(q8k_d(y) * _cvtsh_ss(b->d)), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum8_minus4(acc, _mm_setzero_ps());
}

static void dot_q6_K(int64_t n, float *s, const void *w, const void *x) { *s = q6k_row(w, x, n / QW_QK_K, NULL); }
#define KQ_DOT_Q6_K dot_q6_K

/* Decode: the row loop (kquant_blocks_x86.h), the constants set once a call. */
KQ_GEMV_ROWS(gemv_q6_K, qw_block_q6_K, q6k_row)
#define KQ_GEMV_Q6_K gemv_q6_K
#endif

#ifndef KQ_GEMM_WIDE_Q4_K
#define KQ_GEMM_WIDE_Q4_K NULL
#endif

#ifndef KQ_GEMM_Q2_K /* Q2_K / Q3_K tiles: only the AVX-512 build has them */
#define KQ_GEMM_Q2_K NULL
#define KQ_GEMM_WIDE_Q2_K NULL
#define KQ_GEMM_Q3_K NULL
#define KQ_GEMM_WIDE_Q3_K NULL
#endif

#ifndef KQ_GEMM_Q5_K /* Q5_K tiles: only the AVX-512 build has them */
#define KQ_GEMM_Q5_K NULL
#define KQ_GEMM_WIDE_Q5_K NULL
#endif

#ifndef KQ_QUANTIZE_Q8_K
#define KQ_QUANTIZE_Q8_K qw_ref_quantize_q8_K
#endif

#ifndef KQ_GEMM_Q6_K /* a Q6_K tile needs 32 registers: only the AVX-512 build has one */
#define KQ_GEMM_Q6_K NULL
#define KQ_GEMM_WIDE_Q6_K NULL
#endif

#ifndef KQ_DOT_Q3_K /* the AVX-512 build brings its own (kquant_avx512.c) */
static void dot_q3_K(int64_t n, float *s, const void *w, const void *x) {
    const qw_block_q3_K *b = w;
    const qw_block_q8_K *y = x;
    const __m256i m3 = _mm256_set1_epi8(3);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QW_QK_K; i++, b++, y++) {
        __m256i q[8];
        int16_t sc[16];
        int32_t off = 0;
        const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
            for (int k = 0; k < 4; k++)
                q[4 * h + k] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 2 * k), m3),
                                               bit_to(hm, 1 << (4 * h + k), 4));
        }
        for (int g = 0; g < 16; g++) {
            sc[g] = (int16_t)qw_kq_scale_q3(g, b->scales);
            off += sc[g] * y->bsums[g];
        }
        const int32_t sumi = block_sumi(q, sc, y->qs) - 4 * off;
        acc += q8k_d(y) * (_cvtsh_ss(b->d) * (float)sumi);
    }
    *s = acc;
}
#define KQ_DOT_Q3_K dot_q3_K
#endif

#ifndef KQ_DOT_Q2_K /* the AVX-512 build brings its own (kquant_avx512.c) */
static void dot_q2_K(int64_t n, float *s, const void *w, const void *x) {
    const qw_block_q2_K *b = w;
    const qw_block_q8_K *y = x;
    const __m256i m3 = _mm256_set1_epi8(3);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QW_QK_K; i++, b++, y++) {
        __m256i q[8];
        int16_t sc[16];
        int32_t summ = 0;
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
            for (int k = 0; k < 4; k++) q[4 * h + k] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * k), m3);
        }
        for (int g = 0; g < 16; g++) {
            sc[g] = b->scales[g] & 0xF;
            summ += (b->scales[g] >> 4) * y->bsums[g];
        }
        const int32_t sumi = block_sumi(q, sc, y->qs);
        acc += q8k_d(y) * (_cvtsh_ss(b->d) * (float)sumi - _cvtsh_ss(b->dmin) * (float)summ);
    }
    *s = acc;
}
#define KQ_DOT_Q2_K dot_q2_K
#endif

#ifndef KQ_GEMV_Q4_K
#define KQ_GEMV_Q4_K NULL
#endif
#ifndef KQ_GEMV_Q6_K
#define KQ_GEMV_Q6_K NULL
#endif
#ifndef KQ_GEMV_Q5_K /* only the AVX-512 build has one */
#define KQ_GEMV_Q5_K NULL
#endif

/* Q8_K x Q8_K (never a weight type in practice) stays on the reference. */
const qw_kq_dots qw_kq_dots_avx2 = {
    .q2_K = KQ_DOT_Q2_K, .q3_K = KQ_DOT_Q3_K, .q4_K = KQ_DOT_Q4_K, .q5_K = KQ_DOT_Q5_K, .q6_K = KQ_DOT_Q6_K,
    .q8_K = qw_ref_dot_q8_K,
    .gemm_q4_K = KQ_GEMM_Q4_K, .gemm_q6_K = KQ_GEMM_Q6_K,
    .gemm_wide_q4_K = KQ_GEMM_WIDE_Q4_K, .gemm_wide_q6_K = KQ_GEMM_WIDE_Q6_K,
    .quantize_q8_K = KQ_QUANTIZE_Q8_K,
    .gemm_q5_K = KQ_GEMM_Q5_K, .gemm_wide_q5_K = KQ_GEMM_WIDE_Q5_K,
    .gemm_q2_K = KQ_GEMM_Q2_K, .gemm_wide_q2_K = KQ_GEMM_WIDE_Q2_K,
    .gemm_q3_K = KQ_GEMM_Q3_K, .gemm_wide_q3_K = KQ_GEMM_WIDE_Q3_K,
    .gemv_q4_K = KQ_GEMV_Q4_K, .gemv_q6_K = KQ_GEMV_Q6_K, .gemv_q5_K = KQ_GEMV_Q5_K,
};
