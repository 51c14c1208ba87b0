#!/usr/bin/env python3
"""hf_ref_check.py — compares qwisp with the transformers reference vectors.

usage: hf_ref_check.py QWISP_BIN MODEL.gguf REF.json --mode strict|quant [--threads N]

For every reference prompt it runs `qwisp logits --tokens <prompt+greedy> --top 20`
(teacher forcing over the same sequence transformers scored) and
`qwisp run --temp 0 -n 64 --ignore-eos --json -p <prompt>`, then checks:
  strict (an F32 conversion of the checkpoint): prompt ids identical, top-1
    identical at every position, every reference top-20 entry's logprob
    within TOL_STRICT of qwisp's, greedy continuation identical;
  quant (the shipped Q8_0 file): prompt ids identical, top-1 agreement over
    all positions >= QUANT_TOP1, mean |d logprob| of the reference top-1
    entry <= QUANT_MEAN, and the first QUANT_PREFIX greedy tokens identical
    for every prompt.
Prints the measured numbers and one line PASS/FAIL; exit status 0/1.
"""
import json
import subprocess
import sys

TOL_STRICT = 1e-3
QUANT_TOP1 = 0.93
QUANT_MEAN = 0.08
QUANT_PREFIX = 1


def qwisp(bin_, *args):
    r = subprocess.run([bin_, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qwisp {' '.join(args[:3])}... failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def main():
    a = sys.argv[1:]
    if len(a) < 5 or a[3] != "--mode":
        sys.exit(__doc__)
    bin_, model, ref_path, mode = a[0], a[1], a[2], a[4]
    threads = a[a.index("--threads") + 1] if "--threads" in a else "2"
    ref = json.load(open(ref_path))
    n_pos = top1_same = 0
    max_d = 0.0
    sum_d1 = 0.0
    ok = True
    for p in ref["prompts"]:
        seq = p["prompt_ids"] + p["greedy"]
        got = qwisp(bin_, "logits", "-m", model, "--tokens", ",".join(map(str, seq)), "--top", "20",
                    "--threads", threads)
        for i, (rp, qp) in enumerate(zip(p["positions"], got["positions"])):
            q = {t[0]: t[1] for t in qp["top"]}
            n_pos += 1
            top1_same += qp["top"][0][0] == rp["ids"][0]
            for k, (tid, lp) in enumerate(zip(rp["ids"], rp["logprobs"])):
                if tid in q:
                    d = abs(q[tid] - lp)
                    max_d = max(max_d, d)
                    if k == 0:
                        sum_d1 += d
                elif mode == "strict":
                    print(f"  {p['text']!r} pos {i}: reference top-20 id {tid} not in qwisp's top-20")
                    ok = False
        run = qwisp(bin_, "run", "-m", model, "-p", p["text"], "-n", str(len(p["greedy"])), "--temp", "0",
                    "--ignore-eos", "--json", "--threads", threads)
        if run["prompt_ids"] != p["prompt_ids"]:
            print(f"  {p['text']!r}: prompt ids differ: {run['prompt_ids']} vs {p['prompt_ids']}")
            ok = False
        same = 0
        while same < len(p["greedy"]) and same < len(run["tokens"]) and run["tokens"][same] == p["greedy"][same]:
            same += 1
        print(f"  {p['text']!r}: greedy identical for {same}/{len(p['greedy'])} tokens")
        if (mode == "strict" and same != len(p["greedy"])) or (mode != "strict" and same < QUANT_PREFIX):
            ok = False
    frac = top1_same / n_pos
    mean_d1 = sum_d1 / n_pos
    print(f"  positions {n_pos}, top-1 agreement {top1_same}/{n_pos} ({frac:.4f}), "
          f"max |d logprob| over the reference top-20 {max_d:.3g}, mean |d logprob| of top-1 {mean_d1:.3g}")
    if mode == "strict":
        ok = ok and top1_same == n_pos and max_d <= TOL_STRICT
    else:
        ok = ok and frac >= QUANT_TOP1 and mean_d1 <= QUANT_MEAN
    print(("PASS" if ok else "FAIL") + f": hf_ref_{mode}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
