#!/bin/bash
# t_ab.sh — `qwisp ab` end to end on a tiny generated model: a criteria file
# with a syntax error or an unknown metric is rejected before any child runs;
# arms differ only by their env (each child reports the knobs it saw, and a
# variable set in the parent's env but named by an arm is removed from every
# arm); the order is balanced with one warm-up; report.md/json/svg and
# verdicts are produced; a crashing arm is reported as failed, not averaged
# away; an A/A run comes out "no difference" with the interval containing 0;
# the in-process speed trials (qwisp ab-worker): every arm in one process in
# the warm-up + balanced schedule, the same tokens from every trial (the
# context rewound exactly, recurrent state included), the A/A arm and its
# noise floor in the report, perf counters or the reason they are missing,
# and an arm that is not a pool policy refused for in-process speed.
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
T=${QWISP_TEST_TMP:-/tmp}/ab
rm -rf "$T"; mkdir -p "$T"
M="$T/m.gguf"
"$Q" gen-model --preset tiny -o "$M" >/dev/null 2>&1 || { echo "FAIL: gen-model"; exit 1; }
pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1"; }
RUN=(-m "$M" --prompt-tokens 64 --decode 8 --reps 2)

# 1. criteria errors: before any trial (the out dir is never created)
printf 'decode_tok_s.delta_pct < -2 => close\nfootprint_peak_mb.delta < -1 and => ship\n' >"$T/syntax.txt"
out=$("$Q" ab --criteria "$T/syntax.txt" "${RUN[@]}" --arm a: --arm b:QWISP_PREFILL_CACHE_MB=4 --out "$T/o1" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "syntax.txt: line 2, column 34: expected a metric" && [ ! -e "$T/o1" ] \
    && pass "criteria syntax error: line and column named, no trial run" || fail "syntax error: rc=$rc $out"
printf 'decode_toks.delta_pct < -2 => close\n' >"$T/metric.txt"
out=$("$Q" ab --criteria "$T/metric.txt" "${RUN[@]}" --arm a: --arm b:QWISP_PREFILL_CACHE_MB=4 --out "$T/o2" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "unknown metric 'decode_toks'" && [ ! -e "$T/o2" ] \
    && pass "unknown metric rejected before any trial" || fail "unknown metric: rc=$rc $out"
out=$("$Q" ab --criteria "$T/metric.txt" "${RUN[@]}" --arm a: --arm b:QWISP_PREFIL_CACHE_MB=4 --out "$T/o3" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "unknown knob 'QWISP_PREFIL_CACHE_MB'" && [ ! -e "$T/o3" ] \
    && pass "unknown knob in an arm rejected" || fail "unknown knob: rc=$rc $out"

# 2. three arms, one crashing; the parent's QWISP_PREFILL_CACHE_MB must not leak into 'base'
cat >"$T/crit.txt" <<'EOF'
# deterministic metrics, so the verdict does not depend on machine load
pool_peak_held_mb.delta < -0.001 => smaller
pool_peak_held_mb.delta > 0.001 => larger
else => no-difference
EOF
O="$T/o4"
out=$(QWISP_PREFILL_CACHE_MB=64 QWISP_POOL_FIT=exact "$Q" ab --criteria "$T/crit.txt" "${RUN[@]}" --speed process --no-aa \
    --arm base:QWISP_PREFILL_CACHE_MB= --arm b:QWISP_PREFILL_CACHE_MB=4 --arm crash:QWISP_THREADS=abc --out "$O" 2>&1); rc=$?
J="$O/report.json"
[ $rc -eq 0 ] && [ -s "$O/report.md" ] && [ -s "$J" ] && grep -q "<polyline" "$O/footprint.svg" \
    && grep -q "^## Verdict" "$O/report.md" && pass "report.md, report.json and footprint.svg written" \
    || fail "report: rc=$rc $out"
order=$(jq -r '[.trials[].arm] | join(" ")' "$J" 2>/dev/null)
[ "$order" = "base base b crash crash b base" ] && [ "$(jq '.trials[0].warmup' "$J")" = true ] \
    && pass "balanced order with one warm-up: $order" || fail "order: $order"
# (QWISP_TUNE: the test runner's own setting, the same for every child)
k_base=$(jq -c '[.trials[] | select(.arm=="base") | .knobs | del(.QWISP_TUNE)] | unique' "$J")
k_b=$(jq -c '[.trials[] | select(.arm=="b") | .knobs | del(.QWISP_TUNE)] | unique' "$J")
[ "$k_base" = '[{"QWISP_POOL_FIT":"exact","QWISP_RAW_C":"0"}]' ] \
    && [ "$k_b" = '[{"QWISP_PREFILL_CACHE_MB":"4","QWISP_POOL_FIT":"exact","QWISP_RAW_C":"0"}]' ] \
    && pass "children saw knobs differing only by the arm's env (parent's QWISP_PREFILL_CACHE_MB removed)" \
    || fail "knobs: base=$k_base b=$k_b"
v_crash=$(jq -r '.arms[] | select(.name=="crash") | .verdict.verdict' "$J")
e_crash=$(jq -r '[.trials[] | select(.arm=="crash") | .error] | unique | .[0]' "$J")
[ "$v_crash" = failed ] && echo "$e_crash" | grep -q "exit 2: qwisp: QWISP_THREADS='abc'" \
    && [ "$(jq '.arms[] | select(.name=="crash") | .failed_trials' "$J")" = 2 ] \
    && grep -q "| crash | .*0/2 \*\*FAILED\*\*" "$O/report.md" && echo "$out" | grep -q "verdict crash vs base: failed" \
    && pass "crashing arm reported as failed with its reason" || fail "crash arm: $v_crash / $e_crash"
v_b=$(jq -r '.arms[] | select(.name=="b") | "\(.verdict.verdict) \(.verdict.suggest_reps)"' "$J")
[ "$v_b" = "inconclusive 6" ] && echo "$out" | grep -q "verdict b vs base: inconclusive (about 6 reps would settle it)" \
    && pass "2 pairs give no 95% interval: inconclusive, 6 reps suggested" || fail "verdict b: $v_b"
sha=$(sha256sum "$T/crit.txt" | cut -d' ' -f1)
[ "$(jq -r .criteria.sha256 "$J")" = "$sha" ] && [ "$(jq .criteria.read_before_first_trial "$J")" = true ] \
    && grep -q "$sha" "$O/report.md" && pass "criteria hash recorded, read before the first trial" \
    || fail "criteria hash/time: $(jq -c .criteria "$J")"

# 3. A/A: two identical arms
O="$T/o5"
out=$("$Q" ab --criteria "$T/crit.txt" "${RUN[@]}" --reps 6 --arm a1:QWISP_POOL_FIT=exact --arm a2:QWISP_POOL_FIT=exact \
    --out "$O" 2>&1); rc=$?
J="$O/report.json"
v=$(jq -r '.arms[1].verdict.verdict' "$J" 2>/dev/null)
z=$(jq -r '.arms[1].paired.pool_peak_held_mb.delta | "\(.lo) \(.hi) \(.contains_zero)"' "$J" 2>/dev/null)
[ $rc -eq 0 ] && [ "$v" = no-difference ] && [ "${z##* }" = true ] \
    && pass "A/A comes out no-difference, interval [$z] contains 0" || fail "A/A: rc=$rc v=$v z=$z $out"

# 4. in-process speed: one worker, schedule, A/A arm, noise floor, hygiene facts
for arch in qwen3moe qwen35moe; do
    M2="$T/$arch.gguf"
    "$Q" gen-model --preset tiny --arch $arch -o "$M2" >/dev/null 2>&1 || { fail "gen-model $arch"; continue; }
    O="$T/o6-$arch"
    out=$("$Q" ab --criteria "$T/crit.txt" -m "$M2" --prompt-tokens 48 --decode 12 --replay 16 --reps 2 --footprint-reps 1 \
        --arm u:QWISP_PREFILL_CACHE_MB= --arm e:QWISP_POOL_FIT=exact,QWISP_PREFILL_CACHE_MB=1 --out "$O" 2>&1); rc=$?
    J="$O/report.json"
    sched=$(jq -r '[.speed_trials[].arm] | join(" ")' "$J" 2>/dev/null)
    [ $rc -eq 0 ] && [ "$sched" = "u u e u aa u aa u e u" ] && [ "$(jq '[.speed_trials[] | select(.ok)] | length' "$J")" = 10 ] \
        && pass "$arch: in-process trials in one worker, warm-up + arms bracketed by the baseline ($sched), same tokens every trial" \
        || fail "$arch: in-process schedule: rc=$rc sched=$sched $(jq -c '[.speed_trials[] | .error]' "$J" 2>/dev/null) $out"
done
grep -q "^- \*\*noise floor\*\* (A/A arm 'aa'" "$O/report.md" && grep -q "in one process" "$O/report.md" \
    && echo "$out" | grep -q "^noise floor (A/A, in-process): decode_tok_s" \
    && [ "$(jq -r '.arms[] | select(.name=="aa") | .verdict.verdict' "$J")" = noise-floor ] \
    && pass "A/A arm added; its noise floor is printed and in the report" || fail "noise floor: $out"
perf=$(jq -r .measurement.perf "$J")
echo "$perf" | grep -qE "^perf events: cycles|^perf events unavailable: perf_event_open: .*perf_event_paranoid" \
    && pass "perf counters read or their absence explained: ${perf:0:60}…" || fail "perf: $perf"
O="$T/o7"
out=$("$Q" ab --criteria "$T/crit.txt" -m "$M" --prompt-tokens 32 --decode 6 --reps 1 --footprint-reps 1 --no-perf --no-pin \
    --arm u: --arm e:QWISP_POOL_FIT=exact --out "$O" 2>&1); rc=$?
[ $rc -eq 0 ] && jq -r .measurement.perf "$O/report.json" | grep -q "not used (--no-perf)" \
    && [ "$(jq '[.speed_trials[].metrics.decode_mcycles] | map(select(. != null)) | length' "$O/report.json")" = 0 ] \
    && jq -r .measurement.pin "$O/report.json" | grep -q "not pinned" \
    && pass "--no-perf: wall and CPU time only, no cycles made up" || fail "--no-perf: rc=$rc $out"
out=$("$Q" ab --criteria "$T/crit.txt" "${RUN[@]}" --arm a: --arm b:QWISP_THREADS=1 --out "$T/o8" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "QWISP_THREADS cannot be switched inside one process.*--speed process" && [ ! -e "$T/o8" ] \
    && pass "in-process speed refuses an arm that is not a pool policy" || fail "non-pool arm: rc=$rc $out"

# 5. token-paired speed (--speed tokens, ab_worker_tokens.c), on the recurrent
# model (the saved state must make every arm choose the same token at every
# position): blocks of 2 x the arms, the warm-up block unpaired, the
# signed-rank statistic and the run-queue correction stated, prefill taken
# from the processes; bad --block / --decode-threads combinations refused.
M3="$T/qwen35moe.gguf"
O="$T/o9"
out=$(QWISP_THREADS=2 "$Q" ab --criteria "$T/crit.txt" -m "$M3" --prompt-tokens 48 --decode 25 --footprint-reps 1 \
    --footprint-decode 2 --speed tokens --decode-threads 1 --arm u: --arm c:QWISP_PREFILL_CACHE_MB=1 --out "$O" 2>&1); rc=$?
J="$O/report.json"
[ $rc -eq 0 ] && [ "$(jq -r .measurement.token_block "$J")" = 6 ] && [ "$(jq -r .measurement.speed_rounds "$J")" = 3 ] \
    && [ "$(jq '[.speed_trials[] | select(.ok)] | length' "$J")" = 12 ] \
    && [ "$(jq '[.speed_trials[] | select(.warmup)] | length' "$J")" = 3 ] \
    && [ "$(jq '[.speed_trials[].metrics.decode_tok_s_wall] | map(select(. > 0)) | length' "$J")" = 12 ] \
    && grep -q "token-paired" "$O/report.md" && grep -q "Wilcoxon signed-rank" "$O/report.md" \
    && grep -q "run-queue delay" "$O/report.md" && grep -q "decode threads: 1" "$O/report.md" \
    && [ "$(jq -r .measurement.prime "$J")" = false ] && grep -q "priming pass: no" "$O/report.md" \
    && [ "$(jq '.arms[1].metrics.prefill_tok_s.n' "$J")" = 1 ] \
    && echo "$out" | grep -q "noise floor (A/A, in-process, token-paired)" \
    && pass "token-paired: every arm the same token at every position, blocks of 2 x arms, statistic stated" \
    || fail "token-paired: rc=$rc $out"
out=$("$Q" ab --criteria "$T/crit.txt" "${RUN[@]}" --block 4 --arm a: --arm b:QWISP_PREFILL_CACHE_MB=1 --out "$T/o10" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "\-\-decode-threads and \-\-prime need \-\-speed tokens" && [ ! -e "$T/o10" ] \
    && pass "--block without --speed tokens refused" || fail "--block: rc=$rc $out"
# on a streaming tier the token-paired decode primes every position by
# default (an untimed pass first: the expert cache then holds the position's
# experts for every timed arm), and the arms still agree token for token
O="$T/o12"
out=$(QWISP_THREADS=2 QWISP_BACKEND=cpu "$Q" ab --criteria "$T/crit.txt" -m "$M3" --prompt-tokens 48 --decode 13 --footprint-reps 0 \
    --speed tokens --decode-threads 1 --tier streaming --raw-c 2 --arm u: --arm c:QWISP_PREFILL_CACHE_MB=1 --out "$O" 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(jq -r .measurement.prime "$O/report.json")" = true ] && grep -q "priming pass: yes" "$O/report.md" \
    && [ "$(jq -r .backend_env "$O/report.json")" = QWISP_BACKEND=cpu ] \
    && grep -q "tier: streaming (the host's); backend settings of every arm: .QWISP_BACKEND=cpu." "$O/report.md" \
    && [ "$(jq '[.speed_trials[] | select(.ok and (.warmup | not))] | length' "$O/report.json")" = 3 ] \
    && pass "token-paired on a streaming tier: every position primed by an untimed pass, the arms agree; backend settings named" \
    || fail "--prime: rc=$rc $out"
out=$("$Q" ab --criteria "$T/crit.txt" -m "$M" --prompt-tokens 16 --decode 8 --speed tokens --arm a: --arm b: --out "$T/o11" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "fewer than 2 blocks" && [ ! -e "$T/o11" ] \
    && pass "--speed tokens with too few decode tokens for two blocks refused" || fail "too few blocks: rc=$rc $out"

# 6. footprint trials at once (--footprint-jobs): after the warm-up, groups of
# J processes start together; every footprint is still each process's own,
# so the deterministic pool verdict is the one of sequential trials; refused
# with --speed process and with criteria that read the trials' clocks
O="$T/o13"
out=$("$Q" ab --criteria "$T/crit.txt" -m "$M" --prompt-tokens 32 --decode 6 --reps 1 --footprint-reps 2 --footprint-jobs 3 \
    --no-perf --no-pin --arm u: --arm c:QWISP_PREFILL_CACHE_MB=1 --out "$O" 2>&1); rc=$?
J="$O/report.json"
[ $rc -eq 0 ] && [ "$(jq -r .measurement.footprint_jobs "$J")" = 3 ] \
    && [ "$(jq '[.trials[] | select(.ok)] | length' "$J")" = 7 ] \
    && [ "$(jq '[.trials[1:4][].start_s] | unique | length' "$J")" = 1 ] \
    && [ "$(jq '[.trials[4:7][].start_s] | unique | length' "$J")" = 1 ] \
    && [ "$(jq '[.trials[0].start_s, .trials[1].start_s, .trials[4].start_s] | unique | length' "$J")" = 3 ] \
    && [ "$(jq '[.trials[].metrics.footprint_peak_mb] | map(select(. > 0)) | length' "$J")" = 7 ] \
    && [ "$(jq '[.trials[].metrics | select(.footprint_peak_mb >= .child_footprint_peak_mb)] | length' "$J")" = 7 ] \
    && grep -q "3 at a time after the warm-up" "$O/report.md" \
    && pass "--footprint-jobs 3: the warm-up alone, then two groups of three processes at once, every footprint measured, none below the child's own" \
    || fail "--footprint-jobs: rc=$rc $out"
printf 'wall_ms.delta_pct > 50 => slower\nelse => same\n' >"$T/crit-wall.txt"
out=$("$Q" ab --criteria "$T/crit-wall.txt" "${RUN[@]}" --footprint-jobs 2 --arm a: --arm b:QWISP_PREFILL_CACHE_MB=1 --out "$T/o14" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "uses wall_ms, which comes from the footprint trials" && [ ! -e "$T/o14" ] \
    && pass "--footprint-jobs refused when a rule reads the footprint trials' clock" || fail "jobs + wall_ms: rc=$rc $out"
out=$("$Q" ab --criteria "$T/crit.txt" "${RUN[@]}" --speed process --footprint-jobs 2 --arm a: --arm b:QWISP_PREFILL_CACHE_MB=1 --out "$T/o15" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "footprint-jobs 2 needs --speed inproc or tokens" && [ ! -e "$T/o15" ] \
    && pass "--footprint-jobs refused with --speed process" || fail "jobs + process: rc=$rc $out"
