"""PyTorch's all-reduce rate (torch.distributed, NCCL) as the stand-in for nccl-tests, to put next
to stoker_allreduce_throughput on the same GPUs and NCCL in one run.

  torchrun --nproc-per-node N scripts/torch_allreduce.py [MAX_MIB]

Prints, for sizes from 1 MiB to MAX_MIB (default 1024) of f32, the time of one out-of-place
all-reduce (mean of 20 after 5 warm-ups), algbw = bytes / time and busbw = algbw * 2 (n-1) / n,
as nccl-tests' all_reduce_perf defines them.
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    max_mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    if rank == 0:
        print(f"# torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}, {world} ranks")
        print(f"# {'bytes':>12} {'time us':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    mib = 1
    while mib <= max_mib:
        n = mib * (1 << 20) // 4
        x = torch.ones(n, device="cuda")
        for _ in range(5):
            y = x.clone()
            dist.all_reduce(y)
        torch.cuda.synchronize()
        dist.barrier()
        iters = 20
        ys = [x.clone() for _ in range(iters)]
        torch.cuda.synchronize()
        t = time.perf_counter()
        for y in ys:
            dist.all_reduce(y)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t) / iters
        ok = bool(torch.all(ys[-1] == world))
        algbw = n * 4 / dt / 1e9
        if rank == 0:
            print(f"  {n * 4:>12} {dt * 1e6:>10.1f} {algbw:>11.2f} {algbw * 2 * (world - 1) / world:>11.2f}"
                  f"{'' if ok else '  WRONG'}")
        mib *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
