#!/usr/bin/env python3
"""PyTorch DistributedDataParallel: the peer of stoker's data-parallel scaling runs
(stoker launch ... stoker_gpt / stoker_classifier --synthetic; scripts/gpu-measure.sh run multi
runs both).

  torchrun --nproc-per-node N benchmarks/peers/torch_ddp.py [gpt] [resnet]

  gpt     GPT-2 124M of gpt_model.py, bf16 autocast, B=16 x T=1024 per rank of random tokens,
          fused AdamW lr 3e-4; 8 warm-up + 20 timed steps
  resnet  torchvision's ResNet-50, bf16 autocast, channels_last, B=256 per rank of random
          images, SGD momentum 0.9; 5 warm-up + 15 timed steps
Both on synthetic inputs (one batch per rank), NCCL, TF32 on. Rank 0 prints the per-rank and
job throughput, ms/step (barrier before the timed steps, device sync after) and its peak memory.
"""
import argparse
import os
import sys
import time


def timed(torch, dist, step, warmup, steps):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps, torch.cuda.max_memory_allocated() / 2**30


def gpt(torch, dist, ddp, local, rank, world):
    import gpt_model
    batch, context = 16, 1024
    torch.manual_seed(0)  # the same initial weights on every rank (DDP broadcasts rank 0's)
    model = ddp(gpt_model.GPT(context=context).cuda(), device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    ids = torch.randint(0, 50257, (batch, context), device="cuda")
    targets = torch.randint(0, 50257, (batch, context), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    dt, peak = timed(torch, dist, step, 8, 20)
    if rank == 0:
        tokens = batch * context
        print(f"torch DDP GPT-2 124M bf16 B={batch}/rank T={context}: {tokens / dt:,.0f} "
              f"tok/s/rank, {world * tokens / dt:,.0f} tok/s on {world} GPUs, "
              f"{dt * 1e3:.1f} ms/step, peak {peak:.1f} GiB", flush=True)


def resnet(torch, dist, ddp, local, rank, world):
    import torchvision
    F = torch.nn.functional
    batch = 256
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    model = ddp(model, device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    dt, peak = timed(torch, dist, step, 5, 15)
    if rank == 0:
        print(f"torch DDP ResNet-50 bf16 channels_last B={batch}/rank: {batch / dt:,.0f} "
              f"img/s/rank, {world * batch / dt:,.0f} img/s on {world} GPUs, "
              f"{dt * 1e3:.1f} ms/step, peak {peak:.1f} GiB", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", metavar="MODEL", help="gpt, resnet (default: both)")
    args = ap.parse_args()
    bad = [m for m in args.models if m not in ("gpt", "resnet")]
    if bad:
        ap.error(f"unknown model {bad[0]!r}: gpt or resnet")
    args.models = args.models or ["gpt", "resnet"]
    missing = [v for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if v not in os.environ]
    if missing:
        sys.exit(f"torch_ddp.py: {', '.join(missing)} not set: start it with torchrun "
                 f"--nproc-per-node N {sys.argv[0]}")

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    if rank == 0:
        print(f"# torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}, {world} ranks DDP",
              flush=True)
    for name in args.models:
        {"gpt": gpt, "resnet": resnet}[name](torch, dist, DistributedDataParallel, local, rank,
                                             world)
        torch.cuda.empty_cache()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
