#!/usr/bin/env python3
"""PyTorch's DataLoader feeding the GPU: the peer of stoker_loader_throughput on the same JPEG
files (scripts/make-imagenet-like.sh measure runs both).

  python3 benchmarks/peers/torch_loader.py DIR [--workers 8 16] [--epochs 2]

DIR holds class folders of JPEGs (DIR/<class>/*.jpg, as make_imagenet_like.py writes them);
a sample's label is its folder's index. Each batch is RandomResizedCrop(224) + horizontal flip
+ normalization with ImageNet's mean and std, batch 256, shuffled, delivered to cuda:0, with
the usual fast settings (pin_memory, persistent workers, prefetch_factor 4, drop_last). Two
pipelines, each at every worker count:
  PIL          PIL decode, torchvision.transforms RandomResizedCrop + flip + ToTensor +
               Normalize in the workers (float32 batches cross to the GPU)
  torchvision  torchvision.io.decode_jpeg (libjpeg-turbo) to uint8, transforms.v2
               RandomResizedCrop + flip in the workers, uint8 batches to the GPU, normalized
               there (the faster of the two)
Rate: images delivered after the first --warmup-batches batches (worker start-up excluded)
over the wall time to a device sync after the last one, over --epochs epochs.
Before that it prints the files' count and mean size, and one core's decode rate of the first
500 files (PIL full decode, torchvision full decode, PIL draft at 1/2 scale).

Output lines start with "files", "single-core" and "DataLoader" (scripts/make-imagenet-like.sh
copies them into its summary). torch_e2e.py imports the datasets from here.
"""
import argparse
import io
import os
import sys
import time

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
JPEG_SUFFIXES = (".jpg", ".jpeg")


def image_files(root):
    """[(path, label)] of root/<class>/*.jpg, classes in sorted order, files sorted."""
    if not os.path.isdir(root):
        sys.exit(f"{root}: not a folder (expected class folders of JPEGs)")
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    out = []
    for label, name in enumerate(classes):
        folder = os.path.join(root, name)
        out += [(os.path.join(folder, f), label) for f in sorted(os.listdir(folder))
                if f.lower().endswith(JPEG_SUFFIXES)]
    if not out:
        sys.exit(f"{root}: no JPEGs in class folders ({root}/<class>/*.jpg); make some with "
                 f"benchmarks/peers/make_imagenet_like.py")
    return out


class PilDataset:
    """PIL decode + torchvision.transforms, float32 CHW normalized in the worker. A plain
    map-style dataset (no torch at import), so that it pickles for any worker start method."""

    def __init__(self, files, size=224):
        self.files, self.size, self.transform = files, size, None

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        if self.transform is None:  # built in the worker, on first use
            import torchvision.transforms as T
            self.transform = T.Compose([T.RandomResizedCrop(self.size), T.RandomHorizontalFlip(),
                                        T.ToTensor(), T.Normalize(MEAN, STD)])
        from PIL import Image
        path, label = self.files[i]
        with Image.open(path) as im:
            return self.transform(im.convert("RGB")), label


class TorchvisionDataset:
    """torchvision.io.decode_jpeg to uint8 RGB + transforms.v2 crop and flip; normalize on the
    GPU with gpu_normalizer()."""

    def __init__(self, files, size=224):
        self.files, self.size, self.transform = files, size, None

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg
        if self.transform is None:
            import torchvision.transforms.v2 as T2
            self.transform = T2.Compose([T2.RandomResizedCrop(self.size, antialias=True),
                                         T2.RandomHorizontalFlip()])
        path, label = self.files[i]
        with open(path, "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        return self.transform(decode_jpeg(data, mode=ImageReadMode.RGB)), label


def gpu_normalizer(torch, memory_format=None):
    """u8 NCHW batch on the GPU -> normalized float32 (optionally channels_last)."""
    mean = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device="cuda").view(1, 3, 1, 1) * 255

    def normalize(x):
        y = (x.float() - mean) / std
        return y.contiguous(memory_format=memory_format) if memory_format else y
    return normalize


def data_loader(torch, dataset, batch, workers):
    return torch.utils.data.DataLoader(
        dataset, batch_size=batch, shuffle=True, num_workers=workers, pin_memory=True,
        prefetch_factor=4 if workers > 0 else None, persistent_workers=workers > 0,
        drop_last=True)


def single_core_rates(torch, files):
    """img/s of one core: PIL full decode, torchvision full decode, PIL draft at 1/2 scale."""
    from PIL import Image
    from torchvision.io import ImageReadMode, decode_jpeg
    blobs = []
    for path, _ in files[:500]:
        with open(path, "rb") as f:
            blobs.append(f.read())

    def rate(decode):
        start = time.perf_counter()
        for b in blobs:
            decode(b)
        return len(blobs) / (time.perf_counter() - start)

    def pil_draft(b):
        im = Image.open(io.BytesIO(b))
        im.draft("RGB", (im.size[0] // 2, im.size[1] // 2))
        im.convert("RGB")

    pil = rate(lambda b: Image.open(io.BytesIO(b)).convert("RGB"))
    tv = rate(lambda b: decode_jpeg(torch.frombuffer(bytearray(b), dtype=torch.uint8),
                                    mode=ImageReadMode.RGB))
    return pil, tv, rate(pil_draft)


def measure(torch, loader, normalize, epochs, warmup_batches):
    """Images per second delivered to the GPU after the first warmup_batches batches."""
    seen, images, start = 0, 0, None
    for _ in range(epochs):
        for x, y in loader:
            x = x.cuda(non_blocking=True)
            y = y.cuda(non_blocking=True)
            if normalize is not None:
                x = normalize(x)
            seen += 1
            if seen == warmup_batches:
                torch.cuda.synchronize()
                start = time.perf_counter()
            elif seen > warmup_batches:
                images += x.shape[0]
    torch.cuda.synchronize()
    if start is None or images == 0:
        sys.exit(f"torch_loader.py: {seen} batches in {epochs} epochs: not more than "
                 f"--warmup-batches {warmup_batches}; give more files or epochs")
    return images / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="class folders of JPEGs")
    ap.add_argument("workers_positional", nargs="*", type=int, metavar="W",
                    help="worker counts (same as --workers)")
    ap.add_argument("--workers", nargs="+", type=int, default=None,
                    help="DataLoader worker counts, one run each (default: 8 16)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=2, help="epochs per run (2)")
    ap.add_argument("--warmup-batches", type=int, default=1,
                    help="batches before the clock starts (1)")
    ap.add_argument("--pipelines", default="PIL,torchvision",
                    help="comma-separated: PIL, torchvision (both)")
    args = ap.parse_args()
    workers = (args.workers or []) + args.workers_positional or [8, 16]
    if any(w < 0 for w in workers) or args.batch <= 0 or args.epochs <= 0 or args.warmup_batches < 1:
        ap.error("worker counts must be >= 0, --batch and --epochs > 0, --warmup-batches >= 1")
    pipelines = [p.strip() for p in args.pipelines.split(",") if p.strip()]
    if not pipelines or any(p not in ("PIL", "torchvision") for p in pipelines):
        ap.error(f"--pipelines {args.pipelines}: a comma-separated list of PIL, torchvision")

    files = image_files(args.dir)
    import torch
    if not torch.cuda.is_available():
        sys.exit("torch_loader.py: no CUDA device visible to PyTorch")
    mean_kib = sum(os.path.getsize(p) for p, _ in files) / len(files) / 1024
    print(f"files {len(files)} (mean {mean_kib:.1f} KiB) cores {os.cpu_count()} "
          f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    pil, tv, draft = single_core_rates(torch, files)
    print(f"single-core full decode: PIL {pil:.0f} img/s, torchvision {tv:.0f} img/s; "
          f"PIL draft 1/2 scale {draft:.0f} img/s", flush=True)
    runs = {"PIL": ("PIL+ToTensor+Normalize", PilDataset(files), None),
            "torchvision": ("torchvision decode_jpeg uint8 + GPU normalize",
                            TorchvisionDataset(files), gpu_normalizer(torch))}
    for key in pipelines:
        name, dataset, normalize = runs[key]
        for w in workers:
            loader = data_loader(torch, dataset, args.batch, w)
            rate = measure(torch, loader, normalize, args.epochs, args.warmup_batches)
            del loader  # stops the persistent workers before the next run
            print(f"DataLoader {name} workers={w}: {rate:.0f} img/s", flush=True)


if __name__ == "__main__":
    main()
