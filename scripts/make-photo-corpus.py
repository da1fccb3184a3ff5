#!/usr/bin/python3
"""Builds a benchmark corpus of photo-like JPEGs: an ImageFolder of --count images in --classes
folders, about 500x375 each (a little bigger or smaller, 1 in 5 portrait, as in ImageNet),
averaging at least --min-avg-kb KB per file.

JPEG decode cost depends on content (entropy), so a loader benchmark needs photos, not flat
drawings. The images are random crops of the real photos in /work/shared/data/photos (see its
README), scaled to the target size, with film-like grain added and encoded at quality 90-95.
The sources are few and small, so upscaled crops are smoother than real photos; the grain brings
the entropy, and so the file size and decode cost, up to that of ImageNet photos. The grain's
strength is calibrated on a sample first, and raised until the whole corpus meets
--min-avg-kb (measured, not assumed).

Deterministic: the same --seed and --count give the same files (each image has its own random
generator keyed by (seed, index), so the number of --jobs does not matter).

  /usr/bin/python3 scripts/make-photo-corpus.py --out /tmp/photo-corpus --count 1000
"""

import argparse
import glob
import io
import multiprocessing
import os
import shutil
import sys
import time

import numpy as np
from PIL import Image

DEFAULT_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "photos")
MAX_GRAIN = 48.0


def load_sources(source_dir):
    paths = sorted(glob.glob(os.path.join(source_dir, "*.jpg")))
    if not paths:
        sys.exit(f"make-photo-corpus: no *.jpg in {source_dir}")
    sources = []
    for path in paths:
        with Image.open(path) as image:
            sources.append((os.path.basename(path), np.asarray(image.convert("RGB"))))
    return sources


# Filled in each worker by init_worker (the decoded sources are too big to pass per task).
SOURCES = []


def init_worker(source_dir):
    global SOURCES
    SOURCES = load_sources(source_dir)


def make_image(seed, index, grain):
    """Item `index`: (JPEG bytes, width, height, source photo's number, whether the crop's centre
    lies in the photo's lower half). A function of (seed, index, grain) only."""
    rng = np.random.default_rng([seed, index])
    source = int(rng.integers(len(SOURCES)))
    name, pixels = SOURCES[source]
    src_h, src_w = pixels.shape[:2]

    portrait = rng.random() < 0.2
    width = int(round(500 * rng.uniform(0.9, 1.1)))
    height = int(round(375 * rng.uniform(0.9, 1.1)))
    if portrait:
        width, height = height, width

    # A random crop with the target's aspect ratio, 30% to 100% of the largest that fits.
    aspect = width / height
    max_w = min(src_w, src_h * aspect)
    crop_w = max_w * np.sqrt(rng.uniform(0.3, 1.0))
    crop_h = crop_w / aspect
    x0 = rng.uniform(0, src_w - crop_w)
    y0 = rng.uniform(0, src_h - crop_h)
    image = Image.fromarray(pixels).resize(
        (width, height), Image.BICUBIC, box=(x0, y0, x0 + crop_w, y0 + crop_h))
    if rng.random() < 0.5:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)

    # Grain: mostly luminance, some chroma, strength varying per image.
    sigma = grain * rng.uniform(0.7, 1.3)
    data = np.asarray(image, dtype=np.float32)
    noise = rng.normal(0.0, sigma, (height, width, 1)).astype(np.float32)
    noise = noise + rng.normal(0.0, sigma * 0.4, (height, width, 3)).astype(np.float32)
    data = np.clip(data + noise, 0, 255).astype(np.uint8)

    quality = int(rng.integers(90, 96))
    out = io.BytesIO()
    Image.fromarray(data).save(out, format="JPEG", quality=quality)
    lower = y0 + crop_h / 2 >= src_h / 2
    return out.getvalue(), width, height, source, lower


def make_task(args):
    seed, index, grain = args
    data, _, _, source, lower = make_image(seed, index, grain)
    return index, data, source, lower


def make_size_task(args):
    return len(make_image(*args)[0])


def source_labels(source_dir):
    """For each source photo (load_sources' order), its class: one per photo, a photo's other
    encodings (name_progressive.jpg) in the same class as name.jpg."""
    stems = [os.path.basename(p)[:-len(".jpg")].removesuffix("_progressive")
             for p in sorted(glob.glob(os.path.join(source_dir, "*.jpg")))]
    classes = sorted(set(stems))
    return [classes.index(stem) for stem in stems]


def class_dir(out, classes, index):
    return os.path.join(out, f"class_{index % classes:02d}")


def calibrate(pool, seed, target_bytes, sample):
    """The grain (to 0.5) at which the first `sample` images average >= target_bytes: doubling,
    then bisection."""
    def average(grain):
        sizes = pool.map(make_size_task, [(seed, i, grain) for i in range(sample)])
        return float(np.mean(sizes))

    lo, hi = 0.0, 4.0
    while average(hi) < target_bytes and hi < MAX_GRAIN:
        lo, hi = hi, min(hi * 2, MAX_GRAIN)
    while hi - lo > 0.5:
        mid = (lo + hi) / 2
        if average(mid) >= target_bytes:
            hi = mid
        else:
            lo = mid
    return hi


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output directory (an ImageFolder root)")
    parser.add_argument("--count", type=int, default=1000, help="number of images (default 1000)")
    parser.add_argument("--classes", type=int, default=10, help="class folders (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--min-avg-kb", type=float, default=100.0,
                        help="the average file size to reach, KB of 1000 bytes (default 100)")
    parser.add_argument("--source", default=DEFAULT_SOURCE, help=f"photos to crop (default {DEFAULT_SOURCE})")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--force", action="store_true", help="replace the class_* folders of a non-empty --out")
    parser.add_argument("--label-by", choices=("index", "source", "source-half"), default="index",
                        help="an image's class: its index modulo --classes (default; the classes are noise, "
                             "for loader benchmarks); the source photo it was cropped from (one class per "
                             "photo, --classes ignored: a corpus a model can learn); or the photo and whether the "
                             "crop's centre is in its upper or lower half (two classes per photo: harder, some "
                             "crops straddle the middle)")
    args = parser.parse_args()
    labels = source_labels(args.source) if args.label_by != "index" else None
    halves = 2 if args.label_by == "source-half" else 1
    if labels:
        args.classes = (max(labels) + 1) * halves
    if args.count < 1 or args.classes < 1 or args.jobs < 1:
        parser.error("--count, --classes and --jobs must be positive")

    if os.path.isdir(args.out) and os.listdir(args.out):
        if not args.force:
            sys.exit(f"make-photo-corpus: {args.out} is not empty (use --force to replace its class_* folders)")
        for old in glob.glob(os.path.join(args.out, "class_*")):
            shutil.rmtree(old)
    for c in range(args.classes if labels else min(args.classes, args.count)):
        os.makedirs(class_dir(args.out, args.classes, c), exist_ok=True)

    begin = time.time()
    target = args.min_avg_kb * 1000
    with multiprocessing.Pool(args.jobs, initializer=init_worker, initargs=(args.source,)) as pool:
        # Aim a little above the target: the sample's average is only an estimate.
        grain = calibrate(pool, args.seed, target * 1.05, min(args.count, 32))
        print(f"make-photo-corpus: grain sigma {grain:.1f} from a sample", file=sys.stderr)
        while True:
            total = 0
            tasks = [(args.seed, i, grain) for i in range(args.count)]
            for done, (index, data, source, lower) in enumerate(pool.imap_unordered(make_task, tasks, chunksize=8), 1):
                label = labels[source] * halves + (int(lower) if halves == 2 else 0) if labels else index
                path = os.path.join(class_dir(args.out, args.classes, label), f"img_{index:06d}.jpg")
                with open(path, "wb") as f:
                    f.write(data)
                total += len(data)
                if done % 50 == 0 or done == args.count:
                    print(f"\rmake-photo-corpus: {done}/{args.count}", end="", file=sys.stderr, flush=True)
            print(file=sys.stderr)
            average = total / args.count
            if average >= target or grain >= MAX_GRAIN:
                break
            grain = min(grain + 1.0, MAX_GRAIN)
            print(f"make-photo-corpus: average {average / 1000:.1f} KB is below {args.min_avg_kb:g} KB; "
                  f"again with grain {grain:.1f}", file=sys.stderr)

    # Measure what is on disk, not what was meant to be written.
    files = glob.glob(os.path.join(args.out, "class_*", "*.jpg"))
    sizes = [os.path.getsize(f) for f in files]
    average_kb = sum(sizes) / len(sizes) / 1000
    print(f"{len(files)} images in {len(set(os.path.dirname(f) for f in files))} classes, "
          f"average {average_kb:.1f} KB (min {min(sizes) / 1000:.1f}, max {max(sizes) / 1000:.1f}), "
          f"grain {grain:.1f}, {time.time() - begin:.1f} s -> {args.out}")
    if len(files) != args.count:
        sys.exit(f"make-photo-corpus: {args.out} holds {len(files)} images, expected {args.count} "
                 "(was it written to by something else?)")
    if average_kb < args.min_avg_kb:
        sys.exit(f"make-photo-corpus: the average {average_kb:.1f} KB stays below {args.min_avg_kb:g} KB "
                 "even at the strongest grain; use larger source photos")


if __name__ == "__main__":
    main()
