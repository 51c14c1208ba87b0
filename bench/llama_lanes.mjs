// llama_lanes.mjs — llama.cpp's side of bench/lanes.sh: B sequences of one
// context decoding at once (node-llama-cpp batches concurrent sequences into
// one llama_decode per step, llama-server's batching), on the same model.
//
//   node bench/llama_lanes.mjs --model F.gguf --lanes B --decode N [--threads 2]
//
// Each sequence gets a different short prompt and decodes N greedy tokens;
// prints {"lanes", "gen_tokens", "wall_s", "agg_tok_s"} (wall = all sequences,
// prefill of the short prompts included, as on the qwisp side).
import { dirname, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const { getLlama, LlamaLogLevel } = await import(
    pathToFileURL(resolve(here, "../tests/peers/node_modules/node-llama-cpp/dist/index.js")).href);

const a = { decode: 64, threads: 2, lanes: 1 };
for (let i = 2; i < process.argv.length; i++) {
    const f = process.argv[i], v = process.argv[++i];
    if (f === "--model") a.model = v;
    else if (f === "--lanes") a.lanes = parseInt(v, 10);
    else if (f === "--decode") a.decode = parseInt(v, 10);
    else if (f === "--threads") a.threads = parseInt(v, 10);
    else throw new Error(`unknown flag ${f}`);
}
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: a.threads });
const model = await llama.loadModel({ modelPath: a.model });
const ctx = await model.createContext({ contextSize: 512 * a.lanes, sequences: a.lanes, threads: a.threads,
                                        batchSize: 512, flashAttention: false });
const prompts = Array.from({ length: a.lanes }, (_, i) => `Request number ${i + 1}: tell me about the river.`);
async function one(i) {
    const seq = ctx.getSequence();
    let n = 0;
    for await (const _ of seq.evaluate(model.tokenize(prompts[i]), { temperature: 0 })) {
        if (++n >= a.decode) break;
    }
    return n;
}
const t0 = performance.now();
const counts = await Promise.all(prompts.map((_, i) => one(i)));
const wall = (performance.now() - t0) / 1000;
const gen = counts.reduce((x, y) => x + y, 0);
console.log(JSON.stringify({ lanes: a.lanes, gen_tokens: gen, wall_s: wall, agg_tok_s: gen / wall }));
await ctx.dispose();
await model.dispose();
