// parity_compare.mjs — compares a qwisp JSON result with a llama.cpp one
// (tests/peers/llama_ref.mjs) and prints PASS:/FAIL:/INFO: lines for t_parity.sh.
//
//   node parity_compare.mjs gen QWISP.json LLAMA.json LABEL [--tokens-info]
//       PASS/FAIL "LABEL prompt ids", PASS/FAIL "LABEL greedy 32" (with
//       --tokens-info the token check is reported as INFO: agreement only —
//       used for q4_0, where llama.cpp's and qwisp's kernels may round apart).
//   node parity_compare.mjs tf QWISP.json LLAMA.json LABEL MIN_AGREE [NOISE.json]
//       PASS/FAIL "LABEL teacher-forced top-1" when the share of positions whose
//       top-1 ids agree is >= MIN_AGREE (1 = every position), plus an INFO line
//       with the max |logprob difference| over ids present in both top-K lists.
//       With NOISE.json (from `noise`), the criterion is llama.cpp's own:
//       every disagreement must sit at a position whose llama.cpp top-1/top-2
//       gap is within twice llama.cpp's measured noise (a flip where the gap
//       is wide is a FAIL however rare), and there may be no more of them
//       than MIN_AGREE allows or twice as many as llama.cpp has against itself.
//   node parity_compare.mjs noise LABEL NOISE_OUT.json LLAMA.json ALT.json...
//       llama.cpp against itself: the same teacher-forced run on other CPU
//       variants of the prebuilt and on its one-token path (llama_variants.sh).
//       Prints one INFO line per alternate (top-1 agreement, max |logit diff|)
//       and writes {delta, tol, self_flips, n, primary, alts} to NOISE_OUT.json:
//       delta = the largest difference seen, tol = 2 * delta (two engines each
//       within delta of the truth can disagree where the gap is under 2 delta).
//   gen ... --noise NOISE.json: a strict greedy check that diverges at a step
//       where llama.cpp's own margin is within tol passes with a note (the
//       streams then follow different tokens, so nothing after it compares).
//
// A missing or unparsable file is a FAIL naming the file, never a crash: the
// harness must report, not stop.
import { readFileSync, writeFileSync } from "node:fs";

function load(path, label, what) {
    try {
        const s = readFileSync(path, "utf8").trim();
        const line = s.split("\n").filter((l) => l.startsWith("{")).pop();
        return JSON.parse(line);
    } catch (e) {
        console.log(`FAIL: ${label} ${what}: no JSON from ${path} (${e.message.split("\n")[0]})`);
        return null;
    }
}

function firstDiff(a, b) {
    const n = Math.max(a.length, b.length);
    for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
    return -1;
}

function show(a, i) {
    return JSON.stringify(a.slice(Math.max(0, i - 2), i + 4));
}

function loadNoise(path, label) {
    if (!path) return null;
    try {
        return JSON.parse(readFileSync(path, "utf8"));
    } catch (e) {
        console.log(`FAIL: ${label}: no llama.cpp noise measurement in ${path} (${e.message.split("\n")[0]})`);
        return null;
    }
}

function gen(qPath, lPath, label, tokensInfo, noisePath) {
    const q = load(qPath, label, "qwisp run"), l = load(lPath, label, "llama.cpp");
    if (!q || !l) {
        if (q || l) console.log(`FAIL: ${label} greedy 32: missing output`);
        return;
    }
    const di = firstDiff(q.prompt_ids ?? [], l.prompt_ids ?? []);
    if (di < 0 && (q.prompt_ids ?? []).length > 0) console.log(`PASS: ${label} prompt ids (${q.prompt_ids.length} tokens)`);
    else console.log(`FAIL: ${label} prompt ids differ at ${di}: qwisp ${show(q.prompt_ids ?? [], di)} llama.cpp ${show(l.prompt_ids ?? [], di)}`);
    const qt = q.tokens ?? [], lt = l.tokens ?? [];
    const dt = firstDiff(qt, lt);
    const noise = noisePath ? loadNoise(noisePath, label) : null;
    let agree = 0;
    for (let i = 0; i < Math.min(qt.length, lt.length); i++) if (qt[i] === lt[i]) agree++;
    if (tokensInfo) {
        console.log(`INFO: ${label} greedy ${lt.length}: ${dt < 0 ? "identical" : `first difference at ${dt} (margin there ${l.margins?.[dt]}), ${agree}/${lt.length} positions equal`}`);
    } else if (dt < 0 && qt.length > 0) {
        console.log(`PASS: ${label} greedy ${qt.length} identical`);
    } else if (noise && dt >= 0 && dt < lt.length && l.margins?.[dt] <= noise.tol) {
        console.log(`PASS: ${label} greedy: identical for ${dt} tokens, then diverged where llama.cpp's margin ${l.margins[dt]} is within its own noise (tol ${noise.tol.toFixed(4)})`);
    } else {
        console.log(`FAIL: ${label} greedy: first difference at token ${dt} (llama.cpp margin there ${l.margins?.[dt]}): qwisp ${show(qt, dt)} llama.cpp ${show(lt, dt)}`);
    }
}

// Position by position: top-1 agreement and the largest |logit difference|
// over ids in both top-K lists.  Compared relative to each side's top entry:
// llama_ref's log-sum-exp comes from node-llama-cpp's approximate
// totalLogitWeight, which shifts every logprob of a position alike;
// differences of logits are exact.  Flips carry b's top-1/top-2 gap there.
function comparePositions(ap, bp) {
    let agree = 0, maxDiff = 0, worst = -1;
    const flips = [];
    for (let i = 0; i < ap.length; i++) {
        const at = ap[i].top, bt = bp[i].top;
        if (at[0][0] === bt[0][0]) agree++;
        else flips.push({ pos: i, a: at[0][0], b: bt[0][0], gap: bt[0][1] - bt[1][1] });
        const bm = new Map(bt.map(([id, v]) => [id, v - bt[0][1]]));
        for (const [id, v0] of at) {
            if (!bm.has(id)) continue;
            const d = Math.abs(v0 - at[0][1] - bm.get(id));
            if (d > maxDiff) (maxDiff = d), (worst = i);
        }
    }
    return { agree, maxDiff, worst, flips };
}

function positionsOf(q, l, label) {
    const qp = q.positions ?? [], lp = l.positions ?? [];
    if (qp.length !== lp.length || qp.length === 0) {
        console.log(`FAIL: ${label} teacher-forced: ${qp.length} positions vs ${lp.length} llama.cpp`);
        return null;
    }
    return [qp, lp];
}

function tf(qPath, lPath, label, minAgree, noisePath) {
    const q = load(qPath, label, "qwisp logits"), l = load(lPath, label, "llama.cpp");
    if (!q || !l) return;
    const pl = positionsOf(q, l, label);
    if (!pl) return;
    const n = pl[0].length;
    const { agree, maxDiff, worst, flips } = comparePositions(pl[0], pl[1]);
    const show = (f) => `pos ${f.pos}: qwisp ${f.a} llama.cpp ${f.b} (llama.cpp gap ${f.gap.toFixed(4)})`;
    const noise = noisePath ? loadNoise(noisePath, label) : null;
    if (noisePath && !noise) return;
    let ok, need;
    if (noise) {
        const allowed = Math.max(Math.floor(n * (1 - minAgree) + 1e-9), 2 * noise.self_flips);
        const wide = flips.filter((f) => f.gap > noise.tol);
        ok = wide.length === 0 && flips.length <= allowed;
        need = `flips only where llama.cpp's gap <= ${noise.tol.toFixed(4)}, at most ${allowed}`;
        const listed = (wide.length ? wide : flips).slice(0, 3).map(show);
        console.log(`${ok ? "PASS" : "FAIL"}: ${label} teacher-forced top-1 ${agree}/${n} agree (${need})` +
            `${wide.length ? `; ${wide.length} at a WIDE gap` : ""}${listed.length ? "; " + listed.join("; ") : ""}`);
    } else {
        ok = agree / n >= minAgree;
        console.log(`${ok ? "PASS" : "FAIL"}: ${label} teacher-forced top-1 ${agree}/${n} agree (need ${(minAgree * 100).toFixed(0)}%)` +
            `${flips.length ? "; " + flips.slice(0, 3).map(show).join("; ") : ""}`);
    }
    console.log(`INFO: ${label} teacher-forced max |logit diff| (relative to top-1) ${maxDiff.toExponential(3)} (position ${worst})`);
}

function noise(label, outPath, lPath, altPaths) {
    const l = load(lPath, label, "llama.cpp");
    if (!l) return;
    let delta = 0, selfFlips = 0;
    const alts = [];
    for (const p of altPaths) {
        const a = load(p, label, "llama.cpp alternate");
        if (!a) continue;
        const pl = positionsOf(a, l, `${label} noise`);
        if (!pl) continue;
        const r = comparePositions(pl[0], pl[1]);
        const name = a.batch === 1 ? `${a.cpu_variant} one-token` : a.cpu_variant;
        delta = Math.max(delta, r.maxDiff);
        selfFlips = Math.max(selfFlips, r.flips.length);
        alts.push(name);
        console.log(`INFO: ${label} llama.cpp noise: ${l.cpu_variant} vs ${name}: top-1 ${r.agree}/${pl[0].length} agree, max |logit diff| ${r.maxDiff.toExponential(3)}`);
    }
    const out = { delta, tol: 2 * delta, self_flips: selfFlips, n: (l.positions ?? []).length, primary: l.cpu_variant, alts };
    writeFileSync(outPath, JSON.stringify(out) + "\n");
    console.log(`INFO: ${label} llama.cpp noise floor ${delta.toExponential(3)} over ${alts.length} alternates (flip tolerance ${out.tol.toExponential(3)}, ${selfFlips} self-flips)`);
}

const [mode, a, b, label, extra, ...rest] = process.argv.slice(2);
const args = process.argv.slice(2);
const noiseFlag = args.indexOf("--noise");
if (mode === "gen") gen(a, b, label, args.includes("--tokens-info"), noiseFlag > 0 ? args[noiseFlag + 1] : null);
else if (mode === "tf") tf(a, b, label, parseFloat(extra), rest[0]);
else if (mode === "noise") noise(a, b, label, [extra, ...rest].filter(Boolean));
else {
    console.log(`FAIL: parity_compare: unknown mode ${mode}`);
    process.exit(2);
}
