#!/usr/bin/env python3
"""make_tiny_hf_qwen35.py — writes a tiny random-weight Qwen3_5MoeForCausalLM checkpoint
(for t_hf_qwen35.sh and make_qwen35_ref.py).

usage: make_tiny_hf_qwen35.py OUT_DIR [TOKENIZER_DIR] [--per-expert] [--nested] [--shards N]
                              [--drop NAME] [--set KEY=JSON] [--del KEY]

Stdlib only, byte-identical on every machine (one seeded Mersenne Twister; only
random() and getrandbits() are used, no libm).  config.json + BF16 safetensors
+ the tokenizer files copied from TOKENIZER_DIR (when given):
  hidden 64, 4 layers (linear, full, linear, full attention), 4/2 attention heads of 32
  (partial rotary 0.25: 8 rotated dims), linear attention with 2 key heads and 4 value
  heads of 16 (so the converter's value-head reordering is exercised), conv kernel 4,
  8 experts top-2 (ff 32), a shared expert (ff 64) with its sigmoid gate, untied
  lm_head, the real Qwen3 vocabulary (151,936 rows).
Scales are chosen so every branch writes O(1) values into the residual and the logits
have a std of ~7 (a discriminative next-token distribution).  The two vocab-sized
matrices are drawn as random bf16 bit patterns (random mantissa and sign, the exponent
from a small table) so 19M values cost no Python loop; the rest are uniform draws.
Zero-centred norms (HF computes x·(1 + w)) get small w, so the converter's +1 matters.

--per-expert   experts as mlp.experts.N.{gate,up,down}_proj.weight instead of the merged
               mlp.experts.gate_up_proj [X, 2F, E] / down_proj [X, E, F] (same numbers)
--nested       the published multimodal layout: Qwen3_5MoeForConditionalGeneration, the text
               config under "text_config", tensors under model.language_model., plus a
               vision tensor and an MTP tensor the converter must leave out (same numbers)
--shards N     N safetensors files + model.safetensors.index.json
--drop NAME    leave one tensor out;  --set KEY=JSON / --del KEY  edit the (text) config
"""
import json
import os
import random
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_hf import write_st  # noqa: E402  (one safetensors writer for both generators)

E, L, NH, NKV, HD, PRF = 64, 4, 4, 2, 32, 0.25
X, K, F, FS = 8, 2, 32, 64
CONV, S, HK, HV = 4, 16, 2, 4
V = 151936
LAYER_TYPES = ["linear_attention", "full_attention"] * (L // 2)
KD, VD = HK * S, HV * S


def config():
    return dict(architectures=["Qwen3_5MoeForCausalLM"], model_type="qwen3_5_moe_text", hidden_size=E,
                num_hidden_layers=L, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD,
                hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
                rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=PRF,
                                     mrope_section=[2, 1, 1], mrope_interleaved=True),
                attention_bias=False, linear_conv_kernel_dim=CONV, linear_key_head_dim=S, linear_value_head_dim=S,
                linear_num_key_heads=HK, linear_num_value_heads=HV, moe_intermediate_size=F,
                shared_expert_intermediate_size=FS, num_experts_per_tok=K, num_experts=X, layer_types=LAYER_TYPES,
                vocab_size=V, bos_token_id=151643, eos_token_id=151645, dtype="bfloat16")


def bf16_uniform(rng, n, lo, hi):
    """n uniform values in [lo, hi), truncated to bf16 (exact: no libm)."""
    out = bytearray(2 * n)
    for i in range(n):
        out[2 * i:2 * i + 2] = struct.pack("<f", lo + (hi - lo) * rng.random())[2:4]
    return bytes(out)


def bf16_bits(rng, n, hi7):
    """n bf16 values from random bits: random sign and mantissa, exponent field 2*(hi7 - c) + bit
    with class c = 0, 1, 2, 3, 4 of probability 1/2, 1/4, 1/8, 1/16, 1/16 (rms ~ 1.7 * 2^(2*hi7 - 127))."""
    raw = bytearray(rng.getrandbits(16 * n).to_bytes(2 * n, "little"))
    table = bytes((b & 0x80) | (hi7 - (0 if (b & 0x7f) < 64 else 1 if (b & 0x7f) < 96 else 2 if (b & 0x7f) < 112
                                       else 3 if (b & 0x7f) < 120 else 4)) for b in range(256))
    raw[1::2] = bytes(raw[1::2]).translate(table)
    return bytes(raw)


def tensors(rng):
    """[(name, shape, bf16 bytes)] in the plain Qwen3_5MoeForCausalLM layout, merged experts."""
    u = lambda shape, lo, hi: (shape, ("u", lo, hi))
    s = lambda shape, std: u(shape, -std * 3 ** 0.5, std * 3 ** 0.5)
    spec = [("model.embed_tokens.weight", ([V, E], ("bits", 63))),  # rms ~0.86
            ("model.norm.weight", u([E], -0.2, 0.2))]
    for l, kind in enumerate(LAYER_TYPES):
        p = f"model.layers.{l}."
        spec += [(p + "input_layernorm.weight", u([E], -0.2, 0.2)),
                 (p + "post_attention_layernorm.weight", u([E], -0.2, 0.2))]
        if kind == "full_attention":
            spec += [(p + "self_attn.q_proj.weight", s([2 * NH * HD, E], 0.125)),
                     (p + "self_attn.k_proj.weight", s([NKV * HD, E], 0.125)),
                     (p + "self_attn.v_proj.weight", s([NKV * HD, E], 0.125)),
                     (p + "self_attn.o_proj.weight", s([E, NH * HD], 0.18)),
                     (p + "self_attn.q_norm.weight", u([HD], 0.5, 1.5)),
                     (p + "self_attn.k_norm.weight", u([HD], 0.5, 1.5))]
        else:
            a = p + "linear_attn."
            spec += [(a + "in_proj_qkv.weight", s([2 * KD + VD, E], 0.125)),
                     (a + "in_proj_z.weight", s([VD, E], 0.25)),
                     (a + "in_proj_b.weight", s([HV, E], 0.125)),
                     (a + "in_proj_a.weight", s([HV, E], 0.125)),
                     (a + "conv1d.weight", u([2 * KD + VD, 1, CONV], -0.6, 0.6)),
                     (a + "dt_bias", u([HV], -1.0, 1.0)),
                     (a + "A_log", u([HV], -1.2, 0.4)),
                     (a + "norm.weight", u([S], 0.7, 1.3)),
                     (a + "out_proj.weight", s([E, VD], 0.25))]
        spec += [(p + "mlp.gate.weight", s([X, E], 0.375)),
                 (p + "mlp.experts.gate_up_proj", s([X, 2 * F, E], 0.125)),
                 (p + "mlp.experts.down_proj", s([X, E, F], 0.35)),
                 (p + "mlp.shared_expert.gate_proj.weight", s([FS, E], 0.125)),
                 (p + "mlp.shared_expert.up_proj.weight", s([FS, E], 0.125)),
                 (p + "mlp.shared_expert.down_proj.weight", s([E, FS], 0.25)),
                 (p + "mlp.shared_expert_gate.weight", s([1, E], 0.125))]
    spec.append(("lm_head.weight", ([V, E], ("bits", 63))))
    out = []
    for name, (shape, how) in spec:
        n = 1
        for d in shape:
            n *= d
        b = bf16_bits(rng, n, how[1]) if how[0] == "bits" else bf16_uniform(rng, n, how[1], how[2])
        out.append((name, shape, b))
    return out


def per_expert(items):
    """Splits each layer's merged expert tensors into per-expert matrices (the same numbers)."""
    out = []
    for name, shape, b in items:
        if name.endswith("mlp.experts.gate_up_proj"):
            p, sz = name[:-len("gate_up_proj")], F * E * 2
            for x in range(X):
                blk = b[x * 2 * sz:(x + 1) * 2 * sz]
                out += [(f"{p}{x}.gate_proj.weight", [F, E], blk[:sz]), (f"{p}{x}.up_proj.weight", [F, E], blk[sz:])]
        elif name.endswith("mlp.experts.down_proj"):
            p, sz = name[:-len("down_proj")], E * F * 2
            out += [(f"{p}{x}.down_proj.weight", [E, F], b[x * sz:(x + 1) * sz]) for x in range(X)]
        else:
            out.append((name, shape, b))
    return out


def main():
    a = sys.argv[1:]
    if not a or a[0].startswith("-"):
        sys.exit(__doc__)
    out = a[0]
    tokdir = a[1] if len(a) > 1 and not a[1].startswith("-") else None
    opt = lambda k: [a[i + 1] for i in range(len(a) - 1) if a[i] == k]
    os.makedirs(out, exist_ok=True)
    items = tensors(random.Random(35))
    if "--per-expert" in a:
        items = per_expert(items)
    cfg = config()
    for kv in opt("--set"):
        k, v = kv.split("=", 1)
        cfg[k] = json.loads(v)
    for k in opt("--del"):
        cfg.pop(k, None)
    if "--nested" in a:
        items = [(n.replace("model.", "model.language_model.", 1) if n.startswith("model.") else n, s, b)
                 for n, s, b in items]
        items += [("model.visual.patch_embed.proj.weight", [4, 4], b"\x80\x3f" * 16),
                  ("mtp.fc.weight", [E, 2 * E], b"\x00\x00" * (2 * E * E))]
        cfg = dict(architectures=["Qwen3_5MoeForConditionalGeneration"], model_type="qwen3_5_moe",
                   tie_word_embeddings=False, vision_config=dict(model_type="qwen3_5_moe", depth=1),
                   text_config={**{k: v for k, v in cfg.items() if k != "architectures"},
                                "model_type": "qwen3_5_moe_text", "mtp_num_hidden_layers": 1})
    items = [t for t in items if t[0] not in opt("--drop")]
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    if tokdir:
        for n in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(tokdir, n), os.path.join(out, n))
    shards = int(opt("--shards")[0]) if opt("--shards") else 1
    if shards == 1:
        write_st(os.path.join(out, "model.safetensors"), items)
        return
    wm = {}
    for s in range(shards):
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = [t for k, t in enumerate(items) if k % shards == s]
        write_st(os.path.join(out, fn), part)
        for t in part:
            wm[t[0]] = fn
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wm}, f)


if __name__ == "__main__":
    main()
