#!/bin/bash
# t_chat_templates.sh — qwisp's chat-template rendering against Jinja itself,
# byte for byte, for the real Qwen3, Qwen3.5 and Qwen3-Coder templates.
#
# The templates are not copied into the repo: they come from the llama.cpp
# source that node-llama-cpp ships as llama/gitRelease.bundle
# (models/templates/Qwen-Qwen3-0.6B.jinja, Qwen3.5-4B.jinja, Qwen3-Coder.jinja,
# which are the models' own tokenizer_config.json templates), cloned here into
# the test's tmp dir with only those files checked out, as
# t_tokenizer_qwen35.sh takes the vocab.
# Checks:
#   - every conversation of tests/text/chat_corpus.json (system/user/assistant,
#     multi-turn with <think> in earlier turns, enable_thinking on/off, tools,
#     tool calls (parallel too), tool results, multi-step tool use, text
#     content parts, control-token text and Unicode in content, whitespace,
#     tool schemas with extra keys, the templates' own refusals) rendered by
#     `qwisp template` equals
#     @huggingface/jinja's rendering (render_jinja.mjs), or both refuse;
#     cases marked python_only are where that engine departs from Python's
#     Jinja (the reason is in the corpus) and are compared with Python only;
#   - the same against Python's jinja2 in transformers' environment
#     (render_jinja.py), all cases, when python3 has jinja2 (INFO if not);
#   - recognition: the three templates and models/default.gguf's are
#     "exact"; Qwen2.5's renders as ChatML with a note (and refuses tools); an
#     edited Qwen3 template renders as qwen3 with a note; a llama3 template is
#     refused by name.
# Peers missing is a FAIL, not a SKIP.  Env: QWISP_BIN, QWISP_TEST_TMP.
set -u
BIN=${QWISP_BIN:-$PWD/build/qwisp}
TMP=${QWISP_TEST_TMP:-$(mktemp -d)}/chattmpl
rm -rf "$TMP"; mkdir -p "$TMP"
PEERS=$PWD/tests/peers/node_modules
BUNDLE=$PEERS/node-llama-cpp/llama/gitRelease.bundle
CORPUS=$PWD/tests/text/chat_corpus.json

for need in "$BUNDLE" "$PEERS/@huggingface/jinja/dist/index.js"; do
    if [ ! -f "$need" ]; then
        echo "FAIL: chat templates: $need missing (run scripts/setup.sh)"
        exit 1
    fi
done
for cmd in node git python3; do
    command -v $cmd >/dev/null || { echo "FAIL: chat templates: $cmd not found"; exit 1; }
done
[ -x "$BIN" ] || { echo "FAIL: chat templates: $BIN not built"; exit 1; }

D=models/templates
if ! { git clone -q --no-checkout "$BUNDLE" "$TMP/llama" &&
       git -C "$TMP/llama" checkout -q HEAD -- "$D/Qwen-Qwen3-0.6B.jinja" "$D/Qwen3.5-4B.jinja" \
           "$D/Qwen3-Coder.jinja" "$D/Qwen-Qwen2.5-7B-Instruct.jinja"; } >"$TMP/clone.log" 2>&1; then
    echo "FAIL: chat templates: cannot take $D from $BUNDLE: $(tail -c 300 "$TMP/clone.log")"
    exit 1
fi
T=$TMP/llama/$D

have_py=0
python3 -c 'import jinja2' 2>/dev/null && have_py=1
[ $have_py = 1 ] || echo "INFO: chat templates: python3 has no jinja2; the Python oracle is not run"

for name in Qwen-Qwen3-0.6B Qwen3.5-4B Qwen3-Coder; do
    tf=$T/$name.jinja
    if ! node tests/text/render_jinja.mjs "$PEERS" "$tf" "$CORPUS" >"$TMP/$name.js.json" 2>"$TMP/$name.js.err"; then
        echo "FAIL: chat template $name: the Jinja oracle failed: $(head -c 300 "$TMP/$name.js.err")"
        continue
    fi
    py=""
    if [ $have_py = 1 ]; then
        if python3 tests/text/render_jinja.py "$tf" "$CORPUS" >"$TMP/$name.py.json" 2>"$TMP/$name.py.err"; then
            py=$TMP/$name.py.json
        else
            echo "FAIL: chat template $name: the Python oracle failed: $(head -c 300 "$TMP/$name.py.err")"
        fi
    fi
    python3 - "$BIN" "$tf" "$CORPUS" "$TMP/$name.js.json" "$py" "$name" "$TMP" <<'PYEOF'
import json, subprocess, sys
bin_, tf, corpus, js, py, name, tmp = sys.argv[1:8]
cases = json.load(open(corpus, encoding="utf-8"))
oracles = [("@huggingface/jinja", json.load(open(js, encoding="utf-8")))]
if py:
    oracles.append(("python jinja2", json.load(open(py, encoding="utf-8"))))
for oname, ref in oracles:
    bad, n, both_refuse, skipped = [], 0, 0, 0
    for c in cases:
        if oname == "@huggingface/jinja" and c.get("python_only"):
            skipped += 1
            continue
        req = f"{tmp}/req.json"
        open(req, "w", encoding="utf-8").write(json.dumps(c["request"], ensure_ascii=False))
        r = subprocess.run([bin_, "template", "--chat-template-file", tf, req], capture_output=True)
        ours = {"error": r.stderr.decode(errors="replace").strip()} if r.returncode else r.stdout.decode()
        want = ref[c["name"]]
        n += 1
        if isinstance(want, dict) or isinstance(ours, dict):
            if isinstance(want, dict) and isinstance(ours, dict):
                both_refuse += 1
            else:
                bad.append(f'{c["name"]} (jinja: {str(want)[:120]!r}; qwisp: {str(ours)[:200]!r})')
        elif want != ours:
            i = next((k for k in range(min(len(want), len(ours))) if want[k] != ours[k]), min(len(want), len(ours)))
            bad.append(f'{c["name"]} (first difference at byte {i}: jinja {want[i:i+40]!r}, qwisp {ours[i:i+40]!r})')
    extra = f", {skipped} python_only cases left to the Python oracle" if skipped else ""
    if bad:
        print(f"FAIL: chat template {name} == {oname}: {len(bad)} of {n} differ: " + "; ".join(bad[:4]))
    else:
        print(f"PASS: chat template {name} == {oname}: {n} conversations byte for byte ({both_refuse} refused by both){extra}")
PYEOF
done

# recognition
info() { "$BIN" template "$@" --info 2>&1 | head -1; }
for name in Qwen-Qwen3-0.6B Qwen3.5-4B Qwen3-Coder; do
    out=$(info --chat-template-file "$T/$name.jinja")
    [[ $out == *" exact "* ]] && echo "PASS: chat template $name recognised: $out" ||
        echo "FAIL: chat template $name not recognised as exact: $out"
done
out=$(info)
[[ $out == "qwen3 exact "* ]] && echo "PASS: models/default.gguf's chat template is the exact Qwen3 one" ||
    echo "FAIL: models/default.gguf's template: $out"
out=$("$BIN" template --chat-template-file "$T/Qwen-Qwen2.5-7B-Instruct.jinja" --info 2>&1)
[[ $out == "chatml approximate"*"note: "*"rendered as plain ChatML"* ]] &&
    echo "PASS: Qwen2.5's template: ChatML with a stated note" || echo "FAIL: Qwen2.5's template: $out"
sed 's/You may call one or more functions/You can call one or more functions/' "$T/Qwen-Qwen3-0.6B.jinja" >"$TMP/edited.jinja"
out=$("$BIN" template --chat-template-file "$TMP/edited.jinja" --info 2>&1)
[[ $out == "qwen3 approximate"*"note: "*"may differ"* ]] &&
    echo "PASS: an edited Qwen3 template renders as qwen3 with a note" || echo "FAIL: edited Qwen3 template: $out"
printf '%s' '{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>{% endfor %}' >"$TMP/llama3.jinja"
echo '{"messages":[{"role":"user","content":"hi"}]}' >"$TMP/hi.json"
out=$("$BIN" template --chat-template-file "$TMP/llama3.jinja" "$TMP/hi.json" 2>&1); rc=$?
[ $rc != 0 ] && [[ $out == *'"llama3" is not supported'* ]] &&
    echo "PASS: a llama3 template is refused by name" || echo "FAIL: llama3 template: exit $rc: $out"
# tools on a template without tool syntax: an error naming it, not a silent drop
echo '{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}' >"$TMP/tools.json"
out=$("$BIN" template --chat-template-file "$T/Qwen-Qwen2.5-7B-Instruct.jinja" "$TMP/tools.json" 2>&1); rc=$?
[ $rc != 0 ] && [[ $out == *"no tool syntax"* ]] &&
    echo "PASS: tools on a ChatML-rendered template are refused" || echo "FAIL: tools on Qwen2.5's template: exit $rc: $out"
