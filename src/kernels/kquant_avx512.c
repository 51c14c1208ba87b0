/* kquant_avx512.c — the AVX-512 level's K-quant dots.  For now every type
 * uses the AVX2 kernels (an AVX-512 CPU runs them); this table is where
 * 512-bit / VNNI variants plug in. */
#include "kernels/kquant_impl.h"

const qw_kq_dots qw_kq_dots_avx512 = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
