#!/bin/bash
# t_features.sh — issue 20's server features on the tiny generated model,
# over loopback only:
#   nothing silently ignored: unknown / unimplemented fields are a 400 naming
#     them, the documented harmless ones are accepted;
#   logprobs / top_logprobs in chat and completions, streaming and not, in
#     OpenAI's shapes, checked against `qwisp logits` (features_client.mjs);
#   response_format json_object / json_schema: every output validated against
#     its schema with the openai client (features_client.mjs), unsupported
#     schema features a 400 naming them; both again on the lanes path;
#   /health, /ready and the router gauges: while the model loads (a FIFO as
#     the model file holds the load), with requests queued over
#     QWISP_READY_MAX_QUEUE, and the KV-cache gauge while a request runs.
# Bounded: about 40 requests, ~15 s on two cores.  Every server started here
# is killed on exit (lib.sh).
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
T=${QWISP_TEST_TMP:-/tmp}/features
mkdir -p "$T"
DIR=$(cd "$(dirname "$0")" && pwd)
source "$DIR/lib.sh"
SERVE_MODEL=$T/tiny.gguf SERVE_THREADS=1

"$Q" gen-model --preset tiny -o "$T/tiny.gguf" >/dev/null 2>&1 || { fail "gen-model tiny"; exit 1; }

if ! start_server "$T/serve.log" QWISP_LOG=warn -- --ctx 4096; then
    fail "server starts" "$(tail -3 "$T/serve.log")"; exit 1
fi
BASE="http://127.0.0.1:$PORT"
C=(-H 'Content-Type: application/json')

# expect NAME STATUS CODE PARAM URL BODY: status, error.code and error.param (- = not checked).
expect() {
    local name=$1 want=$2 code=$3 param=$4 url=$5 body=$6 st
    st=$(curl -s -m 20 -o "$T/body" -w '%{http_code}' "${C[@]}" "$BASE$url" -d "$body")
    local ok=1
    [ "$st" = "$want" ] || ok=0
    [ "$code" = "-" ] || grep -q "\"code\":\"$code\"" "$T/body" || ok=0
    [ "$param" = "-" ] || grep -q "\"param\":\"$param\"" "$T/body" || ok=0
    if [ $ok = 1 ]; then pass "$name"; else fail "$name" "status $st (want $want), body $(head -c 300 "$T/body")"; fi
}
M='"messages":[{"role":"user","content":"hi"}],"max_tokens":2'

# ---- item 6: nothing silently ignored ----
expect "unknown field -> 400 naming it" 400 unsupported_parameter foo /v1/chat/completions "{$M,\"foo\":1}"
# tools are implemented (t_tools.sh); this server's model has a plain ChatML
# template, which has no tool syntax: a 400 that says so, never a silent drop
expect "tools on a template without tool syntax -> 400 template_error" 400 template_error - /v1/chat/completions \
    "{$M,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}"
expect "reasoning_effort -> 400" 400 unsupported_parameter reasoning_effort /v1/chat/completions "{$M,\"reasoning_effort\":\"low\"}"
expect "echo true on completions -> 400" 400 unsupported_parameter echo /v1/completions '{"prompt":"a","max_tokens":2,"echo":true}'
expect "best_of 3 -> 400" 400 unsupported_parameter best_of /v1/completions '{"prompt":"a","max_tokens":2,"best_of":3}'
expect "messages on /v1/completions -> 400" 400 unsupported_parameter messages /v1/completions "{\"prompt\":\"a\",$M}"
expect "top_logprobs without logprobs -> 400" 400 invalid_value top_logprobs /v1/chat/completions "{$M,\"top_logprobs\":2}"
expect "top_logprobs over 20 -> 400" 400 invalid_value top_logprobs /v1/chat/completions "{$M,\"logprobs\":true,\"top_logprobs\":21}"
expect "completions logprobs not a number -> 400" 400 invalid_value logprobs /v1/completions '{"prompt":"a","logprobs":true}'
expect "harmless fields accepted (user, store, metadata, echo false, tools [], tool_choice none)" 200 - - \
    /v1/chat/completions "{$M,\"user\":\"u1\",\"store\":false,\"metadata\":{\"a\":\"b\"},\"tools\":[],\"tool_choice\":\"none\",\"parallel_tool_calls\":true}"
expect "null fields are absent" 200 - - /v1/chat/completions "{$M,\"logprobs\":null,\"response_format\":null,\"tools\":null}"
expect "response_format text accepted" 200 - - /v1/chat/completions "{$M,\"response_format\":{\"type\":\"text\"}}"
expect "response_format unknown type -> 400" 400 invalid_value response_format /v1/chat/completions \
    "{$M,\"response_format\":{\"type\":\"xml\"}}"
expect "json_schema without a name -> 400" 400 invalid_value response_format /v1/chat/completions \
    "{$M,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\"}}}}"
expect "unsupported schema keyword -> 400 naming it" 400 unsupported_schema response_format /v1/chat/completions \
    "{$M,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":1}}}}}}"
grep -q "properties.a: 'minimum' is not supported" "$T/body" && pass "the 400 names the schema path and keyword" \
    || fail "the 400 names the schema path and keyword" "$(head -c 300 "$T/body")"
expect "anyOf -> 400" 400 unsupported_schema response_format /v1/chat/completions \
    "{$M,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"anyOf\":[{\"type\":\"string\"}]}}}}"
expect "ignore_eos with response_format -> 400" 400 invalid_value ignore_eos /v1/chat/completions \
    "{$M,\"ignore_eos\":true,\"response_format\":{\"type\":\"json_object\"}}"

# ---- items 3 and 2 with the openai client ----
if [ ! -d tests/peers/node_modules/openai ]; then
    echo "SKIP: openai npm client not installed (scripts/setup.sh)"
else
    "$Q" logits -m "$SERVE_MODEL" -p "In the beginning" --top 5 --threads 1 >"$T/logits.json" 2>/dev/null \
        || fail "qwisp logits for the reference"
    node "$DIR/features_client.mjs" "$BASE" logprobs "$T/logits.json"
    node "$DIR/features_client.mjs" "$BASE" json
fi

# the same on the lanes path (the constraint and the logprobs ride on the job's sampler)
if [ -d tests/peers/node_modules/openai ]; then
    if start_server "$T/lanes.log" QWISP_LOG=warn QWISP_LANES=2 -- --ctx 4096; then
        node "$DIR/features_client.mjs" "http://127.0.0.1:$PORT" logprobs "$T/logits.json" | sed 's/^\(PASS\|FAIL\): /\1: lanes: /'
        node "$DIR/features_client.mjs" "http://127.0.0.1:$PORT" json | sed 's/^\(PASS\|FAIL\): /\1: lanes: /'
        kill -TERM "$SPID"; wait "$SPID" 2>/dev/null
    else fail "lanes server starts" "$(tail -3 "$T/lanes.log")"; fi
fi

# ---- item 4: health, readiness, gauges ----
st=$(curl -s -m 5 -w ' %{http_code}' "$BASE/ready")
[[ $st == '{"status":"ready",'*' 200' ]] && pass "/ready 200 when idle" || fail "/ready 200 when idle" "$st"
curl -s -m 5 "$BASE/metrics" >"$T/metrics.txt"
ok=1
for f in 'vllm:num_requests_waiting 0' 'vllm:num_requests_running 0' 'vllm:kv_cache_usage_perc 0' \
         'vllm:gpu_cache_usage_perc 0' 'qwisp_kv_cache_usage_ratio 0' 'qwisp_kv_cache_capacity_tokens 4096' \
         'qwisp_ready 1' 'qwisp_expert_cache_hit_ratio '; do
    grep -q "^$f" "$T/metrics.txt" || { ok=0; fail "/metrics has '$f'"; }
done
[ $ok = 1 ] && pass "/metrics: router gauges (vLLM names, KV usage, expert-cache hit ratio, ready)"

# a running request holds KV: the gauge moves, then returns to 0
curl -s -N -m 30 "${C[@]}" "$BASE/v1/completions" \
    -d '{"prompt":"And it came to pass","max_tokens":3000,"ignore_eos":true,"stream":true}' >/dev/null &
CP=$!
kv=0; run=0
for _ in $(seq 1 50); do
    curl -s -m 5 "$BASE/metrics" >"$T/metrics.txt"
    kv=$(sed -n 's/^qwisp_kv_cache_tokens \(.*\)/\1/p' "$T/metrics.txt")
    run=$(sed -n 's/^vllm:num_requests_running \(.*\)/\1/p' "$T/metrics.txt")
    [ "${kv%.*}" -gt 5 ] 2>/dev/null && [ "$run" = 1 ] && break
    sleep 0.1
done
ratio=$(sed -n 's/^vllm:kv_cache_usage_perc \(.*\)/\1/p' "$T/metrics.txt")
if [ "${kv%.*}" -gt 5 ] 2>/dev/null && [ "$run" = 1 ] && awk "BEGIN{exit !($ratio > 0 && $ratio < 1)}"; then
    pass "KV gauges while a request runs (tokens $kv, usage $ratio, running $run)"
else fail "KV gauges while a request runs" "kv=$kv run=$run ratio=$ratio"; fi
kill "$CP" 2>/dev/null; wait "$CP" 2>/dev/null
for _ in $(seq 1 50); do
    kv=$(curl -s -m 5 "$BASE/metrics" | sed -n 's/^qwisp_kv_cache_tokens \(.*\)/\1/p')
    [ "$kv" = 0 ] && break; sleep 0.1
done
[ "$kv" = 0 ] && pass "KV gauge back to 0 once the request ends" || fail "KV gauge back to 0" "$kv"

# readiness over the queue knob: one running + two queued, QWISP_READY_MAX_QUEUE=1 -> 503 busy
if start_server "$T/serve2.log" QWISP_LOG=warn QWISP_READY_MAX_QUEUE=1 -- --ctx 4096; then
    B2="http://127.0.0.1:$PORT"
    CPS=()
    for i in 1 2 3; do
        curl -s -N -m 30 "${C[@]}" "$B2/v1/completions" \
            -d '{"prompt":"And it came to pass","max_tokens":3000,"ignore_eos":true,"stream":true}' >/dev/null &
        CPS+=($!)
    done
    st=""
    for _ in $(seq 1 50); do
        st=$(curl -s -m 5 -w ' %{http_code}' "$B2/ready")
        [[ $st == *' 503' ]] && break; sleep 0.1
    done
    [[ $st == '{"status":"busy","queued":2,"running":1,"max_queue":1} 503' ]] \
        && pass "/ready 503 busy with the queue over QWISP_READY_MAX_QUEUE" || fail "/ready 503 busy over the knob" "$st"
    h=$(curl -s -m 5 -w ' %{http_code}' "$B2/health")
    [ "$h" = '{"status":"ok"} 200' ] && pass "/health stays 200 (alive) while not ready" || fail "/health while busy" "$h"
    grep -q '^qwisp_ready 0' <(curl -s -m 5 "$B2/metrics") && pass "qwisp_ready 0 while busy" || fail "qwisp_ready 0 while busy"
    for p in "${CPS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    for _ in $(seq 1 50); do
        st=$(curl -s -m 5 -w ' %{http_code}' "$B2/ready"); [[ $st == *' 200' ]] && break; sleep 0.1
    done
    [[ $st == *' 200' ]] && pass "/ready back to 200 once the queue drains" || fail "/ready back to 200" "$st"
    kill -TERM "$SPID"; wait "$SPID" 2>/dev/null
else fail "server with QWISP_READY_MAX_QUEUE starts" "$(tail -3 "$T/serve2.log")"; fi

# while the model loads: a FIFO as the model file blocks the load in open()
# until a writer comes; the listener is already up.
FPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
rm -f "$T/fifo.gguf"; mkfifo "$T/fifo.gguf"
"$Q" serve -m "$T/fifo.gguf" --port "$FPORT" --threads 1 2>"$T/fifo.log" &
FP=$!; PIDS+=("$FP")
h=""
for _ in $(seq 1 50); do h=$(curl -s -m 2 -w ' %{http_code}' "http://127.0.0.1:$FPORT/health" 2>/dev/null); [ -n "$h" ] && [[ $h != *' 000' ]] && break; sleep 0.1; done
r=$(curl -s -m 2 -w ' %{http_code}' "http://127.0.0.1:$FPORT/ready")
g=$(curl -s -m 2 -w ' %{http_code}' "${C[@]}" "http://127.0.0.1:$FPORT/v1/chat/completions" -d "{$M}")
if [ "$h" = '{"status":"loading"} 200' ] && [[ $r == '{"status":"loading",'*' 503' ]] && [[ $g == *'"code":"model_loading"}} 503' ]]; then
    pass "while loading: /health 200 loading, /ready 503, generation 503 model_loading"
else fail "while loading" "health=$h ready=$r gen=$g"; fi
exec 3>"$T/fifo.gguf"; exec 3>&-   # let the load go on (and fail: a FIFO is not a model)
wait "$FP"; rc=$?
[ "$rc" != 0 ] && grep -q "not a regular file" "$T/fifo.log" && pass "a load that fails after listening exits with its error" \
    || fail "load failure after listening" "rc=$rc $(tail -2 "$T/fifo.log")"
exit 0
