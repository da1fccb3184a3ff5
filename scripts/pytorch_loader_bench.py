#!/usr/bin/python3
"""The PyTorch peer of stoke's loader benchmark: how many images per second the standard
torchvision ImageNet training input pipeline delivers on this machine.

  torchvision.datasets.ImageFolder(root, transforms.Compose([
      RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(),
      Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])]))
  DataLoader(batch_size=64, shuffle=True, num_workers=2, drop_last=False)

Everything else is left at PyTorch's defaults, as a user would run it (that is the fair peer):
PIL decoding, worker processes re-created each epoch (persistent_workers=False), one torch
thread per worker (DataLoader's own setting), no pinned memory. The consumer only touches each
batch. The first --warmup batches (worker start-up, page cache) are not timed; then batches are
counted for --seconds, or for --epochs whole epochs, and one JSON line is printed:

  {"images_per_sec": ..., "images": ..., "seconds": ..., "workers": 2, "torch": "..."}

  /usr/bin/python3 scripts/pytorch_loader_bench.py --data /tmp/photo-corpus --seconds 20
"""

import argparse
import json
import sys
import time

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def batches_forever(loader):
    """Batches of epoch after epoch (a new iterator, and so new workers, per epoch), with the
    epoch number."""
    epoch = 0
    while True:
        for batch in loader:
            yield epoch, batch
        epoch += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="an ImageFolder root (one folder per class)")
    limit = parser.add_mutually_exclusive_group()
    limit.add_argument("--seconds", type=float, default=None, help="time this long (default 20)")
    limit.add_argument("--epochs", type=int, default=None, help="time this many whole epochs instead")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5, help="untimed batches first (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    seconds = args.seconds if args.seconds is not None else (None if args.epochs else 20.0)
    if (seconds is not None and seconds <= 0) or (args.epochs is not None and args.epochs < 1):
        parser.error("--seconds and --epochs must be positive")

    torch.manual_seed(args.seed)
    dataset = datasets.ImageFolder(args.data, transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=IMAGENET_MEAN, std=IMAGENET_STD),
    ]))
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        drop_last=False)

    checksum = 0.0  # touch every batch, as a consumer would
    count = 0
    if args.epochs is not None:
        for i, (images, _) in enumerate(loader):  # warm-up: a partial epoch
            checksum += float(images[0, 0, 0, 0])
            if i + 1 >= args.warmup:
                break
        begin = time.perf_counter()
        for _ in range(args.epochs):
            for images, _ in loader:
                checksum += float(images[0, 0, 0, 0])
                count += images.shape[0]
    else:
        stream = batches_forever(loader)
        for _ in range(args.warmup):
            _, (images, _) = next(stream)
            checksum += float(images[0, 0, 0, 0])
        begin = time.perf_counter()
        for _, (images, _) in stream:
            checksum += float(images[0, 0, 0, 0])
            count += images.shape[0]
            if time.perf_counter() - begin >= seconds:
                break
    elapsed = time.perf_counter() - begin

    print(json.dumps({
        "images_per_sec": round(count / elapsed, 1),
        "images": count,
        "seconds": round(elapsed, 3),
        "workers": args.workers,
        "batch_size": args.batch_size,
        "dataset_images": len(dataset),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
