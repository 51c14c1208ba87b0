#!/bin/bash
# t_profile.sh — QWISP_PROFILE=1 (docs/bench.md, "Where the time goes"):
# `qwisp bench` prints one `profile` line per test over its timed repetitions
# (passes and tokens counted right, the model's own phases named, the shares
# with `other` adding up to the whole), `--json` carries the same as seconds,
# `qwisp run` prints a `profile run:` line; unset, nothing of it appears; the
# profile changes no bits (the same logits hash with and without it).
# Behaviour only: no speed is checked.
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T=${QWISP_TEST_TMP:-/tmp}/profile
rm -rf "$T"; mkdir -p "$T"
export QWISP_TUNE=off QWISP_THREADS=2
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; }

# the shares of a profile line (with `other`) add up to 100 within rounding
shares_sum() { tr ' ' '\n' <<<"$1" | grep -E '^[0-9.]+%$' | tr -d '%' | awk '{ s += $1 } END { printf "%.1f", s }'; }

for f in default qwen35moe; do
    M="$ROOT/models/$f.gguf"
    [ -f "$M" ] || { fail "profile: no $M"; continue; }
    out=$(QWISP_PROFILE=1 "$Q" bench -m "$M" -p 24 -n 3 -r 2 --bw-mb 0 2>"$T/err")
    pp=$(grep '^profile pp24: ' <<<"$out"); tg=$(grep '^profile tg3: ' <<<"$out")
    if [[ "$pp" == *" in 2 passes of 48 tokens: "* && "$tg" == *" in 6 passes of 6 tokens: "* ]]; then
        pass "$f: bench profiles the timed repetitions only (pp: 2 passes of 48 tokens, tg: 6 of 6)"
    else fail "$f: bench's profile lines: '$pp' / '$tg' ($(head -2 "$T/err"))"; fi
    want="moe.gate_up moe.down moe.route attn.proj attn.core head"
    [ "$f" = qwen35moe ] && want="$want delta.core delta.proj moe.shared"
    missing=""
    for ph in $want; do [[ "$pp" == *" $ph "* ]] || missing="$missing $ph"; done
    [ -z "$missing" ] && pass "$f: the prefill profile names the model's phases" || fail "$f: prefill profile lacks$missing: $pp"
    for line in "$pp" "$tg"; do
        s=$(shares_sum "$line")
        awk -v s="$s" 'BEGIN { exit !(s >= 98.5 && s <= 101.5) }' && pass "$f: shares add up ($s %)" ||
            fail "$f: shares add up to $s %: $line"
    done
    js=$(QWISP_PROFILE=1 "$Q" bench -m "$M" -p 24 -n 3 -r 2 --bw-mb 0 --json 2>/dev/null)
    chk=$(python3 -c '
import json, sys
p = json.loads(sys.argv[1])["profile"]
for t, toks in (("pp", 48), ("tg", 6)):
    d = p[t]
    named = sum(d["seconds"].values())
    assert d["tokens"] == toks, (t, d["tokens"])
    assert 0 < named <= d["total_s"] * 1.0001, (t, named, d["total_s"])
    assert "moe.gate_up" in d["seconds"] and "head" in d["seconds"], d["seconds"]
print("ok")' "$js" 2>&1)
    [ "$chk" = ok ] && pass "$f: --json profile: tokens, phases, seconds within the total" || fail "$f: --json profile: $chk"
done

M="$ROOT/models/default.gguf"
out=$("$Q" bench -m "$M" -p 16 -n 2 -r 1 --bw-mb 0 2>&1)
js=$("$Q" bench -m "$M" -p 16 -n 2 -r 1 --bw-mb 0 --json 2>/dev/null)
if ! grep -q '^profile' <<<"$out" && ! grep -q '"profile"' <<<"$js"; then pass "unset: no profile line or object"
else fail "unset: a profile appears: $(grep '^profile' <<<"$out") $(grep -o '"profile".\{0,40\}' <<<"$js")"; fi

hash_of() { "$@" run -m "$M" --prompt-tokens 29 -n 4 --ignore-eos 2>&1 >/dev/null | sed -n 's/.*prompt=.*logits=\([0-9a-f]*\).*/\1/p'; }
h0=$(hash_of "$Q"); h1=$(QWISP_PROFILE=1 hash_of "$Q")
line=$(QWISP_PROFILE=1 "$Q" run -m "$M" --prompt-tokens 29 -n 4 --ignore-eos 2>&1 >/dev/null | grep '^profile run: ')
[ -n "$h0" ] && [ "$h0" = "$h1" ] && pass "the profile changes no bits (logits $h0)" || fail "logits hash $h0 without the profile, $h1 with"
[[ "$line" == *" 4 passes of 32 tokens: "* && "$line" != *moe.shared* ]] && pass "run prints its profile (29 prompt tokens, 3 decode steps; no shared expert in this model)" || fail "run's profile line: '$line'"

err=$(QWISP_PROFILE=2 "$Q" bench -m "$M" -p 8 -n 0 -r 1 --bw-mb 0 2>&1 >/dev/null); rc=$?
[ $rc -ne 0 ] && [[ "$err" == *QWISP_PROFILE* ]] && pass "QWISP_PROFILE=2 is refused, naming the knob" ||
    fail "QWISP_PROFILE=2: rc $rc, '$err'"
exit 0
