/* anon_copy.h — private to experts.c: the resident tier's weights copied from
 * the file mapping into anonymous memory in place (QWISP_WEIGHTS_COPY=1). */
#ifndef QWISP_EXPERTS_ANON_COPY_H
#define QWISP_EXPERTS_ANON_COPY_H

#include "qwisp/experts.h"

/* Replaces the page-aligned span covering w[0..n) with an anonymous,
 * read-only copy at the same addresses (2 MiB pages where the kernel gives
 * them); *copied = its bytes.  0, or -1 + err with the mapping untouched. */
int qw_weights_copy_anon(const qw_mapped_range *w, size_t n, const char *path, uint64_t *copied, qw_error *err);

#endif
