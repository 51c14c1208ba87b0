#!/bin/bash
# pool_long_prefill.sh — the seed's Step 0 on the serialize path: one long
# prefill (16384 tokens) plus 128 decode tokens on a generated model, with the
# pool cache limit unset / 2048 / 512 MB (the seed's values) and a bound
# scaled to this small model (4 MB) that really binds, under qwisp's classes
# rule and under MLX's exact rule.  Prints footprint peak, pool cache/peak
# and prefill/decode tok/s per setting.  Not a test: numbers, not verdicts.
#
#   bench/pool_long_prefill.sh [BUILD_DIR]     (REPEAT=n runs each setting n times, interleaved)
#
# The model (2 layers, 2 heads x 64, 8 experts; ~1 MB of weights, KV 16 MiB
# at 16K) is sized so that the 8 runs take ~8 minutes on 2 shared cores;
# attention dominates (O(n^2)), so the KV and its growth are what the pool
# sees.  Timings on a shared machine are noisy: compare within one run.
set -u
BUILD=${1:-build}
Q="$PWD/$BUILD/qwisp"
N_PROMPT=${N_PROMPT:-16384}
N_GEN=${N_GEN:-128}
REPEAT=${REPEAT:-1}
T=$(mktemp -d /tmp/qwisp-bench-pool.XXXXXX)
trap 'rm -rf "$T"' EXIT
M="$T/m.gguf"
"$Q" gen-model --preset tiny --n-layer 2 --n-head 2 --n-head-kv 2 --head-dim 64 --n-ctx 32768 -o "$M" >/dev/null

settings="classes: classes:2048 classes:512 classes:4 exact: exact:2048 exact:512 exact:4"
echo "# qwisp pool_long_prefill: prompt=$N_PROMPT gen=$N_GEN threads=2 model=tiny(2L,2Hx64,8E) $(date -u +%F)"
printf "%-8s %-7s %10s %9s %9s %9s %9s %10s %9s %9s\n" fit limitMB fp_peakMB rss_pkMB cacheMB poolpkMB heldpkMB prefill_t/s decode_t/s os_calls
for r in $(seq "$REPEAT"); do
    for s in $settings; do
        fit=${s%%:*}; lim=${s#*:}
        out="$T/$fit-$lim.json"
        env QWISP_POOL_FIT=$fit ${lim:+QWISP_PREFILL_CACHE_MB=$lim} "$Q" run -m "$M" --prompt-tokens "$N_PROMPT" \
            -n "$N_GEN" --ignore-eos --threads 2 --json >"$out" 2>/dev/null || { echo "run failed: $s"; continue; }
        jq -r --arg fit "$fit" --arg lim "${lim:-unset}" '[$fit, $lim,
            (.footprint_peak_mb*10|round/10), (.rss_peak_mb*10|round/10),
            (.pool.cache/1048576*10|round/10), (.pool.peak/1048576*10|round/10),
            (.pool.peak_held/1048576*10|round/10),
            (.prefill_tok_s*10|round/10), (.decode_tok_s*100|round/100), .pool.os_calls] | @tsv' "$out" |
            awk -F'\t' '{printf "%-8s %-7s %10s %9s %9s %9s %9s %10s %9s %9s\n",$1,$2,$3,$4,$5,$6,$7,$8,$9,$10}'
    done
done
