/* micro_isa.c — how many 512-bit integer multiply instructions one core
 * retires per second: VPDPWSSD, VPMADDUBSW and VPDPBUSD, each alone, eight
 * independent chains (enough to hide their latency), plus both of the Q4_K
 * tile's pair (maddubs + VPDPWSSD) interleaved.  The K-quant tiles issue one
 * VPMADDUBSW and one VPDPWSSD per 64 weights and token, so these rates bound
 * their multiply-adds per second (bench/RESULTS.md compares the two).
 *
 * Not built by the Makefile (it needs AVX-512 VNNI to run):
 *   gcc -O2 -mavx512f -mavx512bw -mavx512vnni bench/micro_isa.c -o /tmp/micro_isa && /tmp/micro_isa
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

enum { CHAINS = 8 };
static const long N = 100000000; /* instructions per measurement */

/* Eight chains in eight named registers (an array would live in memory);
 * the empty asm keeps every instruction. */
#define KEEP(v) __asm__ volatile("" : "+v"(v))
#define STEP(v, EXPR) \
    do {                 \
        v = EXPR(v);     \
        KEEP(v);         \
    } while (0)
#define RUN(E0, E1)                                                                                             \
    do {                                                                                                        \
        const double t0 = now_s();                                                                              \
        for (long i = 0; i < N / CHAINS; i++) {                                                                 \
            STEP(a0, E0); STEP(a1, E1); STEP(a2, E0); STEP(a3, E1);                                             \
            STEP(a4, E0); STEP(a5, E1); STEP(a6, E0); STEP(a7, E1);                                             \
        }                                                                                                       \
        dt = now_s() - t0;                                                                                      \
    } while (0)

static __m512i g_b, g_c;
static inline __m512i dpwssd(__m512i a) { return _mm512_dpwssd_epi32(a, g_b, g_c); }
static inline __m512i maddubs(__m512i a) { return _mm512_maddubs_epi16(a, g_b); }
static inline __m512i dpbusd(__m512i a) { return _mm512_dpbusd_epi32(a, g_b, g_c); }

int main(void) {
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2), a3 = _mm512_set1_epi32(3);
    __m512i a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5), a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7);
    g_b = _mm512_set1_epi16(3), g_c = _mm512_set1_epi16(5);
    double dt, best[4] = {0};
    for (int pass = 0; pass < 3; pass++) {
        RUN(dpwssd, dpwssd);
        if (N / dt > best[0]) best[0] = N / dt;
        RUN(maddubs, maddubs);
        if (N / dt > best[1]) best[1] = N / dt;
        RUN(dpbusd, dpbusd);
        if (N / dt > best[2]) best[2] = N / dt;
        RUN(maddubs, dpwssd);
        if (N / dt > best[3]) best[3] = N / dt;
    }
    const __m512i all = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                         _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    printf("zmm per second, one core (best of 3): VPDPWSSD %.2f G, VPMADDUBSW %.2f G, VPDPBUSD %.2f G, "
           "maddubs + VPDPWSSD interleaved %.2f G (%d)\n",
           best[0] / 1e9, best[1] / 1e9, best[2] / 1e9, best[3] / 1e9, _mm512_reduce_add_epi32(all) & 1);
    return 0;
}
