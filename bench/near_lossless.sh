#!/bin/bash
# near_lossless.sh — the quality cost of QWISP_NEAR_LOSSLESS on the trained
# models against the resident tier (criteria: bench/near_lossless/README.md).
#
#   bench/near_lossless.sh [BUILD_DIR]
#
# For each model (models/default.gguf, models/qwen35moe.gguf) and text
# (held-out: the first 1200 bytes of /usr/share/common-licenses/GPL-3; in
# training: Psalms 23-24 of the KJV from the `bible` program, when installed):
# the resident tier's logits are dumped once (`qwisp logits --step --dump`),
# then every (C, R) — and strict streaming at each C, which must give KL 0 —
# is compared with them (`--compare`): mean / max KL(resident || setting),
# top-1 agreement, perplexity of the text, hit rate, substitutions.
# CS (default "6 8") and RS (default "6 8") choose the grid.
set -eu
cd "$(dirname "$0")/.."
Q=$PWD/${1:-build}/qwisp
CS=${CS:-6 8}; RS=${RS:-6 8}
T=$(mktemp -d /tmp/near_lossless.XXXXXX)
head -c 1200 /usr/share/common-licenses/GPL-3 >"$T/held-out.txt"
texts=(held-out)
if command -v bible >/dev/null; then bible -f Ps23:1-Ps24:10 | sed 's/^[^ ]* //' | head -c 1200 >"$T/kjv.txt"; texts+=(kjv); fi
echo "| model | text | C | R | KL mean | KL max | top-1 agree | ppl (resident) | hit rate | substituted |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for m in default qwen35moe; do
    for t in "${texts[@]}"; do
        txt=$(cat "$T/$t.txt")
        QWISP_RAW_C=0 "$Q" logits -m "models/$m.gguf" -p "$txt" --step --top 1 --dump "$T/ref.f32" >/dev/null
        for c in $CS; do
            for r in 0 $RS; do
                QWISP_LOG=error QWISP_RAW_C=$c QWISP_NEAR_LOSSLESS=$r "$Q" logits -m "models/$m.gguf" -p "$txt" --step \
                    --compare "$T/ref.f32" | python3 -c '
import json, sys
j = json.load(sys.stdin); e = j["experts"]
m, t, c, r = sys.argv[1:5]
rr = r if r != "0" else "strict"
print("| %s | %s | %s | %s | %.4f | %.3f | %.3f | %.4g (%.4g) | %.3f | %d |" % (m, t, c, rr, j["kl_mean"], j["kl_max"],
      j["top1_agree"], j["ppl"], j["ppl_ref"], e["hit_rate"], e["substituted"]))' "$m" "$t" "$c" "$r"
            done
        done
    done
done
rm -rf "$T"
