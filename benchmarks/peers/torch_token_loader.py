#!/usr/bin/env python3
"""PyTorch's usual language-model loader: the peer of stoker_token_loader_bench on the same file.

  python3 benchmarks/peers/torch_token_loader.py FILE [--context 1024 8192] [--batch 16]
      [--workers 0 1 2] [--seconds 3]

FILE holds raw little-endian uint16 token ids (what stoker_token_loader_bench --file reads; it
prints its temporary file's path, or write one with numpy). The dataset is what practitioners
write (nanoGPT, many training scripts): a numpy memmap of the file, item i the packed sequence
tokens[i T, i T + T + 1) converted to int64, input = [:-1], target = [1:]; a
torch.utils.data.DataLoader over it with shuffle=True, batch_size, num_workers, pin_memory=True
(pinned host batches, as stoker's ring with a GPU) and persistent workers. CPU only: no copy to a
device is timed, the batches stop in (pinned) host memory.
Rate: input tokens (B T per batch) delivered after 3 warm-up batches over --seconds.
Lines start with "torch DataLoader".
"""
import argparse
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file")
    p.add_argument("--context", type=int, nargs="+", default=[1024, 8192])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--no-pin", action="store_true", help="pin_memory=False")
    args = p.parse_args()

    import numpy as np
    import torch

    class PackedTokens(torch.utils.data.Dataset):
        def __init__(self, path, t):
            self.path, self.t = path, t
            self.data = None
            self.n = (np.memmap(path, dtype=np.uint16, mode="r").shape[0] - 1) // t

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            if self.data is None:  # opened in each worker
                self.data = np.memmap(self.path, dtype=np.uint16, mode="r")
            x = torch.from_numpy(self.data[i * self.t: i * self.t + self.t + 1].astype(np.int64))
            return x[:-1], x[1:]

    pin = not args.no_pin
    print(f"torch {torch.__version__}, numpy {np.__version__}, {torch.get_num_threads()} intra-op "
          f"threads, file {args.file}", flush=True)
    for t in args.context:
        ds = PackedTokens(args.file, t)
        for w in args.workers:
            loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=w,
                                                 pin_memory=pin, persistent_workers=w > 0,
                                                 drop_last=True, prefetch_factor=4 if w > 0 else None)
            it = iter(loader)
            for _ in range(3):
                next(it)
            batches, start = 0, time.perf_counter()
            while time.perf_counter() - start < args.seconds:
                try:
                    x, y = next(it)
                except StopIteration:
                    it = iter(loader)
                    continue
                batches += 1
            elapsed = time.perf_counter() - start
            assert x.shape == (args.batch, t) and bool((x[:, 1:] == y[:, :-1]).all())
            print(f"torch DataLoader T={t} batch {args.batch} workers {w} pin_memory {pin}: "
                  f"{batches * args.batch * t / elapsed / 1e6:.1f} M tokens/s "
                  f"({batches / elapsed:.0f} batches/s)", flush=True)
            del it, loader
    return 0


if __name__ == "__main__":
    sys.exit(main())
