/* kquant_avx512.c — the AVX-512 level's K-quant dots.  Every type uses the
 * AVX2 kernels (an AVX-512 CPU runs them); this table is where 512-bit / VNNI
 * variants plug in.  Tried and not kept: a VNNI Q4_K dot + tile (one vpdpbusd
 * per 64 elements, scales applied in float) decoded slower on the full-size
 * qwen36-a3b file (6.7-7.3 vs 8.5 tok/s with the AVX2 loop), prefill about
 * the same; see bench/RESULTS.md. */
#include "kernels/kquant_impl.h"

const qw_kq_dots qw_kq_dots_avx512 = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
