#!/bin/bash
# route_real.sh — the streaming tier on the trained models' real routing:
# hit rate, bytes missed per decoded token, decode tok/s, LRU vs LFU, against
# resident, with the disk-bound limit of each row.
#
#   bench/route_real.sh [BUILD_DIR]
#
# Per model (models/default.gguf, models/qwen35moe.gguf): a 1200-byte prompt
# (the GPL-3 text: not training data), 256 decoded tokens sampled at
# temperature 0.7, seed 1 (the same tokens for every row: routing does not
# depend on the tier or policy, the logits are bit-identical); rows resident
# and C in CS (default "6 8 10") x policy lru / lfu, ROUNDS (default 3)
# rounds in rotated order, medians.  The disk's bandwidth for reads of one
# expert matrix (bench/disk_bw.py, QD 8, O_DIRECT) gives the limit:
# GB/s / (misses per token x expert bytes).
set -eu
cd "$(dirname "$0")/.."
Q=$PWD/${1:-build}/qwisp
CS=${CS:-6 8 10}; ROUNDS=${ROUNDS:-3}
T=$(mktemp -d /tmp/route_real.XXXXXX)
head -c 1200 /usr/share/common-licenses/GPL-3 >"$T/p.txt"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores (shared); $ROUNDS rounds"
for m in default qwen35moe; do
    M=models/$m.gguf
    rows=(resident); for c in $CS; do rows+=("lru-$c" "lfu-$c"); done
    for r in $(seq 1 "$ROUNDS"); do
        n=${#rows[@]}
        for i in $(seq 0 $((n - 1))); do
            row=${rows[$(( (i + r) % n ))]}
            case $row in resident) env=(QWISP_RAW_C=0) ;; *) env=(QWISP_RAW_C=${row#*-} QWISP_EXPERT_POLICY=${row%-*}) ;; esac
            env QWISP_LOG=error "${env[@]}" "$Q" run -m "$M" --prompt-file "$T/p.txt" -n 256 --temp 0.7 --seed 1 \
                --ignore-eos --json --threads 2 2>/dev/null | grep -a '^{' >"$T/$m.$row.$r.json"
        done
    done
    # one expert = its three matrices: bytes per read x 3 from a streaming row
    xb=$(python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["experts"]; print(int(e["bytes_read"]/e["reads"]*3))' "$T/$m.lru-${CS%% *}.1.json")
    bw=$(python3 bench/disk_bw.py "$M" $((xb / 3)) 2 8 | awk '{print $3}')
    python3 - "$T" "$m" "$bw" "$xb" "${rows[@]}" <<'PY'
import glob, json, statistics as st, sys
T, m, bw, xb, rows = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
print(f"\n{m}: expert {xb/1e3:.0f} kB, disk {bw:.3f} GB/s for {xb//3} B reads (QD 8)")
print("| row | decode tok/s median (range) | hit rate | misses/tok | MB missed/tok | limit tok/s | share |")
print("|---|---|---|---|---|---|---|")
for row in rows:
    js = [json.load(open(f)) for f in sorted(glob.glob(f"{T}/{m}.{row}.*.json"))]
    tg = [j["decode_tok_s"] for j in js]
    d = js[0]["experts_decode"]; toks = max(js[0]["gen_tokens"] - 1, 1)
    mpt = d["misses"] / toks; mb = mpt * xb / 1e6
    lim = bw * 1e3 / mb if mb else float("inf")
    print(f"| {row} | {st.median(tg):.1f} ({min(tg):.1f}-{max(tg):.1f}) | {d['hit_rate']:.3f} | {mpt:.2f} | {mb:.3f} | "
          + (f"{lim:.0f} | {st.median(tg) / lim * 100:.0f} % |" if mb else "- | - |"))
PY
done
rm -rf "$T"
