/* kquant_avx512.c — the AVX-512 level's K-quant dots and tiles: the kernels
 * of kquant_avx2.c compiled again with AVX-512VL/VNNI enabled.  That gives
 * the compiler 32 vector registers instead of 16 (the Q4_K tile stays in
 * registers; the Q6_K tile, built only here, needs them), and madd + add
 * become one VPDPWSSD (add_madd).  The integer lanes and the float steps are
 * the AVX2 level's, so are the bits.
 * Tried and not kept: a VNNI Q4_K dot + tile (one vpdpbusd per 64 elements,
 * scales applied in float) decoded slower on the full-size qwen36-a3b file
 * (6.7-7.3 vs 8.5 tok/s with the AVX2 loop), prefill about the same; see
 * bench/RESULTS.md. */
#define qw_kq_dots_avx2 qw_kq_dots_avx512
#include "kquant_avx2.c"
