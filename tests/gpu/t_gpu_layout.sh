#!/bin/bash
# t_gpu_layout.sh — bench/cuda_layout.cu (decode's Q8_0 GEMV on the file's
# layout against one repacked once) builds with nvcc, and on a GPU its two
# layouts give the same floats on every row of a small matrix; it refuses a
# width that is not a multiple of 256 or above 16384 (before touching a GPU).  Without nvcc,
# or without a GPU, the part that needs it prints one SKIP line.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/gpu_usable.sh
BIN=${QWISP_BIN:-build/qwisp}
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
if [ -z "$NVCC" ]; then
    echo "SKIP: bench/cuda_layout.cu: no nvcc on this machine"
    exit 0
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
if "$NVCC" -O3 -std=c++17 -arch=sm_90 -Isrc/cuda -Iinclude bench/cuda_layout.cu -o "$T/cuda_layout" 2> "$T/nvcc.err"; then
    echo "PASS: bench/cuda_layout.cu builds"
else
    echo "FAIL: bench/cuda_layout.cu does not build: $(head -3 "$T/nvcc.err" | tr '\n' ' ')"
    exit 0
fi
out=$("$T/cuda_layout" 16 1000 1 2>&1)
if [ $? -eq 2 ] && [[ $out == *"a multiple of 256"* ]]; then
    echo "PASS: cuda_layout refuses a width that is not a multiple of 256"
else
    echo "FAIL: cuda_layout with k = 1000: $out"
fi
out=$("$T/cuda_layout" 16 16640 1 2>&1)
if [ $? -eq 2 ] && [[ $out == *"up to 16384"* ]]; then
    echo "PASS: cuda_layout refuses a width above 16384 before allocating"
else
    echo "FAIL: cuda_layout with k = 16640: $out"
fi
if why=$(gpu_unusable "$BIN"); then
    echo "SKIP: bench/cuda_layout.cu on a GPU: $why"
    exit 0
fi
out=$("$T/cuda_layout" 4096 2304 1 2>&1)
if [ $? -eq 0 ] && printf '%s\n' "$out" | grep -q "0 of 4096 rows differ between the layouts"; then
    echo "PASS: cuda_layout: the file and repacked layouts give the same floats on every row (k = 2304)"
else
    echo "FAIL: cuda_layout: $(printf '%s\n' "$out" | head -2 | tr '\n' ' ')"
fi
