#!/usr/bin/env python3
"""PyTorch's all-reduce rate (torch.distributed over NCCL), in nccl-tests' terms: the peer of
stoker_allreduce_throughput on the same GPUs in the same run (scripts/gpu-measure.sh run multi
runs both).

  torchrun --nproc-per-node N benchmarks/peers/torch_allreduce.py [--max-mib 1024]

For sizes from --min-mib to --max-mib (x4 each step) of --dtype elements: --warmup untimed
all-reduces, then --iters out-of-place all-reduces (each into its own copy of the input,
summed) between two device syncs; time = their mean. algbw = bytes / time and
busbw = algbw * 2 (n - 1) / n, as nccl-tests' all_reduce_perf defines them (n ranks). Each
size's result is checked (every element = n); a wrong one is marked WRONG and the exit code
is 1. Rank 0 prints the table.
"""
import argparse
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("max_mib_positional", nargs="?", type=int, metavar="MAX_MIB",
                    help="same as --max-mib")
    ap.add_argument("--min-mib", type=int, default=1)
    ap.add_argument("--max-mib", type=int, default=1024)
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    max_mib = args.max_mib_positional or args.max_mib
    if args.min_mib <= 0 or max_mib < args.min_mib or args.warmup < 0 or args.iters <= 0:
        ap.error("need 0 < --min-mib <= --max-mib, --warmup >= 0, --iters > 0")
    missing = [v for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if v not in os.environ]
    if missing:
        sys.exit(f"torch_allreduce.py: {', '.join(missing)} not set: start it with torchrun "
                 f"--nproc-per-node N {sys.argv[0]}")

    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    elem = torch.tensor([], dtype=dtype).element_size()
    if rank == 0:
        print(f"# torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}, {world} ranks, "
              f"{args.dtype}, out of place, mean of {args.iters}")
        print(f"# {'bytes':>12} {'time us':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    wrong = False
    mib = args.min_mib
    while mib <= max_mib:
        count = mib * (1 << 20) // elem
        x = torch.ones(count, device="cuda", dtype=dtype)
        for _ in range(args.warmup):
            dist.all_reduce(x.clone())
        outs = [x.clone() for _ in range(args.iters)]
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        for y in outs:
            dist.all_reduce(y)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - start) / args.iters
        ok = bool(torch.all(outs[-1] == world))
        wrong |= not ok
        algbw = count * elem / dt / 1e9
        if rank == 0:
            print(f"  {count * elem:>12} {dt * 1e6:>10.1f} {algbw:>11.2f} "
                  f"{algbw * 2 * (world - 1) / world:>11.2f}{'' if ok else '  WRONG'}", flush=True)
        del outs, x
        mib *= 4
    dist.destroy_process_group()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
