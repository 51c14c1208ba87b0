#!/bin/bash
# vs_llamacpp.sh — qwisp vs llama.cpp speed on the same synthetic MoE GGUF.
#
#   bench/vs_llamacpp.sh [BUILD_DIR]     (default build; env ROUNDS=3 THREADS=2 PP=512 TG=128)
#
# Model: `qwisp gen-model --preset bench` (q8_0, n_embd 1024, 8 layers, 64
# experts top-8, real Qwen3 vocab, ~0.5 GB), cached in bench/.cache/ and
# regenerated only when missing.  The engines alternate, qwisp then llama.cpp,
# ROUNDS times, so drift in machine load hits both alike; each run loads the
# model untimed and times
#   pp: prefill of the same PP-token prompt (qwisp's --prompt-tokens text; its
#       ids are handed to llama.cpp) and
#   tg: TG greedy decode steps,
# with THREADS threads.  Prints medians and the qwisp/llama.cpp ratios.
# llama.cpp is node-llama-cpp's prebuilt CPU build (bench/llama_bench.mjs).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BIN=${QWISP_BIN:-$PWD/$BUILD/qwisp}
ROUNDS=${ROUNDS:-3}; THREADS=${THREADS:-2}; PP=${PP:-512}; TG=${TG:-128}
CACHE=bench/.cache; MODEL=$CACHE/bench-q8_0.gguf
mkdir -p "$CACHE"
[ -x "$BIN" ] || { echo "vs_llamacpp: $BIN not found (make $BUILD/qwisp)" >&2; exit 1; }
[ -d tests/peers/node_modules/node-llama-cpp ] || { echo "vs_llamacpp: tests/peers/node_modules missing (npm ci in tests/peers)" >&2; exit 1; }
if [ ! -f "$MODEL" ]; then
    echo "generating $MODEL ..." >&2
    "$BIN" gen-model --preset bench -o "$MODEL"
fi

# The exact prompt qwisp prefills, for llama.cpp to prefill too.
IDS=$CACHE/prompt-$PP.json
"$BIN" run -m "$MODEL" --prompt-tokens "$PP" -n 1 --temp 0 --json --ignore-eos --threads "$THREADS" >"$IDS"

field() { node -e 'const j=JSON.parse(require("fs").readFileSync(0,"utf8").trim().split("\n").filter(l=>l.startsWith("{")).pop());
    console.log(j[process.argv[1]])' "$1"; }
q_pp=(); q_tg=(); l_pp=(); l_tg=()
for r in $(seq 1 "$ROUNDS"); do
    out=$("$BIN" run -m "$MODEL" --prompt-tokens "$PP" -n "$TG" --temp 0 --json --ignore-eos --threads "$THREADS")
    q_pp+=("$(echo "$out" | field prefill_tok_s)"); q_tg+=("$(echo "$out" | field decode_tok_s)")
    out=$(node bench/llama_bench.mjs --model "$MODEL" --tokens-file "$IDS" --decode "$TG" --threads "$THREADS")
    l_pp+=("$(echo "$out" | field prefill_tok_s)"); l_tg+=("$(echo "$out" | field decode_tok_s)")
    echo "round $r: qwisp pp ${q_pp[-1]} tg ${q_tg[-1]} | llama.cpp pp ${l_pp[-1]} tg ${l_tg[-1]}" >&2
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
qp=$(median "${q_pp[@]}"); qt=$(median "${q_tg[@]}"); lp=$(median "${l_pp[@]}"); lt=$(median "${l_tg[@]}")
echo "model: $MODEL ($(du -h "$MODEL" | cut -f1)), threads $THREADS, $ROUNDS rounds, medians"
printf '%-10s %14s %14s\n' engine "pp$PP tok/s" "tg$TG tok/s"
printf '%-10s %14.1f %14.2f\n' qwisp "$qp" "$qt"
printf '%-10s %14.1f %14.2f\n' llama.cpp "$lp" "$lt"
printf '%-10s %14.2f %14.2f\n' ratio "$(echo "$qp / $lp" | bc -l)" "$(echo "$qt / $lt" | bc -l)"
