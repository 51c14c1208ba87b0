#!/bin/bash
# t_lanes.sh — the lanes path (QWISP_LANES=B) end to end over loopback:
# 4 concurrent greedy requests with different prompts (and different prompt
# lengths, so prefill interleaves with decode) give exactly the tokens each
# gives alone on the serialize path; a disconnecting client frees its lane;
# QWISP_LANE_MEMDBG reports at idle points; bad lane counts are refused.
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
T=${QWISP_TEST_TMP:-/tmp}/lanes
mkdir -p "$T"
DIR=$(cd "$(dirname "$0")" && pwd)
source "$DIR/lib.sh"
SERVE_MODEL=$T/tiny.gguf SERVE_THREADS=2

"$Q" gen-model --preset tiny --seed 21 -o "$T/tiny.gguf" >/dev/null 2>&1 || { fail "gen-model tiny"; exit 1; }
command -v node >/dev/null || { fail "lanes: node is not installed"; exit 0; }


PROMPTS=("Hello there" "Write a poem about the sea and the wind that carries the ships home at night"
         "1 2 3 4" "What is the capital of France? Answer in one word, then explain why in detail.")

# Runs the 4 prompts on a serialize server, then (with $@ added) on a lanes
# server left running; 0 when both gave the same 24 tokens per prompt.
same_on_both_paths() { # name, extra env for the lanes server...
    local name=$1; shift
    start_server "$T/$name-serial.log" QWISP_LANES=0 -- || { fail "$name serialize server starts" "$(cat "$T/$name-serial.log")"; return 1; }
    node "$DIR/lanes_client.mjs" "http://127.0.0.1:$PORT" tokens 24 "${PROMPTS[@]}" >"$T/$name-serial.json" 2>/dev/null
    kill -TERM "$SPID"; wait "$SPID" 2>/dev/null
    start_server "$T/$name-lanes.log" QWISP_LANES=4 "$@" -- || { fail "$name lanes server starts" "$(cat "$T/$name-lanes.log")"; return 1; }
    node "$DIR/lanes_client.mjs" "http://127.0.0.1:$PORT" tokens 24 "${PROMPTS[@]}" >"$T/$name-lanes.json" 2>"$T/$name-lanes.err"
    local full
    full=$(node -e 'const o=JSON.parse(require("fs").readFileSync(process.argv[1]));
      console.log(Object.keys(o).length === 4 && Object.values(o).every((a) => a.length === 24) ? 1 : 0)' "$T/$name-serial.json" 2>/dev/null)
    [ "$full" = 1 ] && cmp -s "$T/$name-serial.json" "$T/$name-lanes.json" && return 0
    DETAIL="serial=$(head -c 300 "$T/$name-serial.json") lanes=$(head -c 300 "$T/$name-lanes.json") $(head -3 "$T/$name-lanes.err")"
    return 1
}

same_on_both_paths qwen3 QWISP_LANE_MEMDBG=1; same=$?
grep -q "lanes path (B=4)" "$T/qwen3-lanes.log" && pass "lanes: server announces the lanes path" \
    || fail "lanes: server announces the lanes path" "$(head -3 "$T/qwen3-lanes.log")"
if [ $same = 0 ]; then
    pass "lanes: 4 concurrent greedy requests equal the serialize path token for token"
else
    fail "lanes: 4 concurrent greedy requests equal the serialize path" "${DETAIL:-}"
fi
curl -s "http://127.0.0.1:$PORT/metrics" | grep -q 'qwisp_execution_path_info{path="lanes"} 1' \
    && pass "lanes: /metrics names the lanes path" || fail "lanes: /metrics names the lanes path"
node "$DIR/lanes_client.mjs" "http://127.0.0.1:$PORT" abort 2>&1 | grep -E '^(PASS|FAIL):' || fail "lanes: abort client ran"
grep -q '^\[lane-memdbg\]' "$T/qwen3-lanes.log" && pass "lanes: QWISP_LANE_MEMDBG reports at idle points" \
    || fail "lanes: QWISP_LANE_MEMDBG reports at idle points" "$(tail -3 "$T/qwen3-lanes.log")"
kill -TERM "$SPID"; wait "$SPID" 2>/dev/null

# qwen35moe: each lane carries its own recurrent (conv + delta) state
"$Q" gen-model --preset tiny --arch qwen35moe --n-layer 4 --attn-interval 2 --seed 22 -o "$T/q35.gguf" >/dev/null 2>&1 \
    || fail "gen-model qwen35moe tiny"
SERVE_MODEL=$T/q35.gguf
if same_on_both_paths qwen35; then
    pass "lanes: qwen35moe, 4 concurrent greedy requests equal the serialize path token for token"
else
    fail "lanes: qwen35moe, 4 concurrent requests equal the serialize path" "${DETAIL:-}"
fi
kill -TERM "$SPID"; wait "$SPID" 2>/dev/null
SERVE_MODEL=$T/tiny.gguf

out=$(QWISP_LANES=-1 "$Q" serve -m "$T/tiny.gguf" --port 0 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "QWISP_LANES='-1': out of range" && pass "lanes: a negative lane count is refused" \
    || fail "lanes: a negative lane count is refused" "rc=$rc $out"
