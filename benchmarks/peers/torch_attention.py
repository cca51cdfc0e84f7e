#!/usr/bin/env python3
"""PyTorch's fused causal attention at Llama 3.2's grouped-query shapes: the peer of
stoker_attention_bench's BM_CudaFlashAttentionGqa (the same shapes, passes and FLOP count).

  python3 benchmarks/peers/torch_attention.py [--batch 4] [--seq 2048] [--shapes 1b,3b]

Shapes (H query heads, KV key/value heads, head dim D): 1b = Llama-3.2-1B (32, 8, 64),
3b = Llama-3.2-3B (24, 8, 128), gpt2 = GPT-2 124M (12, 12, 64; multi-head). Each is timed with
torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
bf16, under torch.nn.attention.sdpa_kernel with one backend at a time: flash
(SDPBackend.FLASH_ATTENTION) and cudnn (SDPBackend.CUDNN_ATTENTION). q, k and v are
[B, heads, T, D] views of one projection output [B, T, (H + 2 KV) D], as transformers'
LlamaAttention makes them (view, then transpose(1, 2)), each a leaf of its own. A backend that
refuses enable_gqa gets k and v repeated to H heads beforehand (transformers' repeat_kv; the
repeat is not timed) and the row says "repeat_kv"; one that refuses the shape prints why.

Passes: fwd (a sample is 10 back-to-back calls, per call) and fwd+bwd (one forward and
torch.autograd.grad to q, k and v with a random upstream gradient). Timing: --warmup untimed
samples, then --iters samples between two CUDA events; the median is printed. TFLOP/s counts
the causal FLOPs as stoker does: 2 B T^2 H D forward (QK^T and PV over half the scores of the H
query heads), 3.5 times that for fwd+bwd (the backward is 2.5 times the forward).
"""
import argparse
import statistics
import sys

SHAPES = {"1b": (32, 8, 64), "3b": (24, 8, 128), "gpt2": (12, 12, 64)}
BACKENDS = ("flash", "cudnn")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=4, help="B (4)")
    ap.add_argument("--seq", type=int, default=2048, help="T, the sequence length (2048)")
    ap.add_argument("--shapes", default="1b,3b",
                    help="comma-separated subset of " + ",".join(SHAPES) + " (1b,3b)")
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help="comma-separated subset of " + ",".join(BACKENDS))
    ap.add_argument("--iters", type=int, default=30, help="timed samples; the median is printed")
    ap.add_argument("--warmup", type=int, default=5, help="untimed samples first (5)")
    args = ap.parse_args()
    for name in ("batch", "seq", "iters"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name} must be positive")
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    shapes = [s for s in args.shapes.split(",") if s]
    bad = [s for s in shapes if s not in SHAPES]
    if bad or not shapes:
        ap.error(f"--shapes: unknown {','.join(bad) or '(empty)'}; choose from {','.join(SHAPES)}")
    backends = [b for b in args.backends.split(",") if b]
    bad = [b for b in backends if b not in BACKENDS]
    if bad or not backends:
        ap.error(f"--backends: unknown {','.join(bad) or '(empty)'}; "
                 f"choose from {','.join(BACKENDS)}")

    import torch
    if not torch.cuda.is_available():
        sys.exit("torch_attention.py: no CUDA device visible to PyTorch")
    run(torch, args, shapes, backends)


def run(torch, args, shapes, backends):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dev, bf16 = "cuda", torch.bfloat16
    b, t = args.batch, args.seq
    g = torch.Generator(device=dev).manual_seed(0)
    which = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}

    def median_ms(sample):
        for _ in range(args.warmup):
            sample(None, None)
        torch.cuda.synchronize()
        times = [sample(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(args.iters)]
        torch.cuda.synchronize()
        return statistics.median(f() for f in times)

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; B {b}, T {t}, bf16, causal",
          flush=True)
    for name in shapes:
        h, kv, d = SHAPES[name]
        qkv = torch.randn(b, t, (h + 2 * kv) * d, device=dev, dtype=bf16, generator=g)

        def leaf(lo, heads):  # [B, heads, T, D] view of columns lo.. of qkv, as LlamaAttention
            x = qkv[:, :, lo * d:(lo + heads) * d].view(b, t, heads, d).transpose(1, 2)
            return x.detach().requires_grad_()

        q, k, v = leaf(0, h), leaf(h, kv), leaf(h + kv, kv)
        dout = torch.randn(b, h, t, d, device=dev, dtype=bf16, generator=g)
        causal = 2.0 * b * t * t * h * d
        for backend in backends:
            with sdpa_kernel(which[backend]):
                label, ins = ("enable_gqa" if kv != h else "multi-head"), (q, k, v)
                try:
                    F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != h)
                    torch.cuda.synchronize()
                    gqa = kv != h
                except RuntimeError:
                    # transformers' repeat_kv: [B, KV, T, D] -> [B, H, T, D], outside the timing.
                    rep = [x.detach().repeat_interleave(h // kv, dim=1).requires_grad_()
                           for x in (k, v)]
                    label, ins, gqa = "repeat_kv", (q, rep[0], rep[1]), False
                try:
                    def attend():
                        return F.scaled_dot_product_attention(*ins, is_causal=True,
                                                              enable_gqa=gqa)

                    def fwd(start, stop):
                        with torch.no_grad():
                            if start is None:
                                attend()
                                return None
                            start.record()
                            for _ in range(10):
                                attend()
                            stop.record()
                        return lambda: start.elapsed_time(stop) / 10

                    def fwd_bwd(start, stop):
                        if start is not None:
                            start.record()
                        torch.autograd.grad(attend(), ins, dout)
                        if start is None:
                            return None
                        stop.record()
                        return lambda: start.elapsed_time(stop)

                    for pass_, sample, flops in (("fwd", fwd, causal),
                                                 ("fwd+bwd", fwd_bwd, 3.5 * causal)):
                        ms = median_ms(sample)
                        print(f"torch sdpa {backend} {name} (H {h}, KV {kv}, D {d}, {label}) "
                              f"{pass_}: {ms * 1e3:.0f} us, {flops / (ms / 1e3) / 1e12:.1f} TFLOP/s",
                              flush=True)
                except RuntimeError as e:
                    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    print(f"torch sdpa {backend} {name} (H {h}, KV {kv}, D {d}): not run: {first}",
                          flush=True)


if __name__ == "__main__":
    main()
