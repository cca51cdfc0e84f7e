#!/usr/bin/env python3
"""Loss-curve parity of stoker_llm against transformers' LlamaForCausalLM.

    stoker_llm --parity-dir DIR --precision fp32 --lr 1e-3 --steps 200 [model/data options]
    python3 benchmarks/peers/torch_llama_parity.py DIR [--device cpu|cuda]

stoker_llm --parity-dir writes DIR/init/ (the initial weights as a transformers Llama folder),
DIR/config.json (optimizer and run settings), DIR/batches.i32 (every step's input and target
ids, int32 [steps, 2, batch, seq]), DIR/losses.json (stoker's loss of every step) and DIR/final/
(its weights after training). This script loads DIR/init with LlamaForCausalLM.from_pretrained
(attn_implementation "eager": fp32 exactness; --attn sdpa to compare) and trains it on exactly
the same batches: the logits of the inputs, the mean cross-entropy against the given targets
(computed here, not with labels=, which would shift them again), torch.optim.AdamW with the same
lr, betas, eps and weight decay on every parameter (foreach=False, fused=False), constant lr, no
clipping, TF32 off; bf16 runs use torch.autocast(bf16) over fp32 parameters, as stoker keeps f32
masters with bf16 compute. It prints per step stoker's loss, transformers' loss and their
relative difference, a verdict against the tolerances, and writes DIR/parity.json; exit 0 on
PASS, 1 on FAIL.

Tolerances (relative loss difference |s - t| / |t|; both sides fp32, but different GEMM,
reduction and attention code, so the last bits differ from the first forward on, and AdamW
amplifies them over the steps):
  step 1        <= 1e-5  the same weights and batch: only the order of sums differs; a wrong
                         name, layout, RoPE, RMSNorm eps or tie shows up at 1e-3 or more
  steps 2..10   <= 1e-4  a wrong beta, eps, decay or bias correction shows within these steps
  every step    <= 2e-2  late in training rounding differences grow (Adam normalizes tiny
                         gradient elements to updates of size ~lr)
bf16 defaults are looser (--precision bf16 in config.json): 2e-3, 1e-2, 5e-2 (each side rounds
its own GEMM operands). Override with --tol-first, --tol-early, --tol.
"""
import argparse
import json
import math
import os
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="the --parity-dir of a finished stoker_llm run")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--attn", default="eager", choices=("eager", "sdpa"),
                    help="transformers' attention implementation (eager)")
    ap.add_argument("--tol-first", type=float, default=None, help="step 1")
    ap.add_argument("--tol-early", type=float, default=None, help="steps 2..10")
    ap.add_argument("--tol", type=float, default=None, help="every step")
    args = ap.parse_args()

    d = args.dir
    for name in ("config.json", "losses.json", "batches.i32", "init/config.json",
                 "init/model.safetensors"):
        if not os.path.isfile(os.path.join(d, name)):
            sys.exit(f"{d}: no {name}: give the --parity-dir of a finished stoker_llm run")
    cfg = json.load(open(os.path.join(d, "config.json")))
    stoker = json.load(open(os.path.join(d, "losses.json")))["losses"]
    for key, want in (("schedule", "constant"), ("clip_grad_norm", 0), ("grad_accum_steps", 1)):
        if cfg.get(key) != want:
            sys.exit(f"{d}/config.json: {key} is {cfg.get(key)!r}, this script reproduces {want!r}")
    precision = cfg.get("precision", "fp32")
    if precision not in ("fp32", "bf16"):
        sys.exit(f"{d}/config.json: precision {precision!r}: fp32 or bf16")
    defaults = (1e-5, 1e-4, 2e-2) if precision == "fp32" else (2e-3, 1e-2, 5e-2)
    tol_first = args.tol_first if args.tol_first is not None else defaults[0]
    tol_early = args.tol_early if args.tol_early is not None else defaults[1]
    tol = args.tol if args.tol is not None else defaults[2]
    steps, B, T = cfg["steps"], cfg["batch"], cfg["seq"]
    with open(os.path.join(d, cfg.get("batches_file", "batches.i32")), "rb") as f:
        raw_ids = bytearray(f.read())
    if len(raw_ids) != 4 * steps * 2 * B * T:
        sys.exit(f"{d}/batches.i32: {len(raw_ids) // 4} ids, expected steps*2*batch*seq = "
                 f"{steps * 2 * B * T}")
    if len(stoker) != steps:
        sys.exit(f"{d}/losses.json: {len(stoker)} losses for {steps} steps")

    import torch
    import torch.nn.functional as F
    import transformers

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_llama_parity.py: no CUDA device visible to PyTorch (--device cpu)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dev = torch.device(args.device)
    model = transformers.LlamaForCausalLM.from_pretrained(
        os.path.join(d, "init"), torch_dtype=torch.float32, attn_implementation=args.attn).to(dev)
    model.train()
    beta1, beta2 = cfg["betas"]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(beta1, beta2),
                            eps=cfg["eps"], weight_decay=cfg["weight_decay"], foreach=False,
                            fused=False)
    print(f"# torch {torch.__version__}, transformers {transformers.__version__} on "
          f"{torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}")
    print(f"peer LlamaForCausalLM ({args.attn}): "
          f"{sum(p.numel() for p in model.parameters()):,} parameters, {steps} steps of batch "
          f"{B} x {T}, AdamW(lr={cfg['lr']:.6g}, betas=({beta1:.6g}, {beta2:.6g}), "
          f"eps={cfg['eps']:.3g}, weight_decay={cfg['weight_decay']:.6g}), constant lr, "
          f"{precision}, TF32 off")

    batches = torch.frombuffer(raw_ids, dtype=torch.int32).reshape(steps, 2, B, T)
    batches = batches.to(torch.int64).to(dev)
    torch_losses = []
    for s in range(steps):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(input_ids=batches[s, 0]).logits
        loss = F.cross_entropy(logits.float().reshape(B * T, -1), batches[s, 1].reshape(-1),
                               ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch_losses.append(loss.item())

    rel = [abs(a - b) / abs(b) if b != 0 else abs(a - b) for a, b in zip(stoker, torch_losses)]
    print(f"{'step':>6} {'stoker':>12} {'transformers':>12} {'rel diff':>10}")
    for s in range(steps):
        print(f"{s + 1:6d} {stoker[s]:12.6f} {torch_losses[s]:12.6f} {rel[s]:10.2e}")

    # Weights after training (informational: Adam amplifies last-bit differences of tiny
    # gradient elements, so these drift more than the loss).
    weight_rel = {}
    final = os.path.join(d, "final")
    if os.path.isfile(os.path.join(final, "model.safetensors")):
        fin = transformers.LlamaForCausalLM.from_pretrained(final, torch_dtype=torch.float32)
        theirs = dict(fin.named_parameters())
        with torch.no_grad():
            for k, v in model.named_parameters():
                w = theirs[k].to(dev)
                scale = max(v.norm().item(), w.norm().item(), 1e-30)
                weight_rel[k] = (w - v).norm().item() / scale
        worst = max(weight_rel, key=weight_rel.get)
        print(f"final weights: max relative L2 difference {weight_rel[worst]:.2e} ({worst}), "
              f"median {statistics.median(weight_rel.values()):.2e} (not part of the verdict)")

    finite = all(math.isfinite(x) for x in stoker + torch_losses)
    first = rel[0]
    early = max(rel[1:10]) if steps > 1 else 0.0
    worst_all = max(rel)
    worst_step = rel.index(worst_all) + 1
    checks = [
        ("finite losses", finite, ""),
        ("step 1", first <= tol_first, f"{first:.2e} <= {tol_first:.0e}"),
        ("steps 2..10", early <= tol_early, f"{early:.2e} <= {tol_early:.0e}"),
        ("all steps", worst_all <= tol, f"{worst_all:.2e} (step {worst_step}) <= {tol:.0e}"),
    ]
    ok = all(c[1] for c in checks)
    for name, good, what in checks:
        print(f"  {'ok  ' if good else 'FAIL'} {name}: {what}")

    marks = sorted({1, 2, 5, 10, 20, 50, steps} | set(range(100, steps, 100)))
    print("\n| step | stoker loss | transformers loss | relative difference |\n|---:|---:|---:|---:|")
    for s in marks:
        if 1 <= s <= steps:
            print(f"| {s} | {stoker[s - 1]:.6f} | {torch_losses[s - 1]:.6f} | {rel[s - 1]:.1e} |")
    print(f"\nmax relative difference over {steps} steps: {worst_all:.2e} at step {worst_step}; "
          f"{'PASS' if ok else 'FAIL'} (tolerances: step 1 {tol_first:.0e}, steps 2..10 "
          f"{tol_early:.0e}, all {tol:.0e})")
    with open(os.path.join(d, "parity.json"), "w") as f:
        json.dump({"config": cfg, "stoker": stoker, "transformers": torch_losses, "rel": rel,
                   "max_rel": worst_all, "max_rel_step": worst_step, "weight_rel": weight_rel,
                   "torch_version": torch.__version__,
                   "transformers_version": transformers.__version__,
                   "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                   "attn": args.attn, "pass": ok}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
