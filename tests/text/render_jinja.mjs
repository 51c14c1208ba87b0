// render_jinja.mjs — the oracle for t_chat_templates.sh: renders each
// conversation of a corpus (OpenAI chat request bodies) with a Jinja chat
// template through @huggingface/jinja, the JavaScript Jinja engine
// node-llama-cpp uses.  Prints {name: prompt} or {name: {error}} as JSON.
//
// The request becomes the template's context the way OpenAI-compatible
// servers (llama.cpp's --jinja, vLLM) pass it: role "developer" -> "system";
// tool_choice "none" leaves tools out; text parts stay a list for a template
// that renders lists (Qwen3.5's render_content) and are joined otherwise;
// tool-call arguments (JSON strings on the wire) are parsed into objects for
// a template that iterates them (`arguments|items`), kept as strings
// otherwise; null content of a tool-calling assistant is "" where the
// template would call string methods on it.
// usage: node render_jinja.mjs PEERS_NODE_MODULES TEMPLATE.jinja CORPUS.json
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [peers, tmplPath, corpusPath] = process.argv.slice(2);
const { Template } = await import(pathToFileURL(join(peers, '@huggingface/jinja/dist/index.js')).href);
const source = readFileSync(tmplPath, 'utf8');
const corpus = JSON.parse(readFileSync(corpusPath, 'utf8'));
const listsOk = source.includes('render_content');
const objectArgs = source.includes('arguments|items');
const template = new Template(source);

function context(req) {
  const messages = req.messages.map((m) => {
    const out = { ...m };
    if (out.role === 'developer') out.role = 'system';
    if (Array.isArray(out.content) && !listsOk) out.content = out.content.map((p) => p.text).join('');
    if (out.content === null && !listsOk) out.content = '';
    if (out.tool_calls)
      out.tool_calls = out.tool_calls.map((c) => ({
        ...c,
        function: { ...c.function, arguments: objectArgs ? JSON.parse(c.function.arguments) : c.function.arguments },
      }));
    return out;
  });
  const ctx = { messages, add_generation_prompt: true, bos_token: '', eos_token: '<|im_end|>' };
  if (req.tools && req.tool_choice !== 'none') ctx.tools = req.tools;
  const kw = req.chat_template_kwargs || {};
  if ('enable_thinking' in kw) ctx.enable_thinking = kw.enable_thinking;
  return ctx;
}

const out = {};
for (const c of corpus) {
  try {
    out[c.name] = template.render(context(c.request));
  } catch (e) {
    out[c.name] = { error: String(e.message || e) };
  }
}
process.stdout.write(JSON.stringify(out));
