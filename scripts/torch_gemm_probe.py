"""PyTorch's bf16 GEMM rate on the GPU machine for the shapes of the MLP benchmark, to compare
stoker's cuBLASLt GEMMs with what torch gets from cuBLAS in the same run.

  python3 scripts/torch_gemm_probe.py [N]      (N = 8192: M = N, K = N = 4096 for the MLP shapes)
"""
import sys
import torch


def rate(fn, flops, iters=20):
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
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    d = 4096
    dev = "cuda"
    x = torch.randn(n, d, device=dev, dtype=torch.bfloat16)
    w = torch.randn(d, d, device=dev, dtype=torch.bfloat16)
    b = torch.randn(d, device=dev, dtype=torch.bfloat16)
    dy = torch.randn(n, d, device=dev, dtype=torch.bfloat16)
    f = 2.0 * n * d * d
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"forward  x @ w.T + b (addmm, bf16 out)  [{n},{d}]x[{d},{d}]^T: "
          f"{rate(lambda: torch.addmm(b, x, w.t()), f):.0f} TFLOP/s")
    print(f"forward  x @ w.T     (mm, bf16 out):   {rate(lambda: x @ w.t(), f):.0f} TFLOP/s")
    print(f"dx       dy @ w      (mm, bf16 out):   {rate(lambda: dy @ w, f):.0f} TFLOP/s")
    print(f"dW       dy.T @ x    (mm, bf16 out):   {rate(lambda: dy.t() @ x, f):.0f} TFLOP/s")
    s = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    print(f"square   8192^3      (mm, bf16 out):   {rate(lambda: s @ s, 2.0 * 8192 ** 3):.0f} TFLOP/s")


if __name__ == "__main__":
    main()
