// widen_vocab.mjs — writes a copy of a vocab-only GGUF whose vocabulary is
// grown to N tokens, so tokenizer load time can be measured at the size of the
// real Qwen3.5/3.6 vocabulary (248,320 tokens) when only a smaller real vocab
// file is at hand (llama.cpp's models/ggml-vocab-qwen35.gguf holds 151,936).
//
//   node widen_vocab.mjs IN.gguf OUT.gguf N
//
// Each added token is the concatenation of two existing NORMAL tokens, added
// with the merge "a b" that makes it — the shape a trained BPE vocab has — so
// both qwisp and llama.cpp build their maps for a file of the real size.  The
// added tokens go after the existing ones (special ids keep their values).
// Used only for timing; ids on such a file mean nothing.
import { readFileSync, writeFileSync } from "node:fs";

const [inPath, outPath, nStr] = process.argv.slice(2);
const want = Number(nStr);
const b = readFileSync(inPath);
let o = 0;
const u32 = () => { const v = b.readUInt32LE(o); o += 4; return v; };
const u64 = () => { const v = Number(b.readBigUInt64LE(o)); o += 8; return v; };
const str = () => { const n = u64(); const s = b.subarray(o, o + n); o += n; return s; };
const SIZES = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

if (b.toString("latin1", 0, 4) !== "GGUF") throw new Error(`${inPath}: not a GGUF`);
const version = (o = 4, u32());
const nTensors = u64();
const nKv = u64();
if (nTensors !== 0) throw new Error(`${inPath}: has tensors; expected a vocab-only file`);
const kvs = [];
for (let i = 0; i < nKv; i++) {
    const key = str().toString("utf8");
    const type = u32();
    const start = o;
    let items = null;
    if (type === 8) str();
    else if (type === 9) {
        const et = u32(), n = u64();
        if (et === 8) { items = []; for (let k = 0; k < n; k++) items.push(str()); }
        else if (SIZES[et]) { items = { et, raw: b.subarray(o, o + n * SIZES[et]), n }; o += n * SIZES[et]; }
        else throw new Error(`${key}: nested array`);
    } else o += SIZES[type];
    kvs.push({ key, type, raw: b.subarray(start, o), items });
}
const kv = (k) => kvs.find((x) => x.key === k);
const tokens = kv("tokenizer.ggml.tokens").items;
const types = kv("tokenizer.ggml.token_type").items;
const merges = kv("tokenizer.ggml.merges").items;
const have = new Set(tokens.map((t) => t.toString("latin1")));
const normal = [];
for (let i = 0; i < tokens.length; i++) if (types.raw.readInt32LE(i * 4) === 1) normal.push(tokens[i]);
// xorshift32 with a fixed seed: the same file every run.
let seed = 2463534242;
const rnd = (n) => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed % n; };
const addTok = [], addMerge = [];
while (tokens.length + addTok.length < want) {
    const a = normal[rnd(normal.length)], c = normal[rnd(normal.length)];
    const t = Buffer.concat([a, c]);
    const k = t.toString("latin1");
    if (have.has(k) || t.length > 48) continue;
    have.add(k);
    addTok.push(t);
    addMerge.push(Buffer.concat([a, Buffer.from(" "), c]));
}
const out = [];
const w32 = (v) => { const x = Buffer.alloc(4); x.writeUInt32LE(v); out.push(x); };
const w64 = (v) => { const x = Buffer.alloc(8); x.writeBigUInt64LE(BigInt(v)); out.push(x); };
const wstr = (s) => { w64(s.length); out.push(s); };
out.push(Buffer.from("GGUF"));
w32(version); w64(0); w64(kvs.length);
for (const x of kvs) {
    wstr(Buffer.from(x.key, "utf8"));
    w32(x.type);
    if (x.key === "tokenizer.ggml.tokens" || x.key === "tokenizer.ggml.merges") {
        const all = x.key === "tokenizer.ggml.tokens" ? tokens.concat(addTok) : merges.concat(addMerge);
        w32(8); w64(all.length);
        for (const s of all) wstr(s);
    } else if (x.key === "tokenizer.ggml.token_type") {
        w32(5); w64(tokens.length + addTok.length);
        out.push(x.items.raw);
        const extra = Buffer.alloc(addTok.length * 4);
        for (let i = 0; i < addTok.length; i++) extra.writeInt32LE(1, i * 4);
        out.push(extra);
    } else out.push(x.raw);
}
// pad to the alignment (32) as a file with no tensor data still must be
let total = out.reduce((s, x) => s + x.length, 0);
out.push(Buffer.alloc((32 - (total % 32)) % 32));
writeFileSync(outPath, Buffer.concat(out));
console.log(`${outPath}: ${tokens.length + addTok.length} tokens, ${merges.length + addMerge.length} merges`);
