#!/bin/bash
# t_gen_model.sh — `qwisp gen-model`: determinism, flag validation, the
# file's metadata as llama.cpp reads it, and that the generated model is
# discriminating (measured with llama.cpp, tests/peers/discrimination.mjs).
# Env: QWISP_BIN, QWISP_TEST_TMP (tests/run.sh sets both).
set -u
BIN=${QWISP_BIN:-$PWD/build/qwisp}
TMP=${QWISP_TEST_TMP:-$(mktemp -d /tmp/qwisp-gen.XXXXXX)}/gen_model
mkdir -p "$TMP"
PEERS=tests/peers
check() { if [ "$1" = 0 ]; then echo "PASS: gen-model $2"; else echo "FAIL: gen-model $2${3:+ ($3)}"; fi; }

# determinism: same seed -> same bytes; another seed -> other bytes
"$BIN" gen-model --preset tiny --seed 5 -o "$TMP/a.gguf" && "$BIN" gen-model --preset tiny --seed 5 -o "$TMP/b.gguf" &&
    "$BIN" gen-model --preset tiny --seed 6 -o "$TMP/c.gguf"
check $? "writes tiny preset"
cmp -s "$TMP/a.gguf" "$TMP/b.gguf"; check $? "same seed gives identical files"
! cmp -s "$TMP/a.gguf" "$TMP/c.gguf"; check $? "different seed gives different files"
sz=$(stat -c %s "$TMP/a.gguf" 2>/dev/null || echo 0)
[ "$sz" -gt 100000 ] && [ "$sz" -lt 2000000 ]; check $? "tiny preset is a few hundred KB" "$sz bytes"

# validation: exit 2 and one line naming the flag and the value
bad() { # expected-substring flags...
    local want=$1; shift
    local err rc
    err=$("$BIN" gen-model -o "$TMP/bad.gguf" "$@" 2>&1 >/dev/null); rc=$?
    [ "$rc" = 2 ] && [[ $err == *"$want"* ]] && [ ! -e "$TMP/bad.gguf" ]
    check $? "rejects $*" "rc=$rc: $err"
}
bad "--n-embd 100" --type q8_0 --n-embd 100
bad "--n-head-kv 3" --n-head 4 --n-head-kv 3
bad "--n-expert-used 9" --n-expert 8 --n-expert-used 9
bad "--head-dim 15" --head-dim 15
bad "--type q9_9" --type q9_9
bad "--n-embd 64: must be a multiple of 256" --type q5_k
bad "--n-layer abc" --n-layer abc
bad "--preset huge" --preset huge
bad "--tokenizer sentencepiece" --tokenizer sentencepiece
bad "unknown flag --bogus" --bogus

# metadata and tensors as qwisp's reader sees them
if "$BIN" info "$TMP/a.gguf" >"$TMP/info.txt" 2>&1; then
    for k in general.architecture qwen3moe.expert_count qwen3moe.expert_used_count \
        qwen3moe.expert_feed_forward_length qwen3moe.attention.key_length tokenizer.ggml.merges \
        blk.1.ffn_down_exps.weight output.weight; do
        grep -q "$k" "$TMP/info.txt"; check $? "file has $k"
    done
else
    echo "FAIL: gen-model qwisp info cannot read the file: $(head -1 "$TMP/info.txt")"
fi

# experts a token uses: the loader's limit (QW_EXPERT_USED_MAX, 64; the MoE keeps a token's
# picks in fixed arrays) runs at the limit, prefill and decode, and refuses one more, naming it
"$BIN" gen-model --preset tiny --n-expert 128 --n-expert-used 64 --progress 0 -o "$TMP/k64.gguf" >/dev/null 2>&1 &&
    "$BIN" run -m "$TMP/k64.gguf" --prompt-tokens 20 -n 2 --ignore-eos >"$TMP/k64.txt" 2>&1
check $? "a file using 64 experts a token runs" "$(tail -1 "$TMP/k64.txt")"
"$BIN" gen-model --preset tiny --n-expert 128 --n-expert-used 65 --progress 0 -o "$TMP/k65.gguf" >/dev/null 2>&1
"$BIN" run -m "$TMP/k65.gguf" --prompt-tokens 4 -n 1 >"$TMP/k65.txt" 2>&1
rc=$?
[ "$rc" -ne 0 ] && grep -q "expert_used_count=65" "$TMP/k65.txt"
check $? "a file using 65 experts a token is refused, naming the count" "rc=$rc: $(head -1 "$TMP/k65.txt")"
rm -f "$TMP/k64.gguf" "$TMP/k65.gguf"

# llama.cpp loads it, and greedy output is discriminating
if ! command -v node >/dev/null || [ ! -d "$PEERS/node_modules/node-llama-cpp" ]; then
    echo "FAIL: gen-model discrimination: node or $PEERS/node_modules/node-llama-cpp missing"
    exit 0
fi
for spec in "tiny|--preset tiny" "tied-q8_0|--preset tiny --type q8_0 --tied --n-embd 64 --n-head 6 --n-head-kv 2 --n-expert 12 --n-expert-used 3 --seed 9"; do
    IFS='|' read -r name flags <<<"$spec"
    # shellcheck disable=SC2086
    "$BIN" gen-model $flags -o "$TMP/$name.gguf" || { check 1 "$name writes"; continue; }
    out=$(timeout 120 node "$PEERS/discrimination.mjs" --model "$TMP/$name.gguf" 2>&1 | tail -1)
    node -e '
        const d = JSON.parse(process.argv[1]);
        const ok = d.all_different && d.distinct_min >= 8 && d.median_margin > 0.5;
        console.log(`${ok ? "PASS" : "FAIL"}: gen-model ${process.argv[2]} discriminating on llama.cpp ` +
            `(distinct min ${d.distinct_min}/32, all prompts differ ${d.all_different}, median margin ${d.median_margin})`);
    ' "$out" "$name" 2>/dev/null || echo "FAIL: gen-model $name discrimination: $out"
done
exit 0
