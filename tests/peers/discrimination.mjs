// discrimination.mjs — is a generated model worth testing against?  Measured
// with llama.cpp itself, so it says nothing about qwisp.
//
//   node tests/peers/discrimination.mjs --model F.gguf [--generate 32] [--threads 2]
//
// Greedy-decodes the same fixed prompts every time and prints one JSON object:
//   per_prompt: [{prompt, distinct, min_margin, median_margin}]
//   distinct_min        fewest distinct tokens in one continuation
//   all_different       every prompt gave a different continuation
//   median_margin       median top-1 minus top-2 logit over all steps
//   frac_margin_lt_0_1  share of steps whose margin is under 0.1 logits
//   median_rel_margin   median of margin / |top-1 logit|: engines' rounding noise
//                       scales with the logits, so this is the safety ratio
// gen_model.c's scales were tuned against these numbers; t_parity.sh checks them.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "今天天气很好，我们去公园散步吧。",
    "Emoji test 🎉🚀 and numbers 12345 in one line",
    "Once upon a time, in a land far away,",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
];

function median(xs) {
    const s = [...xs].sort((a, b) => a - b);
    return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : NaN;
}

async function main() {
    const a = { generate: 32, threads: 2 };
    for (let i = 2; i < process.argv.length; i++) {
        const f = process.argv[i], v = process.argv[++i];
        if (f === "--model") a.model = v;
        else if (f === "--generate") a.generate = parseInt(v, 10);
        else if (f === "--threads") a.threads = parseInt(v, 10);
        else throw new Error(`unknown flag ${f}`);
    }
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: a.threads });
    const model = await llama.loadModel({ modelPath: a.model, gpuLayers: 0 });
    const context = await model.createContext({ contextSize: 512, batchSize: 512, threads: a.threads, flashAttention: false });
    const seq = context.getSequence();
    const gen = { logits: { filter: { tokens: [], includeTop: 2 } } };
    const per = [], all = [], streams = [], rel = [];
    for (const p of PROMPTS) {
        await seq.clearHistory();
        const ids = model.tokenize(p, true);
        let r = await seq.controlledEvaluate(ids.map((id, i) => (i === ids.length - 1 ? [id, { generateNext: gen }] : id)));
        let next = r[ids.length - 1].next;
        const toks = [], margins = [];
        for (let s = 0; s < a.generate; s++) {
            const top = [...next.logits.entries()];
            toks.push(top[0][0]);
            margins.push(top[0][1] - top[1][1]);
            rel.push((top[0][1] - top[1][1]) / Math.abs(top[0][1]));
            if (s + 1 < a.generate) next = (await seq.controlledEvaluate([[top[0][0], { generateNext: gen }]]))[0].next;
        }
        streams.push(toks.join(","));
        all.push(...margins);
        per.push({
            prompt: p.slice(0, 24),
            distinct: new Set(toks).size,
            min_margin: Math.round(Math.min(...margins) * 1e3) / 1e3,
            median_margin: Math.round(median(margins) * 1e3) / 1e3,
        });
    }
    const out = {
        per_prompt: per,
        distinct_min: Math.min(...per.map((x) => x.distinct)),
        all_different: new Set(streams).size === streams.length,
        median_margin: Math.round(median(all) * 1e3) / 1e3,
        median_rel_margin: Math.round(median(rel) * 1e4) / 1e4,
        frac_rel_margin_lt_0_002: Math.round((rel.filter((m) => m < 0.002).length / rel.length) * 1e3) / 1e3,
        frac_margin_lt_0_1: Math.round((all.filter((m) => m < 0.1).length / all.length) * 1e3) / 1e3,
    };
    process.stdout.write(JSON.stringify(out) + "\n");
    await context.dispose();
    await model.dispose();
    await llama.dispose();
}

main().catch((e) => {
    process.stderr.write(`discrimination: ${e?.message ?? e}\n`);
    process.exit(1);
});
