#!/usr/bin/env python3
"""Makes an ImageNet-like JPEG set from a few real photos, for the loader measurements of both
sides (stoker_loader_throughput --folder, torch_loader.py, torch_e2e.py).

  python3 benchmarks/peers/make_imagenet_like.py PHOTOS DST [N] [--classes 1000] [--seed 0]
                                                [--realistic]

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

--realistic: files like ImageNet's own (mean about 110 KiB) instead of the smooth default (mean
about 35 KiB). The kit's photos are smooth wallpapers, and a smooth JPEG is small and cheap to
entropy-decode; ImageNet's are textured camera shots, which is where most of their decode time
goes. So image i is a crop of photo i mod P with an aspect ratio (width:height) of 3:4, 1:1,
5:4, 4:3, 3:2 or 16:9, scaled (bicubic) so that its shorter side is 333-500 px and its longer
side at most 800 px, mirrored with probability 1/2, given Gaussian grain (sigma 8-24, fine or
coarse, on luma only or on each channel) and saved with quality 80-98 (uniform), chroma
subsampling 4:2:0 (75 %), 4:2:2 (15 %) or 4:4:4 (10 %), about 5 % as grayscale and about 10 %
progressive. The same seeding applies, so the set is reproducible too (the grain comes from
the same per-image generator, not from a global one). Prints the mean and median size and the
mix made.
"""
import argparse
import os
import random
import statistics
import sys
from collections import Counter
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


# ---- --realistic ----------------------------------------------------------------------------

# Width:height of the crops and how often each is drawn: ImageNet's originals are mostly
# landscape 4:3 and 3:2 camera frames, with some portraits, squares and wide shots.
ASPECTS = [(4 / 3, 40), (3 / 2, 20), (3 / 4, 15), (1.0, 10), (16 / 9, 10), (5 / 4, 5)]
# Chroma subsampling as Pillow numbers it (2: 4:2:0, 1: 4:2:2, 0: 4:4:4) and how often:
# 4:2:0 is what most cameras and libjpeg's defaults write; 4:2:2 and 4:4:4 are rarer.
SUBSAMPLINGS = [(2, 75), (1, 15), (0, 10)]
SUBSAMPLING_NAMES = {2: "4:2:0", 1: "4:2:2", 0: "4:4:4"}
# Grain strengths (the standard deviation in 8-bit levels) and how often. The grain stands in
# for the fine texture of real scenes (foliage, fur, fabric, gravel) that the kit's wallpapers
# lack, as much as for sensor noise, so it is strong; it is what sets the mean file size (about
# 110 KiB on the kit's photos with these values; check the mean printed after changing them).
SIGMAS = [(8.0, 20), (12.0, 30), (17.0, 30), (24.0, 20)]
GRAYSCALE_P = 0.05
PROGRESSIVE_P = 0.10
COARSE_P = 0.3  # fine grain (independent pixels) costs the entropy coder more: most is fine
QUALITY = (80, 98)


def weighted(rng, table):
    values, weights = zip(*table)
    return rng.choices(values, weights=weights)[0]


def gaussian_lut(sigma):
    """Maps a uniform byte to 128 + a Gaussian deviate of standard deviation sigma (inverse CDF
    at the byte's bin centre). Noise made from the per-image generator's bytes through this table
    is Gaussian and reproducible, and costs one Pillow point() instead of a Python loop per pixel
    (Pillow's own effect_noise draws from the C library's global generator: not reproducible)."""
    nd = statistics.NormalDist(128.0, sigma)
    return [min(255, max(0, round(nd.inv_cdf((u + 0.5) / 256)))) for u in range(256)]


def grain(rng, size, sigma, coarse):
    """A grayscale noise image centred on 128. Coarse grain is drawn at half resolution and
    scaled up (bilinear), which correlates neighbouring pixels the way film grain and sensor
    noise after demosaicing are; fine grain is independent per pixel. Scaling up averages
    neighbours and so lowers the deviation, hence the larger sigma before it."""
    from PIL import Image
    w, h = size
    nw, nh = ((w + 1) // 2, (h + 1) // 2) if coarse else (w, h)
    noise = Image.frombytes("L", (nw, nh), rng.randbytes(nw * nh))
    noise = noise.point(gaussian_lut(sigma * 1.6 if coarse else sigma))
    return noise.resize((w, h), Image.BILINEAR) if coarse else noise


def make_one_realistic(job):
    """Writes image i of the realistic set; returns (bytes, width, height, subsampling name,
    progressive, quality)."""
    from PIL import Image, ImageChops, ImageFile
    i, dst, classes, seed = job
    rng = random.Random(seed * 1_000_003 + i)
    with Image.open(PHOTOS[i % len(PHOTOS)]) as photo:
        im = photo.convert("RGB")
    w, h = im.size
    aspect = weighted(rng, ASPECTS)
    short = rng.randint(333, 500)
    if aspect >= 1:
        out_w, out_h = min(800, round(short * aspect)), short
    else:
        out_w, out_h = short, min(800, round(short / aspect))
    # The crop: the output's aspect ratio, between the output's size (no upscaling where the
    # photo allows) and the largest that fits, so the detail per output pixel varies as it does
    # between ImageNet's photos.
    max_scale = min(w / out_w, h / out_h)
    scale = rng.uniform(min(1.0, max_scale), max_scale)
    crop_w, crop_h = min(w, round(out_w * scale)), min(h, round(out_h * scale))
    x0, y0 = rng.randint(0, w - crop_w), rng.randint(0, h - crop_h)
    im = im.crop((x0, y0, x0 + crop_w, y0 + crop_h)).resize((out_w, out_h), Image.BICUBIC)
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)

    gray = rng.random() < GRAYSCALE_P
    sigma = weighted(rng, SIGMAS)
    coarse = rng.random() < COARSE_P
    if gray:
        im = im.convert("L")
        noise = grain(rng, im.size, sigma, coarse)
    elif rng.random() < 0.5:  # luma grain: the same deviation on every channel
        n = grain(rng, im.size, sigma, coarse)
        noise = Image.merge("RGB", (n, n, n))
    else:  # colour noise: each channel its own, which also gives the chroma planes work
        noise = Image.merge("RGB", [grain(rng, im.size, sigma, coarse) for _ in range(3)])
    im = ImageChops.add(im, noise, scale=1.0, offset=-128)  # clipped to 0..255

    quality = rng.randint(*QUALITY)
    subsampling = weighted(rng, SUBSAMPLINGS)
    progressive = rng.random() < PROGRESSIVE_P
    path = os.path.join(dst, f"{i % classes:03d}", f"img{i:07d}.jpg")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if progressive:
        # A progressive file is written in one shot into a buffer sized from Pillow's guess of
        # one byte per pixel, which grainy images at high quality exceed ("Suspension not
        # allowed here"); ImageFile.MAXBLOCK is the floor of that buffer. This process only.
        ImageFile.MAXBLOCK = max(ImageFile.MAXBLOCK, 4 * out_w * out_h)
    # Pillow ignores subsampling for a grayscale image (one component).
    im.save(path, quality=quality, subsampling=subsampling, progressive=progressive)
    kind = "gray" if gray else SUBSAMPLING_NAMES[subsampling]
    return os.path.getsize(path), out_w, out_h, kind, progressive, quality


def report_realistic(made, photos, dst):
    n = len(made)
    sizes = [m[0] for m in made]
    kinds = Counter(m[3] for m in made)
    progressive = sum(m[4] for m in made)
    pct = lambda k: 100.0 * k / n  # noqa: E731
    print(f"made {n} realistic jpegs from {photos} photos in {dst}, "
          f"mean {sum(sizes) / n / 1024:.1f} KiB, median {statistics.median(sizes) / 1024:.1f} KiB")
    print(f"  mean {sum(m[1] for m in made) / n:.0f}x{sum(m[2] for m in made) / n:.0f} px; "
          + ", ".join(f"{k} {pct(kinds[k]):.1f} %" for k in ("4:2:0", "4:2:2", "4:4:4", "gray"))
          + f"; progressive {pct(progressive):.1f} %; "
          f"quality {min(m[5] for m in made)}-{max(m[5] for m in made)}")


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
    ap.add_argument("--realistic", action="store_true",
                    help="textured files like ImageNet's (mean ~110 KiB, mixed chroma "
                         "subsampling, some grayscale and progressive); see below")
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
        if args.realistic:
            made = pool.map(make_one_realistic, jobs, chunksize=16)
            report_realistic(made, len(photos), args.dst)
            return
        sizes = pool.map(make_one, jobs, chunksize=64)
    print(f"made {args.n} jpegs from {len(photos)} photos in {args.dst}, "
          f"mean {sum(sizes) / args.n / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
