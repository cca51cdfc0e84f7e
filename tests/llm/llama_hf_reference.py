#!/usr/bin/env python3
"""transformers' side of the Llama parity check (tests/llm/hf_llama_test.cpp).

Usage:
  llama_hf_reference.py [--out DIR]          write the fixture (default: tests/llm/data)
  llama_hf_reference.py --check DIR [--tol T]

Writing the fixture: two tiny random LlamaForCausalLM in fp32 (V 64, C 32, 2 layers, 4 query
heads over 2 key/value heads of 8, F 48, rope_theta 100 with llama3 scaling factor 8, low 1,
high 4, original 32, so that the three branches of the scaled frequencies all occur; RMSNorm
weights drawn around 1 rather than left at 1), one with its own lm_head and one tied to the
embedding, each seeded and saved with save_pretrained into DIR/tiny_llama_untied/ and
DIR/tiny_llama_tied/ (config.json and model.safetensors only), and
DIR/tiny_llama_reference.safetensors:
  ids            I64 [2, 17]   the input ids (fixed)
  targets        I64 [34]      ids shifted left by one per row, the last position -100
  untied.logits  F32 [34, 64]  logits of the eager fp32 forward (TF32 off)
  untied.loss    F32 [1]       mean cross-entropy over the targets that are not -100
  tied.logits, tied.loss       the same for the tied model

--check DIR: the other direction. DIR is a folder stoker wrote (llm::save_hf) holding also
stoker_logits.safetensors with "ids" (I64 [B, T]) and stoker's "logits" (F32 [B * T, V]) for
those ids; the folder is loaded with LlamaForCausalLM.from_pretrained, run in fp32, and the
largest difference relative to the largest logit is printed ("max relative logits difference
X"); the exit status is 1 when it exceeds --tol (1e-4).

Needs torch, transformers and safetensors (not needed by the C++ build or its tests).
"""
import argparse
import os
import shutil
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB = 64
BATCH, SEQ = 2, 17
KEEP = ("config.json", "model.safetensors")


def tiny_config(tied):
    return LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, intermediate_size=48, max_position_embeddings=64,
        rms_norm_eps=1e-5, initializer_range=0.1, rope_theta=100.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
        tie_word_embeddings=tied, bos_token_id=1, eos_token_id=2)


def fp32_eager(model):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model.config._attn_implementation = "eager"
    return model.float().eval()


def logits_and_loss(model, ids, targets):
    with torch.no_grad():
        logits = model(input_ids=ids).logits.reshape(-1, VOCAB).float()
    loss = F.cross_entropy(logits, targets, ignore_index=-100)
    return logits, loss


def write_fixture(out):
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g, dtype=torch.int64)
    targets = torch.cat([ids[:, 1:], torch.full((BATCH, 1), -100, dtype=torch.int64)], 1)
    targets = targets.reshape(-1).contiguous()
    reference = {"ids": ids, "targets": targets}
    for seed, name, tied in ((1, "untied", False), (2, "tied", True)):
        torch.manual_seed(seed)
        model = fp32_eager(LlamaForCausalLM(tiny_config(tied)))
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if pname.endswith("norm.weight"):
                    p.normal_(1.0, 0.2)
        folder = os.path.join(out, f"tiny_llama_{name}")
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        model.save_pretrained(folder)
        for f in os.listdir(folder):
            if f not in KEEP:
                os.remove(os.path.join(folder, f))
        logits, loss = logits_and_loss(model, ids, targets)
        reference[f"{name}.logits"] = logits.contiguous()
        reference[f"{name}.loss"] = loss.reshape(1)
        print(f"{name}: loss {loss.item():.6f}, |logits| max {logits.abs().max().item():.4f}")
    save_file(reference, os.path.join(out, "tiny_llama_reference.safetensors"),
              metadata={"format": "pt"})


def check(folder, tol):
    stoker = load_file(os.path.join(folder, "stoker_logits.safetensors"))
    try:
        model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
    except TypeError:  # transformers before 4.56 names it torch_dtype
        model = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    model = fp32_eager(model)
    ids = stoker["ids"].to(torch.int64)
    with torch.no_grad():
        ours = model(input_ids=ids).logits.reshape(stoker["logits"].shape).float()
    theirs = stoker["logits"].float()
    rel = ((ours - theirs).abs().max() / ours.abs().max()).item()
    print(f"max relative logits difference {rel:.3e} (tolerance {tol:g})")
    return 0 if rel <= tol else 1


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(here, "data"))
    parser.add_argument("--check", metavar="DIR")
    parser.add_argument("--tol", type=float, default=1e-4)
    args = parser.parse_args()
    if args.check:
        return check(args.check, args.tol)
    write_fixture(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
