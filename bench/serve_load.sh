#!/bin/bash
# serve_load.sh [MODEL] [THREADS] — load figures for issue 20: requests/s and
# p50/p99 TTFT at 1, 4 and 16 concurrent clients, on the serialize path and
# the lanes path (QWISP_LANES=4), each direct and through HAProxy
# (deploy/haproxy.cfg, the same one server behind it: what the balancer
# costs).  48 streamed chat requests of 32 tokens per row; loopback only.
# Prints a markdown table (bench/RESULTS.md keeps one, with the CPU).
set -eu
cd "$(dirname "$0")/.."
MODEL=${1:-models/default.gguf}
THREADS=${2:-2}
Q=${QWISP_BIN:-$PWD/build/qwisp}
T=$(mktemp -d /tmp/qwisp-load.XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; rm -rf "$T"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') ($(nproc) cores), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| path | route | clients | req/s | TTFT p50 ms | TTFT p99 ms | failed |"
echo "|---|---|---|---|---|---|---|"
for path in serialize lanes; do
    lanes=0; [ $path = lanes ] && lanes=4
    # the replica flags deploy/qwisp@.service uses (one address, the balancer's, sends everything)
    env QWISP_LOG=warn QWISP_LANES=$lanes "$Q" serve -m "$MODEL" --port 0 --threads "$THREADS" --max-conns-per-client 64 \
        >/dev/null 2>"$T/s.log" &
    SP=$!; PIDS+=($SP)
    for _ in $(seq 1 100); do port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T/s.log"); [ -n "$port" ] && break; sleep 0.1; done
    LB=$(free_port); ST=$(free_port)
    QWISP_LB_BIND=127.0.0.1:$LB QWISP_LB_STATS=127.0.0.1:$ST QWISP_R1=127.0.0.1:$port QWISP_R2=127.0.0.1:1 QWISP_R3=127.0.0.1:1 \
        haproxy -db -f deploy/haproxy.cfg >"$T/h.log" 2>&1 &
    HP=$!; PIDS+=($HP)
    sleep 2  # r2/r3 (port 1) fail their checks and leave rotation
    for route in direct haproxy; do
        base=http://127.0.0.1:$([ $route = direct ] && echo "$port" || echo "$LB")
        node bench/serve_load.mjs "$base" 1 4 32 >/dev/null  # warm-up
        for c in 1 4 16; do
            node bench/serve_load.mjs "$base" "$c" 48 32 $path $route
        done
    done
    kill $SP $HP; wait $SP $HP 2>/dev/null || true
done
