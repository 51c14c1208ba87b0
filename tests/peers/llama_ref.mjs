// llama_ref.mjs — llama.cpp as the reference engine for qwisp's parity tests.
//
//   node tests/peers/llama_ref.mjs --model F.gguf (--prompt TEXT | --tokens 1,2,3)
//        [--generate N] [--teacher-force] [--threads 2] [--top K] [--ctx N] [--tokenize-only] [--batch N]
//   node tests/peers/llama_ref.mjs --variant-only      (only {"cpu_variant": ...}, no model)
//
// Prints one JSON object:
//   prompt_ids    llama.cpp's tokenization of --prompt (special tokens parsed,
//                 no BOS added beyond what the model asks for), or --tokens as given
//   tokens        greedy continuation of N tokens (argmax of the raw logits,
//                 no sampler, no penalties, never stops early: EOG is ignored)
//   margins       per generated token: top-1 minus top-2 logit (how safe the argmax is)
//   text          detokenized continuation
//   positions     with --teacher-force: per input position, {"top": [[id, logprob], ...]}
//                 for the NEXT token; logprob = logit - logsumexp(logits)
//   cpu_variant   which of the prebuilt's CPU libraries ggml loaded
//                 (libggml-cpu-<variant>.so: zen4, sapphirerapids, haswell, ...)
//                 — it picks one at run time, and their rounding differs
//   batch         the ubatch size used (one-token path when 1)
//
// Everything goes through sequence.controlledEvaluate, which hands back raw
// logits per requested position, so both modes share one code path.  Note the
// logprobs carry a small per-position shift (up to ~2e-3): the logsumexp comes
// from node-llama-cpp's totalLogitWeight, which is not exact, so compare logit
// differences (each entry minus the top one), which are exact.  Context: F16 KV cache (the default), no flash
// attention, batch >= the input, so a whole prompt is one ubatch.
import { readFileSync } from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

// The CPU variant ggml chose, read from this process's own mappings: neither
// node-llama-cpp nor ggml's public API says which libggml-cpu-*.so it loaded.
function cpuVariant() {
    try {
        const names = [...readFileSync("/proc/self/maps", "utf8").matchAll(/libggml-cpu-([\w-]+)\.so/g)].map((m) => m[1]);
        return [...new Set(names)].join("+") || "unknown";
    } catch {
        return "unknown";
    }
}

function parseArgs(argv) {
    const a = { generate: 0, teacherForce: false, threads: 2, top: 10, ctx: 0 };
    for (let i = 2; i < argv.length; i++) {
        const f = argv[i];
        const v = () => {
            if (i + 1 >= argv.length) throw new Error(`${f} needs a value`);
            return argv[++i];
        };
        if (f === "--model" || f === "-m") a.model = v();
        else if (f === "--prompt" || f === "-p") a.prompt = v();
        else if (f === "--tokens") a.tokens = v().split(",").filter((s) => s.length).map((s) => parseInt(s, 10));
        else if (f === "--generate" || f === "-n") a.generate = parseInt(v(), 10);
        else if (f === "--teacher-force") a.teacherForce = true;
        else if (f === "--threads") a.threads = parseInt(v(), 10);
        else if (f === "--top") a.top = parseInt(v(), 10);
        else if (f === "--ctx") a.ctx = parseInt(v(), 10);
        else if (f === "--tokenize-only") a.tokenizeOnly = true;
        else if (f === "--batch") a.batch = parseInt(v(), 10);
        else if (f === "--variant-only") a.variantOnly = true;
        else throw new Error(`unknown flag ${f}`);
    }
    if (a.variantOnly) return a;
    if (!a.model) throw new Error("--model is required");
    if (a.prompt === undefined && !a.tokens) throw new Error("--prompt or --tokens is required");
    return a;
}

// Top-k [id, logprob] from a controlledEvaluate output item.
function topEntries(next, k) {
    const logits = [...next.logits.entries()]; // sorted highest first
    const max = logits[0][1];
    const lse = max + Math.log(next.totalLogitWeight);
    return logits.slice(0, k).map(([id, l]) => [id, l - lse]);
}

// One ubatch for the whole input unless --batch N asks for smaller ones (a
// self-consistency probe: llama.cpp batched vs token-by-token).
function a_batch(args, ids) {
    return args.batch > 0 ? args.batch : Math.max(ids.length, 512);
}

async function main() {
    const args = parseArgs(process.argv);
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: args.threads });
    if (args.variantOnly) {
        process.stdout.write(JSON.stringify({ cpu_variant: cpuVariant() }) + "\n");
        await llama.dispose();
        return;
    }
    const model = await llama.loadModel({ modelPath: args.model, gpuLayers: 0 });
    const ids = args.tokens ?? model.tokenize(args.prompt, true);
    if (args.tokenizeOnly) {
        process.stdout.write(JSON.stringify({ prompt_ids: ids, cpu_variant: cpuVariant() }) + "\n");
        await model.dispose();
        await llama.dispose();
        return;
    }
    if (ids.length === 0) throw new Error("empty prompt");
    const need = ids.length + args.generate + 8;
    const contextSize = Math.max(args.ctx || 0, 256, need);
    const context = await model.createContext({
        contextSize,
        batchSize: a_batch(args, ids),
        threads: args.threads,
        flashAttention: false,
        sequences: 1,
    });
    const seq = context.getSequence();
    const want = Math.max(args.top, 2);
    const gen = { logits: { filter: { tokens: [], includeTop: want } }, totalLogitWeight: true };
    const out = { prompt_ids: ids, cpu_variant: cpuVariant(), batch: a_batch(args, ids) };

    // Prompt: logits at every position with --teacher-force, else only the last.
    const input = ids.map((id, i) =>
        args.teacherForce || i === ids.length - 1 ? [id, { generateNext: gen }] : id);
    const res = await seq.controlledEvaluate(input);
    if (args.teacherForce) {
        out.positions = ids.map((_, i) => {
            if (!res[i]?.next?.logits) throw new Error(`no logits at position ${i}`);
            return { top: topEntries(res[i].next, args.top) };
        });
    }
    const tokens = [], margins = [];
    let next = res[ids.length - 1].next;
    for (let step = 0; step < args.generate; step++) {
        const top = [...next.logits.entries()];
        const tok = top[0][0];
        tokens.push(tok);
        margins.push(top.length > 1 ? top[0][1] - top[1][1] : Infinity);
        if (step + 1 === args.generate) break;
        const r = await seq.controlledEvaluate([[tok, { generateNext: gen }]]);
        next = r[0].next;
    }
    if (args.generate > 0) {
        out.tokens = tokens;
        out.margins = margins.map((m) => Math.round(m * 1e4) / 1e4);
        out.text = model.detokenize(tokens, true);
    }
    process.stdout.write(JSON.stringify(out) + "\n");
    await context.dispose();
    await model.dispose();
    await llama.dispose();
}

main().catch((e) => {
    process.stderr.write(`llama_ref: ${e?.message ?? e}\n`);
    process.exit(1);
});
