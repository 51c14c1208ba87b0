#!/usr/bin/env python3
"""make_qwen35_ref.py — transformers' Qwen3_5MoeForCausalLM as the reference for qwisp's
qwen35moe conversion + forward (runs on the GPU machine, where torch and transformers are;
the work itself is fp32 on the CPU: no TF32, eager attention, torch's own gated-delta-rule
and causal-conv1d fallbacks).

usage: python3 make_qwen35_ref.py --out FILE.json [--tmp DIR] [--n-gen 16]

Writes the tiny checkpoint with make_tiny_hf_qwen35.py (merged experts; also the
per-expert and nested/multimodal variants, which must give the same logits), loads it
(every checkpoint tensor must be consumed: no missing or unexpected keys), and for
each fixed token-id prompt below records
  prompt_ids   the ids (Qwen3 tokenizer; the text is kept for reading only)
  greedy       n-gen greedy tokens (argmax of a full forward pass per step)
  positions    for every position of prompt + greedy: the top-20 ids, their logits and
               logprobs (logit - logsumexp) and margin = top1 - top2 logit
  hf_cached_vs_full   max |d logprob| over the top-20 between HF's own cached
               token-by-token decode (recurrent delta rule) and its full pass (chunked):
               transformers' own rounding noise on this model
plus the checkpoint's sha256, so a test can tell that its local copy is the same.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS = [
    ("city", [785, 3840, 315, 279, 3283, 5780, 1182, 803, 1091, 264, 16183, 1635, 11, 323, 1181, 1251, 2058, 3291,
              279, 2310, 7343, 911, 279, 14796, 13]),
    ("code", [750, 10880, 18435, 53322, 982, 262, 421, 2422, 53322, 8, 2651, 220, 16, 510, 286, 470, 11943, 198,
              262, 5099, 284, 2422, 53322, 8, 442, 220, 17, 198]),
    ("fisherman", [12522, 5193, 264, 882, 1052, 572, 264, 7640, 4753, 879, 12163, 553, 279, 9396, 448, 806, 7403,
                   304, 264, 2613, 75879, 13]),
    ("cjk-emoji-numbers", [109539, 114797, 15322, 5373, 113359, 70189, 101783, 130132, 138444, 117184, 15767,
                           100096, 29269, 100066, 16586, 29412, 60204, 41932, 53826, 115481, 15767, 118669, 37541,
                           1773, 82367, 25, 11162, 248, 222, 145691, 5109, 220, 18, 13, 16, 19, 16, 20, 24, 323,
                           220, 19, 17, 0]),
]
TOP = 20


def r6(x):
    return [round(float(v), 6) for v in x]


def make(dirname, *flags):
    subprocess.run([sys.executable, os.path.join(HERE, "make_tiny_hf_qwen35.py"), dirname, *flags], check=True)


def load(cls, d, allow=()):
    """Loads d in fp32; every key outside the prefixes in allow must load."""
    m, info = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager", output_loading_info=True,
                                  ignore_mismatched_sizes=bool(allow))
    bad = {k: [n for n in v if not any(str(n).startswith(p) or str(n).startswith("('" + p) for p in allow)]
           for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if any(bad.values()):
        sys.exit(f"{d}: loading info {bad}")
    return m.eval()


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tmp", default="/tmp/q35ref")
    ap.add_argument("--n-gen", type=int, default=16)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_num_threads(8)
    print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)
    if not hasattr(transformers, "Qwen3_5MoeForCausalLM"):
        sys.exit(f"transformers {transformers.__version__} has no Qwen3_5MoeForCausalLM")
    tcls = getattr(transformers, "Qwen3_5MoeTextConfig", None)
    if tcls is not None:
        print("Qwen3_5MoeTextConfig defaults:", json.dumps({k: v for k, v in tcls().to_dict().items()
                                                           if k != "layer_types"}, sort_keys=True), flush=True)
    ck = os.path.join(a.tmp, "merged")
    make(ck)
    make(os.path.join(a.tmp, "per-expert"), "--per-expert")
    make(os.path.join(a.tmp, "nested"), "--nested")
    sha = hashlib.sha256(open(os.path.join(ck, "model.safetensors"), "rb").read()).hexdigest()
    model = load(transformers.Qwen3_5MoeForCausalLM, ck)
    print(type(model).__name__, "config class", type(model.config).__name__, "experts impl",
          getattr(model.config, "_experts_implementation", None), flush=True)

    # the other layouts of the same numbers must give the same logits
    probe = torch.tensor([PROMPTS[0][1]])
    ref_logits = model(input_ids=probe, use_cache=False).logits
    pe = load(transformers.Qwen3_5MoeForCausalLM, os.path.join(a.tmp, "per-expert"))
    d_pe = float((pe(input_ids=probe, use_cache=False).logits - ref_logits).abs().max())
    nested = load(transformers.Qwen3_5MoeForConditionalGeneration, os.path.join(a.tmp, "nested"),
                  allow=("model.visual.",))
    d_nested = float((nested(input_ids=probe, use_cache=False).logits - ref_logits).abs().max())
    print(f"max |d logit| per-expert layout {d_pe:.3g}, nested (ConditionalGeneration) layout {d_nested:.3g}",
          flush=True)
    del pe, nested

    res = dict(source=f"transformers {transformers.__version__}, torch {torch.__version__}, "
                      "Qwen3_5MoeForCausalLM, fp32 on CPU, eager attention",
               checkpoint="tests/model/make_tiny_hf_qwen35.py (merged experts)", checkpoint_sha256=sha,
               layouts_max_dlogit=dict(per_expert=d_pe, nested=d_nested),
               checkpoint_config={k: v for k, v in model.config.to_dict().items()
                                  if isinstance(v, (int, float, str, bool, list))},
               top=TOP, prompts=[])
    for name, ids in PROMPTS:
        seq = list(ids)
        for _ in range(a.n_gen):
            logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
            seq.append(int(torch.argmax(logits)))
        logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0].float()
        lp = torch.log_softmax(logits, dim=-1)
        vals, idx = torch.topk(logits, TOP, dim=-1)
        pos = [dict(ids=idx[i].tolist(), logits=r6(vals[i]), logprobs=r6(lp[i][idx[i]]),
                    margin=round(float(vals[i][0] - vals[i][1]), 6)) for i in range(len(seq))]
        bad = [i for i in range(len(ids) - 1, len(seq) - 1) if pos[i]["ids"][0] != seq[i + 1]]
        if bad:
            print("   WARNING: full-pass argmax differs from step-by-step at", bad, flush=True)
        # HF's own cached decode, one token at a time (the recurrent form, like qwisp's)
        out = model(input_ids=torch.tensor([seq[:1]]), use_cache=True)
        cache, step = out.past_key_values, [out.logits[0, -1]]
        for t in seq[1:]:
            out = model(input_ids=torch.tensor([[t]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            step.append(out.logits[0, -1])
        slp = torch.log_softmax(torch.stack(step).float(), dim=-1)
        self_d = max(float((slp[i][idx[i]] - lp[i][idx[i]]).abs().max()) for i in range(len(seq)))
        res["prompts"].append(dict(name=name, prompt_ids=ids, greedy=seq[len(ids):], hf_cached_vs_full=self_d,
                                   positions=pos))
        print(f"{name}: {len(ids)} + {a.n_gen} tokens, greedy {seq[len(ids):]}, min margin "
              f"{min(p['margin'] for p in pos):.3g}, top-1 logprob mean "
              f"{sum(p['logprobs'][0] for p in pos) / len(pos):.3f}, HF cached vs full {self_d:.3g}", flush=True)
    with open(a.out, "w") as f:
        json.dump(res, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
