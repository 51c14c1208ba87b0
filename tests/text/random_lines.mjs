// random_lines.mjs — writes N lines of random code points (a fixed seed: the
// same file every run) for tokenizer agreement checks: half the characters
// from a pool chosen to hit the pre-tokenizer's edges (apostrophe
// contractions, combining marks after spaces, digits and punctuation, Unicode
// White_Space beyond ASCII, \r, U+0000, noncharacters, CJK, emoji with
// modifiers), the rest uniform over the BMP start and all of Unicode
// (surrogates and '\n' replaced by a space: a line holds no '\n').
//
//   node random_lines.mjs OUT N SEED
import { writeFileSync } from "node:fs";

const [out, nStr, seedStr] = process.argv.slice(2);
let seed = Number(seedStr) >>> 0 || 1;
const rnd = (n) => {
    seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
    return seed % n;
};
const POOL = [32, 32, 39, 13, 9, 11, 12, 0x85, 0xa0, 0x3000, 0x2028, 0x301, 0x308, 0x20dd, 0x903, 0x93e,
    0xfe0f, 0x200d, 0x41, 0x61, 0x53, 0x73, 0x54, 0x74, 0x52, 0x72, 0x45, 0x65, 0x4c, 0x6c, 0x4d, 0x44, 0x56,
    0x30, 0x35, 0xbd, 0x2153, 0x661, 0x4e00, 0x3042, 0xac00, 0x1f600, 0x1f3fd, 0x21, 0x2e, 0x2c, 0x3b, 0x2d,
    0x5f, 0x3c, 0x7c, 0x3e, 0x130, 0x17f, 0x212a, 0xfffd, 0xe000, 0x10ffff, 0x0, 0x1, 0x7f, 0xad, 0x200b,
    0xfeff, 0x1160, 0x115f, 0x3164, 0x2800, 0x31350, 0x11f04, 0x11f50, 0x1e4ec];
const pick = () => {
    const r = rnd(10);
    if (r < 6) return POOL[rnd(POOL.length)];
    if (r < 8) return rnd(0x3000);
    return rnd(0x110000);
};
const lines = [];
for (let i = 0; i < Number(nStr); i++) {
    let s = "";
    for (let k = 1 + rnd(16); k > 0; k--) {
        let c = pick();
        if ((c >= 0xd800 && c < 0xe000) || c === 10) c = 32;
        s += String.fromCodePoint(c);
    }
    lines.push(s);
}
writeFileSync(out, lines.join("\n") + "\n");
