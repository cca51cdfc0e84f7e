#!/usr/bin/env python3
"""Writes tests/ops/llama_reference.txt, the fixture of tests/ops/rope_test.cpp, rmsnorm_test.cpp
and swiglu_test.cpp: Hugging Face transformers' own numbers for Llama's rotary embeddings,
LlamaRMSNorm and LlamaMLP's activation, so the tests compare stoker's ops with them rather than
with a formula written twice.

How it was made: `python3 tests/ops/llama_reference.py` with torch 2.5.1 (CPU) and transformers
4.57.6 (pip), on x86-64. Each line is `name count v0 v1 ...` with the values as C99 hex floats
(exact). What it holds:
  inv_freq.<case>      LlamaRotaryEmbedding(config).inv_freq for the configs in CASES
  qkv.input            a [T, (H + 2 KV) * D] float32 qkv (values from a fixed formula)
  positions            the T positions (restarting, as in packed documents, and one large)
  qkv.<dtype>.forward  qkv after LlamaRotaryEmbedding + apply_rotary_pos_emb on q and k,
                       in that dtype (v unchanged), as float32
  qkv.<dtype>.backward the gradient of sum(rotated * w) w.r.t. qkv, w = the input (autograd)
  rmsnorm.*            LlamaRMSNorm(64, eps=1e-5) in bfloat16 (its weight bf16 values): input x
                       [8, 64], weight, output y, and for the incoming gradient dy the
                       gradients x.grad and weight.grad (autograd, bf16)
  swiglu.*             LlamaMLP's act_fn(gate) * up in bfloat16 on a [6, 2 * 40] gate|up
                       input (gate columns first): input, y, and for dy the input's gradient
"""
import sys

import torch
from transformers import LlamaConfig
from transformers.activations import ACT2FN
from transformers.models.llama.modeling_llama import (LlamaRMSNorm, LlamaRotaryEmbedding,
                                                      apply_rotary_pos_emb)

CASES = {
    # name: (head_dim, theta, rope_scaling)
    "d64_llama32": (64, 500000.0, {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192}),
    "d128_llama31": (128, 500000.0, {"rope_type": "llama3", "factor": 8.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 8192}),
    "d128_default": (128, 500000.0, None),
    "d64_theta1e4": (64, 10000.0, None),
}
H, KV, T = 2, 1, 6
CASE = "d64_llama32"
POSITIONS = [0, 1, 2, 0, 1, 100000]


def config(head_dim, theta, scaling):
    return LlamaConfig(hidden_size=H * head_dim, num_attention_heads=H, num_key_value_heads=KV,
                       head_dim=head_dim, rope_theta=theta, rope_scaling=scaling,
                       max_position_embeddings=131072)


def hexfloat(v):
    """float.hex without the mantissa's trailing zeros (still a C99 hex float for strtof)."""
    mantissa, exponent = float(v).hex().split("p")
    return mantissa.rstrip("0") + "p" + exponent


def line(name, values):
    values = torch.as_tensor(values).flatten().tolist()
    return f"{name} {len(values)} " + " ".join(hexfloat(v) for v in values)


def rotate(qkv, dtype, rope):
    """transformers' q/k rotation of a [T, (H + 2 KV) D] qkv in `dtype`, and its gradient."""
    d = rope.inv_freq.numel() * 2
    x = qkv.to(dtype).clone().requires_grad_(True)
    q = x[:, : H * d].view(1, T, H, d).transpose(1, 2)
    k = x[:, H * d : (H + KV) * d].view(1, T, KV, d).transpose(1, 2)
    v = x[:, (H + KV) * d :]
    pos = torch.tensor([POSITIONS])
    cos, sin = rope(x, pos)
    qe, ke = apply_rotary_pos_emb(q, k, cos, sin)
    out = torch.cat([qe.transpose(1, 2).reshape(T, H * d), ke.transpose(1, 2).reshape(T, KV * d),
                     v], dim=1)
    (out.float() * qkv).sum().backward()
    return out.detach().float(), x.grad.float()


def values(shape, scale, seed):
    """Deterministic float32 values of a fixed formula (no RNG: the same on every machine)."""
    i = torch.arange(torch.Size(shape).numel(), dtype=torch.float64)
    return (torch.sin(i * (0.37 + seed) + seed) * scale).float().view(shape)


def rmsnorm_lines():
    norm = LlamaRMSNorm(64, eps=1e-5).to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.5 * values([64], 1.0, 1))
    x = (values([8, 64], 3.0, 2)).to(torch.bfloat16).requires_grad_(True)
    dy = values([8, 64], 1.0, 3).to(torch.bfloat16)
    y = norm(x)
    y.backward(dy)
    return [line("rmsnorm.x", x.detach()), line("rmsnorm.weight", norm.weight.detach()),
            line("rmsnorm.dy", dy), line("rmsnorm.y", y.detach()), line("rmsnorm.dx", x.grad),
            line("rmsnorm.dweight", norm.weight.grad)]


def swiglu_lines():
    act = ACT2FN["silu"]
    x = values([6, 80], 5.0, 4).to(torch.bfloat16).requires_grad_(True)
    dy = values([6, 40], 1.0, 5).to(torch.bfloat16)
    gate, up = x[:, :40], x[:, 40:]
    y = act(gate) * up  # LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x))
    y.backward(dy)
    return [line("swiglu.x", x.detach()), line("swiglu.dy", dy), line("swiglu.y", y.detach()),
            line("swiglu.dx", x.grad)]


def main():
    lines = []
    for name, (d, theta, scaling) in CASES.items():
        lines.append(line(f"inv_freq.{name}", LlamaRotaryEmbedding(config(d, theta, scaling)).inv_freq))
    d, theta, scaling = CASES[CASE]
    rope = LlamaRotaryEmbedding(config(d, theta, scaling))
    i = torch.arange(T * (H + 2 * KV) * d, dtype=torch.float64)
    qkv = (torch.sin(i * 0.37) * 2.0 + torch.cos(i * 0.011)).float().view(T, (H + 2 * KV) * d)
    lines.append(line("qkv.input", qkv))
    lines.append(line("positions", POSITIONS))
    for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        out, grad = rotate(qkv, dtype, rope)
        lines.append(line(f"qkv.{tag}.forward", out))
        lines.append(line(f"qkv.{tag}.backward", grad))
    lines += rmsnorm_lines() + swiglu_lines()
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/ops/llama_reference.txt"
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
