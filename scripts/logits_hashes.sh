#!/usr/bin/env bash
# Developer script: the final-logits hash of `qwisp run` over generated models of every
# tensor type and both architectures (plus models/default.gguf), at prefill (-n 0) and after
# decode (-n 12), under each SIMD level this CPU has, one and two threads, f16 and f32 KV,
# resident and streaming (QWISP_RAW_C=2) expert tiers.  One line per case:
#     name  case  hash
# The hashes depend on the CPU (the SIMD level picks the rounding order), so they are not a
# committed test vector: record them before a refactor that must not change a bit and diff
# the two outputs after it:
#     scripts/logits_hashes.sh build >/tmp/before.txt
#     ... change ...
#     scripts/logits_hashes.sh build >/tmp/after.txt && diff /tmp/before.txt /tmp/after.txt
# Models are generated into $QWISP_HASH_DIR (default /tmp/qwisp-hash-models) once and reused;
# gen-model is deterministic from --seed, and its output is hashed too (a changed writer shows).
set -u
BUILD=${1:-build}
BIN="$BUILD/qwisp"
DIR=${QWISP_HASH_DIR:-/tmp/qwisp-hash-models}
mkdir -p "$DIR"
QSMALL="--n-head 4 --n-head-kv 2 --head-dim 32 --n-rot 16 --n-expert 8 --n-expert-used 2 --n-ff-exp 32 --n-ff-shexp 48 --ssm-state 16"
QKQ="--n-embd 256 --n-head 4 --n-head-kv 2 --head-dim 64 --n-rot 32 --n-expert 8 --n-expert-used 2 --n-ff-exp 256 --n-ff-shexp 256 --ssm-state 64 --ssm-groups 2 --ssm-vheads 4"
K3="--n-embd 256 --n-head 8 --n-head-kv 4 --head-dim 32 --n-expert 8 --n-expert-used 2 --n-ff-exp 256 --n-layer 2"
MODELS=(
    "q3-f32|--preset tiny --tokenizer bytes --type f32 --untied --seed 11"
    "q3-f16|--preset tiny --tokenizer bytes --type f16 --untied --seed 21"
    "q3-bf16|--preset tiny --tokenizer bytes --type bf16 --tied --seed 22"
    "q3-q8_0|--preset tiny --tokenizer bytes --type q8_0 --n-embd 128 --n-head 8 --n-head-kv 4 --head-dim 16 --n-expert 8 --n-expert-used 2 --n-ff-exp 64 --n-layer 2 --untied --seed 13"
    "q3-q4_0|--preset tiny --tokenizer bytes --type q4_0 --n-embd 64 --n-head 4 --n-head-kv 2 --head-dim 32 --n-expert 16 --n-expert-used 4 --n-ff-exp 64 --n-layer 2 --untied --seed 15"
    "q3-q2_K|--preset tiny --tokenizer bytes --type q2_K $K3 --untied --seed 23"
    "q3-q3_K|--preset tiny --tokenizer bytes --type q3_K $K3 --untied --seed 24"
    "q3-q4_K|--preset tiny --tokenizer bytes --type q4_K $K3 --untied --seed 16"
    "q3-q5_K|--preset tiny --tokenizer bytes --type q5_K $K3 --tied --seed 25"
    "q3-q6_K|--preset tiny --tokenizer bytes --type q6_K $K3 --tied --seed 17"
    "q35-f32|--arch qwen35moe --preset tiny --tokenizer bytes --type f32 --seed 11 --n-layer 4 --n-embd 64 --attn-interval 4 --ssm-groups 2 --ssm-vheads 4 --untied $QSMALL"
    "q35-f32b|--arch qwen35moe --preset tiny --tokenizer bytes --type f32 --seed 13 --n-layer 5 --n-embd 96 --attn-interval 3 --ssm-groups 1 --ssm-vheads 4 --untied $QSMALL"
    "q35-q8_0|--arch qwen35moe --preset tiny --tokenizer bytes --type q8_0 --seed 14 --n-layer 2 --n-embd 128 --attn-interval 2 --ssm-groups 2 --ssm-vheads 4 --ssm-state 32 --untied --n-head 4 --n-head-kv 2 --head-dim 32 --n-rot 16 --n-expert 8 --n-expert-used 2 --n-ff-exp 64 --n-ff-shexp 64"
    "q35-q4_0|--arch qwen35moe --preset tiny --tokenizer bytes --type q4_0 --seed 18 --n-layer 2 --attn-interval 2 --untied $QKQ"
    "q35-q4_K|--arch qwen35moe --preset tiny --tokenizer bytes --type q4_K --seed 5 --n-layer 2 --attn-interval 2 --untied $QKQ"
    "q35-q6_K|--arch qwen35moe --preset tiny --tokenizer bytes --type q6_K --seed 6 --n-layer 3 --attn-interval 3 --tied $QKQ"
    "q3-gqa4|--preset tiny --tokenizer bytes --type q8_0 --n-embd 256 --n-head 8 --n-head-kv 2 --head-dim 64 --n-expert 8 --n-expert-used 2 --n-ff-exp 64 --n-layer 2 --untied --seed 31"
    "q35-gqa8|--arch qwen35moe --preset tiny --tokenizer bytes --type q4_K --seed 32 --n-layer 2 --attn-interval 2 --untied --n-embd 256 --n-head 8 --n-head-kv 1 --head-dim 128 --n-rot 32 --n-expert 8 --n-expert-used 2 --n-ff-exp 256 --n-ff-shexp 256 --ssm-state 64 --ssm-groups 2 --ssm-vheads 4"
)
PROMPT="Once upon a time, in a small village by the sea, there lived an old fisherman and his wife. Every morning he went out in his little boat before the sun came up."
levels="scalar avx2 avx512 avx512-novbmi avx512-nobf16 avx512-novbmi-nobf16 avx512-amx"
have=$("$BIN" config 2>/dev/null | awk '/SIMD level in use/{print $2}')
case "$have" in avx512*) ;; avx2) levels="scalar avx2" ;; *) levels="scalar" ;; esac

one() {   # name model case-label env...  -> prints "name case hash"
    local name=$1 m=$2 label=$3; shift 3
    local n
    for n in 0 12; do
        h=$(env "$@" "$BIN" run -m "$m" -p "$PROMPT" -n "$n" --seed 1 --json 2>/dev/null |
            sed -n 's/.*"logits_hash":"\([0-9a-f]*\)".*/\1/p')
        echo "$name $label n=$n ${h:-ERROR}"
    done
}
for spec in "${MODELS[@]}" "default|"; do
    IFS='|' read -r name flags <<<"$spec"
    if [ "$name" = default ]; then m=models/default.gguf; else
        m="$DIR/$name.gguf"
        # shellcheck disable=SC2086
        [ -s "$m" ] || "$BIN" gen-model $flags -o "$m" >/dev/null 2>&1 || { echo "$name gen-model ERROR"; continue; }
        echo "$name file $(sha256sum "$m" | cut -c1-16)"
    fi
    for simd in $levels; do
        one "$name" "$m" "simd=$simd,t=2" QWISP_SIMD=$simd QWISP_THREADS=2
    done
    one "$name" "$m" "t=1" QWISP_THREADS=1
    one "$name" "$m" "kv=f32" QWISP_KV_TYPE=f32 QWISP_THREADS=2
    one "$name" "$m" "raw_c=2" QWISP_RAW_C=2 QWISP_THREADS=2
done
