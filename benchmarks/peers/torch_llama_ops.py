#!/usr/bin/env python3
"""PyTorch's Llama-3.2-1B memory-bound ops, forward and backward: the peer of stoker_ops_bench's
BM_RmsNorm*, BM_AddRmsNorm*, BM_Rope* and BM_SwiGlu* (scripts/gpu-measure.sh run llamaops runs
both).

  python3 benchmarks/peers/torch_llama_ops.py [--rows 8192] [--width 2048] [--no-compile]

Each op is written the way transformers' modeling_llama writes it, all bf16:
  rmsnorm      LlamaRMSNorm.forward: fp32 variance and rsqrt, cast back, times the bf16 weight
  add_rmsnorm  the decoder layer's residual add, then LlamaRMSNorm (outputs: y and the sum)
  rope         apply_rotary_pos_emb with rotate_half on q and k, viewed [B, H, T, D] out of one
               qkv [B*T, (H + 2 KV) D] as the projections' outputs are; cos and sin (bf16, made
               once per model forward by LlamaRotaryEmbedding) are built before timing
  swiglu       act_fn(gate) * up, gate and up the two halves of one [.., 2F] tensor
and each is timed (a) eager and (b) under torch.compile (the same function). Backward is
torch.autograd.grad of the outputs with random upstream gradients, to the inputs (and to the
RMSNorm weight). Timing: --warmup untimed calls, then --iters samples between two CUDA events,
the median printed: a forward sample is 10 back-to-back calls (per call), a backward sample one
backward after an untimed forward. GB/s counts the same bytes as stoker_ops_bench: the bf16
activations the op must read once and write once (the weight, cos/sin and positions not counted):
  rmsnorm 2 / 3 x N C x 2 B (fwd / bwd), add_rmsnorm 4 / 4, rope 2 x tokens (H + KV) D x 2 B,
  swiglu 3 / 5 x N F x 2 B.
"""
import argparse
import statistics
import sys

OPS = ("rmsnorm", "add_rmsnorm", "rope", "swiglu")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=8192, help="tokens N = B x T (8192)")
    ap.add_argument("--seq", type=int, default=2048, help="T, the sequence length (2048)")
    ap.add_argument("--width", type=int, default=2048, help="hidden size C (2048)")
    ap.add_argument("--heads", type=int, default=32, help="query heads H (32)")
    ap.add_argument("--kv-heads", type=int, default=8, help="key/value heads KV (8)")
    ap.add_argument("--head-dim", type=int, default=64, help="D, even (64)")
    ap.add_argument("--ffn", type=int, default=8192, help="intermediate size F (8192)")
    ap.add_argument("--iters", type=int, default=50, help="timed samples; the median is printed")
    ap.add_argument("--warmup", type=int, default=10, help="untimed calls first (10)")
    ap.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " + ",".join(OPS))
    ap.add_argument("--no-compile", action="store_true", help="eager only (skip torch.compile)")
    args = ap.parse_args()
    for name in ("rows", "seq", "width", "heads", "kv_heads", "head_dim", "ffn", "iters"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    if args.head_dim % 2 or args.rows % args.seq:
        ap.error("--head-dim must be even and --rows a multiple of --seq")
    ops = [o for o in args.ops.split(",") if o]
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        ap.error(f"--ops: unknown {','.join(bad) or '(empty)'}; choose from {','.join(OPS)}")

    import torch
    if not torch.cuda.is_available():
        sys.exit("torch_llama_ops.py: no CUDA device visible to PyTorch")
    run(torch, args, ops)


def run(torch, args, ops):
    import torch.nn.functional as F
    dev, bf16 = "cuda", torch.bfloat16
    n, c, f = args.rows, args.width, args.ffn
    h, kv, d, t = args.heads, args.kv_heads, args.head_dim, args.seq
    b = n // t
    eps = 1e-5
    g = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape, grad=False):
        return torch.randn(*shape, device=dev, dtype=bf16, generator=g).requires_grad_(grad)

    # transformers' modeling_llama, as written there.
    def rms_norm(hidden_states, weight):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + eps)
        return weight * hidden_states.to(input_dtype)

    def add_rms_norm(hidden_states, residual, weight):
        hidden_states = residual + hidden_states
        return rms_norm(hidden_states, weight), hidden_states

    def rotate_half(x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        q_embed = (q * cos) + (rotate_half(q) * sin)
        k_embed = (k * cos) + (rotate_half(k) * sin)
        return q_embed, k_embed

    def swiglu(x):
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    def median_ms(sample):
        for _ in range(args.warmup):
            sample(None, None)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.iters):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            times.append(sample(start, stop))
        torch.cuda.synchronize()
        return statistics.median(t() for t in times)

    def forward_sample(fn, inputs):
        def sample(start, stop):
            if start is None:
                fn(*inputs)
                return None
            start.record()
            for _ in range(10):
                fn(*inputs)
            stop.record()
            return lambda: start.elapsed_time(stop) / 10
        return sample

    def backward_sample(fn, inputs, wrt, grads_out):
        def sample(start, stop):
            outs = fn(*inputs)
            outs = outs if isinstance(outs, tuple) else (outs,)
            if start is not None:
                start.record()
            torch.autograd.grad(outs, wrt, grads_out)
            if start is None:
                return None
            stop.record()
            return lambda: start.elapsed_time(stop)
        return sample

    def report(op, pass_, mode, ms, nbytes):
        print(f"torch {op} {pass_} {mode}: {ms * 1e3:.1f} us, {nbytes / (ms / 1e3) / 1e9:.0f} GB/s",
              flush=True)

    def bench(op, fn, inputs, wrt, grads_out, fwd_bytes, bwd_bytes):
        modes = [("eager", fn)]
        if not args.no_compile:
            modes.append(("compile", torch.compile(fn, dynamic=False)))
        for mode, f_ in modes:
            with torch.no_grad():
                report(op, "fwd", mode, median_ms(forward_sample(f_, inputs)), fwd_bytes)
            report(op, "bwd", mode, median_ms(backward_sample(f_, inputs, wrt, grads_out)),
                   bwd_bytes)

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; N {n} (B {b} x T {t}), "
          f"C {c}, H {h}, KV {kv}, D {d}, F {f}, bf16", flush=True)
    act = n * c * 2.0
    if "rmsnorm" in ops:
        x, w = randn(n, c, grad=True), torch.ones(c, device=dev, dtype=bf16, requires_grad=True)
        bench("rmsnorm", rms_norm, (x, w), (x, w), (randn(n, c),), 2 * act, 3 * act)
    if "add_rmsnorm" in ops:
        x, r = randn(n, c, grad=True), randn(n, c, grad=True)
        w = torch.ones(c, device=dev, dtype=bf16, requires_grad=True)
        bench("add_rmsnorm", add_rms_norm, (x, r, w), (x, r, w), (randn(n, c), randn(n, c)),
              4 * act, 4 * act)
    if "rope" in ops:
        qkv = randn(n, (h + 2 * kv) * d)
        # Leaves viewed out of qkv as q_proj / k_proj's outputs are: [B, T, H, D] -> [B, H, T, D].
        q = qkv[:, : h * d].view(b, t, h, d).transpose(1, 2).detach().requires_grad_()
        k = qkv[:, h * d: (h + kv) * d].view(b, t, kv, d).transpose(1, 2).detach().requires_grad_()
        # LlamaRotaryEmbedding (default frequencies; the llama3 scaling only changes the values).
        inv_freq = 1.0 / (500000.0 ** (torch.arange(0, d, 2, dtype=torch.int64, device=dev)
                                       .float() / d))
        pos = torch.arange(t, device=dev).repeat(b).view(b, t).float()
        freqs = pos[:, :, None] * inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(bf16), emb.sin().to(bf16)
        nbytes = 2.0 * n * (h + kv) * d * 2
        bench("rope", apply_rotary_pos_emb, (q, k, cos, sin), (q, k),
              (randn(b, h, t, d), randn(b, kv, t, d)), nbytes, nbytes)
    if "swiglu" in ops:
        x = randn(n, 2 * f, grad=True)
        bench("swiglu", swiglu, (x,), (x,), (randn(n, f),), 3 * n * f * 2.0, 5 * n * f * 2.0)


if __name__ == "__main__":
    main()
