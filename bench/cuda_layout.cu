/* cuda_layout.cu — the decode GEMV of Q8_0 weights on the GPU in the file's
 * layout against a layout repacked once into device memory, on one matrix,
 * in one process: which one a resident tier should keep.
 *
 * Both kernels are decode's GEMV as src/cuda/cu_matmul.cu's mv_q8_kernel
 * runs it, with its own parts (cu_w8.cuh): a warp a row, four warps a
 * block, 32 blocks a round one a lane, each block's exact dp4a sum times
 * (d_w * d_x) (cu_q8_block_prod), the row's products added in block order
 * from shared memory (cu_chain_round).  They differ only in where a lane
 * finds its block:
 *   file      34-byte blocks (fp16 scale, 32 quants) in rows of whole
 *             16-byte words, read by the engine's direct loads
 *             (cu_w8_direct: the three aligned 16-byte words around the
 *             block, picked apart in registers);
 *   repacked  each row's quants alone, 16-byte aligned (two 16-byte loads a
 *             block), its scales in a separate array (one 2-byte load).
 * The two must give the same floats bit for bit (checked on every row);
 * each is timed with CUDA events, alternated, and printed as µs a call and
 * TB/s of weight bytes read (the repacked layout reads the same bytes).
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Isrc/cuda -Iinclude bench/cuda_layout.cu -o build/cuda_layout
 *   build/cuda_layout [rows=151936] [k=2048] [rounds=5]
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_w8.cuh"

enum { WARPS = 4, BS = 34 };

#define CHECK(x)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "cuda_layout: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

/* the round's products added to the row's sum in block order (cu_w8.cuh), as mv_q8_kernel does */
__device__ __forceinline__ float chain(float *pw, int lane, float p, int nb, float s) {
    pw[lane] = p;
    __syncwarp();
    s = cu_chain_round(pw, nb, s);
    __syncwarp();
    return s;
}

/* the file layout: each block read by the engine's direct loads (cu_w8_direct) */
__global__ void __launch_bounds__(WARPS * 32) gemv_file(const uint8_t *W, size_t rb, int rows, int k, const int8_t *x,
                                                        const float *xd, float *y) {
    const int lane = threadIdx.x & 31, r = blockIdx.x * WARPS + (threadIdx.x >> 5);
    __shared__ __align__(16) float prod[WARPS][32];
    if (r >= rows) return;
    const uint8_t *row = W + (size_t)r * rb;
    const int nsb = k / 32;
    float s = 0.0f;
    for (int j0 = 0; j0 < nsb; j0 += 32) {
        const int j = j0 + lane;
        float p = 0.0f;
        if (j < nsb) {
            int32_t w[8];
            const float dw = cu_w8_direct<QW_TYPE_Q8_0>(row, j, w);
            p = cu_q8_block_prod(w, dw, x, xd, j);
        }
        s = chain(prod[threadIdx.x >> 5], lane, p, min(32, nsb - j0), s);
    }
    if (lane == 0) y[r] = s;
}

/* the repacked layout: a block's quants in two aligned 16-byte loads, its scale from D */
__global__ void __launch_bounds__(WARPS * 32) gemv_repacked(const uint8_t *Q, const uint16_t *D, int rows, int k,
                                                            const int8_t *x, const float *xd, float *y) {
    const int lane = threadIdx.x & 31, r = blockIdx.x * WARPS + (threadIdx.x >> 5);
    __shared__ __align__(16) float prod[WARPS][32];
    if (r >= rows) return;
    const int nsb = k / 32;
    const uint4 *row = (const uint4 *)(Q + (size_t)r * k);
    const uint16_t *dr = D + (size_t)r * nsb;
    float s = 0.0f;
    for (int j0 = 0; j0 < nsb; j0 += 32) {
        const int j = j0 + lane;
        float p = 0.0f;
        if (j < nsb) {
            const uint4 a = row[2 * j], b = row[2 * j + 1];
            const int32_t w[8] = {(int32_t)a.x, (int32_t)a.y, (int32_t)a.z, (int32_t)a.w,
                                  (int32_t)b.x, (int32_t)b.y, (int32_t)b.z, (int32_t)b.w};
            p = cu_q8_block_prod(w, cu_h2f(dr[j]), x, xd, j);
        }
        s = chain(prod[threadIdx.x >> 5], lane, p, min(32, nsb - j0), s);
    }
    if (lane == 0) y[r] = s;
}

static uint32_t g_rng = 12345;
static uint32_t rnd(void) { return g_rng = g_rng * 1664525u + 1013904223u; }

int main(int argc, char **argv) {
    const int rows = argc > 1 ? atoi(argv[1]) : 151936, k = argc > 2 ? atoi(argv[2]) : 2048;
    const int rounds = argc > 3 ? atoi(argv[3]) : 5;
    if (rows <= 0 || k <= 0 || k % 256 || k > 16384 || rounds <= 0) {
        fprintf(stderr, "usage: cuda_layout [rows > 0] [k: a multiple of 256 up to 16384] [rounds > 0]\n");
        return 2;
    }
    const int nsb = k / 32;
    const size_t rb = (size_t)nsb * BS, fbytes = rb * rows, qbytes = (size_t)rows * k, dcount = (size_t)rows * nsb;
    /* the file layout on the host, then the repacked copy of it */
    uint8_t *hf = (uint8_t *)malloc(fbytes), *hq = (uint8_t *)malloc(qbytes);
    uint16_t *hd = (uint16_t *)malloc(dcount * 2);
    int8_t hx[16384];
    float hxd[512];
    if (!hf || !hq || !hd) {
        fprintf(stderr, "cuda_layout: out of host memory for %d rows of %d\n", rows, k);
        return 1;
    }
    for (size_t i = 0; i < fbytes; i++) hf[i] = (uint8_t)(rnd() >> 24);
    for (size_t b = 0; b < dcount; b++) { /* scales: fp16 of 2^-10 .. 2^-7, positive */
        const uint16_t h = (uint16_t)(0x1400 + (rnd() >> 20) % 0x0c00);
        memcpy(hf + b * BS, &h, 2);
        hd[b] = h;
        memcpy(hq + b * 32, hf + b * BS + 2, 32);
    }
    for (int i = 0; i < k; i++) hx[i] = (int8_t)((int)(rnd() >> 24) - 128);
    for (int j = 0; j < nsb; j++) hxd[j] = 1.0f / (float)(64 + j % 7);
    uint8_t *dfile, *dq;
    uint16_t *dd;
    int8_t *dx;
    float *dxd, *y1, *y2;
    CHECK(cudaMalloc(&dfile, fbytes));
    CHECK(cudaMalloc(&dq, qbytes));
    CHECK(cudaMalloc(&dd, dcount * 2));
    CHECK(cudaMalloc(&dx, k));
    CHECK(cudaMalloc(&dxd, nsb * sizeof(float)));
    CHECK(cudaMalloc(&y1, rows * sizeof(float)));
    CHECK(cudaMalloc(&y2, rows * sizeof(float)));
    CHECK(cudaMemcpy(dfile, hf, fbytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dq, hq, qbytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dd, hd, dcount * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dx, hx, k, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dxd, hxd, nsb * sizeof(float), cudaMemcpyHostToDevice));
    const int grid = (rows + WARPS - 1) / WARPS;
    gemv_file<<<grid, WARPS * 32>>>(dfile, rb, rows, k, dx, dxd, y1);
    gemv_repacked<<<grid, WARPS * 32>>>(dq, dd, rows, k, dx, dxd, y2);
    CHECK(cudaDeviceSynchronize());
    float *h1 = (float *)malloc(rows * sizeof(float)), *h2 = (float *)malloc(rows * sizeof(float));
    if (!h1 || !h2) {
        fprintf(stderr, "cuda_layout: out of host memory for %d results\n", rows);
        return 1;
    }
    CHECK(cudaMemcpy(h1, y1, rows * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(h2, y2, rows * sizeof(float), cudaMemcpyDeviceToHost));
    int differ = 0;
    for (int r = 0; r < rows; r++) differ += memcmp(&h1[r], &h2[r], sizeof(float)) != 0;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("%s: Q8_0 %d x %d (%.1f MB), %d of %d rows differ between the layouts\n", prop.name, rows, k, fbytes / 1e6,
           differ, rows);
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    enum { REPS = 50 };
    for (int round = 0; round < rounds; round++) {
        float us[2];
        for (int v = 0; v < 2; v++) {
            CHECK(cudaEventRecord(e0));
            for (int i = 0; i < REPS; i++) {
                if (v == 0) gemv_file<<<grid, WARPS * 32>>>(dfile, rb, rows, k, dx, dxd, y1);
                else gemv_repacked<<<grid, WARPS * 32>>>(dq, dd, rows, k, dx, dxd, y2);
            }
            CHECK(cudaEventRecord(e1));
            CHECK(cudaEventSynchronize(e1));
            float ms;
            CHECK(cudaEventElapsedTime(&ms, e0, e1));
            us[v] = ms * 1000.0f / REPS;
        }
        printf("round %d: file layout %.1f us (%.2f TB/s), repacked %.1f us (%.2f TB/s)\n", round + 1, us[0],
               fbytes / (us[0] * 1e6), us[1], fbytes / (us[1] * 1e6));
    }
    return differ != 0;
}
