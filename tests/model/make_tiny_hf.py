#!/usr/bin/env python3
"""make_tiny_hf.py — writes a tiny Qwen3MoeForCausalLM checkpoint for t_convert.sh.

usage: make_tiny_hf.py OUT_DIR TOKENIZER_DIR [--shards 2] [--merged] [--drop NAME] [--arch NAME]

Stdlib only.  config.json + BF16 safetensors (2 layers, hidden 64, 2/1 heads
of 32, 4 experts top-2, expert ff 32, the real Qwen3 vocabulary of 151,936
rows, tied embeddings) + the tokenizer files copied from TOKENIZER_DIR.
Weights are small seeded pseudo-random bf16 values (a block of 4096 tiled
with per-tensor offsets, so writing 10M values stays fast).  --shards N
splits the tensors over N files with model.safetensors.index.json; --merged
writes transformers 5's merged expert tensors (gate_up_proj / down_proj);
--drop leaves one tensor out; --arch changes config.json's architecture.
"""
import json
import os
import random
import shutil
import struct
import sys

H, L, NH, NKV, HD, X, K, F, V = 64, 2, 2, 1, 32, 4, 2, 32, 151936


def bf16_block(rng, std):
    out = bytearray()
    for _ in range(4096):
        f = struct.pack("<f", rng.gauss(0.0, std))
        out += f[2:4]
    return bytes(out)


def tensor_bytes(block, n, salt):
    off = (salt * 2 * 977) % len(block)
    rep = block[off:] + block * (2 * n // len(block) + 2)
    return rep[:2 * n]


def tensors():
    ts = [("model.embed_tokens.weight", [V, H], 0.05), ("model.norm.weight", [H], -1.0)]
    for l in range(L):
        p = f"model.layers.{l}."
        ts += [(p + "input_layernorm.weight", [H], -1.0), (p + "post_attention_layernorm.weight", [H], -1.0),
               (p + "self_attn.q_proj.weight", [NH * HD, H], 0.1), (p + "self_attn.k_proj.weight", [NKV * HD, H], 0.1),
               (p + "self_attn.v_proj.weight", [NKV * HD, H], 0.1), (p + "self_attn.o_proj.weight", [H, NH * HD], 0.1),
               (p + "self_attn.q_norm.weight", [HD], -1.0), (p + "self_attn.k_norm.weight", [HD], -1.0),
               (p + "mlp.gate.weight", [X, H], 0.3)]
        for x in range(X):
            ts += [(p + f"mlp.experts.{x}.gate_proj.weight", [F, H], 0.1),
                   (p + f"mlp.experts.{x}.up_proj.weight", [F, H], 0.1),
                   (p + f"mlp.experts.{x}.down_proj.weight", [H, F], 0.1)]
    return ts


def materialise(ts, blocks, merged):
    """[(name, shape, bytes)]; merged: the per-expert tensors of a layer become
    gate_up_proj [X, 2F, H] (expert x: gate rows, then up rows) and down_proj
    [X, H, F], holding exactly the same numbers."""
    out, ex = [], {}
    for i, (name, shape, std) in enumerate(ts):
        n = 1
        for d in shape:
            n *= d
        b = b"\x80\x3f" * n if std < 0 else tensor_bytes(blocks[std], n, i)  # norms: bf16 1.0
        if merged and ".mlp.experts." in name:
            ex[name] = b
            continue
        out.append((name, shape, b))
    if merged:
        for l in range(L):
            p = f"model.layers.{l}.mlp.experts."
            gu = b"".join(ex[p + f"{x}.gate_proj.weight"] + ex[p + f"{x}.up_proj.weight"] for x in range(X))
            dn = b"".join(ex[p + f"{x}.down_proj.weight"] for x in range(X))
            out += [(p + "gate_up_proj", [X, 2 * F, H], gu), (p + "down_proj", [X, H, F], dn)]
    return out


def write_st(path, items):
    hdr, off = {}, 0
    for name, shape, b in items:
        hdr[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
    hdr["__metadata__"] = {"format": "pt"}
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, b in items:
            f.write(b)


def main():
    a = sys.argv[1:]
    out, tokdir = a[0], a[1]
    shards = int(a[a.index("--shards") + 1]) if "--shards" in a else 1
    drop = a[a.index("--drop") + 1] if "--drop" in a else None
    arch = a[a.index("--arch") + 1] if "--arch" in a else "Qwen3MoeForCausalLM"
    os.makedirs(out, exist_ok=True)
    rng = random.Random(7)
    ts = tensors()
    blocks = {std: bf16_block(rng, std) for std in sorted({t[2] for t in ts if t[2] > 0})}
    ts = [t for t in materialise(ts, blocks, "--merged" in a) if t[0] != drop]
    cfg = dict(architectures=[arch], model_type="qwen3_moe", hidden_size=H, num_hidden_layers=L,
               num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD, num_experts=X,
               num_experts_per_tok=K, moe_intermediate_size=F, intermediate_size=K * F, vocab_size=V,
               max_position_embeddings=512, rope_theta=1000000.0, rms_norm_eps=1e-6,
               tie_word_embeddings=True, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
               bos_token_id=151643, eos_token_id=151645, hidden_act="silu")
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
    for n in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tokdir, n), os.path.join(out, n))
    if shards == 1:
        write_st(os.path.join(out, "model.safetensors"), ts)
        return
    wm = {}
    for s in range(shards):
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = [t for k, t in enumerate(ts) if k % shards == s]
        write_st(os.path.join(out, fn), part)
        for t in part:
            wm[t[0]] = fn
    json.dump({"metadata": {}, "weight_map": wm}, open(os.path.join(out, "model.safetensors.index.json"), "w"))


if __name__ == "__main__":
    main()
