#!/usr/bin/env bash
# speed_vs_llamabench.sh — qwisp bench vs llama.cpp's own llama-bench on the
# same GGUF files, same threads, interleaved: each round runs both tools once
# (one repetition each, after their own warm-up) and the order alternates
# between rounds, so machine noise hits both alike.  Prints per-model medians
# of pp (prefill) and tg (decode) tok/s and the ratios qwisp / llama.cpp, plus
# qwisp's share of the bandwidth roofline.
#
#   bench/speed_vs_llamabench.sh [-r ROUNDS] [-p N] [-n N] [-t THREADS] [--gen] MODEL.gguf...
#   bench/speed_vs_llamabench.sh --gen            # generates the default set below, then runs it
#
# --gen writes (if missing) into $QWISP_BENCH_MODELS (default ~/.cache/qwisp/models):
#   bench-q8_0 / bench-q4_0: the `bench` preset (1024 hidden, 8 layers, 64 experts top-8,
#     expert FFN 512, 151k vocab; ~1.1B params), about 30 s each to generate;
#   a3b-q8_0 / a3b-q4_0: Qwen3-30B-A3B's width (hidden 2048, 128 experts top-8, expert
#     FFN 768, 32 heads / 4 KV heads, head_dim 128) with 4 layers (~3.1B params).
# llama-bench comes from bench/llama_bench_build.sh (built once, cached).
# Env: QWISP_BIN (default build/qwisp), LLAMA_BENCH (default: the build script's),
# COLD_CACHE (default 1: each model's page cache dropped and re-read cold first; below).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
qwisp="${QWISP_BIN:-$here/build/qwisp}"
rounds=5 p=512 n=128 t=2 gen=0 models=()
while [[ $# -gt 0 ]]; do
    case "$1" in
    -r) rounds=$2; shift 2 ;;
    -p) p=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    -t) t=$2; shift 2 ;;
    --gen) gen=1; shift ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) models+=("$1"); shift ;;
    esac
done
[[ -x "$qwisp" ]] || { echo "no qwisp binary at $qwisp (make, or set QWISP_BIN)" >&2; exit 1; }
lb="${LLAMA_BENCH:-$("$here/bench/llama_bench_build.sh")}"
[[ -x "$lb" ]] || { echo "no llama-bench at $lb" >&2; exit 1; }

if [[ $gen == 1 ]]; then
    dir="${QWISP_BENCH_MODELS:-$HOME/.cache/qwisp/models}"
    mkdir -p "$dir"
    a3b=(--n-embd 2048 --n-layer 4 --n-head 32 --n-head-kv 4 --head-dim 128 --n-expert 128
         --n-expert-used 8 --n-ff-exp 768 --name qwisp-a3b-width)
    for ty in q8_0 q4_0; do
        [[ -f "$dir/bench-$ty.gguf" ]] || "$qwisp" gen-model -o "$dir/bench-$ty.gguf" --preset bench --type $ty --embd-type q8_0 >&2
        [[ -f "$dir/a3b-$ty.gguf" ]] || "$qwisp" gen-model -o "$dir/a3b-$ty.gguf" --preset bench --type $ty --embd-type q8_0 "${a3b[@]}" >&2
        models+=("$dir/bench-$ty.gguf" "$dir/a3b-$ty.gguf")
    done
fi
[[ ${#models[@]} -gt 0 ]] || { echo "give MODEL.gguf files or --gen" >&2; exit 2; }

# Waits (up to QUIET_WAIT_S, default 120 s) until the rest of the machine is
# quiet: CPU time used outside idle over 1 s, minus nothing of ours (we run
# nothing at this point), below 25% of one core.  Other users' jobs would
# otherwise decide the result: a 2-thread decode on 2 shared cores is mostly
# a measurement of who else is running.
quiet() {
    local waited=0 limit=${QUIET_WAIT_S:-120}
    while ((waited < limit)); do
        local a b
        a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
        local idle=$(( (b[4] + b[5]) - (a[4] + a[5]) )) tot=0 i
        for ((i = 1; i < ${#a[@]}; i++)); do tot=$((tot + b[i] - a[i])); done
        local busy=$(( (tot - idle) * 100 * $(nproc) / (tot > 0 ? tot : 1) ))
        ((busy < 25)) && return 0
        waited=$((waited + 1))
    done
    echo "  (machine still busy after ${limit}s: measuring anyway)" >&2
}

# Each model's page cache is dropped and the file read once before its
# rounds, so both tools read the cache a cold read fills, as a user's model
# file is read at first use.  A file written moments before (by --gen, a
# download, a conversion) is cached in the write path's 4 KB pages, which a
# decode reads markedly slower than the 2 MB folios of a cold read
# (bench/RESULTS.md, 2026-12-05 session 12).  COLD_CACHE=0 keeps the cache.
cold_cache() {
    [[ ${COLD_CACHE:-1} == 1 ]] || return 0
    python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"
    cat "$1" > /dev/null
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# qwisp $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo ?) vs $lb; threads=$t pp$p tg$n; $rounds interleaved rounds; $(date -u +%FT%TZ)"
for m in "${models[@]}"; do
    cold_cache "$m"
    for ((r = 0; r < rounds; r++)); do
        run_q() { "$qwisp" bench -m "$m" -p "$p" -n "$n" -r 1 -t "$t" --json >> "$tmp/q.jsonl"; }
        run_l() { "$lb" -m "$m" -p "$p" -n "$n" -r 1 -t "$t" -o json 2>/dev/null > "$tmp/l.$r.json"; }
        if ((r % 2 == 0)); then quiet; run_q; quiet; run_l; else quiet; run_l; quiet; run_q; fi
    done
    python3 - "$m" "$tmp" "$rounds" <<'PY'
import json, sys, statistics as st, glob, os
m, tmp, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
q = [json.loads(l) for l in open(os.path.join(tmp, "q.jsonl"))]
qpp = [x["pp_tok_s"]["median"] for x in q if "pp_tok_s" in x]
qtg = [x["tg_tok_s"]["median"] for x in q if "tg_tok_s" in x]
# bandwidth: every qwisp run measures it; the best (least disturbed) counts
bw = max(q, key=lambda x: x.get("mem_read_gb_s", 0))
lpp, ltg = [], []
for f in sorted(glob.glob(os.path.join(tmp, "l.*.json"))):
    for rec in json.load(open(f)):
        (lpp if rec["n_prompt"] > 0 else ltg).append(rec["avg_ts"])
def med(v): return st.median(v) if v else float("nan")
def rng(v): return f"{min(v):.1f}-{max(v):.1f}" if v else "-"
name = os.path.basename(m)
roof = bw["roofline_tg_tok_s"]
print(f"\n## {name}  ({bw['weight_bytes']/1e9:.2f} GB file, {bw['active_bytes_per_token']/1e6:.0f} MB active/token, "
      f"read bandwidth {bw['mem_read_gb_s']:.1f} GB/s -> roofline {roof:.1f} tok/s)")
# On a shared machine the best round is the one least disturbed by others,
# so both the median ratio and the best-round ratio are printed.
print("| test | qwisp tok/s median (range) | llama-bench tok/s median (range) | ratio of medians | ratio of bests |")
print("|---|---|---|---|---|")
if qpp: print(f"| pp{q[0]['n_prompt']} | {med(qpp):.1f} ({rng(qpp)}) | {med(lpp):.1f} ({rng(lpp)}) | **{med(qpp)/med(lpp):.2f}x** | {max(qpp)/max(lpp):.2f}x |")
if qtg: print(f"| tg{q[0]['n_gen']} | {med(qtg):.1f} ({rng(qtg)}) | {med(ltg):.1f} ({rng(ltg)}) | **{med(qtg)/med(ltg):.2f}x** | {max(qtg)/max(ltg):.2f}x |")
if qtg: print(f"\ndecode roofline reached (median / best): qwisp {100*med(qtg)/roof:.0f}% / {100*max(qtg)/roof:.0f}%, "
              f"llama.cpp {100*med(ltg)/roof:.0f}% / {100*max(ltg)/roof:.0f}%")
PY
    rm -f "$tmp"/q.jsonl "$tmp"/l.*.json
done
