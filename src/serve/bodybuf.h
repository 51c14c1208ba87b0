/* bodybuf.h — request body buffers: each body in its own anonymous mapping,
 * unmapped when the request ends, all of them together under one byte
 * budget per server.
 *
 * Why not the pool: the pool keeps freed buffers for reuse (its cache),
 * which is right for the forward pass's buffers of recurring sizes and wrong
 * for request bodies, whose sizes are the client's choice: a body grown by
 * doubling leaves capacity the next request does not reuse, and with the
 * serialize path's cache limit unset every multi-MB body stayed in the
 * footprint for good (issue 21, item 1).  Here nothing is cached: what a body
 * maps goes back to the OS when its request ends, and the budget bounds what
 * all bodies in flight can map at once (a body that would pass it is
 * refused, not grown).
 */
#ifndef QWISP_SERVE_BODYBUF_H
#define QWISP_SERVE_BODYBUF_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* What every body of one server may map together. */
typedef struct qw_body_budget {
    atomic_size_t used; /* bytes mapped by bodies in flight */
    size_t limit;
} qw_body_budget;

typedef struct qw_bodybuf {
    char *p;          /* NUL-terminated after the n bytes; NULL until the first byte */
    size_t n, cap;    /* cap: bytes mapped (page multiple) */
} qw_bodybuf;

/* Appends data[0..n).  want_total (the Content-Length; 0 = unknown) caps
 * the growth, so the last mapping is the body's own size.  0, or -1 when the
 * budget has no room or the OS refused memory (b keeps what it had). */
int qw_bodybuf_append(qw_bodybuf *b, qw_body_budget *bud, const char *data, size_t n, size_t want_total);
/* Unmaps the body and returns its bytes to the budget.  NULL-safe, idempotent. */
void qw_bodybuf_release(qw_bodybuf *b, qw_body_budget *bud);

#endif
