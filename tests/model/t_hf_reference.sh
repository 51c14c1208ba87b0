#!/bin/bash
# t_hf_reference.sh — the shipped default model against two peers.
#
#  1. transformers (tests/fixtures/hf_ref/qwisp-default-ref.json, made by
#     tools/train/make_ref_vectors.py from the fp32 checkpoint): on the
#     shipped Q8_0 file, teacher-forced top-1 agreement, mean |d logprob| of
#     the reference top-1, prompt ids and the first greedy token
#     (tests/model/hf_ref_check.py --mode quant states the bounds);
#  2. llama.cpp on the same file: qwisp's 64-token greedy continuation of
#     every reference prompt is llama.cpp's argmax at every position (see below);
#  3. only when QWISP_HF_CKPT names the checkpoint directory (it is not in git:
#     54 MB): convert it to F32 and run the strict check with QWISP_KV_TYPE=f32
#     (top-1 at every position, top-20 logprobs within 1e-3, greedy identical).
# Env (tests/run.sh): QWISP_BIN, QWISP_TEST_TMP.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${QWISP_BIN:-$ROOT/build/qwisp}
TMP=${QWISP_TEST_TMP:-$(mktemp -d /tmp/qwisp-hfref.XXXXXX)}/hfref
mkdir -p "$TMP"
MODEL="$ROOT/models/default.gguf"
REF="$ROOT/tests/fixtures/hf_ref/qwisp-default-ref.json"
CHECK="$HERE/hf_ref_check.py"

if [ ! -f "$MODEL" ]; then echo "FAIL: hf_ref: $MODEL missing"; exit 0; fi
if ! command -v python3 >/dev/null; then echo "FAIL: hf_ref: python3 is not installed"; exit 0; fi

# 1. transformers reference, quantised file
python3 "$CHECK" "$BIN" "$MODEL" "$REF" --mode quant | sed 's/^PASS: hf_ref_quant/PASS: hf_ref_quant_vs_transformers/; s/^FAIL: hf_ref_quant/FAIL: hf_ref_quant_vs_transformers/'

# 2. llama.cpp on the same file.  llama.cpp is not self-consistent between
#    its batched path and its one-token decode path (for a matmul of < 2
#    tokens it skips llamafile_sgemm and sums in another order), so its own
#    greedy decode is not a fixed reference.  The check: teacher-force qwisp's
#    64-token greedy continuation through llama.cpp in one batch — llama.cpp's
#    argmax must equal qwisp's next token at every generated position (>= 63
#    of 64: one position may sit on an f16 rounding tie of the softmax, where
#    llama.cpp's approximate SIMD exp and libm's expf round differently).  The
#    token-by-token comparison with llama.cpp's own decode is reported as INFO.
PEER="$ROOT/tests/peers/llama_ref.mjs"
if ! command -v node >/dev/null || [ ! -d "$ROOT/tests/peers/node_modules/node-llama-cpp" ]; then
    echo "FAIL: hf_ref_llamacpp_greedy: node / node-llama-cpp missing (scripts/setup.sh)"
else
    ok=1
    n=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['prompts']))" "$REF")
    for ((i = 0; i < n; i++)); do
        p=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['prompts'][int(sys.argv[2])]['text'])" "$REF" "$i")
        "$BIN" run -m "$MODEL" -p "$p" -n 64 --temp 0 --ignore-eos --json --threads 2 >"$TMP/qwisp_$i.json" 2>/dev/null
        seq=$(python3 -c "import json,sys; q=json.load(open(sys.argv[1])); print(','.join(map(str, q['prompt_ids'] + q['tokens'][:-1])))" "$TMP/qwisp_$i.json")
        timeout 300 node "$PEER" --model "$MODEL" --tokens "$seq" --teacher-force --top 2 --threads 2 >"$TMP/llama_tf_$i.json" 2>"$TMP/llama_tf_$i.err"
        timeout 300 node "$PEER" --model "$MODEL" --prompt "$p" --generate 64 --threads 2 >"$TMP/llama_$i.json" 2>"$TMP/llama_$i.err"
        if ! python3 - "$TMP/llama_$i.json" "$TMP/qwisp_$i.json" "$TMP/llama_tf_$i.json" "$p" <<'PY'; then ok=0; fi
import json, sys
l, q, tf = (json.load(open(f)) for f in sys.argv[1:4])
np_, toks = len(q["prompt_ids"]), q["tokens"]
agree = sum(1 for k, t in enumerate(toks) if tf["positions"][np_ - 1 + k]["top"][0][0] == t)
same = 0
while same < min(len(l["tokens"]), len(toks)) and l["tokens"][same] == toks[same]:
    same += 1
ids_ok = l["prompt_ids"] == q["prompt_ids"]
print(f"INFO: {sys.argv[4][:40]!r}: prompt ids {'same' if ids_ok else 'DIFFER'}; llama.cpp (batched) argmax = qwisp token at {agree}/64; "
      f"equal to llama.cpp's own decode for {same}/64")
sys.exit(0 if ids_ok and len(toks) == 64 and agree >= 63 else 1)
PY
    done
    [ $ok = 1 ] && echo "PASS: hf_ref_llamacpp_greedy" || echo "FAIL: hf_ref_llamacpp_greedy"
fi

# 3. strict, when the checkpoint is at hand
if [ -n "${QWISP_HF_CKPT:-}" ]; then
    if "$BIN" convert "$QWISP_HF_CKPT" -o "$TMP/f32.gguf" --type f32 2>"$TMP/convert.err"; then
        # fp32 end to end, like the reference: an f32 KV cache (the f16 default rounds K, V,
        # q and p as llama.cpp does, which moves logprobs by up to ~2 against fp32).
        QWISP_KV_TYPE=f32 python3 "$CHECK" "$BIN" "$TMP/f32.gguf" "$REF" --mode strict
    else
        echo "FAIL: hf_ref_strict: convert failed: $(cat "$TMP/convert.err")"
    fi
    rm -f "$TMP/f32.gguf"
fi
