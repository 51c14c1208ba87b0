#!/usr/bin/env bash
# llama_bench_build.sh — builds llama.cpp's own `llama-bench` (CPU only, native
# ISA) once into a cache folder outside the repo, from the exact llama.cpp
# source that node-llama-cpp@3.22.1 ships (llama/gitRelease.bundle), so qwisp
# is compared with the same llama.cpp the parity peer runs.  No llama.cpp code
# is committed here.
#
#   bench/llama_bench_build.sh            # prints the path of llama-bench
#   LLAMA_SRC=/tmp/llama.cpp bench/llama_bench_build.sh   # use a checkout
#
# Cache: $QWISP_CACHE (default ~/.cache/qwisp)/llama-bench/{src,build}.
# Rebuilds nothing when the binary exists.  Takes ~10-20 min on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${QWISP_CACHE:-$HOME/.cache/qwisp}/llama-bench"
bin="$cache/build/bin/llama-bench"
if [[ -x "$bin" ]]; then echo "$bin"; exit 0; fi
mkdir -p "$cache"
src="${LLAMA_SRC:-}"
if [[ -z "$src" ]]; then
    bundle="$here/tests/peers/node_modules/node-llama-cpp/llama/gitRelease.bundle"
    src="$cache/src"
    if [[ ! -d "$src/.git" ]]; then
        [[ -f "$bundle" ]] || { echo "no $bundle: run npm ci in tests/peers, or set LLAMA_SRC" >&2; exit 1; }
        git clone -q "$bundle" "$src" >&2
    fi
fi
jobs="${JOBS:-$(nproc)}"
nice cmake -S "$src" -B "$cache/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF \
    -DGGML_METAL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON >&2
nice cmake --build "$cache/build" --target llama-bench -j "$jobs" >&2
echo "$bin"
