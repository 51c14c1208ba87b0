#!/bin/bash
# t_prefix_disk.sh — the prefix cache across restarts (QWISP_PREFIX_CACHE_DIR),
# on both shipped models: a server that drains (SIGTERM) leaves one
# checksummed file per entry; a restarted server loads them and its first
# request reuses the prefix, answering as a server without reuse; a file
# with one flipped byte, one truncated, and one of another model are each
# ignored with a log line naming the file and why, and the server still
# serves.  Loopback only, ~10 s.
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
T=${QWISP_TEST_TMP:-/tmp}/prefix_disk
mkdir -p "$T"
DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$DIR/../.." && pwd)
source "$DIR/lib.sh"
SERVE_THREADS=1

cat >"$T/req.py" <<'PY'
import json, sys, urllib.request
port, conv = sys.argv[1], int(sys.argv[2])
system = "In the beginning the scribe wrote of rivers, hills and stars, and every word was counted. " * 6
q = ["Tell me of the river.", "Count the stars."][conv]
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(
    {"messages": [{"role": "system", "content": system}, {"role": "user", "content": q}], "max_tokens": 8,
     "temperature": 0, "return_tokens": True}).encode(), {"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(req, timeout=60))
hit = 0
for l in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode().splitlines():
    if l.startswith("qwisp_prefix_cache_hit_tokens_total "): hit = int(float(l.split()[1]))
print(json.dumps({"tokens": r["choices"][0]["tokens"], "hit": hit, "prompt": r["usage"]["prompt_tokens"]}))
PY
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
stop() { kill -TERM "$SPID"; wait "$SPID" 2>/dev/null; }

for model in default qwen35moe; do
    SERVE_MODEL=$ROOT/models/$model.gguf
    arch=$([ $model = default ] && echo qwen3moe || echo qwen35moe)
    D=$T/$model; rm -rf "$D"; mkdir -p "$D"
    env=(QWISP_LOG=info QWISP_PREFIX_CACHE_MB=64 QWISP_PREFIX_BLOCK=32 QWISP_PREFIX_CACHE_DIR=$D)
    start_server "$T/$model-plain.log" QWISP_LOG=warn -- --ctx 2048 || { fail "$arch: plain server starts"; continue; }
    want0=$(field "$(python3 "$T/req.py" "$PORT" 0)" tokens); want1=$(field "$(python3 "$T/req.py" "$PORT" 1)" tokens)
    stop
    # 1. a server that answers two conversations and drains leaves two files
    start_server "$T/$model-1.log" "${env[@]}" -- --ctx 2048 || { fail "$arch: server 1 starts" "$(tail -3 "$T/$model-1.log")"; continue; }
    python3 "$T/req.py" "$PORT" 0 >/dev/null; python3 "$T/req.py" "$PORT" 1 >/dev/null
    stop
    n=$(ls "$D"/prefix-*.qwpc 2>/dev/null | wc -l)
    [ "$n" = 2 ] && ! ls "$D"/*.tmp >/dev/null 2>&1 && grep -q "saved 2 entries" "$T/$model-1.log" \
        && pass "$arch: a drained server leaves one file per entry (no temporary left)" || fail "$arch: 2 files saved" "n=$n $(tail -2 "$T/$model-1.log")"
    # 2. restarted: the first request reuses the loaded prefix, answers unchanged
    start_server "$T/$model-2.log" "${env[@]}" -- --ctx 2048 || { fail "$arch: server 2 starts"; continue; }
    out=$(python3 "$T/req.py" "$PORT" 0)
    hit=$(field "$out" hit); prompt=$(field "$out" prompt)
    [ "$(field "$out" tokens)" = "$want0" ] && [ "$hit" -ge $(( (prompt - 1) / 32 * 32 )) ] && [ "$hit" -gt 0 ] && grep -q "loaded 2 entries" "$T/$model-2.log" \
        && pass "$arch: after a restart the first request reuses $hit of $prompt prompt tokens from disk, same answer" \
        || fail "$arch: reuse after restart" "hit=$hit prompt=$prompt $(grep prefix "$T/$model-2.log" | tail -2)"
    stop
    # 3. corrupt one file (a flipped byte mid-KV), truncate the other, add one of another model
    files=("$D"/prefix-*.qwpc)
    python3 - "${files[0]}" "${files[1]}" <<'PY'
import os, sys
a, b = sys.argv[1], sys.argv[2]
data = bytearray(open(a, "rb").read()); data[len(data) // 2] ^= 0x40; open(a, "wb").write(data)
os.truncate(b, os.path.getsize(b) - 100)
PY
    other=$([ $model = default ] && echo qwen35moe || echo default)
    [ -d "$T/$other" ] && cp "$(ls "$T/$other"/prefix-*.qwpc | head -1)" "$D/prefix-0000000000000000.qwpc" 2>/dev/null
    start_server "$T/$model-3.log" "${env[@]}" -- --ctx 2048 || { fail "$arch: server 3 starts with bad files" "$(tail -3 "$T/$model-3.log")"; continue; }
    out=$(python3 "$T/req.py" "$PORT" 1)
    log=$(grep "ignored" "$T/$model-3.log")
    grep -q "${files[0]##*/} ignored: .*checksum mismatch" <<<"$log" && grep -q "${files[1]##*/} ignored: .*truncated" <<<"$log" \
        && pass "$arch: a flipped byte and a truncated file are each ignored with a log line naming the file and why" \
        || fail "$arch: bad files named in the log" "$log"
    if [ -f "$D/prefix-0000000000000000.qwpc" ]; then
        grep -q "prefix-0000000000000000.qwpc ignored: made with another model" <<<"$log" \
            && pass "$arch: another model's file is ignored, named" || fail "$arch: other model's file refused" "$log"
    fi
    [ "$(field "$out" tokens)" = "$want1" ] && [ "$(field "$out" hit)" = 0 ] && grep -q "loaded 0 entries" "$T/$model-3.log" \
        && pass "$arch: with only bad files the server serves, cold, the same answer" || fail "$arch: serves after bad files" "$out"
    stop
done
exit 0
