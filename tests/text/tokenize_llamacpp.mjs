// tokenize_llamacpp.mjs — token ids from llama.cpp (the prebuilt library in
// node-llama-cpp) for a GGUF, to compare with `qwisp tokenize -m`.  Called by
// t_tokenizer_corpus.sh:
//
//   node tokenize_llamacpp.mjs PEERS_DIR MODEL.gguf CORPUS OUT_LINES OUT_NOSPECIAL
//
// Loads the model vocab-only, encodes each '\n'-separated line of CORPUS with
// special tokens parsed (OUT_LINES) and without (OUT_NOSPECIAL), no BOS
// (llama.cpp adds none for Qwen3 anyway), one JSON array per line.  Prints
// "load_ms N" on stdout: the vocab-only load, for start-up comparisons.
import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [peers, modelPath, corpusPath, outLines, outNoSpecial] = process.argv.slice(2);
const { getLlama, LlamaLogLevel } = await import(
    pathToFileURL(join(peers, "node-llama-cpp/dist/index.js")).href
);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const t0 = performance.now();
const model = await llama.loadModel({ modelPath, vocabOnly: true });
console.log(`load_ms ${(performance.now() - t0).toFixed(1)}`);
const text = readFileSync(corpusPath, "utf8");
let lines = text.split("\n");
if (lines.length && lines[lines.length - 1] === "") lines.pop();
const enc = (s, special) => Array.from(model.tokenize(s, special));
writeFileSync(outLines, lines.map((l) => JSON.stringify(enc(l, true))).join("\n") + "\n");
writeFileSync(outNoSpecial, lines.map((l) => JSON.stringify(enc(l, false))).join("\n") + "\n");
await model.dispose();
await llama.dispose();
