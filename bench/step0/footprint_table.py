#!/usr/bin/env python3
"""footprint_table.py FIT=STDERR... — footprint growth per prefill token from
QWISP_PREFILL_MEMDBG=1 lines (one `qwisp run` per fit rule), as a Markdown table.

Each [prefill-memdbg] line gives, at prompt position pos: the footprint (what
the OS cannot drop), kv (the KV cache + recurrent state as allocated), the
pool's active bytes (KV and state included: they are pool buffers) and its
cache.  Scratch = active - kv.  Growth per token is measured from the first
line (pos = the first report, so model load and context set-up are not in
it) to each later one: (footprint(pos) - footprint(first)) / (pos - first).

Usage: footprint_table.py exact=exact.err classes=classes.err [--at 1024,4096,16384]
"""
import re
import sys

SEED_KB_PER_TOKEN = 477.0   # 16 GB over a 35,178-token prefill (qwisp-Swift, MLX)
KEYS = ("active", "cache", "footprint", "kv")


def parse(path):
    rows = []
    for line in open(path, errors="replace"):
        if not line.startswith("[prefill-memdbg]"):
            continue
        m = re.search(r"pos=(\d+)/(\d+)", line)
        vals = {k: float(v) for k, v in re.findall(r"\b(active|cache|footprint|kv)=([0-9.]+)", line)}
        if m and all(k in vals for k in KEYS):
            rows.append((int(m.group(1)), vals))
    return rows


def main(argv):
    at = [1024, 4096, 16384, 35178]
    runs = []
    for a in argv:
        if a.startswith("--at="):
            at = [int(x) for x in a[5:].split(",")]
        elif "=" in a:
            fit, path = a.split("=", 1)
            runs.append((fit, parse(path)))
    print("| fit | pos | footprint MiB | KV + state MiB (allocated) | pool active MiB | scratch MiB (active - KV) "
          "| pool cache MiB | growth from the first report, KB/token | of which pool cache, KB/token |")
    print("|---|---|---|---|---|---|---|---|---|")
    for fit, rows in runs:
        if not rows:
            print(f"| {fit} | (no MEMDBG lines) | | | | | | | |")
            continue
        p0, v0 = rows[0]
        for pos, v in rows:
            if pos not in at and pos != rows[-1][0] and pos != p0:
                continue
            dt = pos - p0
            g = f"{(v['footprint'] - v0['footprint']) * 1024 / dt:.1f}" if dt else "–"
            gc = f"{(v['cache'] - v0['cache']) * 1024 / dt:.1f}" if dt else "–"
            print(f"| {fit} | {pos} | {v['footprint']:.1f} | {v['kv']:.1f} | {v['active']:.1f} | "
                  f"{v['active'] - v['kv']:.1f} | {v['cache']:.1f} | {g} | {gc} |")
    print(f"\nThe seed's growth: {SEED_KB_PER_TOKEN:.0f} KB/token.")


if __name__ == "__main__":
    main(sys.argv[1:])
