#!/bin/bash
# t_prefix_blocks.sh — the prefix cache by block (QWISP_PREFIX_BLOCK=32), on
# both shipped models (qwen3moe: KV only; qwen35moe: KV + recurrent state
# snapshotted at block boundaries), each against a server without reuse:
#   - a conversation that shares only the system prompt with another reuses
#     it (copied: qwisp_prefix_cache_shared_tokens_total) and the other
#     conversation's next turn still finds its whole history;
#   - qwen35moe resumes mid-prompt at a snapshot (qwisp_prefix_cache_snapshots);
#   - interleaved conversations sent concurrently on the lanes path (B=3),
#     each answer equal to its run alone — never another conversation's tokens;
#   - a 1 MB budget: evictions cut blocks from the LRU entry's tail, bytes
#     never over the budget, answers unchanged.
# Loopback only, ~60 requests per model, ~15 s.
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
T=${QWISP_TEST_TMP:-/tmp}/prefix_blocks
mkdir -p "$T"
DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$DIR/../.." && pwd)
source "$DIR/lib.sh"
SERVE_THREADS=1

cat >"$T/blocks.py" <<'PY'
import json, sys, threading, urllib.request
ARCH, R, P, L, S = sys.argv[1:6]
sys.path.insert(0, sys.argv[6])
from prefix_lib import post, metric, check as check_tagged
def check(name, ok, detail=""): check_tagged(name, ok, detail, ARCH)
def chat(port, msgs):
    r = post(port, "/v1/chat/completions", {"messages": msgs, "max_tokens": 10, "temperature": 0, "return_tokens": True})
    return r["choices"][0]["tokens"], r["choices"][0]["message"]["content"], r["usage"]["prompt_tokens"]
M = lambda n: metric(R, "qwisp_prefix_cache_" + n)

system = "In the beginning the scribe wrote of rivers, hills and stars, and every word was counted. " * 10
def convo(*turns):
    msgs = [{"role": "system", "content": system}]
    for i, t in enumerate(turns):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": t})
    return msgs

# X's first turn, cold; then Y, which shares only the system prompt
river = "Tell me of the river that runs past the hills, where it rises and where it ends. " * 3
x1 = convo(river)
want_x1 = chat(P, x1)
got_x1 = chat(R, x1)
h0, s0 = M("hit_tokens_total"), M("shared_tokens_total")
y1 = convo("Count the stars, one by one, and name them.")
want_y1 = chat(P, y1)
got_y1 = chat(R, y1)
h1, s1 = M("hit_tokens_total"), M("shared_tokens_total")
n_sys = post(P, "/v1/chat/completions", {"messages": convo("x"), "max_tokens": 1, "temperature": 0})["usage"]["prompt_tokens"]
check("first turns equal the server without reuse", got_x1[0] == want_x1[0] and got_y1[0] == want_y1[0])
check("a conversation sharing only the system prompt reuses it from the other's entry (shared tokens)",
      h1 - h0 == s1 - s0 and h1 - h0 >= (n_sys - 40) // 32 * 32 and h1 - h0 > 0, f"hit {h1 - h0} shared {s1 - s0} system ~{n_sys}")
# X's next turn extends X's history: found whole, not cut back to the system prompt by Y
x2 = convo(river, want_x1[1], "And of the hills?")
want_x2 = chat(P, x2)
got_x2 = chat(R, x2)
h2 = M("hit_tokens_total")
# (a recurrent model resumes at the last block boundary of x1's prompt: the snapshot there)
check("the other conversation's next turn still reuses its whole history", got_x2[0] == want_x2[0] and h2 - h1 >= (got_x1[2] - 1) // 32 * 32 and h2 - h1 > n_sys + 32,
      f"hit {h2 - h1} of x1's {got_x1[2]} prompt tokens")
if ARCH == "qwen35moe":
    check("recurrent-state snapshots held at block boundaries", (M("snapshots") or 0) > 0, M("snapshots"))
# the same, sent concurrently on the lanes path: 3 conversations' turns interleaved
turns = {"A": ["Tell me of the river.", "And of the hills?"], "B": ["Count the stars."], "C": ["Sing.", "Again, softer."]}
jobs = []
for w, ts in turns.items():
    for k in range(1, len(ts) + 1):
        jobs.append(convo(*sum(([t, "So it was."] for t in ts[:k - 1]), []), ts[k - 1]))
jobs = jobs * 2
want = [chat(P, m)[0] for m in jobs]
for rnd in range(2):
    got = [None] * len(jobs)
    def run(k): got[k] = chat(L, jobs[k])[0]
    ths = [threading.Thread(target=run, args=(k,)) for k in range(len(jobs))]
    for t in ths: t.start()
    for t in ths: t.join()
    bad = [k for k in range(len(jobs)) if got[k] != want[k]]
    check(f"lanes (B=3), round {rnd + 1}: {len(jobs)} concurrent requests of interleaved conversations each equal its run alone", not bad, bad)
hit, q, sh = (metric(L, "qwisp_prefix_cache_" + n) for n in ("hit_tokens_total", "queried_tokens_total", "shared_tokens_total"))
check("lanes: blocks reused across conversations and within them (hit > half of queried, shared > 0)", hit > q / 2 and sh > 0, f"hit={hit} queried={q} shared={sh}")
# a small budget: eviction by block
budget = metric(S, "qwisp_prefix_cache_budget_bytes")
over, bad = [], []
for rnd in range(2):
    for i in range(6):
        m = convo(f"Conversation {i}: " + f"tell me of scroll {i}, " * 40)
        if chat(S, m)[0] != chat(P, m)[0]: bad.append(i)
        b = metric(S, "qwisp_prefix_cache_bytes")
        if b > budget: over.append(b)
be = metric(S, "qwisp_prefix_cache_block_evictions_total")
check("small budget: blocks cut from LRU tails, bytes never over the budget, answers unchanged",
      not over and be > 0 and not bad, f"budget={budget} over={over} block_evictions={be} bad={bad}")
PY

for model in default qwen35moe; do
    SERVE_MODEL=$ROOT/models/$model.gguf
    arch=$([ $model = default ] && echo qwen3moe || echo qwen35moe)
    start_server "$T/$model-r.log" QWISP_LOG=warn QWISP_PREFIX_CACHE_MB=64 QWISP_PREFIX_BLOCK=32 -- --ctx 2048 || { fail "$arch: cache server starts" "$(tail -3 "$T/$model-r.log")"; continue; }
    R=$PORT
    start_server "$T/$model-p.log" QWISP_LOG=warn -- --ctx 2048 || { fail "$arch: plain server starts"; continue; }
    P=$PORT
    start_server "$T/$model-l.log" QWISP_LOG=warn QWISP_PREFIX_CACHE_MB=64 QWISP_PREFIX_BLOCK=32 QWISP_LANES=3 -- --ctx 2048 || { fail "$arch: lanes server starts"; continue; }
    L=$PORT
    start_server "$T/$model-s.log" QWISP_LOG=warn QWISP_PREFIX_CACHE_MB=1 QWISP_PREFIX_BLOCK=32 -- --ctx 2048 || { fail "$arch: 1 MB server starts"; continue; }
    S=$PORT
    python3 "$T/blocks.py" "$arch" "$R" "$P" "$L" "$S" "$DIR" || fail "$arch: blocks.py ran"
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    PIDS=()
done
exit 0
