#!/usr/bin/env python3
"""decode_kernels.py CSV — developer script (scripts/device_job.sh, steps
ncu, ncudec and nsysdec): where a decode token's GPU time goes, per kernel
name, averaged over the run's last five whole tokens (a token starts at the
embedding's get_rows kernel); for a run of fewer tokens (a prefill), the
totals over the whole run.

CSV is either `nsys stats -r cuda_gpu_trace -f csv` (start and duration of
each kernel: the idle gap before each kernel is shown too) or `ncu --csv
--metrics gpu__time_duration.sum` (durations only, each kernel run alone)."""
import collections
import csv
import signal
import sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`

lines = [l for l in open(sys.argv[1]) if l.startswith('"') or l[:1].isdigit() or l.startswith("Start")]
rows = list(csv.DictReader(lines))
if not rows:
    sys.exit("no rows in " + sys.argv[1])


def col(r, name):
    for k in r:
        if k and k.startswith(name):
            return r[k]
    raise KeyError(name)


ncu = "Kernel Name" in rows[0]
ev = []  # (start ns or index, duration ns, name)
for i, r in enumerate(rows):
    if ncu:
        unit = {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}[r["Metric Unit"]]
        ev.append((i, float(r["Metric Value"].replace(",", "")) * unit, r["Kernel Name"]))
    else:
        name = col(r, "Name")
        if "[CUDA mem" not in name:
            ev.append((int(col(r, "Start")), int(col(r, "Duration")), name))
ev = [(s, d, n.split("(")[0].replace("void ", "")) for s, d, n in sorted(ev)]
starts = [i for i, e in enumerate(ev) if e[2].startswith("get_rows")]
if len(starts) >= 6:
    toks = list(zip(starts[-6:-1], starts[-5:]))
else:  # not a decode run (a prefill): every kernel, as one "token"
    toks = [(0, len(ev))]
    print("fewer than 6 tokens: totals over the whole run")
dur, gap, cnt = collections.defaultdict(float), collections.defaultdict(float), collections.Counter()
wall = busy = 0.0
for a, b in toks:
    if not ncu:
        wall += (ev[b][0] - ev[a][0]) / 1e3
    for i in range(a, b):
        s, d, n = ev[i]
        dur[n] += d / 1e3
        busy += d / 1e3
        cnt[n] += 1
        if not ncu and i > a:
            gap[n] += max((s - (ev[i - 1][0] + ev[i - 1][1])) / 1e3, 0.0)
T = len(toks)
if ncu:
    print("per token: %.1f us in kernels (each run alone), %d kernels" % (busy / T, sum(cnt.values()) // T))
else:
    print("per token: %.1f us wall, %.1f us in kernels (%.0f %%), %d kernels" %
          (wall / T, busy / T, 100 * busy / wall, sum(cnt.values()) // T))
print("%-34s %5s %9s %9s %9s" % ("kernel", "n/tok", "us/tok", "mean us", "gap us"))
for n in sorted(dur, key=lambda k: -(dur[k] + gap[k])):
    c = cnt[n]
    print("%-34s %5.1f %9.1f %9.2f %9.2f" % (n[:34], c / T, dur[n] / T, dur[n] / c, gap[n] / c))
