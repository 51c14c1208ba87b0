#!/bin/bash
# t_gpu_attn_tiles.sh — the attention kernel's long-context path on a short
# context: the kernel keeps a head's scores in shared memory up to
# QW_AT_SMAX positions and past that recomputes them, tile by tile
# (src/cuda/cu_attn.cu).  The suite's prompts never pass the default 8192,
# so this builds a variant of the CUDA object with QW_AT_SMAX=40 and runs
# the GPU-vs-CPU logits test on it: the recompute path must give the CPU's
# logits bit for bit as the kept-scores path does.  SKIP without nvcc or a GPU.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${QWISP_BUILD:-build}
T=$BUILD/gpu-smax
. tests/gpu/gpu_usable.sh
if why=$(gpu_unusable "$BUILD/qwisp"); then echo "SKIP: attention's recompute path: $why"; exit 0; fi
if ! make -s BUILD="$T" NVDEFS=-DQW_AT_SMAX=40 "$T/libqwisp_cuda.so" >"$T.log" 2>&1; then
    if grep -q "No rule\|nvcc: not found\|NVCC" "$T.log"; then echo "SKIP: attention's recompute path: no nvcc"; exit 0; fi
    echo "FAIL: building the QW_AT_SMAX=40 variant: $(tail -3 "$T.log")"
    exit 0
fi
if [ ! -x "$BUILD/tests/gpu/test_gpu" ]; then
    echo "FAIL: GPU vs CPU with attention's scores recomputed past 40 positions: no $BUILD/tests/gpu/test_gpu (make tests-bin)"
    exit 0
fi
out=$(QWISP_CUDA_LIB=$T/libqwisp_cuda.so QWISP_GPU_MODELS=models/default.gguf:models/qwen35moe.gguf \
      "$BUILD/tests/gpu/test_gpu" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -E "INFO: models" | sed 's/^/  /'
if [ $rc != 0 ] || printf '%s\n' "$out" | grep -q "FAILED" || ! printf '%s\n' "$out" | grep -q "PASSED"; then
    echo "FAIL: GPU vs CPU with attention's scores recomputed past 40 positions (test_gpu exit $rc)"
    printf '%s\n' "$out" | tail -15
else
    echo "PASS: GPU vs CPU with attention's scores recomputed past 40 positions (both shipped models)"
fi
