/* bodybuf.c — request body buffers in their own mappings under a byte
 * budget (see bodybuf.h for why they are not pool buffers).
 *
 * Growth: from 16 KiB, doubling with mremap (which moves pages instead of
 * copying them), and never past the announced Content-Length (+1 for the
 * NUL) when there is one, so a body ends in a mapping of its own size.  It
 * grows with what has arrived, not with what was announced: a client that
 * announces 8 MB and then trickles holds only what it has sent.  The budget is reserved before a
 * mapping grows (compare-and-swap, so concurrent uploads never pass it
 * together) and given back when it shrinks to nothing.
 */
#include "bodybuf.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t page_round(size_t n) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

static bool reserve(qw_body_budget *bud, size_t bytes) {
    size_t cur = atomic_load(&bud->used);
    do {
        if (bytes > bud->limit || cur > bud->limit - bytes) return false;
    } while (!atomic_compare_exchange_weak(&bud->used, &cur, cur + bytes));
    return true;
}

int qw_bodybuf_append(qw_bodybuf *b, qw_body_budget *bud, const char *data, size_t n, size_t want_total) {
    if (b->n + n + 1 > b->cap) {
        size_t need = b->n + n + 1, cap = b->cap ? b->cap : 16384;
        while (cap < need) cap *= 2;
        if (want_total + 1 >= need && cap > want_total + 1) cap = want_total + 1;
        cap = page_round(cap);
        if (!reserve(bud, cap - b->cap)) return -1;
        void *p = b->p ? mremap(b->p, b->cap, cap, MREMAP_MAYMOVE)
                       : mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            atomic_fetch_sub(&bud->used, cap - b->cap);
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

void qw_bodybuf_release(qw_bodybuf *b, qw_body_budget *bud) {
    if (!b->p) return;
    munmap(b->p, b->cap);
    atomic_fetch_sub(&bud->used, b->cap);
    *b = (qw_bodybuf){0};
}
