#!/usr/bin/env python3
"""route_policy.py — replays a routing trace (QWISP_ROUTE_TRACE) through
expert-cache policies and reports hit rates and per-layer skew.

    bench/route_policy.py TRACE [C ...] [--skip N]

TRACE lines are "layer e e e ..." (one per MoE call: a chunk's chosen
experts, duplicates included).  Each call is replayed as the streaming tier
sees it: the distinct experts of the call are needed together; every needed
expert not cached is a miss and is brought in, evicting (never one of the
call's own experts) by the policy's choice.  --skip N ignores the first N
calls per layer for counting (the prompt's prefill), not for warming.
Policies:
  lru        least recently used (what streaming.c does)
  lfu        least frequently used, counts since start (ties: LRU)
  lfu-decay  counts halved every 4*C calls of the layer (ties: LRU)
  belady     the offline optimum: evict the expert used furthest in the future
Skew per layer: the share of expert uses that went to the most used 25 % of
experts, and the normalised entropy of the use distribution (1 = uniform).
"""
import bisect, math, sys
from collections import defaultdict

args = [a for a in sys.argv[1:]]
skip = 0
if "--skip" in args:
    i = args.index("--skip"); skip = int(args[i + 1]); del args[i:i + 2]
path, cs = args[0], [int(c) for c in args[1:]]
calls = defaultdict(list)  # layer -> [set of experts]
uses = defaultdict(lambda: defaultdict(int))
for line in open(path):
    f = line.split()
    if not f: continue
    il = int(f[0]); es = [int(x) for x in f[1:]]
    calls[il].append(sorted(set(es)))
    if len(calls[il]) > skip:
        for e in es: uses[il][e] += 1
n_expert = max(max(max(s) for s in v if s) for v in calls.values()) + 1

def replay(seq, c, policy):
    cache, last, cnt = set(), {}, defaultdict(float)
    hits = misses = 0
    at = defaultdict(list)  # expert -> call indices using it (belady)
    for i, need in enumerate(seq):
        for e in need: at[e].append(i)
    def next_use(x, i):
        k = bisect.bisect_right(at[x], i)
        return at[x][k] if k < len(at[x]) else math.inf
    t = 0
    for i, need in enumerate(seq):
        if policy == "lfu-decay" and i and i % (4 * c) == 0:
            for e in cnt: cnt[e] /= 2
        ns = set(need)
        for e in need:
            t += 1; cnt[e] += 1
            if e in cache:
                if i >= skip: hits += 1
            else:
                if i >= skip: misses += 1
                if len(cache) >= c:
                    cand = [x for x in cache if x not in ns] or list(cache)  # a chunk wider than C: groups
                    if policy == "lru": v = min(cand, key=lambda x: last[x])
                    elif policy.startswith("lfu"): v = min(cand, key=lambda x: (cnt[x], last[x]))
                    else: v = max(cand, key=lambda x: (next_use(x, i), -last[x]))
                    cache.discard(v)
                cache.add(e)
            last[e] = t
    return hits, misses

layers = sorted(calls)
print(f"trace {path}: {len(layers)} layers, {len(calls[layers[0]])} calls per layer, {n_expert} experts, skip {skip}")
print("| layer | uses | top-25 % share | norm. entropy |")
print("|---|---|---|---|")
for il in layers:
    u = sorted(uses[il].values(), reverse=True); tot = sum(u)
    top = sum(u[:max(1, n_expert // 4)]) / tot if tot else 0
    ent = -sum(x / tot * math.log(x / tot) for x in u if x) / math.log(n_expert) if tot else 0
    print(f"| {il} | {tot} | {top:.2f} | {ent:.2f} |")
pols = ["lru", "lfu", "lfu-decay", "belady"]
print("| C | " + " | ".join(f"{p} hit rate" for p in pols) + " |")
print("|---|" + "---|" * len(pols))
for c in cs:
    row = []
    for p in pols:
        h = m = 0
        for il in layers:
            a, b = replay(calls[il], c, p); h += a; m += b
        row.append(f"{h / (h + m):.3f}" if h + m else "-")
    print(f"| {c} | " + " | ".join(row) + " |")
