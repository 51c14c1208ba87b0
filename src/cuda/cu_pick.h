/* cu_pick.h — where a Q8_0 / Q4_0 block lies in the aligned 16-byte words
 * around it, and its scale and quant words picked out of them: the index
 * arithmetic of the GEMVs' direct loads (cu_matmul.cu, cu_direct), in C
 * that compiles for the device and the host alike, so a CPU test
 * (tests/gpu/test_gpu.c) checks every block position without a GPU.
 *
 * A row that starts on 16 bytes and has a multiple of 8 blocks is whole
 * 16-byte words (8 * 34 = 17 * 16, 8 * 18 = 9 * 16), and a block of bs
 * bytes (34 or 18) lies in the 2 (Q4_0) or 3 (Q8_0) words from
 * cu_pick_base, starting o = cu_pick_off bytes in (0..14, even). */
#ifndef QW_CU_PICK_H
#define QW_CU_PICK_H
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define CU_PICK_FN __host__ __device__ __forceinline__
#else
#define CU_PICK_FN static inline
#endif

/* The 16-byte aligned byte offset, in its row, of the words block j starts in. */
CU_PICK_FN size_t cu_pick_base(int j, int bs) { return ((size_t)j * bs) & ~(size_t)15; }
/* Block j's first byte in those words. */
CU_PICK_FN int cu_pick_off(int j, int bs) { return (int)(((size_t)j * bs) & 15); }

/* hi:lo shifted right by sh bits, sh clamped to 32 (the device's __funnelshift_rc). */
CU_PICK_FN uint32_t cu_pick_shr(uint32_t lo, uint32_t hi, int sh) {
#ifdef __CUDA_ARCH__
    return __funnelshift_rc(lo, hi, sh);
#else
    return sh >= 32 ? hi : (uint32_t)((((uint64_t)hi << 32) | lo) >> sh);
#endif
}

/* y[i] = x[(o >> 2) + i] for i < nw, by selects on the bits of o >> 2 (a
 * register array is not indexed by a variable on the device); x holds
 * nw + 3 words at least. */
CU_PICK_FN void cu_pick_words(const uint32_t *x, int o, int nw, uint32_t *y) {
    const int b0 = (o >> 2) & 1, b1 = (o >> 3) & 1;
    for (int i = 0; i < nw; i++) {
        const uint32_t lo = b0 ? x[i + 1] : x[i], hi = b0 ? x[i + 3] : x[i + 2];
        y[i] = b1 ? hi : lo;
    }
}

/* From the nw words y a block starts in, sh bits (0 or 16) into y[0]: its
 * fp16 scale's bits, and its quant bytes as nw - 1 words. */
CU_PICK_FN uint16_t cu_pick_block(const uint32_t *y, int sh, int nw, uint32_t *q) {
    for (int c = 0; c < nw - 1; c++) q[c] = cu_pick_shr(y[c], y[c + 1], sh + 16);
    return (uint16_t)(cu_pick_shr(y[0], y[1], sh) & 0xffffu);
}
#endif
