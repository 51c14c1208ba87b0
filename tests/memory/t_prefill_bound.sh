#!/bin/bash
# t_prefill_bound.sh — the serialize path's pool bound on a long prefill.
# A 4096-token prefill on a small generated model whose KV cache (8 MiB at
# 4096 positions) grows by doubling.  Under QWISP_POOL_FIT=exact (MLX's rule)
# every outgrown KV buffer stays cached, so unbounded the cache passes 4 MiB;
# with QWISP_PREFILL_CACHE_MB=4 no MEMDBG line may report more.  The bound
# changes memory, never results: generated tokens are identical in every run
# (exact/classes, bounded/unbounded, memdbg mode 2).  Also: the knobs'
# alias, malformed values, and `qwisp config`.
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
T=${QWISP_TEST_TMP:-/tmp}/prefill_bound
mkdir -p "$T"
M="$T/m.gguf"
BOUND=4
"$Q" gen-model --preset tiny --n-layer 2 --n-head 4 --n-head-kv 4 --head-dim 64 --n-ctx 8192 \
    -o "$M" >/dev/null 2>&1 || { echo "FAIL: gen-model"; exit 1; }

pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1"; }

# run NAME env... : writes $T/NAME.json (stdout) and $T/NAME.err (stderr)
run() {
    local name=$1; shift
    env "$@" QWISP_PREFILL_MEMDBG_EVERY=1 "$Q" run -m "$M" --prompt-tokens 4096 -n 6 --ignore-eos \
        --json --threads 2 >"$T/$name.json" 2>"$T/$name.err" || fail "$name: qwisp run exited $?"
}
max_cache() { sed -n 's/^\[prefill-memdbg\].* cache=\([0-9.]*\) peak=.*/\1/p' "$1" | sort -g | tail -1; }
n_lines() { grep -c '^\[prefill-memdbg\]' "$1"; }
tokens() { jq -c .tokens "$1"; }

run exact_unset QWISP_POOL_FIT=exact QWISP_PREFILL_MEMDBG=1
run exact_bound QWISP_POOL_FIT=exact QWISP_PREFILL_MEMDBG=1 QWISP_PREFILL_CACHE_MB=$BOUND
run classes_unset QWISP_PREFILL_MEMDBG=1
run exact_mode2 QWISP_POOL_FIT=exact QWISP_PREFILL_MEMDBG=2

u=$(max_cache "$T/exact_unset.err"); b=$(max_cache "$T/exact_bound.err"); c=$(max_cache "$T/classes_unset.err")
echo "INFO: max MEMDBG cache MiB: exact unset=$u exact bound($BOUND)=$b classes unset=$c"
[ "$(n_lines "$T/exact_unset.err")" -eq 8 ] && pass "memdbg: one line per chunk with _EVERY=1 (8 chunks), prefill only" \
    || fail "memdbg: expected 8 lines, got $(n_lines "$T/exact_unset.err")"
grep -q '^\[prefill-memdbg\] pos=4096/4096 active=[0-9.]* cache=[0-9.]* peak=[0-9.]* footprint=[0-9.]* rss=[0-9.]* kv=8.0' \
    "$T/exact_unset.err" && pass "memdbg: final line has pos, active, cache, peak, footprint, rss, kv" \
    || fail "memdbg: final line format ($(tail -1 "$T/exact_unset.err"))"
awk -v u="$u" -v b="$BOUND" 'BEGIN{exit !(u > b)}' && pass "unbounded exact cache grows past the bound ($u > $BOUND MiB)" \
    || fail "unbounded exact cache $u MiB does not exceed $BOUND: the bound would not bind"
bad=$(sed -n 's/^\[prefill-memdbg\].* cache=\([0-9.]*\) peak=.*/\1/p' "$T/exact_bound.err" | awk -v b="$BOUND" '$1 > b' | wc -l)
[ "$(n_lines "$T/exact_bound.err")" -eq 8 ] && [ "$bad" -eq 0 ] && pass "bounded: no MEMDBG line reports cache above $BOUND MiB" \
    || fail "bounded: $bad lines above $BOUND MiB"
jc=$(jq '.pool.cache' "$T/exact_bound.json"); jl=$(jq '.pool.limit' "$T/exact_bound.json")
[ "$jc" -le $((BOUND << 20)) ] && [ "$jl" -eq $((BOUND << 20)) ] && pass "bounded: final pool.cache <= limit in --json" \
    || fail "bounded: json pool cache=$jc limit=$jl"
awk -v c="$c" -v b="$BOUND" 'BEGIN{exit !(c <= b)}' && pass "classes rule: unbounded cache stays under the bound (growth is remapped, not cached)" \
    || fail "classes rule: unbounded cache $c MiB"
t0=$(tokens "$T/exact_unset.json")
[ -n "$t0" ] && [ "$t0" != null ] && [ "$t0" = "$(tokens "$T/exact_bound.json")" ] && [ "$t0" = "$(tokens "$T/classes_unset.json")" ] \
    && [ "$t0" = "$(tokens "$T/exact_mode2.json")" ] && pass "tokens identical: unset, bounded, classes, memdbg=2" \
    || fail "tokens differ across pool settings"
grep -q '| cleared active=[0-9.]* cache=0.0 footprint=' "$T/exact_mode2.err" && pass "memdbg=2: after-clear values on the same line, cache 0" \
    || fail "memdbg=2 line ($(head -1 "$T/exact_mode2.err"))"
for k in active cache peak hits misses os_bytes; do
    jq -e ".pool.$k | numbers" "$T/classes_unset.json" >/dev/null || { fail "--json: pool.$k missing"; continue; }
done
jq -e '(.footprint_peak_mb > 1) and (.rss_peak_mb >= .footprint_peak_mb) and (.pool.peak > 0) and (.pool.misses > 0)' \
    "$T/classes_unset.json" >/dev/null && pass "--json: pool {active cache peak hits misses os_bytes}, footprint_peak_mb, rss_peak_mb" \
    || fail "--json fields: $(jq -c '{pool, footprint_peak_mb, rss_peak_mb}' "$T/classes_unset.json")"

# alias and knobs
out=$(QWISP_PREFILL_MLX_CACHE_MB=3 "$Q" run -m "$M" --prompt-tokens 16 -n 1 --json 2>/dev/null | jq .pool.limit)
[ "$out" = $((3 << 20)) ] && pass "alias QWISP_PREFILL_MLX_CACHE_MB applies the serialize limit" || fail "alias: limit=$out"
for v in -1 abc 12x 99999999999; do
    out=$(QWISP_PREFILL_CACHE_MB=$v "$Q" run -m "$M" -p hi -n 1 2>&1); rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -q "QWISP_PREFILL_CACHE_MB='$v'" && pass "malformed QWISP_PREFILL_CACHE_MB=$v rejected" \
        || fail "QWISP_PREFILL_CACHE_MB=$v: rc=$rc $out"
done
out=$(QWISP_POOL_FIT=loose "$Q" config 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "QWISP_POOL_FIT='loose': expected one of classes|exact" && pass "malformed QWISP_POOL_FIT rejected" \
    || fail "QWISP_POOL_FIT=loose: rc=$rc $out"
out=$(QWISP_LANE_MLX_CACHE_MB=512 QWISP_PREFILL_MEMDBG=2 "$Q" config 2>&1)
echo "$out" | grep -qE '^QWISP_LANE_CACHE_MB +512 +env \(QWISP_LANE_MLX_CACHE_MB\)' \
    && echo "$out" | grep -qE '^QWISP_PREFILL_CACHE_MB +\(unset\)' && echo "$out" | grep -qE '^QWISP_PREFILL_MEMDBG +2 +env' \
    && echo "$out" | grep -qE '^QWISP_POOL_FIT +classes +default' && echo "$out" | grep -qE '^QWISP_LANE_MEMDBG +0 +default' \
    && pass "config: memory knobs with value and source" || fail "config output: $(echo "$out" | grep -E 'CACHE|MEMDBG|FIT')"
