#!/bin/bash
# tests/gpu/run.sh [BUILD_DIR] — the GPU suite: the CUDA backend against the CPU
# path on the two shipped models and on generated models of every weight type
# of both architectures (tests/gpu/test_gpu.c says what is compared), then
# `qwisp run` on the GPU.  Ends with tests/run.sh's "N passed, N failed" line.
# Without a GPU every GPU check prints one "SKIP: <reason>" line and passes.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-build}
BIN=$BUILD/qwisp
# the suite's programs (test_gpu, the CUDA object): built here when missing or
# stale, so the suite never runs without them
if ! make -s -j"$(nproc)" BUILD="$BUILD" tests-bin >/dev/null; then
    echo "FAIL: make BUILD=$BUILD tests-bin"
    echo "0 passed, 1 failed"
    exit 1
fi
export QWISP_TEST_TMP=${QWISP_TEST_TMP:-$(mktemp -d /tmp/qwisp-gpu.XXXXXX)}
D=$QWISP_TEST_TMP/gpu-models; mkdir -p "$D"
K3="--n-embd 256 --n-head 8 --n-head-kv 4 --head-dim 32 --n-expert 8 --n-expert-used 2 --n-ff-exp 256 --n-layer 2"
QKQ="--n-embd 256 --n-head 4 --n-head-kv 2 --head-dim 64 --n-rot 32 --n-expert 8 --n-expert-used 2 --n-ff-exp 256 --n-ff-shexp 256 --ssm-state 64 --ssm-groups 2 --ssm-vheads 4 --n-layer 2 --attn-interval 2"
list="models/default.gguf:models/qwen35moe.gguf"
for t in f32 f16 bf16 q8_0 q4_0 q2_K q3_K q4_K q5_K q6_K; do
    for arch in qwen3moe qwen35moe; do
        m=$D/$arch-$t.gguf
        if [ $arch = qwen3moe ]; then flags="$K3"; else flags="--arch qwen35moe $QKQ"; fi
        # shellcheck disable=SC2086
        [ -s "$m" ] || "$BIN" gen-model --preset tiny --tokenizer bytes --type $t $flags --untied --seed 7 -o "$m" >/dev/null ||
            { echo "FAIL: gen-model $arch $t"; continue; }
        list="$list:$m"
    done
done
# Q8_0 and Q4_0 with an expert width of 96, three blocks a row: the down projection's rows
# end mid-word (an odd count of 34- or 18-byte blocks), a shape a GEMV that reads whole
# words must treat apart
for t in q8_0 q4_0; do
    m=$D/qwen3moe-$t-ff96.gguf
    # shellcheck disable=SC2086
    [ -s "$m" ] || "$BIN" gen-model --preset tiny --tokenizer bytes --type $t $K3 --n-ff-exp 96 --untied --seed 7 -o "$m" >/dev/null ||
        { echo "FAIL: gen-model qwen3moe $t ff96"; continue; }
    list="$list:$m"
done
# Q8_0 and Q4_0 at a width of 40 blocks (1280) in and out: decode's GEMV (mv_q8_kernel)
# sums a full round of 32 blocks, then a round of 8, each block loaded directly (its rows
# are whole 16-byte words; the shipped models' narrower rows take the staged loads)
for t in q8_0 q4_0; do
    m=$D/qwen3moe-$t-w1280.gguf
    # shellcheck disable=SC2086
    [ -s "$m" ] || "$BIN" gen-model --preset tiny --tokenizer bytes --type $t $K3 --n-embd 1280 --n-ff-exp 1280 --untied --seed 7 -o "$m" >/dev/null ||
        { echo "FAIL: gen-model qwen3moe $t w1280"; continue; }
    list="$list:$m"
done
# eight query heads on one KV head: prefill attention takes them in one block (cu_attn.cu)
m=$D/qwen3moe-q8_0-g8.gguf
# shellcheck disable=SC2086
[ -s "$m" ] || "$BIN" gen-model --preset tiny --tokenizer bytes --type q8_0 $K3 --n-head 16 --n-head-kv 2 --untied --seed 7 -o "$m" >/dev/null ||
    { echo "FAIL: gen-model qwen3moe q8_0 g8"; }
[ -s "$m" ] && list="$list:$m"
export QWISP_GPU_MODELS=$list
QWISP_TEST_FILTER='tests/gpu/' tests/run.sh "$BUILD"
