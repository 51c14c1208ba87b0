// serve_load.mjs — a bounded load on an OpenAI-compatible endpoint: C
// clients, each sending chat requests back to back (streaming, greedy,
// ignore_eos, max_tokens N) until TOTAL have finished.  Prints one JSON
// line: requests/s, p50/p99 time to first token (first content chunk,
// measured by the client), failures — or, given LABELS, a markdown table row
// starting with them.  bench/serve_load.sh drives it.
//   node serve_load.mjs BASE_URL CLIENTS TOTAL MAX_TOKENS [LABELS...]
const [base, C, TOTAL, N] = [process.argv[2], ...process.argv.slice(3, 6).map(Number)];
const labels = process.argv.slice(6);
const prompts = ["Tell me of the river.", "Count the stars.", "Name three colours.", "Sing a short song.",
                 "Who went out to meet it?", "What did the scribe write?"];
const ttft = [];
let next = 0, failed = 0;
const why = {};
async function one(k) {
  const t0 = performance.now();
  const r = await fetch(base + "/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: prompts[k % prompts.length] }], max_tokens: N,
                           temperature: 0, ignore_eos: true, stream: true }) });
  if (!r.ok) throw new Error(`status ${r.status}`);
  const rd = r.body.getReader(), dec = new TextDecoder();
  let first = 0, buf = "", finish = null;
  for (;;) {
    const { value, done } = await rd.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) { // the first chunk with text, not the role chunk
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (!line.startsWith("data:") || line.includes("[DONE]")) continue;
      const d = JSON.parse(line.slice(5)).choices?.[0];
      if (!first && d?.delta?.content) first = performance.now();
      if (d?.finish_reason) finish = d.finish_reason;
    }
  }
  if (!finish) throw new Error("stream cut");
  ttft.push(first - t0);
}
async function client() {
  while (next < TOTAL) {
    const k = next++;
    try { await one(k); } catch (e) { failed++; why[String(e.cause?.code ?? e.message)] = 1; }
  }
}
const t0 = performance.now();
await Promise.all(Array.from({ length: C }, client));
const s = (performance.now() - t0) / 1000;
ttft.sort((a, b) => a - b);
const q = (p) => ttft[Math.min(ttft.length - 1, Math.floor(p * ttft.length))];
const res = { clients: C, requests: TOTAL, failed, seconds: +s.toFixed(2), rps: +(TOTAL / s).toFixed(2),
              ttft_p50_ms: Math.round(q(0.5)), ttft_p99_ms: Math.round(q(0.99)) };
if (failed) console.error(`failures: ${Object.keys(why).join(", ")}`);
if (!labels.length) console.log(JSON.stringify(res));
else console.log(`| ${labels.join(" | ")} | ${C} | ${res.rps} | ${res.ttft_p50_ms} | ${res.ttft_p99_ms} | ${failed} |`);
