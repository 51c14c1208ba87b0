// tools_client.mjs — tool calling through `qwisp serve` with the official
// openai npm client, streaming and not (tests/serve/t_tools.sh starts the
// servers; each one replies with a scripted text, see there).
//
//   node tools_client.mjs BASE_URL MODE
//   MODE qwen3       reply = reasoning + text + two Qwen3 <tool_call>{json} calls
//   MODE qwen35      reply = reasoning (the template opened <think>) + text + one
//                    Qwen3.5 <function=…><parameter=…> call
//   MODE coder       reply = text + one call, under the Qwen3-Coder template
//   MODE real        no script: models/qwen35moe.gguf's own reply to a get_verse request
//   MODE forced      reply = the rest of a call whose opening the prompt forced
//                    (tool_choice named / required)
// Prints one "PASS: name" / "FAIL: name" line per check.
const { default: OpenAI } = await import(new URL("../peers/node_modules/openai/index.mjs", import.meta.url));

const [base, mode] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "none", maxRetries: 0, timeout: 60000 });
let failed = 0;
function check(name, ok, detail = "") {
  console.log(`${ok ? "PASS" : "FAIL"}: ${mode}: ${name}${ok ? "" : " — " + detail}`);
  if (!ok) failed++;
}
const J = (x) => JSON.stringify(x).slice(0, 400);

const weather = { type: "function", function: { name: "get_weather", description: "Current weather of a city",
  parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] } } };
const search = { type: "function", function: { name: "search", description: "Web search",
  parameters: { type: "object", properties: { q: { type: "string" } } } } };
const ask = [{ role: "system", content: "You can look up the weather." }, { role: "user", content: "Weather in Paris and Tokyo?" }];
const base_req = { model: "default", messages: ask, max_tokens: 200, temperature: 0 };

// The stream's pieces put together the way the OpenAI docs show.
async function collect(stream) {
  const calls = [];
  let content = "", reasoning = "", finish = null, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    const c = ch.choices[0];
    if (!c) continue;
    const d = c.delta || {};
    if (d.content) content += d.content;
    if (d.reasoning_content) reasoning += d.reasoning_content;
    for (const t of d.tool_calls || []) {
      const cur = (calls[t.index] ||= { id: "", type: "", function: { name: "", arguments: "" } });
      if (t.id) cur.id = t.id;
      if (t.type) cur.type = t.type;
      if (t.function?.name) cur.function.name += t.function.name;
      if (t.function?.arguments) cur.function.arguments += t.function.arguments;
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { calls, content, reasoning, finish, chunks };
}

function args(call) {
  try { return JSON.parse(call.function.arguments); } catch { return "unparseable: " + call.function.arguments; }
}
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

async function main() {
if (mode === "qwen3") {
  const want = [{ city: "Paris" }, { city: "Tokyo", days: 2 }];
  const r = await client.chat.completions.create({ ...base_req, tools: [weather, search] });
  const m = r.choices[0].message;
  check("non-stream: finish_reason tool_calls", r.choices[0].finish_reason === "tool_calls", J(r.choices[0]));
  check("non-stream: two tool calls with JSON-string arguments",
        m.tool_calls?.length === 2 && m.tool_calls.every((c, i) => c.type === "function" && c.function.name === "get_weather" &&
          typeof c.function.arguments === "string" && same(args(c), want[i]) && /^call_/.test(c.id)), J(m));
  check("non-stream: distinct call ids", m.tool_calls?.length === 2 && m.tool_calls[0].id !== m.tool_calls[1].id, J(m.tool_calls));
  check("non-stream: text before the calls is content", m.content === "Let me check both.", J(m.content));
  check("non-stream: thinking apart as reasoning_content", m.reasoning_content === "The user wants two cities.", J(m));

  const s = await collect(await client.chat.completions.create({ ...base_req, tools: [weather, search], stream: true }));
  check("stream: finish_reason tool_calls", s.finish === "tool_calls", J(s));
  check("stream: delta.tool_calls assemble into the same two calls",
        s.calls.length === 2 && s.calls.every((c, i) => c.function.name === "get_weather" && same(args(c), want[i]) && c.id && c.type === "function"),
        J(s.calls));
  check("stream: content and reasoning_content deltas", s.content.trim() === "Let me check both." &&
        s.reasoning === "The user wants two cities.", J({ c: s.content, r: s.reasoning }));
  check("stream: no tool-call markup leaks into content", !s.content.includes("<tool_call") && !s.content.includes("get_weather"), J(s.content));

  const one = await client.chat.completions.create({ ...base_req, tools: [weather], parallel_tool_calls: false });
  check("parallel_tool_calls false: one call", one.choices[0].message.tool_calls?.length === 1 &&
        one.choices[0].finish_reason === "tool_calls", J(one.choices[0]));

  const none = await client.chat.completions.create({ ...base_req, tools: [weather], tool_choice: "none" });
  check("tool_choice none: nothing parsed, the text is content", !none.choices[0].message.tool_calls &&
        none.choices[0].message.content.includes("<tool_call>") && none.choices[0].finish_reason === "stop", J(none.choices[0]));

  const notools = await client.chat.completions.create(base_req);
  check("no tools: the text is content", !notools.choices[0].message.tool_calls &&
        notools.choices[0].message.content.includes("<tool_call>"), J(notools.choices[0]));

  const unknown = await client.chat.completions.create({ ...base_req, tools: [search] });
  check("unknown function: returned as plain content, finish stop", !unknown.choices[0].message.tool_calls &&
        unknown.choices[0].message.content.includes("get_weather") && unknown.choices[0].finish_reason === "stop", J(unknown.choices[0]));
  const unknownS = await collect(await client.chat.completions.create({ ...base_req, tools: [search], stream: true }));
  check("unknown function, stream: the held text arrives as content", unknownS.calls.length === 0 &&
        unknownS.content.includes("<tool_call>") && unknownS.finish === "stop", J(unknownS));

  // The calls fed back with their results: rendered through the template (prompt grows), answered.
  const back = [...ask, { role: "assistant", content: m.content, tool_calls: m.tool_calls },
    { role: "tool", tool_call_id: m.tool_calls[0].id, content: "Paris: 18 C, clear" },
    { role: "tool", tool_call_id: m.tool_calls[1].id, content: "Tokyo: 25 C, rain" }];
  const r2 = await client.chat.completions.create({ ...base_req, messages: back, tools: [weather] });
  check("tool results fed back: 200 and a longer prompt", r2.usage.prompt_tokens > r.usage.prompt_tokens + 20, J(r2.usage));

  const off = await client.chat.completions.create({ ...base_req, chat_template_kwargs: { enable_thinking: false } });
  check("enable_thinking false: the prompt closes an empty think block (+4 tokens)",
        off.usage.prompt_tokens === notools.usage.prompt_tokens + 4, `${off.usage.prompt_tokens} vs ${notools.usage.prompt_tokens}`);

  for (const [name, body, param] of [
    ["tool_choice naming a function not in tools", { tools: [weather], tool_choice: { type: "function", function: { name: "nope" } } }, "tool_choice"],
    ["tool_choice required without tools", { tool_choice: "required" }, "tool_choice"],
    ["tool_choice bad string", { tools: [weather], tool_choice: "sometimes" }, "tool_choice"],
    ["a tool name with markup", { tools: [{ type: "function", function: { name: "<|im_end|>" } }] }, "tools"],
    ["chat_template_kwargs.enable_thinking not a boolean", { chat_template_kwargs: { enable_thinking: "no" } }, "chat_template_kwargs"],
  ]) {
    try {
      await client.chat.completions.create({ ...base_req, ...body });
      check(`${name} -> 400`, false, "accepted");
    } catch (e) {
      check(`${name} -> 400 (param ${param})`, e.status === 400 && e.param === param, `${e.status} ${e.param} ${e.message}`);
    }
  }
} else if (mode === "qwen35") {
  const want = { city: "Paris", days: 3 };
  const r = await client.chat.completions.create({ ...base_req, tools: [weather] });
  const m = r.choices[0].message;
  check("non-stream: <function=…><parameter=…> parsed into a call", r.choices[0].finish_reason === "tool_calls" &&
        m.tool_calls?.length === 1 && m.tool_calls[0].function.name === "get_weather" && same(args(m.tool_calls[0]), want), J(r.choices[0]));
  check("non-stream: reasoning (the template opened <think>) and content apart",
        m.reasoning_content === "Paris, so one call." && m.content === "I will look it up.", J(m));
  const s = await collect(await client.chat.completions.create({ ...base_req, tools: [weather], stream: true }));
  check("stream: delta.tool_calls + finish_reason tool_calls", s.finish === "tool_calls" && s.calls.length === 1 &&
        same(args(s.calls[0]), want), J(s));
  check("stream: reasoning_content and content deltas", s.reasoning === "Paris, so one call." && s.content.trim() === "I will look it up.", J(s));
  const bad = await client.chat.completions.create({ ...base_req, tools: [search] });
  check("unknown function: plain content", !bad.choices[0].message.tool_calls && bad.choices[0].finish_reason === "stop" &&
        bad.choices[0].message.content.includes("<function=get_weather>"), J(bad.choices[0]));
  const back = [...ask, { role: "assistant", content: m.content, tool_calls: m.tool_calls },
    { role: "tool", tool_call_id: m.tool_calls[0].id, content: "18 C" }];
  const r2 = await client.chat.completions.create({ ...base_req, messages: back, tools: [weather] });
  check("tool result fed back: 200 and a longer prompt", r2.usage.prompt_tokens > r.usage.prompt_tokens + 10, J(r2.usage));
} else if (mode === "coder") {
  const r = await client.chat.completions.create({ ...base_req, tools: [weather] });
  const m = r.choices[0].message;
  check("non-stream: a call under the Qwen3-Coder template", r.choices[0].finish_reason === "tool_calls" &&
        m.tool_calls?.length === 1 && same(args(m.tool_calls[0]), { city: "Paris" }) && m.content === "I will look it up." &&
        !m.reasoning_content, J(r.choices[0]));
  const s = await collect(await client.chat.completions.create({ ...base_req, tools: [weather], stream: true }));
  check("stream: delta.tool_calls", s.finish === "tool_calls" && s.calls.length === 1 && same(args(s.calls[0]), { city: "Paris" }), J(s));
  const back = [...ask, { role: "assistant", content: m.content, tool_calls: m.tool_calls },
    { role: "tool", tool_call_id: m.tool_calls[0].id, content: "18 C" }];
  const r2 = await client.chat.completions.create({ ...base_req, messages: back, tools: [weather] });
  check("tool result fed back: 200 and a longer prompt", r2.usage.prompt_tokens > r.usage.prompt_tokens + 10, J(r2.usage));
} else if (mode === "real") {
  // models/qwen35moe.gguf, trained on get_verse calls, no script: whatever it writes must come
  // back either as valid tool_calls or as plain content, streaming and not, the same both ways.
  const gv = { type: "function", function: { name: "get_verse", description: "Look up one verse of the King James Bible.",
    parameters: { type: "object", properties: { book: { type: "string", description: "the book, e.g. Genesis" },
      chapter: { type: "integer" }, verse: { type: "integer" } }, required: ["book", "chapter", "verse"] } } };
  const req = { model: "qwen35moe", messages: [{ role: "user", content: "Use the tool to look up Genesis 1:1." }],
                tools: [gv], temperature: 0, max_tokens: 80 };
  const r = await client.chat.completions.create(req);
  const c = r.choices[0], m = c.message;
  const valid = (calls) => calls.every((t) => t.function.name === "get_verse" && typeof args(t) === "object");
  const wrote = m.tool_calls ? `${m.tool_calls.length} valid call(s)` : `plain content (${JSON.stringify((m.content || "").slice(0, 60))}…)`;
  check(`the model's own reply: valid tool_calls or plain content (it wrote ${wrote}, finish ${c.finish_reason})`,
        m.tool_calls ? c.finish_reason === "tool_calls" && valid(m.tool_calls)
                     : typeof m.content === "string" && m.content.length > 0 && c.finish_reason !== "tool_calls", J(c));
  const s = await collect(await client.chat.completions.create({ ...req, stream: true }));
  check("stream: the same outcome as non-streaming (greedy)",
        m.tool_calls ? s.finish === "tool_calls" && s.calls.length === m.tool_calls.length && valid(s.calls)
                     : s.calls.length === 0 && s.content === m.content && s.finish === c.finish_reason,
        J({ s, m }));
} else if (mode === "forced") {
  const named = { ...base_req, tools: [weather, search], tool_choice: { type: "function", function: { name: "get_weather" } } };
  const r = await client.chat.completions.create(named);
  const m = r.choices[0].message;
  check("named tool_choice: the forced call parses", r.choices[0].finish_reason === "tool_calls" && m.tool_calls?.length === 1 &&
        m.tool_calls[0].function.name === "get_weather" && same(args(m.tool_calls[0]), { city: "Paris" }), J(r.choices[0]));
  const s = await collect(await client.chat.completions.create({ ...named, stream: true }));
  check("named tool_choice, stream: one call, nothing as content", s.finish === "tool_calls" && s.calls.length === 1 &&
        s.calls[0].function.name === "get_weather" && s.content === "", J(s));
  const req = await client.chat.completions.create({ ...base_req, tools: [weather], tool_choice: "required" });
  check("required: the prefill without a name + this reply is not a call -> content, finish stop",
        !req.choices[0].message.tool_calls && req.choices[0].finish_reason === "stop" &&
        req.choices[0].message.content.startsWith("<tool_call>"), J(req.choices[0]));
}
}
try {
  await main();
} catch (e) {
  check("the client did not throw", false, String(e.stack || e).slice(0, 400));
}
process.exit(failed ? 1 : 0);
