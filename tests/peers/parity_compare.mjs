// parity_compare.mjs — compares a qwisp JSON result with a llama.cpp one
// (tests/peers/llama_ref.mjs) and prints PASS:/FAIL:/INFO: lines for t_parity.sh.
//
//   node parity_compare.mjs gen QWISP.json LLAMA.json LABEL [--tokens-info]
//       PASS/FAIL "LABEL prompt ids", PASS/FAIL "LABEL greedy 32" (with
//       --tokens-info the token check is reported as INFO: agreement only —
//       used for q4_0, where llama.cpp's and qwisp's kernels may round apart).
//   node parity_compare.mjs tf QWISP.json LLAMA.json LABEL MIN_AGREE
//       PASS/FAIL "LABEL teacher-forced top-1" when the share of positions whose
//       top-1 ids agree is >= MIN_AGREE (1 = every position), plus an INFO line
//       with the max |logprob difference| over ids present in both top-K lists.
//
// A missing or unparsable file is a FAIL naming the file, never a crash: the
// harness must report, not stop.
import { readFileSync } from "node:fs";

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

function gen(qPath, lPath, label, tokensInfo) {
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
    let agree = 0;
    for (let i = 0; i < Math.min(qt.length, lt.length); i++) if (qt[i] === lt[i]) agree++;
    if (tokensInfo) {
        console.log(`INFO: ${label} greedy ${lt.length}: ${dt < 0 ? "identical" : `first difference at ${dt} (margin there ${l.margins?.[dt]}), ${agree}/${lt.length} positions equal`}`);
    } else if (dt < 0 && qt.length > 0) {
        console.log(`PASS: ${label} greedy ${qt.length} identical`);
    } else {
        console.log(`FAIL: ${label} greedy: first difference at token ${dt} (llama.cpp margin there ${l.margins?.[dt]}): qwisp ${show(qt, dt)} llama.cpp ${show(lt, dt)}`);
    }
}

function tf(qPath, lPath, label, minAgree) {
    const q = load(qPath, label, "qwisp logits"), l = load(lPath, label, "llama.cpp");
    if (!q || !l) return;
    const qp = q.positions ?? [], lp = l.positions ?? [];
    if (qp.length !== lp.length || qp.length === 0) {
        console.log(`FAIL: ${label} teacher-forced: ${qp.length} qwisp positions vs ${lp.length} llama.cpp`);
        return;
    }
    let agree = 0, maxDiff = 0, worst = -1;
    const misses = [];
    for (let i = 0; i < qp.length; i++) {
        const qt = qp[i].top, lt = lp[i].top;
        if (qt[0][0] === lt[0][0]) agree++;
        else if (misses.length < 3) misses.push(`pos ${i}: qwisp ${qt[0][0]} llama.cpp ${lt[0][0]} (llama.cpp gap ${(lt[0][1] - lt[1][1]).toFixed(4)})`);
        // Compared relative to each side's top entry: llama_ref's log-sum-exp
        // comes from node-llama-cpp's approximate totalLogitWeight, which shifts
        // every logprob of a position alike; differences of logits are exact.
        const lm = new Map(lt.map(([id, lp_]) => [id, lp_ - lt[0][1]]));
        for (const [id, v0] of qt) {
            if (!lm.has(id)) continue;
            const d = Math.abs(v0 - qt[0][1] - lm.get(id));
            if (d > maxDiff) (maxDiff = d), (worst = i);
        }
    }
    const frac = agree / qp.length;
    const ok = frac >= minAgree;
    console.log(`${ok ? "PASS" : "FAIL"}: ${label} teacher-forced top-1 ${agree}/${qp.length} agree (need ${(minAgree * 100).toFixed(0)}%)${misses.length ? "; " + misses.join("; ") : ""}`);
    console.log(`INFO: ${label} teacher-forced max |logit diff| (relative to top-1) ${maxDiff.toExponential(3)} (position ${worst})`);
}

const [mode, a, b, label, extra] = process.argv.slice(2);
if (mode === "gen") gen(a, b, label, extra === "--tokens-info");
else if (mode === "tf") tf(a, b, label, parseFloat(extra));
else {
    console.log(`FAIL: parity_compare: unknown mode ${mode}`);
    process.exit(2);
}
