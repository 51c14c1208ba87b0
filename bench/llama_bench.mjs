// llama_bench.mjs — llama.cpp's side of bench/vs_llamacpp.sh, through the same
// npm build (node-llama-cpp) the parity tests use.
//
//   node bench/llama_bench.mjs --model F.gguf --tokens-file IDS.json [--decode 128] [--threads 2]
//
// IDS.json holds {"prompt_ids":[...]} (qwisp's --prompt-tokens prompt, so both
// engines prefill the very same tokens).  Times, after loading (not timed):
//   prefill: the whole prompt as one batch (batchSize >= prompt length)
//   decode:  `decode` greedy steps, one token per evaluation (native sampler)
// and prints {"prefill_tok_s", "decode_tok_s", "prompt_tokens", "gen_tokens"}.
// Context: F16 KV cache, no flash attention — the settings of the parity tests.
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const { getLlama, LlamaLogLevel } = await import(
    pathToFileURL(resolve(here, "../tests/peers/node_modules/node-llama-cpp/dist/index.js")).href);

const a = { decode: 128, threads: 2 };
for (let i = 2; i < process.argv.length; i++) {
    const f = process.argv[i], v = process.argv[++i];
    if (f === "--model") a.model = v;
    else if (f === "--tokens-file") a.tokensFile = v;
    else if (f === "--decode") a.decode = parseInt(v, 10);
    else if (f === "--threads") a.threads = parseInt(v, 10);
    else throw new Error(`unknown flag ${f}`);
}
const ids = JSON.parse(readFileSync(a.tokensFile, "utf8")).prompt_ids;
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: a.threads });
const model = await llama.loadModel({ modelPath: a.model, gpuLayers: 0 });
const context = await model.createContext({
    contextSize: ids.length + a.decode + 64,
    batchSize: Math.max(512, ids.length),
    threads: a.threads,
    flashAttention: false,
});
const seq = context.getSequence();
const top1 = { logits: { filter: { tokens: [], includeTop: 1 } } };

let t0 = performance.now();
let r = await seq.controlledEvaluate(ids.map((id, i) => (i === ids.length - 1 ? [id, { generateNext: top1 }] : id)));
const prefillS = (performance.now() - t0) / 1000;
let tok = r[ids.length - 1].next.logits.keys().next().value;

// Decode through the generator: sampling (temperature 0 = greedy) stays in
// native code; asking for logits per step would make node sort the whole
// vocabulary every token and time that instead of llama.cpp.
t0 = performance.now();
let n = 0;
for await (const t of seq.evaluate([tok], { temperature: 0 })) {
    tok = t;
    if (++n >= a.decode) break;
}
const decodeS = (performance.now() - t0) / 1000;
process.stdout.write(JSON.stringify({
    prompt_tokens: ids.length, gen_tokens: a.decode,
    prefill_tok_s: ids.length / prefillS, decode_tok_s: a.decode / decodeS,
}) + "\n");
await context.dispose();
await model.dispose();
await llama.dispose();
