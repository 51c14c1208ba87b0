#!/usr/bin/env python3
"""nsys_decode.py CSV — developer script (scripts/device_job.sh, step nsysdec):
reads `nsys stats -r cuda_gpu_trace -f csv` of a decode run and prints where a
decode token's time goes on the GPU's own clock: per kernel name, its mean
duration and the mean idle gap before it, over the last tokens (a token
starts at the embedding's get_rows kernel), and the totals per token."""
import collections
import csv
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
if not rows:
    sys.exit("no rows in " + sys.argv[1])
def col(r, *names):
    for n in names:
        for k in r:
            if k.startswith(n):
                return r[k]
    raise KeyError(names)
ev = []
for r in rows:
    name = col(r, "Name")
    if "[CUDA mem" in name:
        continue
    ev.append((int(col(r, "Start")), int(col(r, "Duration")), name.split("(")[0].replace("void ", "")))
ev.sort()
starts = [i for i, e in enumerate(ev) if e[2].startswith("get_rows")]
if len(starts) < 6:
    sys.exit("too few tokens (%d)" % len(starts))
toks = list(zip(starts[-6:-1], starts[-5:]))  # the last five whole tokens
dur = collections.defaultdict(float)
gap = collections.defaultdict(float)
cnt = collections.Counter()
wall = busy = 0.0
for a, b in toks:
    wall += (ev[b][0] - ev[a][0]) / 1e3
    for i in range(a, b):
        s, d, n = ev[i]
        g = (s - (ev[i - 1][0] + ev[i - 1][1])) / 1e3 if i > a else 0.0
        dur[n] += d / 1e3
        gap[n] += max(g, 0.0)
        cnt[n] += 1
        busy += d / 1e3
T = len(toks)
print("per token: %.1f us wall, %.1f us in kernels (%.0f %%), %d kernels" %
      (wall / T, busy / T, 100 * busy / wall, sum(cnt.values()) // T))
print("%-34s %5s %9s %9s %9s" % ("kernel", "n/tok", "us/tok", "mean us", "gap us"))
for n in sorted(dur, key=lambda k: -(dur[k] + gap[k])):
    c = cnt[n]
    print("%-34s %5.1f %9.1f %9.2f %9.2f" % (n[:34], c / T, (dur[n]) / T, dur[n] / c, gap[n] / c))
