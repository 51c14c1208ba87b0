/* anon_copy.c — QWISP_WEIGHTS_COPY=1: the resident tier's weights moved from
 * the file mapping into anonymous memory, at the same addresses.
 *
 * Why: a decode token can read the page cache behind a file mapping slower
 * than anonymous huge pages holding the same bytes: much slower when the
 * cache is in 4 KB pages (a file written moments before), a little when a
 * cold read filled it with 2 MB folios (bench/RESULTS.md, 2026-12-05 session
 * 12, an AMD EPYC VM: decode median 1.34x and 1.11x).  llama.cpp gets
 * anonymous memory where it repacks weights; this is the same trade made
 * explicit: the footprint grows by the weights (anonymous memory the OS
 * cannot drop), so it is opt-in.
 *
 * How: the span covering every weight tensor (page-aligned outward) is copied
 * into a fresh anonymous mapping placed at the same offset modulo 2 MiB (so
 * its 2 MiB blocks can be transparent huge pages, MADV_HUGEPAGE), made
 * read-only, and mremap'ed over the span.  Pointers into the mapping (the
 * bound tensors, the expert parts) stay valid; bytes outside the span (the
 * GGUF header and metadata) stay file-backed; the final munmap of the GGUF
 * mapping releases both.  The copy goes a chunk at a time, each chunk's file
 * pages unmapped after it, so the load's RSS peak is the weights plus a
 * chunk, not twice the weights.
 */
#include "anon_copy.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_BYTES ((uintptr_t)2 << 20)
#define COPY_CHUNK ((size_t)64 << 20) /* a multiple of the page size */

int qw_weights_copy_anon(const qw_mapped_range *w, size_t n, const char *path, uint64_t *copied, qw_error *err) {
    *copied = 0;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (size_t i = 0; i < n; i++) {
        if (!w[i].n) continue;
        const uintptr_t a = (uintptr_t)w[i].p, b = a + w[i].n;
        if (a < lo) lo = a;
        if (b > hi) hi = b;
    }
    if (hi <= lo) return 0;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a0 = lo & ~(pg - 1), a1 = (hi + pg - 1) & ~(pg - 1);
    const size_t len = a1 - a0;
    /* room to slide the copy to a0's offset modulo 2 MiB */
    const size_t room = len + HUGE_BYTES;
    /* committed memory (no MAP_NORESERVE): where the kernel accounts commits,
     * a copy that cannot fit fails here with a message, not later in the OOM killer */
    char *raw = mmap(NULL, room, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return qw_fail(err, "QWISP_WEIGHTS_COPY=1: cannot map %zu bytes of anonymous memory for the weights of %s: %s",
                       len, path, strerror(errno));
    const uintptr_t want = a0 & (HUGE_BYTES - 1);
    char *dst = (char *)((((uintptr_t)raw + HUGE_BYTES - 1) & ~(HUGE_BYTES - 1)) + want);
    if (dst - raw >= (ptrdiff_t)HUGE_BYTES) dst -= HUGE_BYTES;
#ifdef MADV_HUGEPAGE
    madvise(dst, len, MADV_HUGEPAGE); /* advice: refused or unsupported is fine */
#endif
    /* the source read in order (readahead from disk where the pages are not
     * cached), a chunk at a time, each chunk's file pages unmapped once
     * copied: the process holds the weights once plus a chunk, not twice
     * (a refault would read the same bytes from the file again) */
    madvise((void *)a0, len, MADV_SEQUENTIAL);
    for (size_t off = 0; off < len; off += COPY_CHUNK) {
        const size_t m = len - off < COPY_CHUNK ? len - off : COPY_CHUNK;
        memcpy(dst + off, (const char *)a0 + off, m);
        madvise((char *)a0 + off, m, MADV_DONTNEED);
    }
    /* the unused head and tail of the reservation */
    if (dst > raw) munmap(raw, (size_t)(dst - raw));
    const size_t tail = (size_t)((raw + room) - (dst + len));
    if (tail) munmap(dst + len, tail);
    if (mprotect(dst, len, PROT_READ) != 0 ||
        mremap(dst, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)a0) == MAP_FAILED) {
        const int e = errno;
        munmap(dst, len);
        /* the file mapping at a0 is untouched unless mremap succeeded */
        return qw_fail(err, "QWISP_WEIGHTS_COPY=1: cannot move the %zu-byte copy of %s's weights in place: %s", len,
                       path, strerror(e));
    }
    *copied = len;
    return 0;
}
