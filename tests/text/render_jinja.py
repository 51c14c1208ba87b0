# render_jinja.py — the second oracle for t_chat_templates.sh: the same
# corpus rendered by Python's jinja2 with the environment transformers'
# apply_chat_template sets up (trim_blocks, lstrip_blocks, a sandbox, tojson
# as json.dumps(ensure_ascii=False), raise_exception), i.e. how the models'
# training prompts were made.  Context built as render_jinja.mjs builds it.
# usage: python3 render_jinja.py TEMPLATE.jinja CORPUS.json
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


source = open(sys.argv[1], encoding="utf-8").read()
corpus = json.load(open(sys.argv[2], encoding="utf-8"))
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
template = env.from_string(source)
lists_ok = "render_content" in source
object_args = "arguments|items" in source


def context(req):
    messages = []
    for m in req["messages"]:
        m = dict(m)
        if m["role"] == "developer":
            m["role"] = "system"
        if isinstance(m.get("content"), list) and not lists_ok:
            m["content"] = "".join(p["text"] for p in m["content"])
        if m.get("content", "") is None and not lists_ok:
            m["content"] = ""
        if "tool_calls" in m:
            calls = []
            for c in m["tool_calls"]:
                f = dict(c["function"])
                if object_args:
                    f["arguments"] = json.loads(f["arguments"])
                calls.append({**c, "function": f})
            m["tool_calls"] = calls
        messages.append(m)
    ctx = {"messages": messages, "add_generation_prompt": True, "bos_token": "", "eos_token": "<|im_end|>"}
    if req.get("tools") and req.get("tool_choice") != "none":
        ctx["tools"] = req["tools"]
    kw = req.get("chat_template_kwargs", {})
    if "enable_thinking" in kw:
        ctx["enable_thinking"] = kw["enable_thinking"]
    return ctx


out = {}
for c in corpus:
    try:
        out[c["name"]] = template.render(**context(c["request"]))
    except Exception as e:  # the template's own raise_exception, or a type error
        out[c["name"]] = {"error": str(e)}
sys.stdout.write(json.dumps(out, ensure_ascii=False))
