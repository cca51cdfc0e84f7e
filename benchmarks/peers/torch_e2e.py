#!/usr/bin/env python3
"""ResNet training end to end in PyTorch: synthetic batches vs batches fed by the DataLoader
from JPEG files. The peer of stoker_classifier --synthetic [--data DB] on the same images
(scripts/gpu-measure.sh run resnet runs both).

  python3 benchmarks/peers/torch_e2e.py DIR [--arch resnet18 resnet50] [--workers 16]

Per architecture (torchvision's, random init, 1000 classes, channels_last, bf16 autocast,
SGD momentum 0.9, lr 0.1, cuDNN benchmark mode):
  synthetic  one random batch on the GPU: --warmup steps, then --steps steps between two
             device syncs
  fed        the DataLoader of torch_loader.py (torchvision decode_jpeg, RandomResizedCrop(224)
             + flip in --workers workers, uint8 to the GPU, normalized there) over --epochs
             epochs of DIR; the clock starts after the first --warmup steps
One line per architecture: both rates and the fed rate as a share of the synthetic one.
"""
import argparse
import os
import sys
import time


def build(torch, arch):
    """(model, step(x, y)) for one architecture."""
    import torchvision
    F = torch.nn.functional
    model = getattr(torchvision.models, arch)().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model, step


def synthetic_rate(torch, step, batch, warmup, steps):
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    for _ in range(warmup):
        step(x, y)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step(x, y)
    torch.cuda.synchronize()
    return steps * batch / (time.perf_counter() - start)


def fed_rate(torch, loader_mod, step, loader, epochs, warmup):
    normalize = loader_mod.gpu_normalizer(torch, memory_format=torch.channels_last)
    seen, images, start = 0, 0, None
    for _ in range(epochs):
        for x, y in loader:
            x = normalize(x.cuda(non_blocking=True))
            y = y.cuda(non_blocking=True) % 1000
            step(x, y)
            seen += 1
            if seen == warmup:
                torch.cuda.synchronize()
                start = time.perf_counter()
            elif seen > warmup:
                images += x.shape[0]
    torch.cuda.synchronize()
    if start is None or images == 0:
        sys.exit(f"torch_e2e.py: {seen} steps in {epochs} epochs: not more than --warmup "
                 f"{warmup}; give more files or epochs")
    return images / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="class folders of JPEGs (make_imagenet_like.py)")
    ap.add_argument("--arch", nargs="+", default=["resnet18", "resnet50"],
                    choices=("resnet18", "resnet50"))
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=16, help="DataLoader workers (16)")
    ap.add_argument("--epochs", type=int, default=2, help="fed epochs (2)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps (5)")
    ap.add_argument("--steps", type=int, default=20, help="timed synthetic steps (20)")
    args = ap.parse_args()
    if args.batch <= 0 or args.workers < 0 or args.epochs <= 0 or args.warmup < 1 or args.steps <= 0:
        ap.error("--batch, --epochs, --steps must be > 0, --warmup >= 1, --workers >= 0")

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_loader
    files = torch_loader.image_files(args.dir)
    import torch
    if not torch.cuda.is_available():
        sys.exit("torch_e2e.py: no CUDA device visible to PyTorch")
    torch.backends.cudnn.benchmark = True
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}; {len(files)} files, "
          f"{os.cpu_count()} cores", flush=True)
    dataset = torch_loader.TorchvisionDataset(files)
    for arch in args.arch:
        model, step = build(torch, arch)
        syn = synthetic_rate(torch, step, args.batch, args.warmup, args.steps)
        loader = torch_loader.data_loader(torch, dataset, args.batch, args.workers)
        fed = fed_rate(torch, torch_loader, step, loader, args.epochs, args.warmup)
        del loader, model, step
        torch.cuda.empty_cache()
        print(f"torch {arch} bf16 channels_last B={args.batch}: synthetic {syn:,.0f} img/s; "
              f"fed by DataLoader({args.workers} workers) {fed:,.0f} img/s "
              f"({fed / syn:.0%} of synthetic)", flush=True)


if __name__ == "__main__":
    main()
