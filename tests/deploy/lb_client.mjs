// lb_client.mjs — drives 3 qwisp replicas behind HAProxy with the official
// openai npm client (tests/deploy/t_deploy.sh), kills one replica mid-load
// and prints PASS/FAIL lines.
//
//   node lb_client.mjs LB_PORT VICTIM_PID VICTIM_PORT SURVIVOR_PORT...
//
// 1. reference: each prompt once on every replica directly (greedy, so the
//    three answer alike) — this also settles each replica's pool (the
//    context's KV and buffers reach the size this load needs); then each
//    survivor's qwisp_pool_active_bytes is its baseline;
// 2. load: ROUNDS x CONC requests through HAProxy, half streaming, client
//    retries off; once the victim is running a request it gets SIGKILL;
// 3. every request that failed did so cleanly (an HTTP status, a refused or
//    reset connection, or a stream that ended without finish_reason — never
//    a wrong answer or a hang past the deadline) and one retry fixed it;
//    every completed answer equals its reference;
// 4. the survivors end idle with their pools back at the baseline.
const [lbPort, victimPid, victimPort, ...survivors] = process.argv.slice(2);
const { default: OpenAI } = await import(new URL("../peers/node_modules/openai/index.mjs", import.meta.url));

const PROMPTS = ["Tell me of the river.", "Count the stars.", "Name three colours.", "Sing a short song."];
const N_TOK = 24, CONC = 6, ROUNDS = 4, DEADLINE_MS = 60000;
const say = (ok, name, detail = "") => console.log(`${ok ? "PASS" : "FAIL"}: ${name}${ok || !detail ? "" : " — " + detail}`);
const client = (port) => new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "none", maxRetries: 0,
                                     timeout: DEADLINE_MS });
const body = (p, stream) => ({ model: "default", messages: [{ role: "user", content: p }], max_tokens: N_TOK,
                               temperature: 0, ignore_eos: true, return_tokens: true, stream });

async function metric(port, name) {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const m = text.match(new RegExp("^qwisp_" + name + " (\\S+)$", "m"));
  return m ? Number(m[1]) : NaN;
}

// One request; resolves to {text} or throws.  A stream must end with a
// finish_reason, else it was cut (its replica died) and that is the error.
async function ask(c, p, stream) {
  if (!stream) {
    const r = await c.chat.completions.create(body(p, false));
    return r.choices[0].message.content;
  }
  let text = "", finish = null;
  for await (const ch of await c.chat.completions.create(body(p, true))) {
    const d = ch.choices[0];
    if (d?.delta?.content) text += d.delta.content;
    if (d?.finish_reason) finish = d.finish_reason;
  }
  if (!finish) throw new Error("stream ended without finish_reason");
  return text;
}

// What a clean failure looks like to a client: a status, a connection error
// (refused, reset, closed early), or a cut stream.  A timeout is not clean.
function clean(e) {
  if (e instanceof OpenAI.APIConnectionTimeoutError) return false;
  if (e instanceof OpenAI.APIError) return true; // APIConnectionError and status errors
  return /finish_reason|terminated|socket|ECONNRESET|other side closed|premature/i.test(String(e?.message ?? e));
}

// 1. references and baselines
const want = {};
for (const port of [victimPort, ...survivors])
  for (const p of PROMPTS) {
    for (const stream of [false, true]) {
      const t = await ask(client(port), p, stream);
      if (want[p] === undefined) want[p] = t;
      else if (want[p] !== t) say(false, `replica ${port} answers "${p}" like the others`, `${t} vs ${want[p]}`);
    }
  }
const base = {};
for (const port of survivors) base[port] = await metric(port, "pool_active_bytes");
say(Object.values(base).every((b) => b > 0), "baseline pool_active_bytes read from every survivor", JSON.stringify(base));

// 2. load, with the kill
let killedWhile = -1;
const killer = (async () => {
  for (let i = 0; i < 400; i++) {
    const running = await metric(victimPort, "requests_running").catch(() => NaN);
    if (running >= 1) {
      killedWhile = running;
      process.kill(Number(victimPid), "SIGKILL");
      return;
    }
    await new Promise((r) => setTimeout(r, 10));
  }
})();
const lb = client(lbPort);
const results = [];
let next = 0;
async function worker() {
  while (next < ROUNDS * CONC) {
    const k = next++, p = PROMPTS[k % PROMPTS.length], stream = k % 2 === 1;
    const t0 = Date.now();
    const res = { k, p, stream };
    try {
      res.text = await ask(lb, p, stream);
    } catch (e) {
      res.error = String(e?.message ?? e).slice(0, 120);
      res.clean = clean(e) && Date.now() - t0 < DEADLINE_MS;
      try { res.retry = await ask(lb, p, stream); } catch (e2) { res.retryError = String(e2?.message ?? e2).slice(0, 120); }
    }
    results.push(res);
  }
}
await Promise.all(Array.from({ length: CONC }, worker));
await killer;

// 3. outcomes
say(killedWhile >= 1, "the victim replica was SIGKILLed while running a request", `running=${killedWhile}`);
const failed = results.filter((r) => r.error !== undefined);
console.log(`INFO: ${results.length} requests through HAProxy, ${failed.length} failed before a retry` +
            (failed.length ? ` (${[...new Set(failed.map((r) => r.error))].join("; ")})` : ""));
say(results.length === ROUNDS * CONC, `all ${ROUNDS * CONC} requests returned`);
const wrong = results.filter((r) => r.text !== undefined && r.text !== want[r.p]);
say(!wrong.length, "every completed answer equals the prompt's reference", JSON.stringify(wrong.slice(0, 2)));
const unclean = failed.filter((r) => !r.clean);
say(!unclean.length, "every failure was clean (status, connection error or cut stream; no hang)", JSON.stringify(unclean));
const unfixed = failed.filter((r) => r.retry !== want[r.p]);
say(!unfixed.length, "one retry through HAProxy fixed every failure", JSON.stringify(unfixed));

// 4. survivors back to idle and baseline
let settled = false, now = {};
for (let i = 0; i < 100 && !settled; i++) {
  for (const port of survivors)
    now[port] = { pool: await metric(port, "pool_active_bytes"), inflight: await metric(port, "requests_in_flight"),
                  queued: await metric(port, "queue_depth") };
  settled = survivors.every((p) => now[p].pool === base[p] && now[p].inflight === 0 && now[p].queued === 0);
  if (!settled) await new Promise((r) => setTimeout(r, 100));
}
say(settled, "survivors idle with pool_active_bytes back at their baseline (no leak)",
    JSON.stringify({ base, now }));
// the load balancer still answers after the kill
const after = await ask(lb, PROMPTS[0], false).catch((e) => "error: " + e.message);
say(after === want[PROMPTS[0]], "HAProxy serves with one replica gone", after);
