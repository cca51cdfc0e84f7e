"""PyTorch DistributedDataParallel as the peer of stoker's data-parallel scaling runs: GPT-2 124M
(the model of shared/peers/torch_train.py, bf16 autocast, B=16 x T=1024 per rank, fused AdamW)
and torchvision's ResNet-50 (bf16 autocast, channels_last, B=256 per rank, SGD momentum), on
synthetic inputs, 8 warm-up + 20 timed steps.

  torchrun --nproc-per-node N scripts/torch_ddp.py PEERS_DIR [gpt] [resnet]

PEERS_DIR holds torch_train.py (shared/peers, carried in build-gpu/carry/peers). Rank 0 prints
per-rank and job throughput (tokens/s or img/s), ms/step and peak memory.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def bench(step, warm=8, iters=20):
    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    for _ in range(iters):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters, torch.cuda.max_memory_allocated() / 2**30


def main():
    peers = sys.argv[1]
    which = sys.argv[2:] or ["gpt", "resnet"]
    sys.path.insert(0, peers)
    sys.argv = sys.argv[:1]  # torch_train.py runs nothing when imported without arguments
    import torch_train  # noqa: E402

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    if rank == 0:
        print(f"# torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}, {world} ranks DDP")
    if "gpt" in which:
        torch.manual_seed(0)
        m = DDP(torch_train.GPT().cuda(), device_ids=[local])
        opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True)
        B, T = 16, 1024
        idx = torch.randint(0, 50257, (B, T), device="cuda")
        tgt = torch.randint(0, 50257, (B, T), device="cuda")

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(idx, tgt)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        dt, mem = bench(step)
        if rank == 0:
            print(f"DDP GPT-2 124M bf16 B={B}/rank T={T}: {B * T / dt:,.0f} tok/s/rank, "
                  f"{world * B * T / dt:,.0f} tok/s on {world} GPUs, {dt * 1e3:.1f} ms/step, "
                  f"peak {mem:.1f} GiB", flush=True)
        del m, opt
    if "resnet" in which:
        import torchvision
        m = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
        m = DDP(m, device_ids=[local])
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        B = 256
        x = torch.randn(B, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (B,), device="cuda")

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        dt, mem = bench(step, warm=5, iters=15)
        if rank == 0:
            print(f"DDP ResNet-50 bf16 channels_last B={B}/rank: {B / dt:,.0f} img/s/rank, "
                  f"{world * B / dt:,.0f} img/s on {world} GPUs, {dt * 1e3:.1f} ms/step, "
                  f"peak {mem:.1f} GiB", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
