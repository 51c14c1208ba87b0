#!/bin/bash
# run_device.sh — the one GPU-machine command: smoke test, train, pack, reference vectors.
#   run(command="bash tools/train/run_device.sh", carry=["tools/train/data"])
#   run(command="ARCH=qwen35moe bash tools/train/run_device.sh", carry=["tools/train/data_qwen35"])
# after `python3 tools/train/prepare_data.py` (or prepare_data_qwen35.py) here.  Results under
# $OUT: train_log.txt, hf_ref.json, ckpt.tar.part.* (cat them to get ckpt.tar: the checkpoint
# does not fit the 16 MiB-per-file return limit whole).
# ARCH=qwen3moe (default: models/default.gguf, 300 s) or qwen35moe (models/qwen35moe.gguf,
# 240 s; its reference vectors add two chat-format prompts).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
cd "$(dirname "$0")"
ARCH=${ARCH:-qwen3moe}
case $ARCH in
qwen3moe) DATA=data; BUDGET=${BUDGET:-300}; REF_FLAGS="" ;;
qwen35moe) DATA=data_qwen35; BUDGET=${BUDGET:-240}; REF_FLAGS="--chat" ;;
*) echo "run_device.sh: ARCH=$ARCH: expected qwen3moe or qwen35moe" >&2; exit 2 ;;
esac
LOG=$OUT/train_log.txt
nvidia-smi -L 2>&1 | tee "$LOG"
python3 -c 'import transformers, tokenizers; print("transformers", transformers.__version__, "tokenizers", tokenizers.__version__)' 2>&1 | tee -a "$LOG"
echo "== smoke" | tee -a "$LOG"
python3 train.py --arch "$ARCH" --data "$DATA" --out /tmp/smoke --steps 3 2>&1 | tee -a "$LOG" || exit 1
python3 make_ref_vectors.py --ckpt /tmp/smoke --out /tmp/smoke_ref.json --n-gen 3 2>&1 | tee -a "$LOG" || exit 1
echo "== train" | tee -a "$LOG"
python3 train.py --arch "$ARCH" --data "$DATA" --out /tmp/ckpt --steps "${STEPS:-auto}" --time-budget "$BUDGET" 2>&1 | tee -a "$LOG" || exit 1
tar -C /tmp -cf - ckpt | split -b 15M - "$OUT/ckpt.tar.part."
echo "== reference vectors" | tee -a "$LOG"
# shellcheck disable=SC2086
python3 make_ref_vectors.py --ckpt /tmp/ckpt --out "$OUT/hf_ref.json" $REF_FLAGS 2>&1 | tee -a "$LOG"
ls -la "$OUT" | tee -a "$LOG"
