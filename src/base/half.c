/* half.c — the two 16-bit float formats of GGUF and safetensors files, one
 * value at a time: IEEE binary16 (f16) and bfloat16 (bf16), to and from f32,
 * bit-exact with ggml: round to nearest even, infinities kept, NaN kept and
 * made quiet.  Here in base/ because both the file formats (safetensors'
 * F16/BF16 tensors) and the kernels (every block scale) need them; the
 * kernels' row conversions (kernels/quant_*.c) give these same bits.
 */
#include "qwisp/base.h"

#include <string.h>

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float qw_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or NaN made quiet */
        return bits_f32(sign | 0x7f800000u | (mant ? 0x400000u | (mant << 13) : 0));
    if (exp == 0) { /* zero or subnormal: mant * 2^-24 is exact in f32 */
        float v = (float)mant * 0x1p-24f;
        return bits_f32(sign | f32_bits(v));
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t qw_f32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) /* NaN: quiet it, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    /* 65520 = 0x477ff000 is the midpoint between 65504 (max, odd mantissa)
     * and 65536; ties go to even, i.e. up to infinity. */
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    uint32_t e = x >> 23;
    if (e < 113) { /* result is subnormal (or zero) in half */
        if (e < 102) return sign; /* below 2^-25: rounds to zero */
        uint32_t m = (x & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* value / 2^-24 = m >> shift */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q); /* q may carry into the smallest normal */
    }
    uint32_t h = ((e - 112) << 10) | ((x >> 13) & 0x3ffu);
    uint32_t rem = x & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* may carry into exp */
    return (uint16_t)(sign | h);
}

float qw_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t qw_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
