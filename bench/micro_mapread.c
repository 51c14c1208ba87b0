/* bench/micro_mapread.c — how fast one thread reads 1 GiB of a file's page
 * cache through a read-only mapping (the way the resident tier reads
 * weights), against anonymous memory with 4 KB pages and with transparent
 * huge pages: whether the mapping itself holds decode under the read probe.
 * Plain 512-bit loads, four streams of 64 bytes, best of 7 passes; then the
 * same with software prefetch 4 KB ahead.
 *
 *   gcc -O2 -mavx512f bench/micro_mapread.c -o build/micro_mapread
 *   taskset -c 1 build/micro_mapread FILE   (FILE >= 1 GiB, read once first) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static volatile __m512i g_sink; /* keeps the loads */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double read_gbs(const char *p, size_t n, int prefetch) {
    double best = 0;
    for (int rep = 0; rep < 7; rep++) {
        const double t0 = now();
        __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
        for (size_t i = 0; i < n; i += 256) {
            if (prefetch)
                for (int l = 0; l < 256; l += 64) _mm_prefetch(p + i + 4096 + l, _MM_HINT_T0);
            a = _mm512_add_epi32(a, _mm512_loadu_si512(p + i));
            b = _mm512_add_epi32(b, _mm512_loadu_si512(p + i + 64));
            c = _mm512_add_epi32(c, _mm512_loadu_si512(p + i + 128));
            d = _mm512_add_epi32(d, _mm512_loadu_si512(p + i + 192));
        }
        g_sink = _mm512_add_epi32(_mm512_add_epi32(a, b), _mm512_add_epi32(c, d));
        const double gbs = n / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

int main(int argc, char **argv) {
    const size_t n = (size_t)1 << 30;
    if (argc != 2) {
        fprintf(stderr, "usage: micro_mapread FILE (at least 1 GiB)\n");
        return 2;
    }
    const int fd = open(argv[1], O_RDONLY);
    const char *f = fd < 0 ? MAP_FAILED : mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
    char *a4 = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *ah = aligned_alloc((size_t)1 << 21, n);
    if (f == MAP_FAILED || a4 == MAP_FAILED || !ah || lseek(fd, 0, SEEK_END) < (off_t)n) {
        fprintf(stderr, "micro_mapread: %s: cannot map 1 GiB of it, or out of memory\n", argv[1]);
        return 1;
    }
    volatile char touch = 0;
    for (size_t i = 0; i < n; i += 4096) touch += f[i]; /* page cache in, mapping populated */
    madvise(a4, n, MADV_NOHUGEPAGE);
    memset(a4, 1, n);
    madvise(ah, n, MADV_HUGEPAGE);
    memset(ah, 1, n);
    for (int pf = 0; pf < 2; pf++)
        printf("%s: file mapping %.1f GB/s | anonymous 4 KB pages %.1f | anonymous THP %.1f\n",
               pf ? "prefetch 4 KB ahead" : "plain loads", read_gbs(f, n, pf), read_gbs(a4, n, pf),
               read_gbs(ah, n, pf));
    return 0;
}
