#!/bin/bash
# stream_ab.sh — streaming-tier configurations A/B'd on one model under one
# memory limit, interleaved, with the physical limit of each row.
#
#   bench/stream_ab.sh MODEL LIMIT_GB 'NAME:ENV=V ENV=V' ['NAME:…' …]
#
# Each config runs `qwisp simulate LIMIT_GB -- qwisp run -m MODEL
# --prompt-tokens PP -n TG --ignore-eos --json` (LIMIT_GB "none" = no cgroup;
# a config with QWISP_RAW_C=0 is the resident row; SIM=X in a config's
# environment overrides LIMIT_GB for it, e.g. 'resident:SIM=none QWISP_RAW_C=0') with its environment,
# ROUNDS times (default 3), configs in rotated order each round.  Per config:
# median (min-max) decode tok/s, and from the decode phase alone
# ("experts_decode" in --json): hit rate, MB missed and MB read per token,
# forward wait per token, look-ahead precision/recall and hidden read time.
# The disk's bandwidth is measured before and after (bench/disk_bw.py, QD 8,
# O_DIRECT); limit = GB/s / GB missed per token, and the share of it reached.
# PP (default 16), TG (default 32), THREADS (default 2).
set -eu
cd "$(dirname "$0")/.."
Q=$PWD/${BUILD:-build}/qwisp
M=$1; LIM=$2; shift 2
ROUNDS=${ROUNDS:-3}; PP=${PP:-16}; TG=${TG:-32}; THREADS=${THREADS:-2}
OUT=$(mktemp -d /tmp/stream_ab.XXXXXX)
bw() { python3 bench/disk_bw.py "$M" 606208 3 8 | awk '{print $3}'; }
BW0=$(bw)
echo "model $M, limit $LIM GB, pp$PP tg$TG, $THREADS threads, $ROUNDS rounds, CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), disk $BW0 GB/s (QD 8 O_DIRECT)"
names=(); for c in "$@"; do names+=("${c%%:*}"); done
n=${#names[@]}
for r in $(seq 1 "$ROUNDS"); do
    for i in $(seq 0 $((n - 1))); do
        k=$(( (i + r - 1) % n )); cfg=${*:$((k + 1)):1}; name=${cfg%%:*}; envs=${cfg#*:}
        lim=$LIM; case " $envs " in *" SIM="*) lim=$(echo "$envs" | sed 's/.*SIM=\([^ ]*\).*/\1/') ;; esac
        pre=(); [ "$lim" = none ] || pre=("$Q" simulate "$lim" --)
        # shellcheck disable=SC2086
        env QWISP_LOG=error $envs "${pre[@]}" "$Q" run -m "$M" --prompt-tokens "$PP" -n "$TG" --ignore-eos --json \
            --threads "$THREADS" 2>/dev/null | grep -a '^{' >"$OUT/$name.$r.json" || echo "  $name round $r failed"
        echo "  round $r $name: $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.2f tok/s" % j["decode_tok_s"])' "$OUT/$name.$r.json" 2>/dev/null || echo failed)"
    done
done
BW1=$(bw)
python3 - "$OUT" "$BW0" "$BW1" "${names[@]}" <<'PY'
import json, sys, glob, statistics as st
out, bw0, bw1, names = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
bw = (bw0 + bw1) / 2
print(f"disk {bw0:.3f} / {bw1:.3f} GB/s before / after; limit uses {bw:.3f}")
print("| config | decode tok/s median (range) | hit rate | MB missed/tok | MB read/tok | wait ms/tok | ahead prec / recall | hidden ms/tok | limit tok/s | share |")
print("|---|---|---|---|---|---|---|---|---|---|")
for n in names:
    js = []
    for f in sorted(glob.glob(f"{out}/{n}.*.json")):
        try: js.append(json.load(open(f)))
        except Exception: pass
    if not js: print(f"| {n} | failed |"); continue
    tg = [j["decode_tok_s"] for j in js]
    med = st.median(tg)
    d = [j.get("experts_decode", {}) for j in js]
    toks = [max(j["gen_tokens"] - 1, 1) for j in js]
    def per(key, scale=1.0): return st.median([x.get(key, 0) / t * scale for x, t in zip(d, toks)])
    exp_mb = js[0]["experts"]["bytes_read"] / max(js[0]["experts"]["reads"], 1) * 3 / 1e6 if js[0]["experts"]["reads"] else 0
    missed = per("misses") * exp_mb
    hr = st.median([x.get("hit_rate", 1) for x in d])
    read = per("bytes_read", 1e-6)
    lim = bw * 1e3 / missed if missed > 0 else float("inf")
    share = f"{med / lim * 100:.0f} %" if missed > 0 else "-"
    pr = st.median([x.get("ahead_precision", 0) for x in d]); rc = st.median([x.get("ahead_recall", 0) for x in d])
    print(f"| {n} | {med:.2f} ({min(tg):.2f}-{max(tg):.2f}) | {hr:.3f} | {missed:.0f} | {read:.0f} | {per('wait_ms'):.0f} | "
          f"{pr:.2f} / {rc:.2f} | {per('ahead_hidden_ms'):.0f} | {'-' if missed == 0 else f'{lim:.2f}'} | {share} |")
print("decision:", js[0]["experts"].get("decision", ""))
PY
