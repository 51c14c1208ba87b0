#!/bin/bash
# lanes.sh — aggregate decode throughput of the lanes path at B = 1, 2, 4, 8
# against llama.cpp's batching of B sequences in one context (node-llama-cpp),
# on the same generated model, 2 threads, alternating engines per B.
#
#   bench/lanes.sh [BUILD_DIR] [MODEL.gguf]
#
# qwisp: `qwisp serve` with QWISP_LANES=B, B concurrent greedy chat requests of
# N tokens (tests/serve/lanes_client.mjs), aggregate = total tokens / wall.
# llama.cpp: bench/llama_lanes.mjs, B sequences, same N.
set -eu
cd "$(dirname "$0")/.."
BUILD=${1:-build}
Q=$PWD/$BUILD/qwisp
N=${DECODE:-48}
M=${2:-bench/.cache/lanes-small.gguf}
mkdir -p bench/.cache
[ -f "$M" ] || "$Q" gen-model --preset small --type q8_0 -o "$M" >/dev/null
echo "model: $M ($(du -h "$M" | cut -f1)), $N tokens per request, 2 threads"
printf "%-3s %16s %16s %8s\n" B "qwisp agg tok/s" "llama agg tok/s" ratio
for B in 1 2 4 8; do
    log=$(mktemp)
    QWISP_LANES=$B "$Q" serve -m "$M" --port 0 --threads 2 --ctx 1024 2>"$log" &
    pid=$!
    port=""
    for _ in $(seq 1 300); do
        port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log"); [ -n "$port" ] && break; sleep 0.1
    done
    prompts=(); for i in $(seq 1 "$B"); do prompts+=("Request number $i: tell me about the river."); done
    node tests/serve/lanes_client.mjs "http://127.0.0.1:$port" tokens 4 "${prompts[@]}" >/dev/null  # warm-up
    t0=$(date +%s.%N)
    node tests/serve/lanes_client.mjs "http://127.0.0.1:$port" tokens "$N" "${prompts[@]}" >/dev/null
    t1=$(date +%s.%N)
    kill -TERM $pid; wait $pid 2>/dev/null || true; rm -f "$log"
    q=$(awk -v b="$B" -v n="$N" -v a="$t0" -v z="$t1" 'BEGIN { printf "%.1f", b * n / (z - a) }')
    l=$(node bench/llama_lanes.mjs --model "$M" --lanes "$B" --decode "$N" --threads 2 |
        node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).agg_tok_s.toFixed(1)))')
    printf "%-3s %16s %16s %8s\n" "$B" "$q" "$l" "$(awk -v q="$q" -v l="$l" 'BEGIN { printf "%.2f", q / l }')"
done
