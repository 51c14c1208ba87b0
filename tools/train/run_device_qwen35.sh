#!/bin/bash
# run_device_qwen35.sh — the GPU-machine command for the qwen35moe model:
# smoke test, train, pack, reference vectors (run_device.sh's steps, --arch qwen35moe).
#   run(command="bash tools/train/run_device_qwen35.sh", carry=["tools/train/data_qwen35"])
# after `python3 tools/train/prepare_data_qwen35.py` here.  Results under $OUT:
#   train_log.txt, hf_ref.json, ckpt.tar.part.* (cat them to get ckpt.tar).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
cd "$(dirname "$0")"
LOG=$OUT/train_log.txt
D=data_qwen35
nvidia-smi -L 2>&1 | tee "$LOG"
python3 -c 'import transformers, tokenizers; print("transformers", transformers.__version__, "tokenizers", tokenizers.__version__)' 2>&1 | tee -a "$LOG"
echo "== smoke" | tee -a "$LOG"
python3 train.py --arch qwen35moe --data $D --out /tmp/smoke --steps 3 2>&1 | tee -a "$LOG" || exit 1
python3 make_ref_vectors.py --ckpt /tmp/smoke --out /tmp/smoke_ref.json --n-gen 3 2>&1 | tee -a "$LOG" || exit 1
echo "== train" | tee -a "$LOG"
python3 train.py --arch qwen35moe --data $D --out /tmp/ckpt --steps "${STEPS:-auto}" --time-budget "${BUDGET:-240}" 2>&1 | tee -a "$LOG" || exit 1
tar -C /tmp -cf - ckpt | split -b 15M - "$OUT/ckpt.tar.part."
echo "== reference vectors" | tee -a "$LOG"
python3 make_ref_vectors.py --ckpt /tmp/ckpt --out "$OUT/hf_ref.json" --chat 2>&1 | tee -a "$LOG"
ls -la "$OUT" | tee -a "$LOG"
