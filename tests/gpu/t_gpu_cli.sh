#!/bin/bash
# t_gpu_cli.sh — `qwisp run` on the CUDA backend: the same greedy text as the
# CPU on both shipped models, --json names the backend and carries the device
# pool's counters, QWISP_DEVICE_VRAM=N emulates a smaller GPU (the streaming
# tier is chosen and says so), and without a GPU `QWISP_BACKEND=cuda` fails
# with one line while every check here prints one SKIP line.
set -u
cd "$(dirname "$0")/../.." || exit 1
BIN=${QWISP_BIN:-build/qwisp}
P="Once upon a time"
if ! why=$(QWISP_BACKEND=cuda "$BIN" run -m models/default.gguf -p "$P" -n 1 2>&1 >/dev/null); then
    n=$(printf '%s\n' "$why" | grep -c .)
    if [ "$n" = 1 ] && [[ $why == *"QWISP_BACKEND=cuda: "* ]]; then
        echo "PASS: QWISP_BACKEND=cuda without a GPU fails with one line"
    else
        echo "FAIL: QWISP_BACKEND=cuda without a GPU: $why"
    fi
    echo "SKIP: qwisp run on the GPU: ${why#*QWISP_BACKEND=cuda: }"
    exit 0
fi
for m in models/default.gguf models/qwen35moe.gguf; do
    g=$(QWISP_BACKEND=cuda "$BIN" run -m "$m" -p "$P" -n 24 --seed 1 2>/dev/null)
    c=$(QWISP_BACKEND=cpu "$BIN" run -m "$m" -p "$P" -n 24 --seed 1 2>/dev/null)
    # both shipped models are Q8_0: the GPU takes the CPU's Q8_0 activations
    if [ "$g" = "$c" ]; then echo "PASS: $m: GPU greedy text = CPU's"
    else echo "FAIL: $m: GPU '$g' vs CPU '$c'"; fi
    j=$(QWISP_BACKEND=cuda "$BIN" run -m "$m" -p "$P" -n 4 --json 2>/dev/null | tail -1)
    if python3 -c "import json,sys; j=json.loads(sys.argv[1]); assert j['backend']=='cuda' and j['device']['weights']>0 and j['device']['peak']>0" "$j" 2>/dev/null; then
        echo "PASS: $m: --json has backend=cuda and the device pool"
    else echo "FAIL: $m: --json without the device: $j"; fi
done
s=$(QWISP_LOG=info QWISP_BACKEND=cuda QWISP_DEVICE_SLOTS=4 "$BIN" run -m models/qwen35moe.gguf -p "$P" -n 24 --seed 1 2>&1 >/dev/null | grep -c "streaming tier")
g=$(QWISP_BACKEND=cuda QWISP_DEVICE_SLOTS=4 "$BIN" run -m models/qwen35moe.gguf -p "$P" -n 24 --seed 1 2>/dev/null)
r=$(QWISP_BACKEND=cuda "$BIN" run -m models/qwen35moe.gguf -p "$P" -n 24 --seed 1 2>/dev/null)
if [ "$s" -ge 1 ] && [ "$g" = "$r" ]; then echo "PASS: streaming tier (4 slots) says so and writes the resident tier's text"
else echo "FAIL: streaming tier: said=$s '$g' vs '$r'"; fi
# the expert copies' three paths (docs/cuda.md): qwisp's staging with buffers
# smaller than one expert matrix (pieces split over buffers, the ring wrapping),
# the driver's pageable copies, and page-locked in place: the resident text each
for mode in "QWISP_DEVICE_PIN=off QWISP_DEVICE_STAGE_MB=1" "QWISP_DEVICE_PIN=off QWISP_DEVICE_STAGE_MB=0" "QWISP_DEVICE_PIN=on"; do
    # shellcheck disable=SC2086
    line=$(env $mode QWISP_LOG=info QWISP_BACKEND=cuda QWISP_DEVICE_SLOTS=4 "$BIN" run -m models/qwen35moe.gguf -p "$P" -n 24 --seed 1 2>&1 >/dev/null | grep -m1 "streaming tier")
    # shellcheck disable=SC2086
    g=$(env $mode QWISP_BACKEND=cuda QWISP_DEVICE_SLOTS=4 "$BIN" run -m models/qwen35moe.gguf -p "$P" -n 24 --seed 1 2>/dev/null)
    case "$mode" in
    *STAGE_MB=1) want="staged through" ;;
    *STAGE_MB=0) want="the driver's copies" ;;
    *) want="page-locked" ;;
    esac
    if [ "$g" = "$r" ] && [ "${line#*"$want"}" != "$line" ]; then echo "PASS: streaming tier, $mode: '$want', the resident tier's text"
    else echo "FAIL: streaming tier, $mode: '$g' vs '$r'; tier line: $line"; fi
done
# QWISP_CHUNK on the GPU: a 700-token prompt in one chunk (all-row logits in
# blocks of 512, cu_forward.cu) and in 97-token chunks, resident and streaming:
# every position's logits the default's bits
m=$(echo "${QWISP_GPU_MODELS:-}" | tr ':' '\n' | grep -m1 'qwen35moe-q4_K')
if [ -n "$m" ]; then
    T=${QWISP_TEST_TMP:-/tmp}/gpu-chunk; mkdir -p "$T"
    QWISP_BACKEND=cuda "$BIN" logits -m "$m" --prompt-tokens 700 --dump "$T/ref.bin" >/dev/null 2>&1
    for mode in "QWISP_CHUNK=2048" "QWISP_CHUNK=97" "QWISP_CHUNK=2048 QWISP_DEVICE_SLOTS=2"; do
        # shellcheck disable=SC2086
        env $mode QWISP_BACKEND=cuda "$BIN" logits -m "$m" --prompt-tokens 700 --dump "$T/c.bin" >/dev/null 2>&1
        if [ -s "$T/ref.bin" ] && cmp -s "$T/ref.bin" "$T/c.bin"; then echo "PASS: $mode: 700 positions' logits = the 512-token chunks'"
        else echo "FAIL: $mode: logits differ from the 512-token chunks' ($(cmp "$T/ref.bin" "$T/c.bin" 2>&1 | head -1))"; fi
    done
else
    echo "SKIP: QWISP_CHUNK on the GPU: no qwen35moe-q4_K model in QWISP_GPU_MODELS (tests/gpu/run.sh makes it)"
fi
