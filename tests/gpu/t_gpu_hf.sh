#!/bin/bash
# t_gpu_hf.sh — the CUDA backend against Hugging Face transformers' reference
# vectors (the checks tests/model/ runs on the CPU path, here with
# QWISP_BACKEND=cuda and the same bounds):
#   - the two shipped Q8_0 models against their fixtures (hf_ref_check.py --mode
#     quant: teacher-forced top-1 agreement, mean |d logprob| of the reference
#     top-1, prompt ids, the first greedy token);
#   - the tiny Qwen3_5MoeForCausalLM checkpoint converted to F32 with an F32 KV
#     cache (top-1 at every position, reference top-20 logprobs within 2e-3,
#     greedy identical) and to Q8_0 (tests/model/t_hf_qwen35.sh's logits checks).
# The fixtures were made by transformers from the same checkpoints
# (tests/model/make_qwen35_ref.py, tools/train/make_ref_vectors.py).
# Without a GPU: one SKIP line.
set -u
cd "$(dirname "$0")/../.." || exit 1
export QWISP_BIN=${QWISP_BIN:-$PWD/build/qwisp}
. tests/gpu/gpu_usable.sh
if why=$(gpu_unusable "$QWISP_BIN"); then echo "SKIP: transformers references on the GPU: $why"; exit 0; fi
if ! command -v python3 >/dev/null; then echo "FAIL: gpu hf_ref: python3 is not installed"; exit 0; fi
export QWISP_BACKEND=cuda
for spec in "default|tests/fixtures/hf_ref/qwisp-default-ref.json" \
    "qwen35moe|tests/fixtures/hf_ref_qwen35/qwisp-qwen35moe-ref.json"; do
    IFS='|' read -r name ref <<<"$spec"
    python3 tests/model/hf_ref_check.py "$QWISP_BIN" "models/$name.gguf" "$ref" --mode quant |
        sed -E "s/^(PASS|FAIL): hf_ref_quant/\1: gpu $name hf_ref_quant_vs_transformers/"
done
QWISP_HF_LOGITS_ONLY=1 bash tests/model/t_hf_qwen35.sh | sed -E "s/^(PASS|FAIL|SKIP): /\1: gpu /"
