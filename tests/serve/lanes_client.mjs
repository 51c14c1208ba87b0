// lanes_client.mjs — drives `qwisp serve` for the lanes tests (raw fetch, so
// the requests really are concurrent).
//
//   node lanes_client.mjs BASE tokens N_TOKENS PROMPT...  -> {"PROMPT": [ids…], …}
//       all prompts at once, greedy chat, ignore_eos, return_tokens
//   node lanes_client.mjs BASE abort                     -> PASS/FAIL lines
//       a streaming client that goes away; its lane must be freed (metrics)
const [base, mode, ...args] = process.argv.slice(2);

async function chat(prompt, n) {
  const r = await fetch(base + "/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: prompt }], max_tokens: n, temperature: 0,
                           ignore_eos: true, return_tokens: true }),
  });
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  const j = await r.json();
  return j.choices[0].tokens;
}

async function metric(name) {
  const text = await (await fetch(base + "/metrics")).text();
  const m = text.match(new RegExp("^qwisp_" + name + " (\\S+)$", "m"));
  return m ? Number(m[1]) : NaN;
}

if (mode === "tokens") {
  const n = parseInt(args[0], 10);
  const prompts = args.slice(1);
  const res = await Promise.all(prompts.map((p) => chat(p, n)));
  const out = {};
  prompts.forEach((p, i) => (out[p] = res[i]));
  console.log(JSON.stringify(out));
} else if (mode === "abort") {
  const ac = new AbortController();
  const r = await fetch(base + "/v1/chat/completions", {
    method: "POST", signal: ac.signal, headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: "Tell me a long story" }], max_tokens: 100000,
                           temperature: 0, ignore_eos: true, stream: true }),
  });
  const reader = r.body.getReader();
  await reader.read(); // first chunk arrived: the lane is decoding
  const running = await metric("requests_running");
  ac.abort();
  let freed = false;
  for (let i = 0; i < 100 && !freed; i++) {
    await new Promise((res) => setTimeout(res, 100));
    freed = (await metric("requests_running")) === 0 && (await metric('jobs_total\\{result="cancelled"\\}')) >= 1;
  }
  console.log(`${running === 1 ? "PASS" : "FAIL"}: lanes: the streaming request was running (running=${running})`);
  console.log(`${freed ? "PASS" : "FAIL"}: lanes: a disconnecting client frees its lane (metrics)`);
  const after = await chat("still serving?", 4);
  console.log(`${after.length === 4 ? "PASS" : "FAIL"}: lanes: next request served after the disconnect`);
} else {
  console.error("usage: lanes_client.mjs BASE tokens|abort …");
  process.exit(2);
}
