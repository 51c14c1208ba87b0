#!/usr/bin/env bash
# t_weights_copy.sh — QWISP_WEIGHTS_COPY=1 (experts/anon_copy.c): the resident tier's
# weights copied into anonymous memory in place.  The same logits bits as the file
# mapping; `run --json` reports the bytes copied and the footprint (anonymous memory)
# grows by them; the streaming tier copies nothing; a bad value is refused by name.
set -u
BIN=${QWISP_BIN:-$PWD/build/qwisp}
M=${QWISP_TEST_MODEL:-models/default.gguf}
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" | head -1; }
hash() { sed -n 's/.*"logits_hash":"\([0-9a-f]*\)".*/\1/p'; }
base=$(QWISP_WEIGHTS_COPY=0 "$BIN" run -m "$M" -p "The pool" -n 8 --temp 0 --json 2>/dev/null)
copy=$(QWISP_WEIGHTS_COPY=1 "$BIN" run -m "$M" -p "The pool" -n 8 --temp 0 --json 2>/dev/null)
h0=$(echo "$base" | hash); h1=$(echo "$copy" | hash)
[ -n "$h0" ] && [ "$h0" = "$h1" ] && echo "PASS: weights copy: logits bits equal the mapping's ($h1)" \
    || echo "FAIL: weights copy: logits hash '$h1' != mapping's '$h0'"
c0=$(echo "$base" | field copied_bytes); c1=$(echo "$copy" | field copied_bytes)
size=$(stat -c %s "$M")
# the copy spans every tensor's data: at least half the file, never more than it plus a page
[ "$c0" = 0 ] && awk -v c="$c1" -v s="$size" 'BEGIN{exit !(c >= s / 2 && c <= s + 4096)}' \
    && echo "PASS: weights copy: copied_bytes $c1 of a $size-byte file (0 without the knob)" \
    || echo "FAIL: weights copy: copied_bytes '$c1' (without: '$c0'), file $size bytes"
f0=$(echo "$base" | field footprint_peak_mb); f1=$(echo "$copy" | field footprint_peak_mb)
awk -v a="$f0" -v b="$f1" -v c="$c1" 'BEGIN{exit !(b - a >= 0.9 * c / 1048576)}' \
    && echo "PASS: weights copy: footprint peak $f0 -> $f1 MiB (the copy is counted)" \
    || echo "FAIL: weights copy: footprint peak $f0 -> $f1 MiB does not count $c1 copied bytes"
s=$(QWISP_WEIGHTS_COPY=1 QWISP_RAW_C=2 "$BIN" run -m "$M" -p "The pool" -n 4 --temp 0 --json 2>/dev/null)
case "$s" in *'"decision":"tier=streaming'*) ;; *) s="" ;; esac
[ -n "$s" ] && [ "$(echo "$s" | field copied_bytes)" = 0 ] \
    && echo "PASS: weights copy: the streaming tier copies nothing" \
    || echo "FAIL: weights copy: streaming tier: $(echo "$s" | head -c 300)"
out=$(QWISP_WEIGHTS_COPY=yes "$BIN" run -m "$M" -p hi -n 1 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "QWISP_WEIGHTS_COPY" \
    && echo "PASS: weights copy: QWISP_WEIGHTS_COPY=yes refused naming the knob (rc=$rc)" \
    || echo "FAIL: weights copy: bad value: rc=$rc $out"
# the copy goes a chunk (64 MiB) at a time, unmapping the file's pages behind it: on a
# 556 MB model the process's RSS peak (getrusage, so no sampling can miss it) stays that
# of the mapping plus a chunk, where copying all at once would hold the weights twice
T=$(mktemp -d "${QWISP_TEST_TMP:-/tmp}/wcopy.XXXXXX")
if "$BIN" gen-model --preset bench --type q8_0 --n-layer 2 --fast-weights --progress 0 -o "$T/m.gguf" >/dev/null 2>&1; then
    maxrss() { QWISP_WEIGHTS_COPY=$1 python3 -c 'import subprocess, resource, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)' "$BIN" run -m "$T/m.gguf" -p hi -n 1; }
    r0=$(maxrss 0); r1=$(maxrss 1)
    awk -v a="$r0" -v b="$r1" 'BEGIN{exit !(a > 400 && b <= a + 64 + 32)}' \
        && echo "PASS: weights copy: RSS peak $r0 -> $r1 MiB (the mapping's plus at most a chunk)" \
        || echo "FAIL: weights copy: RSS peak $r0 MiB mapped, $r1 MiB copied (more than a 64 MiB chunk above)"
    # a copy that cannot get its memory is one clear error, not a crash: under an address-space
    # limit that the mapped run fits in (one thread), the copied run exits 1 naming the knob
    lim() { (ulimit -v 1000000; QWISP_WEIGHTS_COPY=$1 "$BIN" run -m "$T/m.gguf" -p hi -n 1 -t 1 2>&1 >/dev/null); }
    if lim 0 >/dev/null; then
        out=$(lim 1); rc=$?
        [ $rc -eq 1 ] && echo "$out" | grep -q "QWISP_WEIGHTS_COPY=1: cannot map [0-9]* bytes" \
            && echo "PASS: weights copy: no memory for the copy -> exit 1: $out" \
            || echo "FAIL: weights copy: no memory for the copy: rc=$rc $out"
    else
        echo "SKIP: weights copy: the mapped run does not fit a 1 GB address space here (sanitizer build?)"
    fi
else
    echo "FAIL: weights copy: gen-model of the 556 MB model failed"
fi
rm -rf "$T"
# qwisp bench names where the weights are read from, in text and --json
b0=$(QWISP_WEIGHTS_COPY=0 "$BIN" bench -m "$M" -p 0 -n 2 -r 1 --bw-mb 16 2>/dev/null | grep '^weights:')
b1=$(QWISP_WEIGHTS_COPY=1 "$BIN" bench -m "$M" -p 0 -n 2 -r 1 --bw-mb 16 --json 2>/dev/null | field weights_copied_bytes)
case "$b0" in *"file mapping"*) ;; *) b0="" ;; esac
[ -n "$b0" ] && [ "$b1" = "$c1" ] && echo "PASS: weights copy: bench says '$b0' without it and weights_copied_bytes $b1 with it" \
    || echo "FAIL: weights copy: bench lines: '$b0' / weights_copied_bytes '$b1' (run said $c1)"
