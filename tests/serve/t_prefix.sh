#!/bin/bash
# t_prefix.sh — prefix reuse on the serialize path (QWISP_PREFIX_REUSE=1):
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
"$Q" gen-model --preset tiny -o "$T/tiny.gguf" >/dev/null 2>&1 || { fail "gen-model tiny"; exit 1; }

start_server "$T/reuse.log" QWISP_LOG=warn QWISP_PREFIX_REUSE=1 -- --ctx 4096 || { fail "reuse server starts" "$(tail -3 "$T/reuse.log")"; exit 1; }
R=$PORT
start_server "$T/plain.log" QWISP_LOG=warn -- --ctx 4096 || { fail "plain server starts" "$(tail -3 "$T/plain.log")"; exit 1; }
P=$PORT

python3 - "$R" "$P" <<'PY'
import json, sys, threading, urllib.request
R, P = sys.argv[1], sys.argv[2]
def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)
def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None
def check(name, ok, detail=""):
    print(("PASS: " if ok else "FAIL: ") + name + ("" if ok else " — " + str(detail)[:300]))

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
PY
exit 0
