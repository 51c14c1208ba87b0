// client.mjs — drives a running `qwisp serve` with the official openai npm
// client and raw HTTP, printing one "PASS: name" / "FAIL: name" line per check
// (tests/serve/t_serve.sh starts the server and calls this).
//
//   node client.mjs BASE_URL MODE [ARGS…]
//   MODE api      the OpenAI client: non-streaming + streaming chat, completions,
//                 usage counts, finish_reason, stop strings, models
//   MODE greedy   RUN_JSON: greedy chat equals `qwisp run --chat` (tokens and text)
//   MODE conns    MAX_CONNS: more idle connections than the limit -> 429 (/health 200), then fine
//   MODE abort    a streaming client that goes away mid-stream
//   MODE load     N C: N requests over C concurrent connections, no errors
import net from "node:net";
import fs from "node:fs";

// The peers live in tests/peers/node_modules (pinned in tests/peers/package.json).
const { default: OpenAI } = await import(new URL("../peers/node_modules/openai/index.mjs", import.meta.url));

const [base, mode, ...args] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: process.env.QWISP_TEST_KEY || "none", maxRetries: 0, timeout: 60000 });
let failed = 0;
function check(name, ok, detail = "") {
  console.log(`${ok ? "PASS" : "FAIL"}: ${name}${ok ? "" : " — " + detail}`);
  if (!ok) failed++;
}
const msgs = (t) => [{ role: "user", content: t }];

async function metrics() {
  const r = await fetch(base + "/metrics");
  const text = await r.text();
  const get = (name) => {
    const m = text.match(new RegExp("^" + name.replace(/[{}"=]/g, (c) => "\\" + c) + " (\\S+)$", "m"));
    return m ? Number(m[1]) : NaN;
  };
  return { text, get };
}

async function api() {
  const r = await client.chat.completions.create({ model: "tiny", messages: msgs("Hello"), max_tokens: 12, temperature: 0 });
  const ch = r.choices[0];
  check("chat: object and role", r.object === "chat.completion" && ch.message.role === "assistant", JSON.stringify(r).slice(0, 200));
  check("chat: usage counts", r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 12 && r.usage.prompt_tokens > 0 &&
        r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, JSON.stringify(r.usage));
  check("chat: finish_reason length at max_tokens", r.usage.completion_tokens === 12 ? ch.finish_reason === "length" : ch.finish_reason === "stop",
        `${ch.finish_reason} after ${r.usage.completion_tokens}`);
  check("chat: no think tags in content", typeof ch.message.content === "string" && !ch.message.content.includes("<think>"));

  // Streaming: the concatenated deltas equal the non-streaming content (greedy).
  const stream = await client.chat.completions.create({ model: "tiny", messages: msgs("Hello"), max_tokens: 12, temperature: 0,
                                                        stream: true, stream_options: { include_usage: true } });
  let text = "", finish = null, usage = null, n = 0, role = null;
  for await (const c of stream) {
    n++;
    if (c.usage) usage = c.usage;
    if (!c.choices.length) continue;
    if (c.choices[0].delta.role) role = c.choices[0].delta.role;
    text += c.choices[0].delta.content || "";
    if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
  }
  check("stream: chunks, role, finish_reason", n >= 3 && role === "assistant" && finish === ch.finish_reason, `n=${n} role=${role} finish=${finish}`);
  check("stream: text equals non-streaming", text === ch.message.content, JSON.stringify([text, ch.message.content]));
  check("stream: usage chunk", usage && usage.completion_tokens === r.usage.completion_tokens && usage.prompt_tokens === r.usage.prompt_tokens,
        JSON.stringify(usage));

  // Stop strings are cut from the output and end it with finish_reason "stop".
  const long = await client.chat.completions.create({ model: "tiny", messages: msgs("Tell me"), max_tokens: 64, temperature: 0 });
  const full = long.choices[0].message.content;
  const cp = Array.from(full);
  if (cp.length >= 12) {
    const stop = cp.slice(6, 9).join("");
    const cut = full.slice(0, full.indexOf(stop));
    const s1 = await client.chat.completions.create({ model: "tiny", messages: msgs("Tell me"), max_tokens: 64, temperature: 0, stop: [stop, "\u0001never"] });
    check("stop: text cut before the stop string", s1.choices[0].message.content === cut, JSON.stringify([s1.choices[0].message.content, cut, stop]));
    check("stop: finish_reason stop, fewer tokens", s1.choices[0].finish_reason === "stop" && s1.usage.completion_tokens < long.usage.completion_tokens,
          `${s1.choices[0].finish_reason} ${s1.usage.completion_tokens}`);
    let st = "";
    let sf = null;
    for await (const c of await client.chat.completions.create({ model: "tiny", messages: msgs("Tell me"), max_tokens: 64, temperature: 0, stop: stop, stream: true })) {
      if (!c.choices.length) continue;
      st += c.choices[0].delta.content || "";
      sf = c.choices[0].finish_reason || sf;
    }
    check("stop: streaming cuts the same", st === cut && sf === "stop", JSON.stringify([st, cut, sf]));
  } else {
    check("stop: output long enough to test", false, JSON.stringify(full));
  }

  // Sampling: a seed makes sampling reproducible; penalties accepted.
  const p = { model: "tiny", messages: msgs("Hi"), max_tokens: 16, temperature: 0.9, top_p: 0.95, seed: 1234, presence_penalty: 0.5, frequency_penalty: 0.3 };
  const a = await client.chat.completions.create(p), b = await client.chat.completions.create(p);
  check("sampling: same seed, same text", a.choices[0].message.content === b.choices[0].message.content);

  const comp = await client.completions.create({ model: "tiny", prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
  check("completions: text_completion with usage", comp.object === "text_completion" && typeof comp.choices[0].text === "string" &&
        comp.usage.completion_tokens >= 1 && comp.usage.completion_tokens <= 8, JSON.stringify(comp).slice(0, 200));
  let ctext = "";
  for await (const c of await client.completions.create({ model: "tiny", prompt: "Once upon a time", max_tokens: 8, temperature: 0, stream: true }))
    ctext += c.choices[0]?.text || "";
  check("completions: streaming equals non-streaming", ctext === comp.choices[0].text, JSON.stringify([ctext, comp.choices[0].text]));

  const models = await client.models.list();
  check("models: lists the served model", models.data.length === 1 && models.data[0].id === "tiny", JSON.stringify(models.data));
}

async function greedy(runJsonPath) {
  const run = JSON.parse(fs.readFileSync(runJsonPath, "utf8"));
  const r = await fetch(base + "/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: msgs("Hello there"), max_tokens: run.gen_tokens, temperature: 0, return_tokens: true }) });
  const j = await r.json();
  const toks = j.choices[0].tokens;
  check("greedy: tokens equal qwisp run --chat", JSON.stringify(toks) === JSON.stringify(run.tokens), JSON.stringify([toks, run.tokens]));
  check("greedy: prompt_tokens equal", j.usage.prompt_tokens === run.prompt_tokens, `${j.usage.prompt_tokens} vs ${run.prompt_tokens}`);
  const want = run.stopped_eos ? run.text.replace(/<\|im_end\|>$|<\|endoftext\|>$/, "") : run.text;
  check("greedy: text equals qwisp run --chat", j.choices[0].message.content === want, JSON.stringify([j.choices[0].message.content, want]));
}

async function conns(maxConns) {
  // Idle connections from four other loopback addresses (one address may hold
  // only --max-conns-per-client of them), so the checks below come from a
  // client that is not over its own cap.
  const socks = [];
  for (let i = 0; i < maxConns + 2; i++) {
    const s = net.connect({ port: Number(new URL(base).port), host: "127.0.0.1", localAddress: `127.0.0.${2 + (i % 4)}` });
    s.on("error", () => {});
    socks.push(s);
    await new Promise((res) => s.once("connect", res));
  }
  await new Promise((res) => setTimeout(res, 300));
  const r = await fetch(base + "/v1/models");
  const j = await r.json().catch(() => ({}));
  check("too many connections: 429 with an error object", r.status === 429 && j.error && j.error.code === "too_many_connections", `${r.status} ${JSON.stringify(j)}`);
  const h = await fetch(base + "/health");
  check("too many connections: /health still answered", h.status === 200, `${h.status}`);
  socks.forEach((s) => s.destroy());
  await new Promise((res) => setTimeout(res, 500));
  const ok = await client.chat.completions.create({ model: "tiny", messages: msgs("Hi"), max_tokens: 2, temperature: 0 });
  check("too many connections: next request succeeds", ok.choices.length === 1);
}

async function abort() {
  const before = await metrics();
  const ac = new AbortController();
  const stream = await client.chat.completions.create({ model: "tiny", messages: msgs("Write forever"), max_tokens: 20000, temperature: 0, stream: true, ignore_eos: true },
                                                      { signal: ac.signal });
  let got = 0;
  try {
    for await (const c of stream) { if (++got >= 3) ac.abort(); }
  } catch (e) { /* aborted */ }
  const t0 = Date.now();
  // The execution path must move on: the next request completes, and /metrics
  // shows the disconnect and the cancelled job.
  const next = await client.chat.completions.create({ model: "tiny", messages: msgs("Hi"), max_tokens: 2, temperature: 0 });
  let after;
  for (let i = 0; i < 50; i++) {
    after = await metrics();
    if (after.get("qwisp_jobs_total{result=\"cancelled\"}") > before.get("qwisp_jobs_total{result=\"cancelled\"}")) break;
    await new Promise((res) => setTimeout(res, 100));
  }
  check("disconnect: next request served", next.choices.length === 1 && next.usage.completion_tokens >= 1);
  check("disconnect: counted in /metrics", after.get("qwisp_client_disconnects_total") === before.get("qwisp_client_disconnects_total") + 1,
        `${before.get("qwisp_client_disconnects_total")} -> ${after.get("qwisp_client_disconnects_total")}`);
  check("disconnect: generation cancelled (job cancelled, not completed)",
        after.get("qwisp_jobs_total{result=\"cancelled\"}") === before.get("qwisp_jobs_total{result=\"cancelled\"}") + 1 &&
        after.get("qwisp_generated_tokens_total") - before.get("qwisp_generated_tokens_total") < 20000,
        `cancelled ${after.get("qwisp_jobs_total{result=\"cancelled\"}")}, gen +${after.get("qwisp_generated_tokens_total") - before.get("qwisp_generated_tokens_total")}`);
  check("disconnect: nothing left in flight", after.get("qwisp_requests_in_flight") === 0 && after.get("qwisp_queue_depth") === 0, after.text.match(/in_flight \d+/)?.[0]);
  void t0;
}

async function load(total, conc) {
  await client.chat.completions.create({ model: "tiny", messages: msgs("warm up"), max_tokens: 4, temperature: 0 });
  const before = await metrics();
  let errors = 0, done = 0, next = 0;
  const prompts = ["Hi", "Hello there", "What is 2+2?", "Tell me a story", "a b c d e f g"];
  async function worker(w) {
    while (next < total) {
      const i = next++;
      try {
        const stream = i % 2 === 1;
        const p = { model: "tiny", messages: msgs(prompts[i % prompts.length]), max_tokens: 4, temperature: i % 3 ? 0.8 : 0, seed: i };
        if (stream) {
          let fin = null;
          for await (const c of await client.chat.completions.create({ ...p, stream: true })) fin = c.choices[0]?.finish_reason || fin;
          if (!fin) throw new Error("no finish_reason");
        } else {
          const r = await client.chat.completions.create(p);
          if (!r.choices[0].finish_reason) throw new Error("no finish_reason");
        }
        done++;
      } catch (e) {
        errors++;
        if (errors < 4) console.log("INFO: load error " + e.message);
      }
    }
  }
  await Promise.all(Array.from({ length: conc }, (_, w) => worker(w)));
  const after = await metrics();
  check(`load: ${total} requests over ${conc} connections, no errors`, errors === 0 && done === total, `errors=${errors} done=${done}`);
  check("load: pool active back to baseline", after.get("qwisp_pool_active_bytes") === before.get("qwisp_pool_active_bytes"),
        `${before.get("qwisp_pool_active_bytes")} -> ${after.get("qwisp_pool_active_bytes")}`);
  check("load: queue empty, nothing in flight", after.get("qwisp_queue_depth") === 0 && after.get("qwisp_requests_in_flight") === 0);
  check("load: every request counted", after.get("qwisp_requests_total{endpoint=\"chat_completions\",code=\"2xx\"}") -
        before.get("qwisp_requests_total{endpoint=\"chat_completions\",code=\"2xx\"}") === total);
  const fpb = before.get("qwisp_footprint_bytes"), fpa = after.get("qwisp_footprint_bytes");
  console.log(`INFO: footprint ${fpb} -> ${fpa} bytes, pool active ${after.get("qwisp_pool_active_bytes")}`);
}

try {
  if (mode === "api") await api();
  else if (mode === "greedy") await greedy(args[0]);
  else if (mode === "conns") await conns(Number(args[0]));
  else if (mode === "abort") await abort();
  else if (mode === "load") await load(Number(args[0]), Number(args[1]));
  else throw new Error("unknown mode " + mode);
} catch (e) {
  check(`${mode}: no exception`, false, e.stack || String(e));
}
process.exit(failed ? 1 : 0);
