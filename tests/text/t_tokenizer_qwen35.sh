#!/bin/bash
# t_tokenizer_qwen35.sh — the Qwen3.5/3.6 tokenizer (tokenizer.ggml.pre =
# "qwen35") against llama.cpp, on the real vocabulary file llama.cpp keeps for
# its own tests (models/ggml-vocab-qwen35.gguf + .inp/.out vectors).
#
# The file is not copied into the repo: it comes from the llama.cpp source
# that node-llama-cpp ships as llama/gitRelease.bundle, cloned here into the
# test's tmp dir with only those three files checked out (~2 s).
# Checks:
#   - the vocab loads and `tokenize -p "Héllo wörld"` gives ids (it was refused
#     with 'tokenizer.ggml.pre = "qwen35" is not supported');
#   - llama.cpp's .inp/.out vectors: stored ids == live llama.cpp == qwisp,
#     and decode round-trips (vocab_vectors.mjs);
#   - tests/text/corpus.txt + corpus_marks.txt (decomposed combining marks:
#     the qwen35 regex's \p{M}; kept apart from corpus.txt because the JS
#     reference of t_tokenizer_corpus.sh applies NFC and llama.cpp does not),
#     ids per line with and without special-token parsing == llama.cpp
#     (node-llama-cpp, vocab-only), and decode(encode(line)) == line;
#   - 3000 lines of random code points (random_lines.mjs, fixed seed) ==
#     llama.cpp, with and without special-token parsing;
#   - start-up: vocab load time of qwisp and llama.cpp on this file and on a
#     copy widened to the real Qwen3.5 size, 248,320 tokens (widen_vocab.mjs;
#     ggml-vocab-qwen35.gguf itself holds Qwen2's 151,936).  Times are INFO
#     only (speed is measured, never asserted in a test); the check is that
#     the 248k vocabulary loads and tokenizes.
# Peers missing is a FAIL, not a SKIP.  Env: QWISP_BIN, QWISP_TEST_TMP.
set -u
BIN=${QWISP_BIN:-$PWD/build/qwisp}
TMP=${QWISP_TEST_TMP:-$(mktemp -d)}/tokqwen35
rm -rf "$TMP"; mkdir -p "$TMP"
PEERS=$PWD/tests/peers/node_modules
BUNDLE=$PEERS/node-llama-cpp/llama/gitRelease.bundle

for need in "$BUNDLE" "$PEERS/node-llama-cpp/dist/index.js"; do
    if [ ! -f "$need" ]; then
        echo "FAIL: qwen35 tokenizer: $need missing (run scripts/setup.sh)"
        exit 1
    fi
done
for cmd in node git; do
    command -v $cmd >/dev/null || { echo "FAIL: qwen35 tokenizer: $cmd not found"; exit 1; }
done
[ -x "$BIN" ] || { echo "FAIL: qwen35 tokenizer: $BIN not built"; exit 1; }

V=models/ggml-vocab-qwen35.gguf
if ! { git clone -q --no-checkout "$BUNDLE" "$TMP/llama" &&
       git -C "$TMP/llama" checkout -q HEAD -- "$V" "$V.inp" "$V.out"; } >"$TMP/clone.log" 2>&1; then
    echo "FAIL: qwen35 tokenizer: cannot take $V from $BUNDLE: $(tail -c 300 "$TMP/clone.log")"
    exit 1
fi
VOCAB=$TMP/llama/$V

# 1. the issue's reproduction
out=$("$BIN" tokenize -m "$VOCAB" -p "Héllo wörld" 2>&1); rc=$?
if [ $rc = 0 ] && [[ $out =~ ^\[[0-9,]+\]$ ]]; then
    echo "PASS: qwen35 vocab loads and tokenizes \"Héllo wörld\" -> $out"
else
    echo "FAIL: qwen35 vocab: tokenize exit $rc: $(echo "$out" | head -c 300)"
    exit 0
fi

# 2. llama.cpp's own vectors
out=$(node tests/text/vocab_vectors.mjs "$PEERS" "$BIN" "$VOCAB" "$TMP" 2>&1); rc=$?
echo "$out" | grep -E '^(PASS|FAIL|INFO):'
[ $rc = 0 ] || echo "FAIL: qwen35 vectors: vocab_vectors.mjs exited $rc: $(echo "$out" | tail -3 | cut -c1-300)"

# 3. the project's corpus, with and without special-token parsing
cat tests/text/corpus.txt tests/text/corpus_marks.txt >"$TMP/corpus.txt"
if ! node tests/text/tokenize_llamacpp.mjs "$PEERS" "$VOCAB" "$TMP/corpus.txt" "$TMP/lc.jsonl" "$TMP/lc_ns.jsonl" \
        >"$TMP/lc.log" 2>&1; then
    echo "FAIL: qwen35 corpus: node-llama-cpp failed: $(tail -c 300 "$TMP/lc.log")"
    exit 0
fi
"$BIN" tokenize -m "$VOCAB" --lines "$TMP/corpus.txt" >"$TMP/q.jsonl" 2>"$TMP/err"
"$BIN" tokenize -m "$VOCAB" --no-special --lines "$TMP/corpus.txt" >"$TMP/q_ns.jsonl" 2>>"$TMP/err"
nl=$(wc -l <"$TMP/corpus.txt")
for mode in "" _ns; do
    name="qwen35 corpus ids agree with llama.cpp${mode:+ (--no-special)}"
    ref=$TMP/lc$mode.jsonl ours=$TMP/q$mode.jsonl
    if [ "$(wc -l <"$ref")" = "$nl" ] && cmp -s "$ref" "$ours"; then
        echo "PASS: $name ($nl lines)"
    else
        echo "FAIL: $name: $(diff "$ref" "$ours" | grep -c '^<') of $nl lines differ $(head -c 200 "$TMP/err")"
        diff "$ref" "$ours" | head -4 | cut -c1-200 | sed 's/^/INFO: /'
    fi
done
"$BIN" tokenize -m "$VOCAB" --decode-lines "$TMP/q.jsonl" >"$TMP/dec.jsonl" 2>>"$TMP/err"
node -e '
const fs = require("fs");
const lines = fs.readFileSync(process.argv[1], "utf8").split("\n"); lines.pop();
const dec = fs.readFileSync(process.argv[2], "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
const bad = lines.filter((l, i) => dec[i] !== l);
console.log(dec.length === lines.length && bad.length === 0
    ? `PASS: qwen35 corpus decode(encode(line)) == line (${lines.length} lines)`
    : `FAIL: qwen35 corpus decode round trip: ${bad.length} of ${lines.length} lines differ, first ${JSON.stringify((bad[0] || "").slice(0, 60))}`);
' "$TMP/corpus.txt" "$TMP/dec.jsonl"

# 4. random code points (seeded), with and without special-token parsing
node tests/text/random_lines.mjs "$TMP/random.txt" 3000 20261203
if node tests/text/tokenize_llamacpp.mjs "$PEERS" "$VOCAB" "$TMP/random.txt" "$TMP/rl.jsonl" "$TMP/rl_ns.jsonl" \
        >"$TMP/rl.log" 2>&1; then
    "$BIN" tokenize -m "$VOCAB" --lines "$TMP/random.txt" >"$TMP/rq.jsonl" 2>"$TMP/err"
    "$BIN" tokenize -m "$VOCAB" --no-special --lines "$TMP/random.txt" >"$TMP/rq_ns.jsonl" 2>>"$TMP/err"
    d1=$(diff "$TMP/rl.jsonl" "$TMP/rq.jsonl" | grep -c '^<'); d2=$(diff "$TMP/rl_ns.jsonl" "$TMP/rq_ns.jsonl" | grep -c '^<')
    if [ "$(wc -l <"$TMP/rq.jsonl")" = 3000 ] && [ "$d1" = 0 ] && [ "$d2" = 0 ]; then
        echo "PASS: qwen35 random code points: 3000 lines agree with llama.cpp"
    else
        echo "FAIL: qwen35 random code points: $d1 / $d2 (--no-special) of 3000 lines differ $(head -c 200 "$TMP/err")"
    fi
else
    echo "FAIL: qwen35 random code points: node-llama-cpp failed: $(tail -c 300 "$TMP/rl.log")"
fi

# 5. start-up: vocab load, qwisp (best of 3, `tokenize -v`) vs llama.cpp
qload() {
    local best="" ms
    for _ in 1 2 3; do
        ms=$("$BIN" tokenize -m "$1" -p x -v 2>&1 >/dev/null | sed -n 's/.*load \([0-9.]*\) ms.*/\1/p')
        [ -n "$ms" ] || return 1
        if [ -z "$best" ] || awk "BEGIN{exit !($ms < $best)}"; then best=$ms; fi
    done
    echo "$best"
}
lc_ms=$(sed -n 's/^load_ms //p' "$TMP/lc.log")
q_ms=$(qload "$VOCAB")
echo "INFO: vocab load, 151,936 tokens: qwisp ${q_ms:-?} ms (best of 3), llama.cpp ${lc_ms:-?} ms (node-llama-cpp loadModel vocabOnly, its JS GGUF read included)"
printf 'x\n' >"$TMP/one.txt"
if node tests/text/widen_vocab.mjs "$VOCAB" "$TMP/v248k.gguf" 248320 >"$TMP/widen.log" 2>&1 &&
   node tests/text/tokenize_llamacpp.mjs "$PEERS" "$TMP/v248k.gguf" "$TMP/one.txt" "$TMP/w1" "$TMP/w2" >"$TMP/lcw.log" 2>&1; then
    lcw_ms=$(sed -n 's/^load_ms //p' "$TMP/lcw.log")
    qw_ms=$(qload "$TMP/v248k.gguf")
    echo "INFO: vocab load, 248,320 tokens: qwisp ${qw_ms:-?} ms (best of 3), llama.cpp ${lcw_ms:-?} ms"
    if [ -n "$qw_ms" ]; then echo "PASS: qwen35 248k vocab loads and tokenizes"
    else echo "FAIL: qwen35 248k vocab: qwisp tokenize -v gave no load time: $("$BIN" tokenize -m "$TMP/v248k.gguf" -p x 2>&1 | tail -1)"; fi
else
    echo "FAIL: qwen35 248k vocab: $(tail -c 300 "$TMP/widen.log" "$TMP/lcw.log" 2>/dev/null)"
fi
rm -rf "$TMP"
