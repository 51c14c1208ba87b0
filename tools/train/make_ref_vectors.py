#!/usr/bin/env python3
"""make_ref_vectors.py — Hugging Face transformers as a reference for qwisp.

Loads a Qwen3-MoE checkpoint (the trained default model) with transformers in
fp32 on the CPU (no TF32, no bf16, eager attention: plain fp32 math), and for
each prompt below records
  prompt_ids   the tokenizers library's ids for the prompt (no BOS: Qwen3 adds none)
  greedy       the 64-token greedy continuation (argmax of the logits, EOS ignored)
  positions    for every position of prompt+continuation (the distribution of the
               token after it): the top-20 ids, their raw logits and logprobs
               (logit - logsumexp), and margin = top1 - top2 logit
and writes one JSON file (values rounded to 6 decimals).  The bf16 weights of
the checkpoint are read exactly (bf16 -> fp32 is lossless), so a GGUF made by
`qwisp convert --type f32` holds the very same numbers.

usage: python3 make_ref_vectors.py --ckpt DIR --out FILE.json [--n-gen 64]
"""
import argparse
import json

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM

PROMPTS = [
    "In the beginning God created",
    "And the LORD spake unto Moses, saying,",
    "The river came down from the hills",
    "Blessed are the poor in spirit: for",
    "A fool and his money",
]
# --chat: prompts in the Qwen3.5 chat format (the qwen35moe model learned it)
CHAT_PROMPTS = [
    "<|im_start|>user\nWhat does John 3:16 say?<|im_end|>\n<|im_start|>assistant\n<think>\n",
    "<|im_start|>user\nTell me a fortune.<|im_end|>\n<|im_start|>assistant\n<think>\n",
]
TOP = 20


def r6(x):
    return [round(float(v), 6) for v in x]


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n-gen", type=int, default=64)
    ap.add_argument("--chat", action="store_true")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_num_threads(8)
    tok = Tokenizer.from_file(a.ckpt + "/tokenizer.json")
    model = AutoModelForCausalLM.from_pretrained(a.ckpt, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    res = dict(source="transformers " + __import__("transformers").__version__ +
               ", torch " + torch.__version__ + ", fp32 on CPU, eager attention",
               checkpoint_config={k: v for k, v in model.config.to_dict().items()
                                  if isinstance(v, (int, float, str, bool))},
               top=TOP, prompts=[])
    for p in PROMPTS + (CHAT_PROMPTS if a.chat else []):
        ids = tok.encode(p, add_special_tokens=False).ids
        seq = list(ids)
        for _ in range(a.n_gen):
            logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
            seq.append(int(torch.argmax(logits)))
        logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0].float()
        lp = torch.log_softmax(logits, dim=-1)
        vals, idx = torch.topk(logits, TOP, dim=-1)
        pos = []
        for i in range(len(seq)):
            pos.append(dict(ids=idx[i].tolist(), logits=r6(vals[i]),
                            logprobs=r6(lp[i][idx[i]]),
                            margin=round(float(vals[i][0] - vals[i][1]), 6)))
        # the full-sequence pass must agree with the step-by-step argmax
        bad = [i for i in range(len(ids) - 1, len(seq) - 1) if pos[i]["ids"][0] != seq[i + 1]]
        if bad:
            print("   WARNING: full-pass argmax differs from step-by-step at", bad, flush=True)
        greedy = seq[len(ids):]
        res["prompts"].append(dict(text=p, prompt_ids=ids, greedy=greedy,
                                   greedy_text=tok.decode(greedy, skip_special_tokens=False),
                                   positions=pos))
        print(json.dumps(p), "->", json.dumps(tok.decode(greedy)), flush=True)
        print("   min margin along greedy:",
              min(pos[i]["margin"] for i in range(len(ids) - 1, len(seq) - 1)), flush=True)
    with open(a.out, "w") as f:
        json.dump(res, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
