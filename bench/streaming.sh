#!/bin/bash
# streaming.sh — the streaming tier under a memory limit against resident
# qwisp and against llama.cpp under the same limit (its mmap pages in and out).
#
#   bench/streaming.sh [BUILD_DIR]
#
# Model: the `bench` preset (≈1.2 GB, 64 experts top-8), limit ≈ half of it
# (LIMIT_GB, default 0.6).  Rows, each measured in the same run, order
# alternating per round (ROUNDS, default 2; medians printed):
#   qwisp resident      no limit
#   qwisp streaming     `qwisp simulate LIMIT -- qwisp run …` (tier chosen from RAM)
#   llama.cpp limited   `qwisp simulate LIMIT -- node bench/llama_bench.mjs …`
# each with and without QWISP_SSD_THROTTLE_GBS=1.5 (qwisp streaming only; the
# throttle emulates a slow SSD for expert reads).  The model file is evicted
# from the page cache before every row, so every row starts cold.  PP prompt tokens (default
# 128), TG decode tokens (default 32), 2 threads.
set -eu
cd "$(dirname "$0")/.."
BUILD=${1:-build}
Q=$PWD/$BUILD/qwisp
LIMIT=${LIMIT_GB:-0.6}
ROUNDS=${ROUNDS:-2}
PP=${PP:-128}
TG=${TG:-32}
M=bench/.cache/bench-q8_0.gguf
mkdir -p bench/.cache
[ -f "$M" ] || "$Q" gen-model --preset bench -o "$M" >/dev/null
echo "model $M ($(du -h "$M" | cut -f1)), limit ${LIMIT} GB, pp$PP tg$TG, 2 threads, $ROUNDS rounds"
"$Q" run -m "$M" --prompt-tokens "$PP" -n 1 --json >bench/.cache/stream_ids.json 2>/dev/null

qwisp_run() { # ENV... -- prefix...: prints "pp tg"
    local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
    env "${envs[@]}" "$@" "$Q" run -m "$M" --prompt-tokens "$PP" -n "$TG" --ignore-eos --json --threads 2 2>/dev/null |
        grep -a "^{" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s);
            console.log(j.prefill_tok_s.toFixed(2), j.decode_tok_s.toFixed(2), j.experts ? j.experts.tier : "?")})'
}
llama_run() { # prefix...: prints "pp tg"
    "$@" node bench/llama_bench.mjs --model "$M" --tokens-file bench/.cache/stream_ids.json --decode "$TG" --threads 2 2>/dev/null |
        grep -a "^{" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s);
            console.log(j.prefill_tok_s.toFixed(2), j.decode_tok_s.toFixed(2), "mmap")})'
}
declare -A PPS TGS
rows=(resident streaming streaming-throttled llama-limited)
# The page cache is shared: pages a resident run read stay cached, charged to
# the root cgroup, and a limited run would map them for free.  Evict the model
# file before every row so each starts cold and limited runs really page.
evict() { python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$M"; }
run_row() {
    evict
    case $1 in
    resident) qwisp_run QWISP_RAW_C=0 -- ;;
    streaming) qwisp_run QWISP_LOG=error -- "$Q" simulate "$LIMIT" -- ;;
    streaming-throttled) qwisp_run QWISP_LOG=error QWISP_SSD_THROTTLE_GBS=1.5 -- "$Q" simulate "$LIMIT" -- ;;
    llama-limited) llama_run "$Q" simulate "$LIMIT" -- ;;
    esac
}
for r in $(seq 1 "$ROUNDS"); do
    order=("${rows[@]}")
    [ $((r % 2)) = 0 ] && order=(llama-limited streaming-throttled streaming resident)
    for row in "${order[@]}"; do
        read -r pp tg tier < <(run_row "$row" || echo "0 0 failed")
        PPS[$row]="${PPS[$row]:-} $pp"; TGS[$row]="${TGS[$row]:-} $tg"
        echo "  round $r $row: pp $pp tg $tg ($tier)"
    done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf "%-22s %10s %10s %12s\n" row "pp tok/s" "tg tok/s" "tg vs llama"
lt=$(echo "${TGS[llama-limited]}" | median)
for row in "${rows[@]}"; do
    p=$(echo "${PPS[$row]}" | median); t=$(echo "${TGS[$row]}" | median)
    printf "%-22s %10s %10s %12s\n" "$row" "$p" "$t" "$(awk -v a="$t" -v b="$lt" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')"
done
