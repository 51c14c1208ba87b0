#!/bin/bash
# t_prefix.sh — prefix reuse on the serialize path (QWISP_PREFIX_CACHE_MB=64):
# interleaved conversations that share a long system prompt, sequential and
# then concurrent, each answer's greedy tokens equal to a server without
# reuse (never another conversation's tokens), reuse actually happening (the
# prefix-cache counters), and a completion sent twice reusing all but its
# last token.  Loopback only, ~30 requests, a few seconds.
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
T=${QWISP_TEST_TMP:-/tmp}/prefix
mkdir -p "$T"
DIR=$(cd "$(dirname "$0")" && pwd)
source "$DIR/lib.sh"
SERVE_MODEL=$T/tiny.gguf SERVE_THREADS=1
export PYTHONPATH="$DIR${PYTHONPATH:+:$PYTHONPATH}" # prefix_lib.py
"$Q" gen-model --preset tiny -o "$T/tiny.gguf" >/dev/null 2>&1 || { fail "gen-model tiny"; exit 1; }

start_server "$T/reuse.log" QWISP_LOG=warn QWISP_PREFIX_CACHE_MB=64 -- --ctx 4096 || { fail "reuse server starts" "$(tail -3 "$T/reuse.log")"; exit 1; }
R=$PORT
start_server "$T/plain.log" QWISP_LOG=warn -- --ctx 4096 || { fail "plain server starts" "$(tail -3 "$T/plain.log")"; exit 1; }
P=$PORT
start_server "$T/small.log" QWISP_LOG=warn QWISP_PREFIX_CACHE_MB=1 -- --ctx 4096 || { fail "1 MB server starts" "$(tail -3 "$T/small.log")"; exit 1; }
S=$PORT

python3 - "$R" "$P" "$S" <<'PY'
import json, sys, threading, urllib.request
R, P, S = sys.argv[1], sys.argv[2], sys.argv[3]
from prefix_lib import post, metric, check

system = "You are a careful assistant who answers in the manner of an old scribe. " * 12
def convo(tag, turns):
    msgs = [{"role": "system", "content": system}]
    for t in turns:
        msgs.append({"role": "user", "content": t})
    return msgs
def chat(port, msgs):
    r = post(port, "/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "temperature": 0, "return_tokens": True})
    return r["choices"][0]["tokens"], r["choices"][0]["message"]["content"]

# two conversations, turns interleaved: A1 B1 A2 B2 A3 B1 (B1 again: its prefix is now B's)
A = ["Tell me of the river.", "And of the hills?", "What came after?"]
B = ["Count the stars.", "Name the brightest."]
seq, histA, histB = [], [], []
order = [("A", 0), ("B", 0), ("A", 1), ("B", 1), ("A", 2), ("B", 0)]
mismatch = []
for who, i in order:
    if who == "A":
        msgs = convo("A", A[: i + 1])
    else:
        msgs = convo("B", B[: i + 1])
    # feed back the assistant answers like a client does
    got_r = chat(R, msgs)
    got_p = chat(P, msgs)
    if got_r[0] != got_p[0]:
        mismatch.append((who, i, got_r[1], got_p[1]))
check("interleaved conversations: every answer equals the server without reuse", not mismatch, mismatch)
# the same with the history including the previous answers
msgs = convo("A", A[:1])
tok, text = chat(P, msgs)
msgs2 = msgs + [{"role": "assistant", "content": text}, {"role": "user", "content": A[1]}]
check("a turn that extends the previous answer equals the server without reuse", chat(R, msgs)[0] == tok and chat(R, msgs2)[0] == chat(P, msgs2)[0])
hit = metric(R, "qwisp_prefix_cache_hit_tokens_total")
q = metric(R, "qwisp_prefix_cache_queried_tokens_total")
check("prefix reuse happens (hit tokens > half the queried ones)", hit is not None and q and hit > q / 2, f"hit={hit} queried={q}")
check("vLLM-named prefix counters", metric(R, "vllm:prefix_cache_hits_total") == hit and metric(R, "vllm:prefix_cache_queries_total") == q)
check("no prefix family without reuse", metric(P, "qwisp_prefix_cache_hit_tokens_total") is None)

# concurrent: 12 requests from 4 conversations at once (the queue orders them arbitrarily)
jobs = [convo(w, t) for w, t in [("A", A[:1]), ("B", B[:1]), ("A", A[:2]), ("B", B[:2]), ("A", A[:3]), ("C", ["Sing."])]] * 2
want = [chat(P, m)[0] for m in jobs]
got = [None] * len(jobs)
def run(k):
    got[k] = chat(R, jobs[k])[0]
ths = [threading.Thread(target=run, args=(k,)) for k in range(len(jobs))]
for t in ths: t.start()
for t in ths: t.join()
bad = [k for k in range(len(jobs)) if got[k] != want[k]]
check("12 concurrent requests of 6 conversations: each equals its answer alone", not bad, bad)

# a completion sent twice reuses all but its last token
h0 = metric(R, "qwisp_prefix_cache_hit_tokens_total")
body = {"prompt": "In the beginning was the word, and the word was with the river", "max_tokens": 4, "temperature": 0, "return_tokens": True}
a = post(R, "/v1/completions", body); b = post(R, "/v1/completions", body)
h1 = metric(R, "qwisp_prefix_cache_hit_tokens_total")
n = a["usage"]["prompt_tokens"]
check("the same completion twice: same tokens, n_prompt - 1 reused", a["choices"][0]["tokens"] == b["choices"][0]["tokens"] and h1 - h0 == n - 1,
      f"reused {h1 - h0} of {n}")

# three long conversations in turn: the second round hits each one's own entry
def long_prompt(i):
    return {"prompt": f"conversation {i}: " + f"line {i} of the scroll, " * 120, "max_tokens": 3, "temperature": 0, "return_tokens": True}
for i in range(3): post(R, "/v1/completions", long_prompt(i))
h0 = metric(R, "qwisp_prefix_cache_hit_tokens_total")
for i in range(3): post(R, "/v1/completions", long_prompt(i))
n = sum(post(P, "/v1/completions", long_prompt(i))["usage"]["prompt_tokens"] for i in range(3))
h1 = metric(R, "qwisp_prefix_cache_hit_tokens_total")
check("three conversations in turn: each reuses its own entry", h1 - h0 == n - 3 and metric(R, "qwisp_prefix_cache_entries") >= 3,
      f"reused {h1 - h0} of {n}")

# a 1 MB budget: six conversations of ~256 KiB of KV each, twice
budget = metric(S, "qwisp_prefix_cache_budget_bytes")
over, bad = [], []
for rnd in range(2):
    for i in range(6):
        got = post(S, "/v1/completions", long_prompt(i))["choices"][0]["tokens"]
        if got != post(P, "/v1/completions", long_prompt(i))["choices"][0]["tokens"]: bad.append(i)
        b = metric(S, "qwisp_prefix_cache_bytes")
        if b > budget: over.append(b)
ev = metric(S, "qwisp_prefix_cache_evictions_total")
check("1 MB budget: bytes held never over the budget, LRU evictions, answers unchanged",
      budget == 1 << 20 and not over and ev > 0 and not bad, f"budget={budget} over={over} evictions={ev} bad={bad}")
PY

# the lanes path: interleaved conversations sent concurrently, each answer equal to its run alone
if start_server "$T/lanes.log" QWISP_LOG=warn QWISP_PREFIX_CACHE_MB=64 QWISP_LANES=3 -- --ctx 4096; then
    python3 - "$PORT" "$P" <<'PY'
import json, sys, threading, urllib.request
L, P = sys.argv[1], sys.argv[2]
from prefix_lib import metric, check, post as post_path
def post(port, body): return post_path(port, "/v1/chat/completions", body)
system = "You are a careful assistant who answers in the manner of an old scribe. " * 12
turns = {"A": ["Tell me of the river.", "And of the hills?", "What came after?"], "B": ["Count the stars.", "Name the brightest."],
         "C": ["Sing.", "Again."]}
jobs = []
for w, ts in turns.items():
    for k in range(1, len(ts) + 1):
        jobs.append([{"role": "system", "content": system}] + [{"role": "user", "content": t} for t in ts[:k]])
jobs = jobs * 2
body = lambda m: {"messages": m, "max_tokens": 12, "temperature": 0, "return_tokens": True}
want = [post(P, body(m))["choices"][0]["tokens"] for m in jobs]
got = [None] * len(jobs)
def run(k): got[k] = post(L, body(jobs[k]))["choices"][0]["tokens"]
for rnd in range(2):
    ths = [threading.Thread(target=run, args=(k,)) for k in range(len(jobs))]
    for t in ths: t.start()
    for t in ths: t.join()
    bad = [k for k in range(len(jobs)) if got[k] != want[k]]
    check(f"lanes (B=3), round {rnd + 1}: {len(jobs)} concurrent requests of 3 interleaved conversations each equal its run alone",
          not bad, bad)
hit, q = metric(L, "qwisp_prefix_cache_hit_tokens_total"), metric(L, "qwisp_prefix_cache_queried_tokens_total")
check("lanes: the prefix cache is used (hit tokens > half the queried ones)", hit and q and hit > q / 2, f"hit={hit} queried={q}")
PY
    kill -TERM "$SPID"; wait "$SPID" 2>/dev/null
else fail "lanes server with a prefix cache starts" "$(tail -3 "$T/lanes.log")"; fi
out=$(QWISP_PREFIX_CACHE_MB=8 QWISP_LANES=33 timeout 20 "$Q" serve -m "$SERVE_MODEL" --port 0 2>&1); rc=$?
[ "$rc" = 1 ] && grep -q "at most 32 lanes" <<<"$out" && pass "QWISP_PREFIX_CACHE_MB with more than 32 lanes is refused, not ignored" \
    || fail "prefix cache + 33 lanes refused" "rc=$rc $out"
exit 0
