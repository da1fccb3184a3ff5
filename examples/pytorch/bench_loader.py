#!/usr/bin/python3
"""stoke.Loader against torch's DataLoader with no model: images/s and memory over whole epochs.

Both load the same ImageFolder through the same transforms -- RandomResizedCrop(size), a
horizontal flip, ToTensor + Normalize, batches of 64 -- for --epochs epochs, touching each batch.
DataLoader runs as users run it: --workers worker processes (default 2), re-created each epoch,
PIL decoding. Each loader runs in a process of its own (python3 this-script --run stoke|torch), so
that their memory is measured apart: every 50 ms, the PSS of the process and of its children (the
DataLoader's workers) summed; at each epoch's end, the process's RSS. Prints one JSON line per
loader and the ratios:

  images/s stoke / DataLoader             (goal >= 2.5 at 224 px)
  peak PSS stoke / DataLoader (all processes)
  stoke's RSS at the last epoch's end / at the first's   (flat: close to 1)

  PYTHONPATH=build/release/python /usr/bin/python3 examples/pytorch/bench_loader.py --data photos/train
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def kib(path, field):
    """A field of /proc/<pid>/status or smaps_rollup, in KiB (0 when the process is gone)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        return []
    return children + [d for c in children for d in descendants(c)]


def pss_total(pid):
    """PSS of `pid` and all its descendants, KiB (shared pages counted once across them)."""
    return sum(kib(f"/proc/{p}/smaps_rollup", "Pss") for p in [pid] + descendants(pid))


class PeakSampler(threading.Thread):
    def __init__(self, interval=0.05):
        super().__init__(daemon=True)
        self.interval, self.peak, self.running = interval, 0, True

    def run(self):
        while self.running:
            self.peak = max(self.peak, pss_total(os.getpid()))
            time.sleep(self.interval)


def loader_of(kind, args):
    if kind == "stoke":
        import stoke
        return stoke.Loader(args.data, batch_size=args.batch, size=args.size, seed=0, device=args.device,
                            epochs=args.epochs, transforms=[f"random_resized_crop size={args.size}", "random_horizontal_flip", "normalize"])
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms as T
    torch.manual_seed(0)
    dataset = datasets.ImageFolder(args.data, T.Compose([T.RandomResizedCrop(args.size), T.RandomHorizontalFlip(),
                                                         T.ToTensor(), T.Normalize(MEAN, STD)]))
    return DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                      pin_memory=args.device != "cpu")


def run_one(kind, args):
    """One loader's run, in this process: prints its JSON line."""
    import torch  # both sides pay for torch's import alike

    sampler = PeakSampler()
    sampler.start()
    begin = time.perf_counter()
    loader = loader_of(kind, args)
    device = torch.device(args.device)
    images, checksum, rss = 0, torch.zeros((), device=device), []
    for epoch in range(args.epochs):
        if kind == "stoke":
            loader.set_epoch(epoch)
        for batch_images, _ in loader:
            # On a GPU: stoke's batches are there already (a no-op), DataLoader's pinned ones are copied.
            batch_images = batch_images.to(device, non_blocking=True)
            checksum += batch_images[0, 0, 0, 0]  # touches each batch without a sync per batch
            images += batch_images.shape[0]
        rss.append(kib("/proc/self/status", "VmRSS"))
    float(checksum)  # waits for the last copy
    seconds = time.perf_counter() - begin
    sampler.running = False
    sampler.join()
    print(json.dumps({"loader": kind, "device": args.device, "workers": args.workers if kind == "torch" else None, "size": args.size,
                      "epochs": args.epochs, "images": images, "seconds": round(seconds, 2),
                      "images_per_sec": round(images / seconds, 1), "peak_pss_mib": round(sampler.peak / 1024, 1),
                      "rss_mib_per_epoch": [round(r / 1024, 1) for r in rss], "torch": torch.__version__}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="an ImageFolder (one folder per class)")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader's num_workers (default 2)")
    parser.add_argument("--device", default="cpu",
                        help="cpu, or cuda[:N]: the batches end on that GPU (stoke.Loader(device=...); DataLoader "
                             "with pin_memory and a non_blocking copy)")
    parser.add_argument("--run", choices=("stoke", "torch"), help=argparse.SUPPRESS)  # one side, in a child
    args = parser.parse_args()
    if args.run:
        run_one(args.run, args)
        return 0
    if not os.path.isdir(args.data):
        parser.error(f"{args.data} is not a folder")

    for root, _, files in os.walk(args.data):  # a warm page cache for both
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                f.read()
    results = {}
    for kind in ("stoke", "torch"):
        out = subprocess.run([sys.executable, __file__, "--run", kind] + sys.argv[1:], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        results[kind] = json.loads(out.strip().splitlines()[-1])
        print(out.strip().splitlines()[-1], flush=True)
    s, t = results["stoke"], results["torch"]
    print(f"images/s  stoke {s['images_per_sec']:.1f}, DataLoader ({args.workers} workers) {t['images_per_sec']:.1f}: "
          f"ratio {s['images_per_sec'] / t['images_per_sec']:.2f}   (goal >= 2.5)")
    print(f"peak PSS  stoke {s['peak_pss_mib']:.0f} MiB, DataLoader (all {1 + args.workers} processes) "
          f"{t['peak_pss_mib']:.0f} MiB: ratio {s['peak_pss_mib'] / t['peak_pss_mib']:.2f}")
    print(f"stoke RSS at each epoch's end {s['rss_mib_per_epoch']} MiB: last / first "
          f"{s['rss_mib_per_epoch'][-1] / s['rss_mib_per_epoch'][0]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
