#!/bin/bash
# t_parity_qwen35.sh — qwen35moe (work in progress) against llama.cpp.
# The architecture is not registered in the loader yet, so this runs the
# forward through its own driver (tests/model/wip_q35_driver.c).
#
# Builds tests/model/wip_q35_driver.c against $BUILD/libqwisp.a, generates
# small qwen35moe models (tokenizer copied from a tiny gen-model file), and per
# model: greedy 32 tokens after 3 prompts (ids from llama.cpp's tokenizer) must
# be identical; teacher forcing over 128 tokens: top-1 equal at every position,
# INFO max |logprob difference| over the top-10 (parity_compare.mjs).
#   QWISP_TEST_FILTER=qwen35 tests/run.sh build   (~100 s)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${BUILD:-${QWISP_BUILD:-build}}
BIN="$ROOT/$BUILD/qwisp"
DRV="$ROOT/$BUILD/wip_q35_driver"
TMP=${QWISP_TEST_TMP:-$(mktemp -d /tmp/qwisp-q35.XXXXXX)}/q35
mkdir -p "$TMP"
REF="$HERE/llama_ref.mjs"; CMP="$HERE/parity_compare.mjs"
T="timeout 300"
if ! command -v node >/dev/null || [ ! -d "$HERE/node_modules/node-llama-cpp" ]; then
    echo "FAIL: qwen35 parity: node / node-llama-cpp missing (scripts/setup.sh)"; exit 0
fi

SAN=""; case "$BUILD" in *asan*) SAN="-fsanitize=address,undefined";; esac
# shellcheck disable=SC2086
gcc $SAN -O2 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -I"$ROOT/include" -I"$ROOT/src" -pthread \
    "$ROOT/tests/model/wip_q35_driver.c" "$ROOT/$BUILD/libqwisp.a" -pthread -lpcre2-8 -lcjson -lmicrohttpd -lm \
    -o "$DRV" || { echo "FAIL: qwen35 driver does not build"; exit 0; }
$T "$BIN" gen-model --preset tiny --tokenizer bytes --type f32 --seed 1 -o "$TMP/tok.gguf" 2>/dev/null ||
    { echo "FAIL: qwen35 tokenizer source"; exit 0; }

PROMPTS=(
    "The history of the city goes back more than a thousand years, and its people still tell the old stories."
    $'def merge_sort(xs):\n    if len(xs) <= 1:\n        return xs\n    mid = len(xs) // 2\n'
    "Once upon a time there was a fisherman who lived by the sea with his wife."
)
TF_TEXT="Once upon a time, in a small village by the sea, there lived an old fisherman and his wife. Every morning he went out in his little boat before the sun came up, and every evening he came back with whatever the sea had given him. Some days it was a basket full of silver fish; other days it was nothing at all. One winter the storms lasted for weeks, and the fisherman could not go out."

# name | driver gen args: type seed n_layer n_embd attn_interval Hk Hv tied
MODELS=(
    "f32-4L-i4-hk2hv4-untied|f32 11 4 64 4 2 4 0"
    "f32-6L-i2-hk2hv2-tied|f32 12 6 64 2 2 2 1"
    "f32-5L-i3-hk1hv4-untied|f32 13 5 96 3 1 4 0"
)
ids_of() { $T node "$REF" --model "$1" --prompt "$2" --tokenize-only 2>/dev/null |
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s);
        const n=+process.argv[1]; console.log(j.prompt_ids.slice(0,n>0?n:undefined).join(","))})' "${3:-0}"; }

for spec in "${MODELS[@]}"; do
    IFS='|' read -r name args <<<"$spec"
    m="$TMP/$name.gguf"
    # shellcheck disable=SC2086
    "$DRV" gen "$m" "$TMP/tok.gguf" $args || { echo "FAIL: $name gen"; continue; }
    for i in "${!PROMPTS[@]}"; do
        ids=$(ids_of "$m" "${PROMPTS[$i]}")
        q="$TMP/$name.$i.q.json"; l="$TMP/$name.$i.l.json"
        $T "$DRV" run "$m" --tokens "$ids" -n 32 >"$q" 2>"$q.err" || echo "INFO: $name/$i driver: $(tail -1 "$q.err")"
        $T node "$REF" --model "$m" --tokens "$ids" --generate 32 --threads 2 >"$l" 2>"$l.err" ||
            echo "INFO: $name/$i llama_ref: $(tail -1 "$l.err")"
        node "$CMP" gen "$q" "$l" "qwen35 $name/p$i"
    done
    ids=$(ids_of "$m" "$TF_TEXT" 128)
    q="$TMP/$name.tf.q.json"; l="$TMP/$name.tf.l.json"
    $T "$DRV" tf "$m" --tokens "$ids" --top 10 >"$q" 2>"$q.err" || echo "INFO: $name tf driver: $(tail -1 "$q.err")"
    $T node "$REF" --model "$m" --tokens "$ids" --teacher-force --top 10 --threads 2 >"$l" 2>"$l.err" ||
        echo "INFO: $name llama_ref tf: $(tail -1 "$l.err")"
    node "$CMP" tf "$q" "$l" "qwen35 $name" 1.0
done
exit 0
