#!/usr/bin/env python3
"""hf_qwen35_check.py — compares a qwen35moe forward with the transformers reference vectors
(tests/fixtures/hf_ref_qwen35/, made by make_qwen35_ref.py).

usage: hf_qwen35_check.py REF.json --name NAME --mode strict|quant -- CMD [ARG...]

CMD + ["--tokens", "1,2,3"] must print {"positions":[{"top":[[id,logprob],…]},…]} with at
least the top 30 (e.g. `qwisp logits -m X.gguf --top 30`, or the work-in-progress driver's
`tf X.gguf --top 30`).  For every reference prompt it teacher-forces prompt + the reference
greedy continuation and checks:
  strict (an F32 conversion): the top-1 id equal at every position (so the greedy
    continuation is the reference's), every reference top-20 id among CMD's top 30 with
    its logprob within TOL_STRICT;
  quant (Q8_0): top-1 agreement >= QUANT_TOP1 over the positions where the reference top-1
    leads its runner-up by >= QUANT_MARGIN logits (8-bit weights move this random model's
    logprobs by ~0.5, so closer calls are a coin toss), and the mean |d logprob| of the
    reference top-1 over all positions <= QUANT_MEAN.
Prints the measured numbers per prompt and one line `PASS: NAME` or `FAIL: NAME: …`.
"""
import json
import subprocess
import sys

TOL_STRICT = 2e-3
QUANT_MARGIN = 1.5
QUANT_TOP1 = 0.9
QUANT_MEAN = 0.7


def main():
    a = sys.argv[1:]
    if "--" not in a or len(a) < 6:
        sys.exit(__doc__)
    cut = a.index("--")
    opts, cmd = a[:cut], a[cut + 1:]
    ref = json.load(open(opts[0]))
    name, mode = opts[opts.index("--name") + 1], opts[opts.index("--mode") + 1]
    n_pos = top1 = missing = n_wide = top1_wide = 0
    max_d = sum_d1 = 0.0
    for p in ref["prompts"]:
        seq = p["prompt_ids"] + p["greedy"]
        r = subprocess.run(cmd + ["--tokens", ",".join(map(str, seq))], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL: {name}: {' '.join(cmd[:2])} failed: {r.stderr.strip()[-300:]}")
            sys.exit(1)
        got = json.loads(r.stdout)["positions"]
        if len(got) != len(seq):
            print(f"FAIL: {name}: {len(got)} positions for {len(seq)} tokens")
            sys.exit(1)
        pmax = 0.0
        ptop1 = 0
        for rp, qp in zip(p["positions"], got):
            q = {t[0]: t[1] for t in qp["top"]}
            same = qp["top"][0][0] == rp["ids"][0]
            ptop1 += same
            if rp["margin"] >= QUANT_MARGIN:
                n_wide += 1
                top1_wide += same
            for k, (tid, lp) in enumerate(zip(rp["ids"], rp["logprobs"])):
                if tid not in q:
                    missing += 1
                    continue
                d = abs(q[tid] - lp)
                pmax = max(pmax, d)
                if k == 0:
                    sum_d1 += d
        n_pos += len(seq)
        top1 += ptop1
        max_d = max(max_d, pmax)
        print(f"  {p['name']}: {len(seq)} positions, top-1 equal {ptop1}/{len(seq)}, "
              f"max |d logprob| over the reference top-20 {pmax:.3g} (transformers cached vs full pass: "
              f"{p['hf_cached_vs_full']:.3g})")
    mean_d1 = sum_d1 / n_pos
    print(f"  all: top-1 {top1}/{n_pos}, max |d logprob| {max_d:.3g}, mean |d logprob| of the top-1 {mean_d1:.3g}, "
          f"reference top-20 ids outside the top 30: {missing}; top-1 where the reference margin >= "
          f"{QUANT_MARGIN}: {top1_wide}/{n_wide}")
    if mode == "strict":
        ok = top1 == n_pos and missing == 0 and max_d <= TOL_STRICT
        why = f"top-1 {top1}/{n_pos}, max |d logprob| {max_d:.3g} (limit {TOL_STRICT}), {missing} ids missing"
    else:
        ok = n_wide > 0 and top1_wide >= QUANT_TOP1 * n_wide and mean_d1 <= QUANT_MEAN
        why = (f"top-1 {top1_wide}/{n_wide} where the margin >= {QUANT_MARGIN} (limit {QUANT_TOP1}), "
               f"mean |d logprob| {mean_d1:.3g} (limit {QUANT_MEAN})")
    print(f"PASS: {name}" if ok else f"FAIL: {name}: {why}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
