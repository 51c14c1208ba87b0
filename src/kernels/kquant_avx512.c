/* kquant_avx512.c — the AVX-512 level's K-quant dots: the AVX2 kernels of
 * kquant_avx2.c compiled again with AVX-512VL enabled, which gives the
 * compiler 32 vector registers instead of 16 (the Q4_K tile's prepared
 * super-block then stays in registers instead of spilling).  Same
 * intrinsics, same operations, same bits as the AVX2 level.
 * Tried and not kept: a VNNI Q4_K dot + tile (one vpdpbusd per 64 elements,
 * scales applied in float) decoded slower on the full-size qwen36-a3b file
 * (6.7-7.3 vs 8.5 tok/s with the AVX2 loop), prefill about the same; see
 * bench/RESULTS.md. */
#define qw_kq_dots_avx2 qw_kq_dots_avx512
#include "kquant_avx2.c"
