// features_client.mjs — logprobs and response_format through the official
// openai npm client against a running `qwisp serve` (tests/serve/t_features.sh
// starts it).  One "PASS: name" / "FAIL: name" line per check.
//
//   node features_client.mjs BASE_URL logprobs LOGITS_JSON
//       chat (choices[].logprobs.content[]: token, logprob, bytes,
//       top_logprobs) and completions (the legacy object), streaming and not;
//       the values equal `qwisp logits` on the same prompt (LOGITS_JSON)
//   node features_client.mjs BASE_URL json
//       json_schema (several schemas, greedy and sampled, streaming and not)
//       and json_object: every output parses and validates against its schema
//       (validate() below: the subset the server supports, written here so the
//       test does not trust the server's own matcher)
import fs from "node:fs";

const { default: OpenAI } = await import(new URL("../peers/node_modules/openai/index.mjs", import.meta.url));
const [base, mode, ...args] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "none", maxRetries: 0, timeout: 60000 });
let failed = 0;
function check(name, ok, detail = "") {
  console.log(`${ok ? "PASS" : "FAIL"}: ${name}${ok ? "" : " — " + String(detail).slice(0, 400)}`);
  if (!ok) failed++;
}
const msgs = (t) => [{ role: "user", content: t }];
const close = (a, b, tol = 2e-3) => Math.abs(a - b) <= tol;
const utf8 = (bytes) => new TextDecoder("utf-8", { fatal: false }).decode(Uint8Array.from(bytes));

// One chat logprobs entry has OpenAI's shape.
function entryOk(e, k) {
  const shape = (x) => typeof x.token === "string" && typeof x.logprob === "number" && x.logprob <= 1e-6 &&
    Array.isArray(x.bytes) && x.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256) && utf8(x.bytes) === x.token;
  if (!shape(e) || !Array.isArray(e.top_logprobs) || e.top_logprobs.length !== k) return false;
  for (let i = 0; i < k; i++) {
    if (!shape(e.top_logprobs[i]) || "top_logprobs" in e.top_logprobs[i]) return false;
    if (i && e.top_logprobs[i].logprob > e.top_logprobs[i - 1].logprob) return false;
  }
  return true;
}

async function logprobs() {
  const ref = JSON.parse(fs.readFileSync(args[0], "utf8"));
  const refTop = ref.positions[ref.positions.length - 1].top; // [[id, logprob, text], …] after the prompt

  // chat, greedy, non-streaming
  const K = 3;
  const r = await client.chat.completions.create({ model: "tiny", messages: msgs("Hello"), max_tokens: 8, temperature: 0,
                                                   logprobs: true, top_logprobs: K });
  const ch = r.choices[0], lp = ch.logprobs;
  check("chat logprobs: choices[0].logprobs.content[] with refusal null", lp && Array.isArray(lp.content) && lp.refusal === null,
        JSON.stringify(lp));
  const content = lp?.content || [];
  check("chat logprobs: one entry per completion token", content.length === r.usage.completion_tokens - (ch.finish_reason === "stop" ? 1 : 0),
        `${content.length} entries, ${r.usage.completion_tokens} tokens, ${ch.finish_reason}`);
  check("chat logprobs: each entry has token, logprob, bytes, top_logprobs (sorted, k items)", content.every((e) => entryOk(e, K)),
        JSON.stringify(content[0]));
  check("chat logprobs: greedy picks top_logprobs[0]",
        content.every((e) => e.top_logprobs[0].token === e.token && e.top_logprobs[0].logprob === e.logprob), JSON.stringify(content[0]));
  const joined = Buffer.concat(content.map((e) => Buffer.from(e.bytes))).toString("utf8");
  check("chat logprobs: the tokens' bytes make the content", joined === ch.message.content, JSON.stringify([joined, ch.message.content]));
  check("chat logprobs: probabilities sum to <= 1", content.every((e) => e.top_logprobs.reduce((s, t) => s + Math.exp(t.logprob), 0) <= 1 + 1e-4));

  // chat, streaming: the same entries, spread over the chunks
  const st = await client.chat.completions.create({ model: "tiny", messages: msgs("Hello"), max_tokens: 8, temperature: 0,
                                                    logprobs: true, top_logprobs: K, stream: true });
  const sEntries = [];
  for await (const c of st) {
    const l = c.choices[0]?.logprobs;
    if (l && l.content) sEntries.push(...l.content);
  }
  check("chat stream logprobs: the chunks' entries equal the non-streaming ones", JSON.stringify(sEntries) === JSON.stringify(content),
        `${sEntries.length} vs ${content.length}`);

  // completions: the legacy object, checked against `qwisp logits`
  const c = await client.completions.create({ model: "tiny", prompt: "In the beginning", max_tokens: 6, temperature: 0, logprobs: 2 });
  const cl = c.choices[0].logprobs;
  const n = c.usage.completion_tokens - (c.choices[0].finish_reason === "stop" ? 1 : 0);
  check("completions logprobs: tokens / token_logprobs / top_logprobs / text_offset, one per token",
        cl && [cl.tokens, cl.token_logprobs, cl.top_logprobs, cl.text_offset].every((a) => Array.isArray(a) && a.length === n),
        JSON.stringify(cl));
  check("completions logprobs: tokens join to the text", cl.tokens.join("") === c.choices[0].text, JSON.stringify([cl.tokens, c.choices[0].text]));
  // text_offset: bytes of the generated text before each token (as generated: a
  // token holding part of a UTF-8 character counts its own bytes, shown as U+FFFD)
  let offOk = cl.text_offset[0] === 0;
  for (let i = 1; i < n; i++) {
    const d = cl.text_offset[i] - cl.text_offset[i - 1];
    offOk &&= cl.tokens[i - 1].includes("\ufffd") ? d >= 1 : d === Buffer.byteLength(cl.tokens[i - 1]);
  }
  check("completions logprobs: text_offset counts the bytes before each token", offOk, JSON.stringify([cl.tokens, cl.text_offset]));
  check("completions logprobs: top_logprobs has the 2 best plus the chosen token",
        cl.top_logprobs.every((d, i) => Object.keys(d).length >= 1 && Object.keys(d).length <= 3 && d[cl.tokens[i]] === cl.token_logprobs[i]),
        JSON.stringify(cl.top_logprobs));
  check("completions logprobs: first token's logprob equals `qwisp logits` (the model's log-softmax)",
        close(cl.token_logprobs[0], refTop[0][1]) && cl.tokens[0] === refTop[0][2],
        `${cl.tokens[0]} ${cl.token_logprobs[0]} vs ${refTop[0][2]} ${refTop[0][1]}`);
  // the dict is keyed by text: tokens that decode alike (U+FFFD) share a key, the likelier one's
  const refOf = (t) => refTop.find((x) => x[2] === t);
  const dictOk = (d) => refTop.slice(0, 2).every(([, , t]) => t in d) &&
    Object.entries(d).every(([t, l]) => !refOf(t) || close(l, refOf(t)[1]));
  const d0 = cl.top_logprobs[0];
  check("completions logprobs: the alternatives equal `qwisp logits` top-2", dictOk(d0), JSON.stringify([d0, refTop.slice(0, 2)]));

  // sampled at temperature 1.5 + penalties: logprobs stay the model's (not the sampling distribution)
  const hot = await client.completions.create({ model: "tiny", prompt: "In the beginning", max_tokens: 1, temperature: 1.5, seed: 3,
                                                presence_penalty: 1, logprobs: 2 });
  const h = hot.choices[0].logprobs;
  check("logprobs are before temperature and penalties", h.top_logprobs[0] && dictOk(h.top_logprobs[0]), JSON.stringify(h));

  // completions streaming: the chunks' legacy objects concatenate to the non-streaming one
  const cs = await client.completions.create({ model: "tiny", prompt: "In the beginning", max_tokens: 6, temperature: 0, logprobs: 2, stream: true });
  const acc = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const k of cs) {
    const l = k.choices[0]?.logprobs;
    if (l) for (const f of Object.keys(acc)) acc[f].push(...l[f]);
  }
  check("completions stream logprobs: concatenated chunks equal the non-streaming object", JSON.stringify(acc) === JSON.stringify(cl),
        JSON.stringify([acc.tokens, cl.tokens]));

  const plain = await client.chat.completions.create({ model: "tiny", messages: msgs("Hello"), max_tokens: 2 });
  check("no logprobs asked: logprobs null", plain.choices[0].logprobs === null, JSON.stringify(plain.choices[0]));
}

// ---- a JSON Schema validator for the supported subset ----
function validate(s, v, path = "$") {
  const errs = [];
  const type = (x) => (x === null ? "null" : Array.isArray(x) ? "array" : typeof x);
  if (s === true || Object.keys(s).length === 0) return errs;
  if ("const" in s && JSON.stringify(v) !== JSON.stringify(s.const)) errs.push(`${path}: not the const`);
  if (s.enum && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) errs.push(`${path}: ${JSON.stringify(v)} not in enum`);
  const t = s.type;
  if (t === "integer" && !Number.isInteger(v)) errs.push(`${path}: not an integer`);
  else if (t && t !== "integer" && type(v) !== t) errs.push(`${path}: ${type(v)} is not ${t}`);
  if (t === "string" && typeof v === "string") {
    const len = [...v].length;
    if (s.maxLength !== undefined && len > s.maxLength) errs.push(`${path}: longer than ${s.maxLength}`);
    if (s.minLength !== undefined && len < s.minLength) errs.push(`${path}: shorter than ${s.minLength}`);
  }
  if (t === "array" && Array.isArray(v)) {
    if (s.maxItems !== undefined && v.length > s.maxItems) errs.push(`${path}: more than ${s.maxItems} items`);
    if (s.minItems !== undefined && v.length < s.minItems) errs.push(`${path}: fewer than ${s.minItems} items`);
    if (s.items) v.forEach((x, i) => errs.push(...validate(s.items, x, `${path}[${i}]`)));
  }
  if ((t === "object" || s.properties) && type(v) === "object") {
    const props = s.properties || {};
    for (const r of s.required || []) if (!(r in v)) errs.push(`${path}: missing ${r}`);
    for (const [k, x] of Object.entries(v)) {
      if (k in props) errs.push(...validate(props[k], x, `${path}.${k}`));
      else if (s.additionalProperties === false) errs.push(`${path}: extra key ${k}`);
    }
  }
  return errs;
}

const SCHEMAS = {
  person: { type: "object", additionalProperties: false, required: ["name", "age", "member"],
            properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer" }, member: { type: "boolean" } } },
  order: { type: "object", additionalProperties: false, required: ["id", "status", "items", "ship"],
           properties: { id: { type: "integer" }, status: { enum: ["open", "paid", "shipped"] },
                         items: { type: "array", maxItems: 3, items: { type: "object", additionalProperties: false,
                                  required: ["sku", "qty", "price"],
                                  properties: { sku: { type: "string", minLength: 1, maxLength: 6 }, qty: { type: "integer" },
                                                price: { type: "number" } } } },
                         ship: { type: "object", additionalProperties: false, required: ["city"],
                                 properties: { city: { type: "string", maxLength: 10 }, express: { type: "boolean" } } },
                         note: { type: "null" } } },
  tags: { type: "object", additionalProperties: false, required: ["tags", "level"],
          properties: { tags: { type: "array", minItems: 1, maxItems: 4, items: { type: "string", maxLength: 5 } },
                        level: { const: "high" } } },
};

async function json() {
  for (const [name, schema] of Object.entries(SCHEMAS)) {
    for (const [label, extra] of [["greedy", { temperature: 0 }], ["seed 1", { temperature: 1, seed: 1 }],
                                  ["seed 2 top_p", { temperature: 0.9, top_p: 0.9, seed: 2 }]]) {
      const rf = { type: "json_schema", json_schema: { name, schema, strict: true } };
      const r = await client.chat.completions.create({ model: "tiny", messages: msgs(`Give me a ${name} as JSON`), max_tokens: 600,
                                                       response_format: rf, ...extra });
      const out = r.choices[0].message.content;
      let v, errs;
      try { v = JSON.parse(out); errs = validate(schema, v); } catch (e) { errs = ["not JSON: " + e.message]; }
      check(`json_schema ${name} (${label}): ends with finish_reason stop and validates`,
            r.choices[0].finish_reason === "stop" && errs.length === 0, `${r.choices[0].finish_reason} ${errs.join("; ")} ${JSON.stringify(out)}`);
    }
    // streaming: the deltas make a valid document too
    const st = await client.chat.completions.create({ model: "tiny", messages: msgs(`A ${name}`), max_tokens: 600, temperature: 1, seed: 5,
                                                      response_format: { type: "json_schema", json_schema: { name, schema } }, stream: true });
    let out = "", fin = null;
    for await (const c of st) { out += c.choices[0]?.delta?.content || ""; fin = c.choices[0]?.finish_reason || fin; }
    let errs;
    try { errs = validate(schema, JSON.parse(out)); } catch (e) { errs = ["not JSON: " + e.message]; }
    check(`json_schema ${name} streamed: validates`, fin === "stop" && errs.length === 0, `${fin} ${errs.join("; ")} ${JSON.stringify(out)}`);
  }
  // completions take response_format too (an extension), with logprobs alongside
  const c = await client.completions.create({ model: "tiny", prompt: "JSON:", max_tokens: 400, temperature: 0.8, seed: 4, logprobs: 1,
    response_format: { type: "json_schema", json_schema: { name: "p", schema: SCHEMAS.person } } });
  let errs;
  try { errs = validate(SCHEMAS.person, JSON.parse(c.choices[0].text)); } catch (e) { errs = ["not JSON: " + e.message]; }
  check("json_schema on /v1/completions with logprobs: validates", c.choices[0].finish_reason === "stop" && errs.length === 0 &&
        c.choices[0].logprobs.tokens.length === c.usage.completion_tokens - 1, `${errs} ${JSON.stringify(c.choices[0]).slice(0, 300)}`);

  // json_object: an object, or cut by max_tokens (free-form strings can run on)
  let nObj = 0;
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({ model: "tiny", messages: msgs("JSON please"), max_tokens: 200, temperature: 1, seed,
                                                     response_format: { type: "json_object" } });
    const out = r.choices[0].message.content, fin = r.choices[0].finish_reason;
    let ok = out.startsWith("{");
    if (fin === "stop") {
      try { const v = JSON.parse(out); ok &&= typeof v === "object" && v !== null && !Array.isArray(v); nObj++; } catch { ok = false; }
    } else ok &&= fin === "length";
    check(`json_object seed ${seed}: ${fin === "stop" ? "a JSON object" : "a prefix of one, cut at max_tokens"}`, ok, `${fin} ${JSON.stringify(out)}`);
  }
}

if (mode === "logprobs") await logprobs();
else if (mode === "json") await json();
else { console.log(`FAIL: unknown mode ${mode}`); failed++; }
process.exit(failed ? 1 : 0);
