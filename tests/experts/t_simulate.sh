#!/bin/bash
# t_simulate.sh — `qwisp simulate`: a generated model larger than the memory
# limit runs to completion inside a cgroup of that limit, in the streaming
# tier, with the reported peak under the limit, no OOM kill, and the same
# tokens as the resident tier without a limit.  Also: usage errors, and the
# ballast mode's "nothing to hold" path (the real ballast would take the
# machine's RAM, so it is not run here).
# Needs root and a writable memory cgroup; otherwise the cgroup checks SKIP.
set -u
BIN=${QWISP_BIN:-$PWD/build/qwisp}
TMP=${QWISP_TEST_TMP:-/tmp}/t_simulate.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
pass() { echo "PASS: simulate $1"; }
fail() { echo "FAIL: simulate $1"; }

# ~107 MB of experts (4 layers x 32 experts of 512x512 q8_0), ~1.5 MB else
"$BIN" gen-model --preset tiny --n-expert 32 --n-expert-used 4 --n-layer 4 --n-embd 512 --n-ff-exp 512 \
    --type q8_0 -o "$TMP/m.gguf" >/dev/null 2>&1 || { fail "gen-model"; exit 0; }
size=$(stat -c %s "$TMP/m.gguf")
LIMIT=0.08
RUN=(run -m "$TMP/m.gguf" --prompt-tokens 48 -n 12 --ignore-eos --json --ctx 256)

tokens() { python3 -c 'import json,sys; o=json.loads(sys.stdin.buffer.read().decode("utf-8","replace")); print(o["tokens"], o["experts"]["tier"], o["experts"]["c"])'; }

ref=$(QWISP_RAW_C=0 "$BIN" "${RUN[@]}" 2>/dev/null | tokens)
[ -n "$ref" ] && pass "resident reference run" || fail "resident reference run"

if "$BIN" simulate $LIMIT -- true 2>"$TMP/probe.err"; then
    "$BIN" simulate $LIMIT -- "$BIN" "${RUN[@]}" >"$TMP/out.json" 2>"$TMP/err.txt"
    rc=$?
    got=$(tokens <"$TMP/out.json")
    line=$(grep '^qwisp simulate:' "$TMP/err.txt")
    echo "INFO: model $size bytes, $line"
    [ $rc -eq 0 ] && pass "run under ${LIMIT} GB exits 0" || { fail "run under ${LIMIT} GB exits 0 (rc=$rc)"; cat "$TMP/err.txt"; }
    [ "$size" -gt 80000000 ] && pass "model larger than the limit" || fail "model larger than the limit ($size)"
    case "$got" in *streaming*) pass "streaming tier chosen from the cgroup";; *) fail "streaming tier chosen ($got)";; esac
    grep -q 'tier=streaming' "$TMP/err.txt" && pass "decision printed at load" || fail "decision printed at load"
    [ "${got% streaming*}" = "${ref% resident*}" ] && pass "same tokens as resident" || fail "same tokens as resident ($got vs $ref)"
    peak=$(echo "$line" | sed -n 's/.*peak=\([0-9.]*\) GB.*/\1/p')
    python3 -c "import sys; sys.exit(0 if 0 < float('$peak') < $LIMIT else 1)" 2>/dev/null \
        && pass "peak $peak GB under the ${LIMIT} GB limit" || fail "peak under the limit ($line)"
    echo "$line" | grep -q 'oom_kill=0 ' && pass "not OOM-killed" || fail "not OOM-killed ($line)"
    # the cgroup is gone afterwards
    left=$(find /sys/fs/cgroup -maxdepth 6 -type d -name "qwisp-sim-*" 2>/dev/null | wc -l)
    [ "$left" -eq 0 ] && pass "cgroup removed" || fail "cgroup removed ($left left)"
    "$BIN" simulate $LIMIT -- /nonexistent/cmd 2>"$TMP/e2.txt"
    [ $? -eq 127 ] && grep -q "cannot run '/nonexistent/cmd'" "$TMP/e2.txt" && pass "missing command: 127 + message" \
        || fail "missing command: 127 + message"
else
    echo "SKIP: simulate cgroup checks ($(cat "$TMP/probe.err"))"
    grep -q "cannot create a memory cgroup" "$TMP/probe.err" && pass "clear error without cgroups" \
        || fail "clear error without cgroups"
fi

"$BIN" simulate lots -- true 2>"$TMP/e3.txt"
[ $? -eq 2 ] && grep -q "NGB='lots'" "$TMP/e3.txt" && pass "bad NGB: usage error" || fail "bad NGB: usage error"
"$BIN" simulate 2 -- 2>"$TMP/e4.txt"
[ $? -eq 2 ] && grep -q "nothing after --" "$TMP/e4.txt" && pass "empty command: usage error" || fail "empty command"
"$BIN" simulate 1000000 2>"$TMP/e5.txt"
[ $? -eq 0 ] && grep -q "nothing to hold" "$TMP/e5.txt" && pass "ballast: nothing to hold above MemAvailable" \
    || fail "ballast: nothing to hold"
exit 0
