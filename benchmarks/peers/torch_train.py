#!/usr/bin/env python3
"""PyTorch's training-step throughput and peak memory on one GPU: the peer of
stoker_train_bench (mlp), stoker_gpt --synthetic (gpt), stoker_classifier --synthetic
(resnet) and stoker_llm --synthetic (llama). Eager by default; --compile runs the same step through torch.compile.

  python3 benchmarks/peers/torch_train.py mlp [--precision fp32,bf16,fp16]
  python3 benchmarks/peers/torch_train.py gpt [--precision bf16] [--batch 16] [--checkpoint]
  python3 benchmarks/peers/torch_train.py gpt --precision bf16 --compile
  python3 benchmarks/peers/torch_train.py resnet [--arch resnet50] [--precision fp32,bf16]
  python3 benchmarks/peers/torch_train.py llama --llama llama3.2-1b --precision bf16 --batch 4

Models (the stoker programs build the same ones):
  mlp     L x (Linear(d, d) + GELU(tanh)), batch B of normal inputs, loss mean(y^2) in fp32,
          fused AdamW (PyTorch's defaults); fp16 with torch.amp.GradScaler.
          TFLOP/s = 6 L d^2 B / step time.
  gpt     GPT-2 124M (gpt_model.py: vocab 50304, context 1024, width 768, 12 layers, 12 heads,
          tied head), one fixed batch of random tokens, fused AdamW lr 3e-4; --checkpoint
          recomputes every block in backward. TFLOP/s = (6 N + 12 L C T) per token.
  resnet  torchvision's ResNet (random init, 1000 classes), channels_last, one random batch,
          SGD momentum 0.9, lr 0.1.
  llama   transformers' LlamaForCausalLM (attn_implementation "sdpa", random init, fp32
          parameters) of a stoker_llm preset's config, sequence --seq (2048), one fixed batch of
          random tokens with labels = ids (the model shifts them), fused AdamW lr 3e-4;
          --checkpoint: gradient checkpointing of every layer. TFLOP/s = (6 N + 12 L H D T) per
          token, N the parameters that multiply (the embedding lookup excluded, the head
          included), the attention term without the causal halving (PaLM's convention).
Half precision is torch.autocast (bf16 or fp16); fp32 runs with TF32 on unless --no-tf32.
Timing: --warmup steps, a device sync, --steps steps between two device syncs; the peak is
torch.cuda.max_memory_allocated over the timed steps. One line per configuration.
"""
import argparse
import os
import sys
import time

PRECISIONS = ("fp32", "bf16", "fp16")


def timed(torch, step, warmup, steps):
    """(seconds per step, peak GiB of the timed steps)."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps, torch.cuda.max_memory_allocated() / 2**30


def autocast(torch, precision):
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    return torch.autocast("cuda", dtype=dtype, enabled=precision != "fp32")


def label(precision, tf32):
    return f"fp32({'tf32' if tf32 else 'no tf32'})" if precision == "fp32" else precision


def run_mlp(torch, args, precision):
    nn = torch.nn
    layers, width, batch = args.layers, args.width, args.batch or 8192
    model = nn.Sequential(*(nn.Sequential(nn.Linear(width, width), nn.GELU(approximate="tanh"))
                            for _ in range(layers))).cuda()
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    x = torch.randn(batch, width, device="cuda")
    forward = torch.compile(model) if args.compile else model

    def step():
        with autocast(torch, precision):
            loss = forward(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    dt, peak = timed(torch, step, args.warmup, args.steps)
    flops = 6 * layers * width * width * batch
    print(f"torch MLP {layers}x{width} B={batch} {label(precision, args.tf32)}"
          f"{' +compile' if args.compile else ''}: {flops / dt / 1e12:.0f} TFLOP/s, "
          f"{dt * 1e3:.2f} ms/step, peak {peak:.2f} GiB", flush=True)


# GPT-2's sizes as stoker_gpt's --preset names them: (layers, heads, width); vocabulary 50304.
GPT_PRESETS = {
    "gpt2-124m": (12, 12, 768),
    "gpt2-350m": (24, 16, 1024),
    "gpt2-774m": (36, 20, 1280),
    "gpt2-1.5b": (48, 25, 1600),
}


def run_gpt(torch, args, precision):
    import gpt_model

    batch, context = args.batch or 16, 1024
    layers, heads, width = GPT_PRESETS[args.preset]
    torch.manual_seed(0)
    model = gpt_model.GPT(context=context, width=width, layers=layers, heads=heads,
                          checkpoint_blocks=args.checkpoint).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    forward = torch.compile(model) if args.compile else model
    ids = torch.randint(0, 50257, (batch, context), device="cuda")
    targets = torch.randint(0, 50257, (batch, context), device="cuda")

    def step():
        with autocast(torch, precision):
            loss = forward(ids, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    dt, peak = timed(torch, step, args.warmup, args.steps)
    tokens = batch * context
    flops = gpt_model.flops_per_token(model, layers, width, context) * tokens
    print(f"torch GPT {args.preset} B={batch} T={context} {label(precision, args.tf32)}"
          f"{' +ckpt(every 1)' if args.checkpoint else ''}{' +compile' if args.compile else ''}: "
          f"{tokens / dt:,.0f} tok/s, {dt * 1e3:.1f} ms/step, peak {peak:.1f} GiB, "
          f"~{flops / dt / 1e12:.0f} TFLOP/s", flush=True)


def run_resnet(torch, args, precision):
    import torchvision
    F = torch.nn.functional

    batch = args.batch or 256
    model = getattr(torchvision.models, args.arch)().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    forward = torch.compile(model) if args.compile else model
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")

    def step():
        with autocast(torch, precision):
            loss = F.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    dt, peak = timed(torch, step, args.warmup, args.steps)
    print(f"torch {args.arch} {label(precision, args.tf32)} channels_last B={batch}"
          f"{' +compile' if args.compile else ''}: {batch / dt:,.0f} img/s, "
          f"{dt * 1e3:.1f} ms/step, peak {peak:.1f} GiB", flush=True)


LLAMA_PRESETS = {  # stoker_llm's presets (examples/llm/llama_model.cpp)
    "llama3.2-1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=64, intermediate_size=8192,
                        tie_word_embeddings=True),
    "llama3.2-3b": dict(hidden_size=3072, num_hidden_layers=28, num_attention_heads=24,
                        num_key_value_heads=8, head_dim=128, intermediate_size=8192,
                        tie_word_embeddings=True),
}


def run_llama(torch, args, precision):
    import transformers

    cfg = LLAMA_PRESETS[args.llama]
    config = transformers.LlamaConfig(
        vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_theta=500000.0, attention_bias=False, mlp_bias=False, hidden_act="silu",
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        use_cache=False, **cfg)
    batch, seq = args.batch or 4, args.seq
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM._from_config(
        config, attn_implementation="sdpa", torch_dtype=torch.float32).cuda()
    if args.checkpoint:
        model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    forward = torch.compile(model) if args.compile else model
    ids = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")

    def step():
        with autocast(torch, precision):
            loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    dt, peak = timed(torch, step, args.warmup, args.steps)
    tokens = batch * seq
    c, layers, heads, d = (cfg["hidden_size"], cfg["num_hidden_layers"],
                           cfg["num_attention_heads"], cfg["head_dim"])
    params = sum(p.numel() for p in model.parameters())
    matmul_params = params - (0 if cfg["tie_word_embeddings"] else config.vocab_size * c)
    flops = (6 * matmul_params + 12 * layers * heads * d * seq) * tokens
    print(f"torch Llama {args.llama} B={batch} T={seq} {label(precision, args.tf32)}"
          f"{' +ckpt(every 1)' if args.checkpoint else ''}{' +compile' if args.compile else ''}: "
          f"{tokens / dt:,.0f} tok/s, {dt * 1e3:.1f} ms/step, peak {peak:.1f} GiB, "
          f"~{flops / dt / 1e12:.0f} TFLOP/s", flush=True)


def precision_list(text):
    out = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in out if p not in PRECISIONS]
    if not out or bad:
        raise argparse.ArgumentTypeError(
            f"'{text}': a comma-separated list of {', '.join(PRECISIONS)}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", choices=("mlp", "gpt", "resnet", "llama"))
    ap.add_argument("--precision", type=precision_list, default=None,
                    help="comma-separated fp32, bf16, fp16 (default: mlp fp32,bf16,fp16; "
                         "gpt fp32,bf16; resnet fp32,bf16)")
    ap.add_argument("--batch", type=int, default=0,
                    help="batch size (default: mlp 8192, gpt 16, resnet 256, llama 4)")
    ap.add_argument("--preset", default="gpt2-124m", choices=tuple(GPT_PRESETS),
                    help="gpt: the model size (gpt2-124m)")
    ap.add_argument("--llama", default="llama3.2-1b", choices=tuple(LLAMA_PRESETS),
                    help="llama: the stoker_llm preset whose shape to build (llama3.2-1b)")
    ap.add_argument("--seq", type=int, default=2048, help="llama: sequence length (2048)")
    ap.add_argument("--layers", type=int, default=8, help="mlp: Linear+GELU blocks (8)")
    ap.add_argument("--width", type=int, default=4096, help="mlp: width d (4096)")
    ap.add_argument("--arch", default="resnet50", choices=("resnet18", "resnet50"),
                    help="resnet: the torchvision model (resnet50)")
    ap.add_argument("--checkpoint", action="store_true",
                    help="gpt, llama: recompute every block in backward")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--no-tf32", dest="tf32", action="store_false",
                    help="fp32 without TF32 (default: TF32 on, as the stoker runs it compares with)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps (8; resnet 5)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (20; resnet 15)")
    args = ap.parse_args()
    if args.batch < 0:
        ap.error(f"--batch {args.batch}: must be positive")
    if args.warmup is None:
        args.warmup = 5 if args.model == "resnet" else 8
    if args.steps is None:
        args.steps = 15 if args.model == "resnet" else 20
    if args.warmup < 0 or args.steps <= 0:
        ap.error("--warmup must be >= 0 and --steps > 0")
    if args.precision is None:
        args.precision = (list(PRECISIONS) if args.model == "mlp" else
                          ["bf16"] if args.model == "llama" else ["fp32", "bf16"])

    import torch
    if not torch.cuda.is_available():
        sys.exit("torch_train.py: no CUDA device visible to PyTorch")
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = True
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    run = {"mlp": run_mlp, "gpt": run_gpt, "resnet": run_resnet, "llama": run_llama}[args.model]
    for precision in args.precision:
        run(torch, args, precision)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
