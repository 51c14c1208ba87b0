#!/bin/bash
# t_tune.sh — calibration (`qwisp tune`, include/qwisp/tune.h) changes speed,
# never bits: the logits hash of a Q8_0 and a Q4_0 model (prefill through the
# tiles + decode through the row loops) is the same under the defaults, under
# extreme knob values, and under a calibration read from the cache; `qwisp
# config` names each value's source; QWISP_TUNE=auto calibrates at first use; a corrupt, truncated or foreign cache
# file falls back to the defaults with one line on stderr and the same bits.
# Behaviour only: no speed is checked.
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
T=${QWISP_TEST_TMP:-/tmp}/tune
rm -rf "$T"; mkdir -p "$T"
export QWISP_TUNE_FILE="$T/cache/tune.txt" QWISP_THREADS=2
# no calibration at first use except where a check asks for it (QWISP_TUNE=auto)
export QWISP_TUNE=cached
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; }

for ty in q8_0 q4_0; do
    "$Q" gen-model --preset small --type "$ty" --tokenizer bytes --n-embd 512 --n-ff-exp 512 --n-layer 2 \
        -o "$T/$ty.gguf" >/dev/null 2>&1 || fail "gen-model $ty"
done
# the summary line's logits hash after a 37-token prefill and 5 decode steps;
# every other stderr line is left in $T/err
hash_of() {
    "$@" run -m "$M" --prompt-tokens 37 -n 5 --ignore-eos 2>"$T/all" >/dev/null
    grep -v 'prompt=.*logits=' "$T/all" >"$T/err"
    sed -n 's/.*prompt=.*logits=\([0-9a-f]*\).*/\1/p' "$T/all"
}

for ty in q8_0 q4_0; do
    M="$T/$ty.gguf"
    ref=$(QWISP_TUNE=off hash_of "$Q")
    [ -n "$ref" ] || { fail "$ty: no logits hash"; continue; }
    ok=1
    for kn in "16K 1K 4 1 8 0" "64M 1M 512 0 4 1" "100K 3K 20 1 2 0" "300K 64K 8 0 8 1"; do
        set -- $kn
        h=$(QWISP_DECODE_ITEM_BYTES=$1 QWISP_DECODE_AHEAD_BYTES=$2 QWISP_PREFILL_ROWS=$3 QWISP_DECODE_PREFETCH_L2=$4 QWISP_DECODE_ROWS=$5 QWISP_DECODE_GEMV=$6 hash_of "$Q")
        [ "$h" = "$ref" ] || { ok=0; fail "$ty: knobs item=$1 ahead=$2 rows=$3 l2=$4 drows=$5 gemv=$6 give $h, defaults $ref"; }
        h=$(QWISP_THREADS=1 QWISP_DECODE_ITEM_BYTES=$1 QWISP_DECODE_AHEAD_BYTES=$2 QWISP_PREFILL_ROWS=$3 QWISP_DECODE_PREFETCH_L2=$4 QWISP_DECODE_ROWS=$5 QWISP_DECODE_GEMV=$6 hash_of "$Q")
        [ "$h" = "$ref" ] || { ok=0; fail "$ty: 1 thread, knobs $kn give $h, defaults $ref"; }
    done
    [ $ok = 1 ] && pass "$ty: four knob calibrations × 1/2 threads give the defaults' logits bits ($ref)"
    eval "ref_$ty=$ref"
done

# a real calibration, written and read back
out=$("$Q" tune --mb 8 --passes 1 2>&1)
if [ -s "$QWISP_TUNE_FILE" ] && grep -q "^written: $QWISP_TUNE_FILE" <<<"$out"; then pass "tune writes the cache file"; else fail "tune: $out"; fi
cfg=$("$Q" config 2>&1)
if grep -qE '^\(tune\) decode_item_bytes +[0-9]+ +calibrated' <<<"$cfg" && grep -qE '^\(tune cache\) .*: loaded' <<<"$cfg"; then
    pass "config shows the calibrated values and the cache as loaded"
else fail "config after tune: $(grep tune <<<"$cfg")"; fi
cfg=$(QWISP_PREFILL_ROWS=12 "$Q" config 2>&1)
if grep -qE '^\(tune\) prefill_rows +12 +knob' <<<"$cfg" && grep -qE '^\(tune\) decode_ahead_bytes +[0-9]+ +calibrated' <<<"$cfg"; then
    pass "a knob overrides one calibrated value, the others stay calibrated"
else fail "knob over cache: $(grep '(tune)' <<<"$cfg")"; fi
for ty in q8_0 q4_0; do
    M="$T/$ty.gguf"
    h=$(hash_of "$Q"); want=$(eval echo \$ref_$ty)
    if [ "$h" = "$want" ] && [ ! -s "$T/err" ]; then pass "$ty: calibrated run gives the same bits, silently"; else fail "$ty: calibrated $h vs $want ($(cat "$T/err"))"; fi
done

# the cache is keyed by SIMD level: the same file read under another level is
# foreign (one notice, defaults, same bits), and the default file is one per level
lvl=$("$Q" config 2>/dev/null | sed -n 's/^(kernels) *\([^ ]*\).*/\1/p')
other=scalar; [ "$lvl" = scalar ] && other=avx2
M="$T/q8_0.gguf"
ref_other=$(QWISP_SIMD=$other QWISP_TUNE=off hash_of "$Q")
h=$(QWISP_SIMD=$other hash_of "$Q")
if [ -n "$ref_other" ] && [ "$h" = "$ref_other" ] && grep -q "another CPU, SIMD level or binary" "$T/err" \
    && QWISP_SIMD=$other "$Q" config 2>/dev/null | grep -qE '^\(tune\) decode_item_bytes +262144 +default'; then
    pass "a cache calibrated at $lvl is refused at $other with one notice, defaults, same bits as $other alone"
else fail "cache across SIMD levels: hash $h vs $ref_other; $(cat "$T/err")"; fi
p1=$(env -u QWISP_TUNE_FILE XDG_CACHE_HOME="$T/xdg" "$Q" config 2>/dev/null | sed -n 's/^(tune cache) *\([^:]*\):.*/\1/p')
p2=$(env -u QWISP_TUNE_FILE XDG_CACHE_HOME="$T/xdg" QWISP_SIMD=$other "$Q" config 2>/dev/null | sed -n 's/^(tune cache) *\([^:]*\):.*/\1/p')
if [ "$p1" = "$T/xdg/qwisp/tune-$lvl.txt" ] && [ "$p2" = "$T/xdg/qwisp/tune-$other.txt" ]; then
    pass "the default cache file is one per SIMD level ($(basename "$p1"), $(basename "$p2"))"
else fail "default cache paths: '$p1' '$p2'"; fi

# broken caches: one stderr line, defaults, same bits
good=$(cat "$QWISP_TUNE_FILE")
check_broken() { # name, file text (already written)
    local name=$1 h n cfg
    M="$T/q8_0.gguf"
    h=$(hash_of "$Q"); n=$(wc -l <"$T/err")
    cfg=$("$Q" config 2>/dev/null)
    if [ "$h" = "$ref_q8_0" ] && [ "$n" = 1 ] && grep -q "using the built-in defaults" "$T/err" \
        && grep -qE '^\(tune\) decode_item_bytes +262144 +default' <<<"$cfg" && grep -qE 'unusable|stale' <<<"$cfg"; then
        pass "$name cache: one notice ($(cut -c1-90 "$T/err")…), defaults, same bits"
    else fail "$name cache: hash $h (want $ref_q8_0), $n stderr lines: $(cat "$T/err"); $(grep '(tune' <<<"$cfg")"; fi
}
sed 's/^decode_item_bytes .*/decode_item_bytes 98304/' <<<"$good" >"$QWISP_TUNE_FILE"; check_broken "edited (check mismatch)"
head -c 60 <<<"$good" >"$QWISP_TUNE_FILE"; check_broken "truncated"
head -c 300 /dev/urandom >"$QWISP_TUNE_FILE"; check_broken "random bytes"
# a well-formed file (valid check) from another machine, and one with a value out of range
# writes TEXT (a good cache file's) to the cache path re-keyed to another
# machine, with a valid check line: well formed, someone else's
write_foreign() {
    python3 - "$QWISP_TUNE_FILE" "$1" <<'PY'
import sys
path, good = sys.argv[1], sys.argv[2]
def fnv(b):
    h = 1469598103934665603
    for c in b: h = ((h ^ c) * 1099511628211) & 0xffffffffffffffff
    return h
body = "".join(l + "\n" for l in good.splitlines() if not l.startswith("check "))
body = "\n".join("machine Some Other CPU | 00ff" if l.startswith("machine ") else l for l in body.split("\n"))
open(path, "w").write(body + "check %016x\n" % fnv(body.encode()))
PY
}
write_foreign "$good"
check_broken "another machine's"
body=$(grep -v '^check ' <<<"$good" | sed 's/^prefill_rows .*/prefill_rows 9999/')
printf '%s\ncheck %s\n' "$body" "$(python3 -c 'import sys
h=1469598103934665603
for c in sys.stdin.buffer.read(): h=((h^c)*1099511628211)&0xffffffffffffffff
print("%016x"%h)' <<<"$body")" >"$QWISP_TUNE_FILE"
check_broken "out-of-range value"
rm -f "$QWISP_TUNE_FILE"
M="$T/q8_0.gguf"; h=$(hash_of "$Q")
if [ "$h" = "$ref_q8_0" ] && [ ! -s "$T/err" ] && "$Q" config | grep -qE '^\(tune cache\) .*: absent'; then
    pass "absent cache: defaults, silent, config says absent"
else fail "absent cache: $h $(cat "$T/err")"; fi

# calibration at first use (QWISP_TUNE=auto, nothing cached): the run measures in a child,
# caches, says so on stderr and gives the same bits; the next run reads the cache silently
M="$T/q8_0.gguf"; h=$(QWISP_TUNE=auto hash_of "$Q")
if [ "$h" = "$ref_q8_0" ] && [ -s "$QWISP_TUNE_FILE" ] && grep -q 'first use on this CPU' "$T/err" \
    && grep -q "cached in $QWISP_TUNE_FILE" "$T/err"; then
    pass "first use calibrates once, caches it ($(grep -o 'decode_gemv [01]' "$T/err")), same bits"
else fail "first use: hash $h (want $ref_q8_0), file $(ls -la "$QWISP_TUNE_FILE" 2>&1); $(cat "$T/err")"; fi
h=$(QWISP_TUNE=auto hash_of "$Q")
if [ "$h" = "$ref_q8_0" ] && [ ! -s "$T/err" ] && "$Q" config | grep -qE '^\(tune cache\) .*: loaded'; then
    pass "after first use: the cache is read silently, same bits"
else fail "after first use: $h $(cat "$T/err")"; fi

# a stale cache (well formed, another binary's — every rebuild or upgrade) is replaced at
# first use under auto; under `cached` it stays, with one notice (checked above)
write_foreign "$(cat "$QWISP_TUNE_FILE")"
M="$T/q8_0.gguf"; h=$(QWISP_TUNE=auto hash_of "$Q")
if [ "$h" = "$ref_q8_0" ] && grep -q 'first use on this CPU' "$T/err" && ! grep -q 'Some Other CPU' "$QWISP_TUNE_FILE" \
    && QWISP_TUNE=auto "$Q" config 2>/dev/null | grep -qE '^\(tune cache\) .*: loaded'; then
    pass "a stale cache (another binary's) is recalibrated and replaced at first use, same bits"
else fail "stale cache under auto: hash $h; $(cat "$T/err"); $(grep machine "$QWISP_TUNE_FILE")"; fi

# a cache measured with another thread count (QWISP_THREADS=2 above) is stale for a run of
# 1 thread (work-item sizes that suit 2 threads need not suit 16): under `cached` the
# defaults with one notice, whether the count comes from QWISP_THREADS or -t; under auto
# it is recalibrated with the run's count and replaced
M="$T/q8_0.gguf"; h=$(QWISP_THREADS=1 hash_of "$Q")
"$Q" run -m "$M" -t 1 --prompt-tokens 4 -n 1 >/dev/null 2>"$T/err_t"
if [ "$h" = "$ref_q8_0" ] && grep -q "measured with 2 threads, this run uses 1" "$T/err" \
    && grep -q "measured with 2 threads, this run uses 1" "$T/err_t" \
    && QWISP_THREADS=1 "$Q" config 2>/dev/null | grep -qE '^\(tune cache\) .*: stale: .*2 threads' \
    && "$Q" config 2>/dev/null | grep -qE '^\(tune cache\) .*: loaded'; then
    pass "a cache of another thread count is stale for the run (QWISP_THREADS and -t), defaults, same bits"
else fail "other thread count: hash $h; $(cat "$T/err"); -t: $(cat "$T/err_t")"; fi
h=$(QWISP_TUNE=auto QWISP_THREADS=1 hash_of "$Q")
if [ "$h" = "$ref_q8_0" ] && grep -q 'thread count (1): calibrating' "$T/err" && grep -qx 'threads 1' "$QWISP_TUNE_FILE" \
    && QWISP_THREADS=1 "$Q" config 2>/dev/null | grep -qE '^\(tune cache\) .*: loaded'; then
    pass "under auto a cache of another thread count is recalibrated with the run's, same bits"
else fail "other thread count under auto: hash $h; $(cat "$T/err"); $(grep threads "$QWISP_TUNE_FILE")"; fi
