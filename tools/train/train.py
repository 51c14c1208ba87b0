#!/usr/bin/env python3
"""train.py — trains qwisp's small default model on the GPU machine.

The model is transformers' own Qwen3MoeForCausalLM (so the architecture is the
reference one, not ours), with the real Qwen3 tokenizer (151,669 tokens; the
embedding has 151,936 rows like every Qwen3 checkpoint) and a small but real
MoE: 6 layers, 16 experts, top-4 routing with normalised top-k weights,
GQA (4 query heads / 2 KV heads, head_dim 64 so q is wider than the residual,
as in the big Qwen3 models), tied input/output embeddings.  The embedding is
most of the parameters (151,936 x 128 = 19.4M of ~27M); tying keeps the
shipped Q8_0 GGUF near 29 MB and the bf16 checkpoint under the device's
64 MiB return limit.

Data: tools/train/data/corpus.txt from prepare_data.py (KJV Bible + fortunes),
tokenized here, documents joined by <|endoftext|>.  Every 50th block of 8192
tokens is held out for the validation loss.

Training: AdamW, linear warm-up then cosine decay, bf16 autocast with fp32
master weights, the router's load-balancing loss (router_aux_loss_coef) on so
the experts stay used.  Everything is seeded; --steps auto times a few steps
first and picks the step count that fits --time-budget, then re-seeds and
trains from scratch (the chosen count is printed: pass it as --steps N to
repeat the run; GPU kernels are not bit-deterministic, so a repeat matches in
its loss curve, not bit for bit).  The checkpoint is saved in bf16 as
safetensors + config.json, with the tokenizer files beside it.

usage: python3 train.py --data DATA_DIR --out CKPT_DIR [--steps N|auto] [--time-budget S]
                       [--arch qwen3moe|qwen35moe]
"""
import argparse
import json
import math
import os
import random
import shutil
import time

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

SEED = 1234
MODEL = dict(
    vocab_size=151936, hidden_size=128, num_hidden_layers=6,
    num_attention_heads=4, num_key_value_heads=2, head_dim=64,
    num_experts=16, num_experts_per_tok=4, moe_intermediate_size=192,
    intermediate_size=512, decoder_sparse_step=1, mlp_only_layers=[],
    norm_topk_prob=True, max_position_embeddings=2048, rope_theta=1000000.0,
    rms_norm_eps=1e-6, tie_word_embeddings=True, output_router_logits=True,
    router_aux_loss_coef=0.01, bos_token_id=151643, eos_token_id=151645,
    attention_bias=False, use_sliding_window=False, initializer_range=0.02,
)
HP = dict(seq_len=256, batch=64, lr=3e-3, min_lr_frac=0.1, warmup=100,
          weight_decay=0.1, betas=(0.9, 0.95), clip=1.0, eval_every=250,
          eval_batches=8, log_every=25)
# --arch qwen35moe: transformers' Qwen3_5MoeForCausalLM (the Qwen3.5/3.6 MoE text
# model): 8 layers, Gated DeltaNet ("linear attention") in three of every four,
# gated full attention with partial RoPE in every fourth, 16 routed experts
# top-4 plus a shared expert with its sigmoid gate, tied embeddings, the real
# Qwen3.5 pre-tokenizer over the Qwen3 vocabulary (prepare_data_qwen35.py).
# Hidden 96 keeps the tied 151,936-row embedding at 15.5 MB in Q8_0, so the
# shipped file stays small next to models/default.gguf.
MODEL_QWEN35 = dict(
    architectures=["Qwen3_5MoeForCausalLM"], model_type="qwen3_5_moe_text",
    vocab_size=151936, hidden_size=96, num_hidden_layers=8,
    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
    hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=1e-6,
    tie_word_embeddings=True, attention_bias=False,
    rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                         mrope_section=[2, 1, 1], mrope_interleaved=True),
    linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=32,
    linear_num_key_heads=2, linear_num_value_heads=4,
    moe_intermediate_size=128, shared_expert_intermediate_size=128,
    num_experts_per_tok=4, num_experts=16,
    layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 2,
    output_router_logits=True, router_aux_loss_coef=0.01,
    bos_token_id=151643, eos_token_id=151645, initializer_range=0.02,
)
EOT = 151643  # <|endoftext|>
ARCH = "qwen3moe"  # set by --arch


def seed_all(s):
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)
    torch.cuda.manual_seed_all(s)


def load_tokens(data_dir):
    tok = Tokenizer.from_file(os.path.join(data_dir, "tokenizer.json"))
    with open(os.path.join(data_dir, "corpus.txt"), encoding="utf-8") as f:
        docs = [d.strip("\n") for d in f.read().split("\n<|endoftext|>\n")]
    ids = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(EOT)
    ids = np.asarray(ids, dtype=np.int64)
    blk = 8192
    nblk = len(ids) // blk
    val_mask = np.zeros(len(ids), dtype=bool)
    for b in range(7, nblk, 50):
        val_mask[b * blk:(b + 1) * blk] = True
    train, val = ids[~val_mask], ids[val_mask]
    print(f"data: {len(docs)} docs, {len(ids)} tokens ({len(train)} train, {len(val)} val), "
          f"{len(np.unique(ids))} distinct ids", flush=True)
    return torch.from_numpy(train), torch.from_numpy(val)


def make_model():
    if ARCH == "qwen35moe":
        from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig
        kw = {k: v for k, v in MODEL_QWEN35.items() if k not in ("architectures", "model_type")}
        cfg = Qwen3_5MoeTextConfig(**kw)
        cfg.architectures = MODEL_QWEN35["architectures"]
        return Qwen3_5MoeForCausalLM(cfg)
    cfg = Qwen3MoeConfig(**MODEL)
    # transformers 5 keeps rope settings in rope_parameters; make sure ours took
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict) and rp.get("rope_theta") != MODEL["rope_theta"]:
        rp["rope_theta"] = MODEL["rope_theta"]
    return Qwen3MoeForCausalLM(cfg)


def batch_from(stream, n, L, gen, device):
    starts = torch.randint(0, len(stream) - L - 1, (n,), generator=gen)
    x = torch.stack([stream[s:s + L] for s in starts.tolist()])
    return x.to(device, non_blocking=True)


def lr_at(step, steps):
    if step < HP["warmup"]:
        return HP["lr"] * (step + 1) / HP["warmup"]
    t = (step - HP["warmup"]) / max(1, steps - HP["warmup"])
    m = HP["min_lr_frac"]
    return HP["lr"] * (m + (1 - m) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


@torch.no_grad()
def evaluate(model, val, device):
    model.eval()
    gen = torch.Generator().manual_seed(99)
    tot = 0.0
    for _ in range(HP["eval_batches"]):
        x = batch_from(val, HP["batch"], HP["seq_len"], gen, device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=x, labels=x, output_router_logits=False)
        tot += out.loss.item()
    model.train()
    return tot / HP["eval_batches"]


def train(train_ids, val_ids, steps, device, log=None, timing_only=False):
    seed_all(SEED)
    model = make_model().to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=HP["lr"], betas=HP["betas"],
                            weight_decay=HP["weight_decay"], fused=True)
    gen = torch.Generator().manual_seed(SEED)
    t0 = time.time()
    t_mark = None
    for step in range(steps):
        if timing_only and step == 3:
            torch.cuda.synchronize()
            t_mark = time.time()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps)
        x = batch_from(train_ids, HP["batch"], HP["seq_len"], gen, device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=x, labels=x)
        out.loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), HP["clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        if timing_only:
            continue
        if step % HP["log_every"] == 0 or step == steps - 1:
            aux = out.aux_loss.item() if getattr(out, "aux_loss", None) is not None else float("nan")
            lm = out.loss.item() - (0.0 if aux != aux else MODEL["router_aux_loss_coef"] * aux)
            rec = dict(step=step, loss=round(lm, 4), aux=round(aux, 4), lr=lr_at(step, steps),
                       gnorm=round(float(gnorm), 3), s=round(time.time() - t0, 1))
            if step % HP["eval_every"] == 0 or step == steps - 1:
                rec["val"] = round(evaluate(model, val_ids, device), 4)
            print(json.dumps(rec), flush=True)
            if log:
                log.write(json.dumps(rec) + "\n")
    torch.cuda.synchronize()
    if timing_only:
        return (time.time() - t_mark) / (steps - 3)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", default="auto")
    ap.add_argument("--time-budget", type=float, default=300.0)
    ap.add_argument("--arch", choices=["qwen3moe", "qwen35moe"], default="qwen3moe")
    a = ap.parse_args()
    global ARCH
    ARCH = a.arch
    device = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    print("torch", torch.__version__, "device", torch.cuda.get_device_name(0), flush=True)
    print("model", json.dumps(MODEL_QWEN35 if ARCH == "qwen35moe" else MODEL), "\nhp", json.dumps(HP),
          "\nseed", SEED, flush=True)
    train_ids, val_ids = load_tokens(a.data)
    if a.steps == "auto":
        dt = train(train_ids, val_ids, 13, device, timing_only=True)
        steps = max(10, int(a.time_budget / (dt * 1.08)))
        print(f"timing: {dt * 1000:.1f} ms/step -> steps={steps} (repeat with --steps {steps})",
              flush=True)
    else:
        steps = int(a.steps)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "train_log.jsonl"), "w") as log:
        model = train(train_ids, val_ids, steps, device, log=log)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params: {n_params} ({n_params / 1e6:.2f}M), tokens seen: "
          f"{steps * HP['batch'] * HP['seq_len']}", flush=True)
    model.config.output_router_logits = False
    model = model.to(torch.bfloat16)
    model.save_pretrained(a.out, safe_serialization=True, max_shard_size="2GB")
    for n in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(a.data, n), os.path.join(a.out, n))
    from safetensors import safe_open
    for f in sorted(os.listdir(a.out)):
        print("saved", f, os.path.getsize(os.path.join(a.out, f)))
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(a.out, f), "pt") as st:
                keys = sorted(st.keys())
                print("  ", len(keys), "tensors;", [k for k in keys if "layers.0." in k or "layers" not in k][:40])


if __name__ == "__main__":
    main()
