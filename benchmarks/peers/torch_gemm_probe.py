#!/usr/bin/env python3
"""PyTorch's bf16 GEMM rate for the shapes of the MLP benchmark: the peer of stoker_gemm_bench
and of the GEMMs inside stoker_train_bench (scripts/gpu-measure.sh run gemm runs both).

  python3 benchmarks/peers/torch_gemm_probe.py [--rows 8192] [--width 4096]

Shapes: x [rows, width] times w [width, width] as the MLP's forward (addmm with the bias, and
mm), input gradient (dy @ w) and weight gradient (dy^T @ x), then a square 8192^3 product, all
bf16 in and out. Each: 3 untimed calls, then --iters calls between two CUDA events;
TFLOP/s = 2 M N K per call / mean time. These are short bursts (the clock stays high), so they
read a little above a sustained benchmark.
"""
import argparse
import sys


def rate(torch, fn, flops, iters):
    for _ in range(3):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return flops * iters / (start.elapsed_time(stop) / 1e3) / 1e12


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows_positional", nargs="?", type=int, metavar="ROWS", help="same as --rows")
    ap.add_argument("--rows", type=int, default=8192, help="M: the batch (8192)")
    ap.add_argument("--width", type=int, default=4096, help="N = K: the layer width (4096)")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    n = args.rows_positional or args.rows
    d = args.width
    if n <= 0 or d <= 0 or args.iters <= 0:
        ap.error("--rows, --width and --iters must be positive")

    import torch
    if not torch.cuda.is_available():
        sys.exit("torch_gemm_probe.py: no CUDA device visible to PyTorch")
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    x, dy = torch.randn(n, d, **bf16), torch.randn(n, d, **bf16)
    w, b = torch.randn(d, d, **bf16), torch.randn(d, **bf16)
    f = 2.0 * n * d * d
    it = args.iters
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"forward  x @ w.T + b (addmm, bf16 out)  [{n},{d}]x[{d},{d}]^T: "
          f"{rate(torch, lambda: torch.addmm(b, x, w.t()), f, it):.0f} TFLOP/s")
    print(f"forward  x @ w.T     (mm, bf16 out):   {rate(torch, lambda: x @ w.t(), f, it):.0f} TFLOP/s")
    print(f"dx       dy @ w      (mm, bf16 out):   {rate(torch, lambda: dy @ w, f, it):.0f} TFLOP/s")
    print(f"dW       dy.T @ x    (mm, bf16 out):   {rate(torch, lambda: dy.t() @ x, f, it):.0f} TFLOP/s")
    s = torch.randn(8192, 8192, **bf16)
    print(f"square   8192^3      (mm, bf16 out):   "
          f"{rate(torch, lambda: s @ s, 2.0 * 8192 ** 3, it):.0f} TFLOP/s")


if __name__ == "__main__":
    main()
