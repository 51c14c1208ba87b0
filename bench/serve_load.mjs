// serve_load.mjs — a bounded load on an OpenAI-compatible endpoint: C
// clients, each sending chat requests back to back (streaming, greedy,
// ignore_eos, max_tokens N) until TOTAL have finished.  Prints one JSON
// line: requests/s, p50/p99 time to first token (first content chunk,
// measured by the client), failures.  bench/serve_load.sh drives it.
//   node serve_load.mjs BASE_URL CLIENTS TOTAL MAX_TOKENS
const [base, C, TOTAL, N] = [process.argv[2], ...process.argv.slice(3).map(Number)];
const prompts = ["Tell me of the river.", "Count the stars.", "Name three colours.", "Sing a short song.",
                 "Who went out to meet it?", "What did the scribe write?"];
const ttft = [];
let next = 0, failed = 0;
async function one(k) {
  const t0 = performance.now();
  const r = await fetch(base + "/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: prompts[k % prompts.length] }], max_tokens: N,
                           temperature: 0, ignore_eos: true, stream: true }) });
  if (!r.ok) throw new Error(`status ${r.status}`);
  const rd = r.body.getReader();
  let first = 0;
  for (;;) {
    const { value, done } = await rd.read();
    if (done) break;
    if (!first && new TextDecoder().decode(value).includes('"content"')) first = performance.now();
  }
  ttft.push((first || performance.now()) - t0);
}
async function client() {
  while (next < TOTAL) {
    const k = next++;
    try { await one(k); } catch { failed++; }
  }
}
const t0 = performance.now();
await Promise.all(Array.from({ length: C }, client));
const s = (performance.now() - t0) / 1000;
ttft.sort((a, b) => a - b);
const q = (p) => ttft[Math.min(ttft.length - 1, Math.floor(p * ttft.length))];
console.log(JSON.stringify({ clients: C, requests: TOTAL, failed, seconds: +s.toFixed(2), rps: +(TOTAL / s).toFixed(2),
                             ttft_p50_ms: Math.round(q(0.5)), ttft_p99_ms: Math.round(q(0.99)) }));
