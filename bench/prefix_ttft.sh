#!/bin/bash
# prefix_ttft.sh MODEL [THREADS] — time to first token for a ~4.4K-token
# shared system prompt, cold vs warm, with the prefix cache by block
# (QWISP_PREFIX_CACHE_MB=512, QWISP_PREFIX_BLOCK default 256):
#   cold     the first question (nothing cached), and every request of a
#            server without the cache;
#   shared   three other conversations' first questions: the system prompt's
#            blocks copied from the first conversation's entry;
#   extend   the first conversation's next turn: its own entry continued.
# TTFT is the server's timings.ttft_ms.  Prints one table row per case.
set -eu
MODEL=${1:?usage: prefix_ttft.sh MODEL [THREADS]}
THREADS=${2:-2}
Q=${QWISP_BIN:-$PWD/build/qwisp}
T=$(mktemp -d /tmp/qwisp-prefix-ttft.XXXXXX)
trap 'kill $P1 $P2 2>/dev/null; rm -rf "$T"' EXIT
start() { # LOG ENV...: prints the port
    local log=$1; shift
    env "$@" "$Q" serve -m "$MODEL" --port 0 --threads "$THREADS" --ctx 8192 >/dev/null 2>"$log" &
    echo $! >"$log.pid"
    for _ in $(seq 1 100); do
        p=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
        [ -n "$p" ] && { echo "$p"; return; }
        sleep 0.1
    done
    exit 1
}
C=$(start "$T/c.log" QWISP_LOG=warn QWISP_PREFIX_CACHE_MB=512); P1=$(cat "$T/c.log.pid")
N=$(start "$T/n.log" QWISP_LOG=warn); P2=$(cat "$T/n.log.pid")
python3 - "$C" "$N" <<'PY'
import json, sys, urllib.request
C, N = sys.argv[1:3]
def chat(port, msgs):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(
        {"messages": msgs, "max_tokens": 4, "temperature": 0}).encode(), {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=600))
    return r["timings"]["ttft_ms"], r["usage"]["prompt_tokens"], r["choices"][0]["message"]["content"]
def metric(port, name):
    for l in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode().splitlines():
        if l.startswith(name + " "): return float(l.split()[1])
system = "And the river came down from the hills, and the people of the valley went out to meet it with songs. " * 190
qs = ["Who came to the river?", "What did the people sing?", "Where are the hills?", "When did the river come?"]
conv = lambda *t: [{"role": "system", "content": system}] + [{"role": "user" if i % 2 == 0 else "assistant", "content": x} for i, x in enumerate(t)]
rows = []
ms, n, a = chat(C, conv(qs[0])); rows.append(("cold (first question)", n, [ms]))
shared = [chat(C, conv(q)) for q in qs[1:]]; rows.append(("shared: other conversations' first questions", shared[0][1], [s[0] for s in shared]))
ext = chat(C, conv(qs[0], a, "And then?")); rows.append(("extend: the first conversation's next turn", ext[1], [ext[0]]))
nc = [chat(N, conv(q))[0] for q in qs[:3]]; rows.append(("no prefix cache (any request)", n, nc))
for name, n, v in rows:
    print(f"| {name} | {n} | {', '.join(f'{x:,.0f}' for x in v)} |")
h, q = metric(C, "qwisp_prefix_cache_hit_tokens_total"), metric(C, "qwisp_prefix_cache_queried_tokens_total")
print(f"hit ratio {h / q:.3f}, shared tokens {metric(C, 'qwisp_prefix_cache_shared_tokens_total'):.0f}, "
      f"cache bytes {metric(C, 'qwisp_prefix_cache_bytes') / 2**20:.1f} MiB, snapshots {metric(C, 'qwisp_prefix_cache_snapshots'):.0f}")
PY
