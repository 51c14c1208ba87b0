// vocab_vectors.mjs — qwisp against llama.cpp's own tokenizer test vectors
// (models/ggml-vocab-*.gguf.inp / .out in the llama.cpp tree, the files its
// test-tokenizer-0 reads).  Called by t_tokenizer_qwen35.sh:
//
//   node vocab_vectors.mjs PEERS_DIR QWISP_BIN VOCAB.gguf TMP_DIR
//
// .inp holds the texts separated by "\n__ggml_vocab_test__\n"; .out one line
// of space-separated ids per text, encoded without BOS and without
// special-token parsing (test-tokenizer-0's add_special = parse_special =
// false).  Checks, each a PASS:/FAIL: line:
//   1. the .out ids equal live llama.cpp (node-llama-cpp, vocab-only load),
//      so the stored vectors are the oracle's current behaviour;
//   2. qwisp's ids (`qwisp tokenize --no-special -f`, one process per text)
//      equal the .out ids;
//   3. qwisp decodes its ids back to the exact text.
// Texts are handled as bytes, never re-encoded.
import { readFileSync, writeFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [peers, bin, vocab, tmp] = process.argv.slice(2);
const raw = readFileSync(vocab + ".inp");
const outLines = readFileSync(vocab + ".out", "utf8").split("\n");
if (outLines.length && outLines[outLines.length - 1] === "") outLines.pop();

// test-tokenizer-0's split: pieces between separators, the tail after the last
// separator only if non-empty.
const sep = Buffer.from("\n__ggml_vocab_test__\n");
const texts = [];
for (let pos = 0; pos < raw.length; ) {
    const next = raw.indexOf(sep, pos);
    if (next < 0) { texts.push(raw.subarray(pos)); break; }
    texts.push(raw.subarray(pos, next));
    pos = next + sep.length;
}
const name = vocab.replace(/.*\//, "");
if (texts.length === 0 || texts.length !== outLines.length) {
    console.log(`FAIL: ${name} vectors: ${texts.length} texts in .inp, ${outLines.length} lines in .out`);
    process.exit(0);
}
const want = outLines.map((l) => l.trim().split(/ +/).filter((x) => x !== "").map(Number));
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const show = (buf) => JSON.stringify(buf.toString("utf8").slice(0, 60));

// 1. live llama.cpp vs the stored vectors
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(join(peers, "node-llama-cpp/dist/index.js")).href);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: vocab, vocabOnly: true });
let bad = texts.map((t, i) => i).filter((i) => !same(Array.from(model.tokenize(texts[i].toString("utf8"), false)), want[i]));
if (bad.length === 0) console.log(`PASS: ${name} .out vectors equal live llama.cpp (${texts.length} texts)`);
else console.log(`FAIL: ${name} .out vectors differ from live llama.cpp on ${bad.length} texts, first ${show(texts[bad[0]])}`);
await model.dispose();
await llama.dispose();

// 2. qwisp ids
const got = [];
bad = [];
for (let i = 0; i < texts.length; i++) {
    const f = join(tmp, `vec${i}.txt`);
    writeFileSync(f, texts[i]);
    const r = spawnSync(bin, ["tokenize", "-m", vocab, "--no-special", "-f", f], { encoding: "utf8" });
    let ids = null;
    try { ids = JSON.parse(r.stdout); } catch { ids = null; }
    got.push(ids || []);
    if (r.status !== 0 || !ids || !same(ids, want[i])) bad.push({ i, ids, err: r.stderr });
}
if (bad.length === 0) console.log(`PASS: ${name} qwisp ids equal llama.cpp's vectors (${texts.length} texts)`);
else {
    console.log(`FAIL: ${name} qwisp ids differ on ${bad.length} of ${texts.length} texts`);
    for (const b of bad.slice(0, 4)) {
        console.log(`INFO: text ${b.i} ${show(texts[b.i])}`);
        console.log(`INFO:   llama.cpp ${JSON.stringify(want[b.i]).slice(0, 200)}`);
        console.log(`INFO:   qwisp     ${JSON.stringify(b.ids).slice(0, 200)} ${(b.err || "").slice(0, 200)}`);
    }
}

// 3. decode round trip of qwisp's ids (one process for all)
const idsFile = join(tmp, "vec_ids.jsonl");
writeFileSync(idsFile, got.map((g) => JSON.stringify(g)).join("\n") + "\n");
const d = spawnSync(bin, ["tokenize", "-m", vocab, "--decode-lines", idsFile], { encoding: "utf8" });
const dec = d.stdout.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
bad = texts.map((t, i) => i).filter((i) => dec[i] !== texts[i].toString("utf8"));
if (d.status === 0 && dec.length === texts.length && bad.length === 0)
    console.log(`PASS: ${name} qwisp decode(encode(text)) == text (${texts.length} texts)`);
else console.log(`FAIL: ${name} decode round trip: exit ${d.status}, ${bad.length} texts differ${bad.length ? ", first " + show(texts[bad[0]]) : ""}`);
