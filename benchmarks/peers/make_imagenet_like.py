#!/usr/bin/env python3
"""Makes an ImageNet-like JPEG set from a few real photos, for the loader measurements of both
sides (stoker_loader_throughput --folder, torch_loader.py, torch_e2e.py).

  python3 benchmarks/peers/make_imagenet_like.py PHOTOS DST [N] [--classes 1000] [--seed 0]

Image i (0 <= i < N) is a random crop of photo i mod P (P photos, *.jpg in PHOTOS, sorted by
name): a crop at least min(width, 400) px wide with an aspect ratio of 0.6-1.0, scaled so that
its shorter side is 300-500 px (ImageNet's images are about 400 x 350 px on average; bilinear),
mirrored with probability 1/2, saved with quality 85-95, as DST/<i mod classes>/img<i>.jpg
(class folders of three digits, image numbers of seven). Every draw comes from a generator
seeded with (seed, i), so the same arguments make the same files. Needs Pillow only; uses
every core. Prints the count and mean size made.

Real photos matter: JPEGs of real scenes decode at the speed the loader meets in training
(synthetic images with flat areas decode faster). scripts/make-imagenet-like.sh kit fetches
some (Debian's mate-backgrounds package).
"""
import argparse
import os
import random
import sys
from multiprocessing import Pool

PHOTOS = []  # set in the parent before the pool forks, and in each worker by init()


def init(photos):
    PHOTOS[:] = photos


def make_one(job):
    """Writes image i; returns its size in bytes."""
    from PIL import Image
    i, dst, classes, seed = job
    rng = random.Random(seed * 1_000_003 + i)
    with Image.open(PHOTOS[i % len(PHOTOS)]) as photo:
        im = photo.convert("RGB")
    w, h = im.size
    crop_w = rng.randint(min(w, 400), w)
    crop_h = min(h, int(crop_w * rng.uniform(0.6, 1.0)))
    x0, y0 = rng.randint(0, w - crop_w), rng.randint(0, h - crop_h)
    im = im.crop((x0, y0, x0 + crop_w, y0 + crop_h))
    scale = rng.randint(300, 500) / min(im.size)
    im = im.resize((max(1, round(im.size[0] * scale)), max(1, round(im.size[1] * scale))),
                   Image.BILINEAR)
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    path = os.path.join(dst, f"{i % classes:03d}", f"img{i:07d}.jpg")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    im.save(path, quality=rng.randint(85, 95))
    return os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("photos", help="folder of real photos (*.jpg)")
    ap.add_argument("dst", help="output folder (class folders are created in it)")
    ap.add_argument("n", nargs="?", type=int, default=20000, help="images to make (20000)")
    ap.add_argument("--classes", type=int, default=1000, help="class folders (1000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="processes (all cores)")
    args = ap.parse_args()
    if args.n <= 0 or args.classes <= 0 or args.jobs <= 0:
        ap.error("N, --classes and --jobs must be positive")
    if not os.path.isdir(args.photos):
        ap.error(f"{args.photos}: not a folder")
    photos = sorted(os.path.join(args.photos, f) for f in os.listdir(args.photos)
                    if f.lower().endswith((".jpg", ".jpeg")))
    if not photos:
        sys.exit(f"{args.photos}: no *.jpg photos (scripts/make-imagenet-like.sh kit fetches some)")
    try:
        import PIL  # noqa: F401
    except ImportError:
        sys.exit("make_imagenet_like.py: needs Pillow (Debian: apt-get install python3-pil)")
    os.makedirs(args.dst, exist_ok=True)
    init(photos)
    jobs = [(i, args.dst, args.classes, args.seed) for i in range(args.n)]
    with Pool(args.jobs, initializer=init, initargs=(photos,)) as pool:
        sizes = pool.map(make_one, jobs, chunksize=64)
    print(f"made {args.n} jpegs from {len(photos)} photos in {args.dst}, "
          f"mean {sum(sizes) / args.n / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
