#!/usr/bin/env python3
"""Loss-curve parity of examples/gpt against PyTorch (issue #9).

    stoker_gpt --device cuda --precision fp32 --parity-dir DIR [model/data options]
    python3 benchmarks/peers/torch_gpt_parity.py DIR

(scripts/gpu-measure.sh run gptparity runs both.)

stoker_gpt --parity-dir writes DIR/config.json, DIR/init.safetensors (the initial weights
under the peer model's names), DIR/batches.i32 (every step's input and target ids, int32
[steps, 2, batch, seq]) and DIR/losses.json (stoker's loss of every optimizer step), and
DIR/final.safetensors (its weights after training). This script builds the PyTorch peer model
(class GPT of gpt_model.py, beside this file), loads init.safetensors into it (the head is
tied to wte.weight), and trains
it on exactly the same batches with torch.optim.AdamW (the same lr, betas, eps and weight
decay, one parameter group with decay on every parameter, constant lr, no clipping, the
single-tensor implementation: foreach=False, fused=False), fp32 with TF32 off. Needs torch only
(safetensors files are read by hand). It prints, per
step, stoker's loss, torch's loss and their relative difference |s - t| / |t|, then the
verdict, and writes DIR/parity.json. Exit code 0 on PASS, 1 on FAIL.

Tolerances (relative loss difference; both sides fp32, no TF32, but different GEMM, reduction
and attention kernels, so the last bits differ from the first forward on and the difference
is amplified by training):
  step 1         <= 1e-5  the same weights and batch: only the summation order differs
                          (~1e-7 expected); a wrong name, layout, tie, LayerNorm eps or GELU
                          form shows up here at 1e-3 or more
  steps 2..10    <= 1e-4  one to nine AdamW updates; a wrong bias correction, beta, eps or
                          decay would be visible at >= 1e-3 within these steps
  every step     <= 2e-2  late in training the rounding differences grow (Adam normalises
                          tiny gradient elements to updates of size ~lr, so last-bit
                          differences are amplified). Measured on the H200 (2026-11-29):
                          steps 1-10 agree to <= 1e-7; at step 11 both runs take the same
                          loss spike (grad norm 31 at lr 2e-3) and the last-bit differences
                          grow from 1e-5 to at most 9.3e-3 (step 72), ending 1.9e-3 apart;
                          2e-2 keeps twice that margin while a real difference in the model
                          or the optimizer (>= 1e-3 within the first steps) still fails
Override with --tol-first, --tol-early, --tol.
"""
import argparse
import json
import math
import os
import statistics
import sys


def read_safetensors(torch, path, device):
    """{name: float32 tensor on device} of a safetensors file (F32 only: what stoker_gpt
    writes). Read by hand (x86: little-endian) so the script needs neither the safetensors
    package nor numpy."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {e['dtype']}, expected F32")
        begin, end = e["data_offsets"]
        count = math.prod(e["shape"])
        if end - begin != 4 * count or 8 + n + end > len(raw):
            sys.exit(f"{path}: {name} has bytes [{begin}, {end}) for shape {e['shape']}")
        t = torch.frombuffer(bytearray(raw[8 + n + begin:8 + n + end]), dtype=torch.float32)
        out[name] = t.reshape(e["shape"]).to(device)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="the --parity-dir of a stoker_gpt run")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tol-first", type=float, default=1e-5, help="step 1")
    ap.add_argument("--tol-early", type=float, default=1e-4, help="steps 2..10")
    ap.add_argument("--tol", type=float, default=2e-2, help="every step")
    args = ap.parse_args()

    for name in ("config.json", "losses.json", "init.safetensors"):
        if not os.path.isfile(os.path.join(args.dir, name)):
            sys.exit(f"{args.dir}: no {name}: give the --parity-dir of a finished stoker_gpt run")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    import gpt_model

    def load_file(path, device):
        return read_safetensors(torch, path, device)

    # Parity is plain fp32: no TF32 anywhere.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    d = args.dir
    cfg = json.load(open(os.path.join(d, "config.json")))
    stoker = json.load(open(os.path.join(d, "losses.json")))["losses"]
    for key, want in (("schedule", "constant"), ("precision", "fp32"), ("dropout", 0),
                      ("clip_grad_norm", 0), ("grad_accum_steps", 1), ("tf32", False)):
        if cfg.get(key) != want:
            sys.exit(f"{d}/config.json: {key} is {cfg.get(key)!r}, this script reproduces {want!r}")
    steps, B, T = cfg["steps"], cfg["batch"], cfg["seq"]
    with open(os.path.join(d, cfg.get("batches_file", "batches.i32")), "rb") as f:
        raw_ids = bytearray(f.read())
    if len(raw_ids) != 4 * steps * 2 * B * T:
        sys.exit(f"{d}/batches.i32: {len(raw_ids) // 4} ids, expected steps*2*batch*seq = "
                 f"{steps * 2 * B * T}")
    if len(stoker) != steps:
        sys.exit(f"{d}/losses.json: {len(stoker)} losses for {steps} steps")

    dev = torch.device(args.device)
    torch.manual_seed(0)  # the peer's own init is overwritten by init.safetensors below
    m = gpt_model.GPT(vocab=cfg["vocab"], context=cfg["context"], width=cfg["width"],
                      layers=cfg["layers"], heads=cfg["heads"]).to(dev)
    assert m.head.weight is m.wte.weight, "the peer model's head is not tied to wte"
    sd = load_file(os.path.join(d, "init.safetensors"), device=str(dev))
    sd["head.weight"] = sd["wte.weight"]  # the tie: stoker stores wte once
    want = set(m.state_dict().keys())
    missing, extra = want - set(sd), set(sd) - want
    if missing or extra:
        sys.exit(f"init.safetensors does not fit the peer model: missing {sorted(missing)}, "
                 f"unexpected {sorted(extra)}")
    for k, v in m.state_dict().items():
        if tuple(v.shape) != tuple(sd[k].shape) or sd[k].dtype != torch.float32:
            sys.exit(f"init.safetensors: {k} is {sd[k].dtype}{tuple(sd[k].shape)}, the peer "
                     f"model has {v.dtype}{tuple(v.shape)}")
    m.load_state_dict(sd, strict=True)
    m.train()

    beta1, beta2 = cfg["betas"]
    opt = torch.optim.AdamW(m.parameters(), lr=cfg["lr"], betas=(beta1, beta2), eps=cfg["eps"],
                            weight_decay=cfg["weight_decay"], foreach=False, fused=False)
    print(f"peer model {cfg['model']}: {sum(p.numel() for p in m.parameters()):,} parameters, "
          f"{steps} steps of batch {B} x {T} on {dev}, AdamW(lr={cfg['lr']:.6g}, "
          f"betas=({beta1:.6g}, {beta2:.6g}), eps={cfg['eps']:.3g}, "
          f"weight_decay={cfg['weight_decay']:.6g}), constant lr, fp32, TF32 off")

    # int32 little-endian [steps, 2, B, T]: per step the input ids, then the target ids
    batches = torch.frombuffer(raw_ids, dtype=torch.int32).reshape(steps, 2, B, T)
    batches = batches.to(torch.int64).to(dev)
    torch_losses = []
    for s in range(steps):
        loss = m(batches[s, 0], batches[s, 1])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch_losses.append(loss.item())

    rel = [abs(a - b) / abs(b) if b != 0 else abs(a - b) for a, b in zip(stoker, torch_losses)]
    print(f"{'step':>6} {'stoker':>12} {'torch':>12} {'rel diff':>10}")
    for s in range(steps):
        print(f"{s + 1:6d} {stoker[s]:12.6f} {torch_losses[s]:12.6f} {rel[s]:10.2e}")

    # Weights after training (informational: Adam amplifies last-bit differences of tiny
    # gradient elements, so these drift more than the loss).
    weight_rel = {}
    final_path = os.path.join(d, "final.safetensors")
    if os.path.exists(final_path):
        fin = load_file(final_path, device=str(dev))
        with torch.no_grad():
            for k, v in m.state_dict().items():
                if k == "head.weight":
                    continue
                scale = max(v.norm().item(), fin[k].norm().item(), 1e-30)
                weight_rel[k] = (fin[k] - v).norm().item() / scale
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
        ("step 1", first <= args.tol_first, f"{first:.2e} <= {args.tol_first:.0e}"),
        ("steps 2..10", early <= args.tol_early, f"{early:.2e} <= {args.tol_early:.0e}"),
        ("all steps", worst_all <= args.tol,
         f"{worst_all:.2e} (step {worst_step}) <= {args.tol:.0e}"),
    ]
    ok = all(c[1] for c in checks)
    for name, good, what in checks:
        print(f"  {'ok  ' if good else 'FAIL'} {name}: {what}")

    # A short markdown table for docs/benchmarks.md.
    marks = sorted({1, 2, 5, 10, 20, 50, steps} | set(range(100, steps, 100)))
    print("\n| step | stoker loss | PyTorch loss | relative difference |\n|---:|---:|---:|---:|")
    for s in marks:
        if 1 <= s <= steps:
            print(f"| {s} | {stoker[s - 1]:.6f} | {torch_losses[s - 1]:.6f} | {rel[s - 1]:.1e} |")
    print(f"\nmax relative difference over {steps} steps: {worst_all:.2e} at step {worst_step}; "
          f"{'PASS' if ok else 'FAIL'} (tolerances: step 1 {args.tol_first:.0e}, steps 2..10 "
          f"{args.tol_early:.0e}, all {args.tol:.0e})")

    with open(os.path.join(d, "parity.json"), "w") as f:
        json.dump({"config": cfg, "stoker": stoker, "torch": torch_losses, "rel": rel,
                   "max_rel": worst_all, "max_rel_step": worst_step,
                   "weight_rel": weight_rel, "torch_version": torch.__version__,
                   "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                   "pass": ok}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
