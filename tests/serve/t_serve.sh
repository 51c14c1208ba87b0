#!/bin/bash
# t_serve.sh — `qwisp serve` end to end on the tiny generated model, over
# loopback only: the official openai npm client (streaming and not), curl for
# every bad input (status + error object, then a valid request still works),
# greedy output equal to `qwisp run --chat`, a client that disconnects
# mid-stream, a bounded load test (200 requests over 8 connections), API-key
# auth, and SIGTERM draining an in-flight request.
# Every server started here is killed on exit (trap).
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
T=${QWISP_TEST_TMP:-/tmp}/serve
mkdir -p "$T"
DIR=$(cd "$(dirname "$0")" && pwd)
source "$DIR/lib.sh"
SERVE_MODEL=$T/tiny.gguf SERVE_THREADS=1

"$Q" gen-model --preset tiny -o "$T/tiny.gguf" >/dev/null 2>&1 || { fail "gen-model tiny"; exit 1; }
if [ ! -d tests/peers/node_modules/openai ]; then
    echo "SKIP: openai npm client not installed (scripts/setup.sh)"; NODE_OK=0
else NODE_OK=1; fi


# expect_status NAME CODE ERRCODE_OR_- curl-args... : status and error.code, then a valid request works.
expect_status() {
    local name=$1 want=$2 code=$3; shift 3
    local out st
    out=$(curl -s -m 20 -o "$T/body" -w '%{http_code}' "$@" 2>&1); st=$out
    local ok=1
    [ "$st" = "$want" ] || ok=0
    if [ "$code" != "-" ]; then
        grep -q "\"code\":\"$code\"" "$T/body" && grep -q '"error":{"message":' "$T/body" || ok=0
    fi
    local st2
    st2=$(curl -s -m 20 -o /dev/null -w '%{http_code}' "$BASE/v1/chat/completions" \
        -d '{"messages":[{"role":"user","content":"ok?"}],"max_tokens":2}')
    [ "$st2" = "200" ] || ok=0
    if [ $ok = 1 ]; then pass "$name"; else fail "$name" "status $st (want $want), body $(head -c 200 "$T/body"), next $st2"; fi
}

# ---- main server: ctx 32768 so a long generation takes a while (disconnect test) ----
if ! start_server "$T/serve.log" QWISP_LOG=warn -- --ctx 32768 --max-conns 16; then
    fail "server starts" "$(tail -3 "$T/serve.log")"; exit 1
fi
BASE="http://127.0.0.1:$PORT"
pass "server starts on a free loopback port"

st=$(curl -s -m 5 "$BASE/health")
[ "$st" = '{"status":"ok"}' ] && pass "health" || fail "health" "$st"

# ---- bad inputs: each a 4xx with an error object; the next request succeeds ----
C=(-H 'Content-Type: application/json')
expect_status "bad JSON -> 400" 400 invalid_json "$BASE/v1/chat/completions" "${C[@]}" -d '{"messages": [}'
expect_status "body not an object -> 400" 400 invalid_value "$BASE/v1/chat/completions" "${C[@]}" -d '[1,2]'
expect_status "max_tokens wrong type -> 400" 400 invalid_value "$BASE/v1/chat/completions" "${C[@]}" \
    -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":"ten"}'
expect_status "temperature out of range -> 400" 400 invalid_value "$BASE/v1/chat/completions" "${C[@]}" \
    -d '{"messages":[{"role":"user","content":"hi"}],"temperature":7}'
expect_status "stop wrong type -> 400" 400 invalid_value "$BASE/v1/chat/completions" "${C[@]}" \
    -d '{"messages":[{"role":"user","content":"hi"}],"stop":5}'
expect_status "message content wrong type -> 400" 400 invalid_value "$BASE/v1/chat/completions" "${C[@]}" \
    -d '{"messages":[{"role":"user","content":5}]}'
expect_status "bad role -> 400" 400 invalid_value "$BASE/v1/chat/completions" "${C[@]}" \
    -d '{"messages":[{"role":"wizard","content":"hi"}]}'
expect_status "unknown model -> 404" 404 model_not_found "$BASE/v1/chat/completions" "${C[@]}" \
    -d '{"model":"gpt-17","messages":[{"role":"user","content":"hi"}]}'
expect_status "empty messages -> 400" 400 invalid_value "$BASE/v1/chat/completions" "${C[@]}" -d '{"messages":[]}'
expect_status "missing messages -> 400" 400 missing_required_parameter "$BASE/v1/chat/completions" "${C[@]}" -d '{}'
expect_status "empty completion prompt -> 400" 400 empty_prompt "$BASE/v1/completions" "${C[@]}" -d '{"prompt":""}'
head -c 300000 /dev/zero | tr '\0' 'x' | sed 's/^/{"prompt":"/; s/$/","max_tokens":1}/' > "$T/long.json"
expect_status "prompt longer than the context -> 400" 400 context_length_exceeded "$BASE/v1/completions" "${C[@]}" \
    --data-binary "@$T/long.json"
head -c 9000000 /dev/zero | tr '\0' 'x' > "$T/big.json"
expect_status "oversized body (Content-Length) -> 413" 413 request_too_large "$BASE/v1/chat/completions" "${C[@]}" \
    --data-binary "@$T/big.json"
expect_status "oversized chunked body -> 413" 413 request_too_large "$BASE/v1/chat/completions" "${C[@]}" \
    -H 'Transfer-Encoding: chunked' --data-binary "@$T/big.json"
expect_status "unknown endpoint -> 404" 404 not_found "$BASE/v1/embeddings" "${C[@]}" -d '{}'
expect_status "GET on a POST endpoint -> 405" 405 method_not_allowed "$BASE/v1/chat/completions"

# ---- greedy output equals qwisp run on the same prompt (chat template applied) ----
"$Q" run -m "$T/tiny.gguf" -p "Hello there" --chat -n 24 --threads 1 --json > "$T/run.json" 2>/dev/null \
    || fail "qwisp run --chat --json"
if [ $NODE_OK = 1 ]; then
    node "$DIR/client.mjs" "$BASE" greedy "$T/run.json"
    node "$DIR/client.mjs" "$BASE" api
    node "$DIR/client.mjs" "$BASE" conns 16
    node "$DIR/client.mjs" "$BASE" abort
    node "$DIR/client.mjs" "$BASE" load 200 8
fi
# curl, streaming: SSE events end with data: [DONE] (ignore_eos: at temperature 1 the tiny
# model may end before max_tokens, and these checks want finish_reason "length")
curl -sN -m 20 "$BASE/v1/chat/completions" "${C[@]}" \
    -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"stream":true,"ignore_eos":true}' > "$T/sse.txt"
if grep -q '"object":"chat.completion.chunk"' "$T/sse.txt" && [ "$(grep -v '^$' "$T/sse.txt" | tail -1)" = "data: [DONE]" ] \
    && grep -q '"finish_reason":"length"' "$T/sse.txt"; then pass "curl: SSE chunks end with [DONE]"
else fail "curl: SSE chunks end with [DONE]" "$(tail -c 300 "$T/sse.txt")"; fi
curl -s -m 20 "$BASE/v1/chat/completions" "${C[@]}" \
    -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"ignore_eos":true}' > "$T/one.json"
grep -q '"completion_tokens":3' "$T/one.json" && grep -q '"finish_reason":"length"' "$T/one.json" \
    && pass "curl: non-streaming usage + finish_reason" || fail "curl: non-streaming usage + finish_reason" "$(head -c 300 "$T/one.json")"
grep -qE '^qwisp serve: #[0-9]+ chat 200 prompt=[0-9]+ prefill=[0-9.]+ tok/s gen=3 ttft=[0-9]+ ms decode=[0-9.]+ tok/s' "$T/serve.log" \
    && pass "one log line per request" || fail "one log line per request" "$(tail -2 "$T/serve.log")"
curl -s -m 5 "$BASE/metrics" > "$T/metrics.txt"
for m in qwisp_requests_total qwisp_generated_tokens_total qwisp_prefill_tokens_per_second qwisp_decode_tokens_per_second \
         qwisp_queue_depth qwisp_pool_active_bytes qwisp_pool_cache_bytes qwisp_pool_peak_bytes qwisp_footprint_bytes; do
    grep -q "^$m" "$T/metrics.txt" || { fail "metrics: $m present"; continue; }
done
grep -q '^qwisp_requests_total{endpoint="chat_completions",code="4xx"} [1-9]' "$T/metrics.txt" \
    && pass "metrics: Prometheus families present, 4xx counted" || fail "metrics: 4xx counted"

# ---- a client that leaves during a long prefill stops it within one chunk ----
# 16000 prompt token ids (several seconds of prefill on the tiny model); curl
# gives up after 1 s; the stream's keep-alive comment then meets a reset.
# The job must end cancelled *in its prompt* (the worker saw the flag between
# chunks), and the next request is served.
metric() { curl -s -m 5 "$BASE/metrics" | sed -n "s/^$1 //p"; }
python3 -c 'import json; print(json.dumps({"prompt": [32 + i % 200 for i in range(16000)], "max_tokens": 4, "stream": True}))' > "$T/p16k.json"
c0=$(metric 'qwisp_jobs_cancelled_in_prompt_total'); j0=$(metric 'qwisp_jobs_total{result="cancelled"}')
curl -sN -m 1 "${C[@]}" "$BASE/v1/completions" -d @"$T/p16k.json" >/dev/null 2>&1
for _ in $(seq 1 100); do [ "$(metric 'qwisp_jobs_total{result="cancelled"}')" != "$j0" ] && break; sleep 0.1; done
c1=$(metric 'qwisp_jobs_cancelled_in_prompt_total')
st=$(curl -s -o "$T/after.json" -w '%{http_code}' -m 30 "${C[@]}" "$BASE/v1/completions" -d '{"prompt":"Hi","max_tokens":2}')
if [ -n "$c0" ] && [ "$c1" = "$((c0 + 1))" ] && [ "$st" = 200 ]; then
    pass "a client gone during a 16000-token prefill cancels it in the prompt; the next request is served"
else fail "cancel during prefill" "in_prompt $c0 -> $c1, next $st $(tail -3 "$T/serve.log")"; fi

# ---- SIGTERM drains the in-flight request, then exits 0 ----
# (ignore_eos + 4000 tokens at growing context: still running when the signal lands)
curl -s -m 60 "$BASE/v1/completions" "${C[@]}" \
    -d '{"prompt":"Long","max_tokens":4000,"temperature":0,"ignore_eos":true}' > "$T/drain.json" &
CURL=$!
sleep 0.5
kill -TERM "$SPID"
wait "$CURL"
wait "$SPID"; rc=$?
sig_line=$(grep -n "SIGTERM received" "$T/serve.log" | cut -d: -f1)
req_line=$(grep -n "completions 200 .*gen=4000 " "$T/serve.log" | cut -d: -f1)
if [ $rc = 0 ] && grep -q '"completion_tokens":4000' "$T/drain.json" && grep -q "qwisp serve: stopped" "$T/serve.log" \
    && [ -n "$sig_line" ] && [ -n "$req_line" ] && [ "$sig_line" -lt "$req_line" ]; then
    pass "SIGTERM drains the in-flight request and exits 0"
else fail "SIGTERM drains" "rc=$rc sig@$sig_line req@$req_line $(head -c 200 "$T/drain.json") $(tail -2 "$T/serve.log")"; fi

# ---- API key ----
if start_server "$T/auth.log" QWISP_API_KEY=s3cret -- --ctx 32768 --max-queue 0; then
    BASE="http://127.0.0.1:$PORT"
    st=$(curl -s -o "$T/body" -w '%{http_code}' "$BASE/v1/models")
    [ "$st" = 401 ] && grep -q invalid_api_key "$T/body" && pass "auth: no key -> 401" || fail "auth: no key -> 401" "$st"
    st=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer wrong' "$BASE/v1/models")
    [ "$st" = 401 ] && pass "auth: wrong key -> 401" || fail "auth: wrong key -> 401" "$st"
    st=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer s3cret' "$BASE/v1/models")
    [ "$st" = 200 ] && pass "auth: right key -> 200" || fail "auth: right key -> 200" "$st"
    st=$(curl -s -o /dev/null -w '%{http_code}' "$BASE/health")
    [ "$st" = 200 ] && pass "auth: /health stays open" || fail "auth: /health stays open" "$st"
    # --max-queue 0: while one request runs, the next is refused with 429; a curl
    # that goes away mid-stream frees the path for the one after.
    K=(-H 'Authorization: Bearer s3cret' -H 'Content-Type: application/json')
    rm -f "$T/longstream.txt" # a stale file from an earlier run would end the wait below at once
    curl -sN -m 60 "${K[@]}" "$BASE/v1/completions" \
        -d '{"prompt":"x","max_tokens":20000,"ignore_eos":true,"stream":true}' > "$T/longstream.txt" &
    LC=$!
    for _ in $(seq 1 50); do [ -s "$T/longstream.txt" ] && break; sleep 0.1; done
    st=$(curl -s -o "$T/body" -w '%{http_code}' -m 20 "${K[@]}" "$BASE/v1/completions" -d '{"prompt":"y","max_tokens":2}')
    [ "$st" = 429 ] && grep -q '"code":"queue_full"' "$T/body" && pass "queue full -> 429" || fail "queue full -> 429" "$st $(head -c 200 "$T/body")"
    kill "$LC" 2>/dev/null; wait "$LC" 2>/dev/null
    st=000
    for _ in $(seq 1 50); do
        st=$(curl -s -o /dev/null -w '%{http_code}' -m 20 "${K[@]}" "$BASE/v1/completions" -d '{"prompt":"y","max_tokens":2}')
        [ "$st" = 200 ] && break; sleep 0.1
    done
    [ "$st" = 200 ] && grep -q "cancelled (client gone)" "$T/auth.log" \
        && pass "curl disconnect mid-stream cancels; the next request is served" || fail "curl disconnect cancels" "$st"
    kill -INT "$SPID"; wait "$SPID"; rc=$?
    [ $rc = 0 ] && pass "SIGINT exits 0" || fail "SIGINT exits 0" "rc=$rc"
else fail "auth server starts" "$(tail -2 "$T/auth.log")"; fi

# (the lanes path has its own test: t_lanes.sh)
exit 0
