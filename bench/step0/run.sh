#!/bin/bash
# bench/step0/run.sh [BUILD_DIR] — the seed's Step 0 at full size, run by
# `qwisp ab`: QWISP_PREFILL_CACHE_MB unset (baseline) vs 2048 vs 512 MB (the
# seed's values, unscaled), plus the A/A arm `qwisp ab` adds, one long prefill
# + a decode per trial, under QWISP_POOL_FIT=exact (MLX's rule, what the seed
# measured) and classes (qwisp's default), at the resident tier and at a
# streaming tier (QWISP_RAW_C=$RAW_C; under `qwisp simulate $SIM_GB` when a
# memory cgroup is writable).  Verdicts come from criteria-resident.txt and
# criteria-streaming.txt (the seed's 2 % and 4 GB, unscaled), written before
# the first full-size trial.  Reports land in $OUT/<tier>-<fit>/; the last
# lines printed are the verdicts.
#
# Speed: in one process, token-paired (qwisp ab --speed tokens, docs/ab.md):
# the prompt prefilled once on THREADS threads, then N_GEN decode positions,
# each decoded once per arm from the same saved state on DECODE_THREADS
# threads, blocks of 2 x the arms paired; footprint: separate processes
# (FP_REPS rounds, FP_DECODE decode tokens each — a footprint is a process's;
# FP_REPS=0 = speed only, enough for the resident criteria; FP_JOBS of them
# at once after the warm-up, default 1 — a process's footprint is its own,
# so on a many-core host FP_JOBS=4 runs a round of 4 arms in the time of one).
#
# BACKEND=cuda: the same experiment on the GPU backend (issue 18, item 7),
# where the bound is also the device pool's cache limit: tiers `resident`
# (every weight in VRAM) and `vram` (QWISP_DEVICE_VRAM=$VRAM_GB: the routed
# experts streamed from host memory into a VRAM expert cache; prefill chunks
# of QWISP_CHUNK=$VRAM_CHUNK tokens, each copying every expert once), criteria
# criteria-gpu-resident.txt / criteria-gpu-vram.txt (footprint = host + the
# device pool's held peak).  THREADS and DECODE_THREADS only size the host side.
#
# Cost: one prefill of N_PROMPT tokens, then N_GEN x 4 arms forward passes,
# plus FP_REPS x 4 full prefills in separate processes.  On the shared 2-core
# EPYC (full-size file, page cache warm): prefill ~12 tok/s on 2 threads,
# decode ~7 tok/s per pass on 1 thread, so 16K + 1024 positions is ~35 min per
# tier x fit with FP_REPS=0.
set -eu
BUILD=${1:-build}
D="$PWD/bench/step0"
OUT=${OUT:-$D/full}
N_PROMPT=${N_PROMPT:-16384}
N_GEN=${N_GEN:-1025}
FP_REPS=${FP_REPS:-0}
DECODE_THREADS=${DECODE_THREADS:-1}
FP_DECODE=${FP_DECODE:-16}
FP_JOBS=${FP_JOBS:-1}
RAW_C=${RAW_C:-16}
SIM_GB=${SIM_GB:-16}
BACKEND=${BACKEND:-cpu}
VRAM_GB=${VRAM_GB:-8}
VRAM_CHUNK=${VRAM_CHUNK:-4096}  # vram tier: every prefill chunk copies its experts once (docs/cuda.md)
THREADS=${THREADS:-$(( $(nproc) > 2 ? $(nproc) - 1 : $(nproc) ))}  # prefill; one CPU left for the harness's sampler
T=$(mktemp -d /tmp/qwisp-step0.XXXXXX)
trap 'rm -rf "$T"' EXIT
Q="$T/qwisp"                 # a private copy: a rebuild meanwhile cannot change the binary between runs
cp "$BUILD/qwisp" "$Q"
# the GPU backend's object is loaded from next to the binary: copied with it
[ "$BACKEND" = cuda ] && cp "$BUILD/libqwisp_cuda.so" "$T/"
M=${MODEL:-}
if [ -z "$M" ]; then
    M="$T/qwen36-a3b.gguf"   # full size, rows from a pool (same memory and speed, not a real model)
    "$Q" gen-model --preset qwen36-a3b --fast-weights -o "$M" --progress 0 >/dev/null
fi
ARMS=(--arm unset:QWISP_PREFILL_CACHE_MB= --arm 2048:QWISP_PREFILL_CACHE_MB=2048 --arm 512:QWISP_PREFILL_CACHE_MB=512)
STREAM=(--tier streaming --raw-c "$RAW_C")
if "$Q" simulate 1 -- true >/dev/null 2>&1; then STREAM+=(--simulate "$SIM_GB"); fi
dev=""
[ "$BACKEND" = cuda ] && dev=" + $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) (QWISP_BACKEND=cuda)"
echo "== Step 0 on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)$dev, $THREADS threads; model $M"
default_tiers="resident streaming"
[ "$BACKEND" = cuda ] && default_tiers="resident vram"
for fit in ${FITS:-exact classes}; do
    for tier in ${TIERS:-$default_tiers}; do
        out="$OUT/$tier-$fit"
        extra=(--tier resident) crit="$D/criteria-resident.txt" env=(QWISP_BACKEND=cpu)
        [ "$tier" = streaming ] && extra=("${STREAM[@]}") crit="$D/criteria-streaming.txt"
        [ "$BACKEND" = cuda ] && env=(QWISP_BACKEND=cuda) crit="$D/criteria-gpu-resident.txt"
        # the VRAM tier streams experts, but `qwisp ab` sees a resident host tier: prime by hand (docs/ab.md)
        [ "$tier" = vram ] && env=(QWISP_BACKEND=cuda "QWISP_DEVICE_VRAM=$VRAM_GB" "QWISP_CHUNK=$VRAM_CHUNK") crit="$D/criteria-gpu-vram.txt" \
            extra=(--tier resident --prime)
        echo "== $tier, QWISP_POOL_FIT=$fit ${env[*]} -> $out"
        env "${env[@]}" QWISP_POOL_FIT=$fit QWISP_THREADS=$THREADS "$Q" ab --criteria "$crit" -m "$M" \
            --prompt-tokens "$N_PROMPT" --decode "$N_GEN" --speed tokens --decode-threads "$DECODE_THREADS" \
            --footprint-reps "$FP_REPS" --footprint-decode "$FP_DECODE" --footprint-jobs "$FP_JOBS" "${extra[@]}" "${ARMS[@]}" --out "$out" \
            | sed "s/^/[$tier-$fit] /"
        w="$out/trials/speed-worker.stderr"   # the worker's progress: its prefix, its blocks
        [ -s "$w" ] && tail -n 3 "$w" | sed "s/^/[$tier-$fit worker] /"
        rm -f "$out"/trials/[0-9]*.json   # per-trial stdout (prompt ids); the report keeps the numbers
    done
done
