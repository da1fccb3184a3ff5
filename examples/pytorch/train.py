#!/usr/bin/python3
"""Train a small CNN in an ordinary PyTorch loop fed by stoke.Loader or by torch's DataLoader.

The model is stoke's small_cnn written in torch (4 conv-BN-ReLU stages of 32, 64, 128 and 256
channels with max pooling between them, global average pooling, a linear classifier); the input
is the same for both loaders: RandomResizedCrop(size), a horizontal flip, ToTensor + Normalize
(ImageNet's mean and std), batches of 64. The training loop is the same too -- only the line that
makes the loader differs:

    stoke.Loader(train, batch_size=64, size=48, seed=0, transforms=[
        "random_resized_crop size=48", "random_horizontal_flip", "normalize"])
    DataLoader(ImageFolder(train, Compose([RandomResizedCrop(48), RandomHorizontalFlip(),
        ToTensor(), Normalize(mean, std)])), batch_size=64, shuffle=True, num_workers=2)

--loader both trains with stoke's loader, then with DataLoader for every --workers x
--torch-threads setting (the peer at its best on this machine), each from the same initial
weights, and prints each run's whole-run images/s (the training epochs' images over their wall
time, the loader's start-up and each epoch's worker start included; validation excluded), its
validation accuracy, and stoke's images/s over DataLoader's best. One JSON line per run; a summary.

  /usr/bin/python3 scripts/make-photo-corpus.py --out photos/train --count 1200 --label-by source
  /usr/bin/python3 scripts/make-photo-corpus.py --out photos/val --count 300 --label-by source --seed 1
  PYTHONPATH=build/release/python /usr/bin/python3 examples/pytorch/train.py --data photos --loader both

--data holds train/ and val/, ImageFolders (one folder per class).
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


class SmallCNN(nn.Module):
    """stoke's small_cnn (nn/src/models.cpp) in torch."""

    def __init__(self, classes, width=32):
        super().__init__()
        layers, channels = [], 3
        for stage in range(4):
            out = width * 2 ** stage
            layers += [nn.Conv2d(channels, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
            if stage < 3:
                layers.append(nn.MaxPool2d(2))
            channels = out
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def classes_of(folder):
    return sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))


def stoke_loaders(args, train_dir, val_dir, cpu_budget, **settings):
    import stoke

    common = dict(batch_size=args.batch, size=args.size, seed=args.seed, cpu_budget=cpu_budget, **settings)
    train = stoke.Loader(train_dir, transforms=[f"random_resized_crop size={args.size}", "random_horizontal_flip",
                                                "normalize"], **common)
    val = stoke.Loader(val_dir, transforms=[f"resize size={args.resize}", f"center_crop size={args.size}",
                                            "normalize"], shuffle=False, **common)
    return train, val


def torch_loaders(args, train_dir, val_dir, workers):
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms as T

    normalize = [T.ToTensor(), T.Normalize(MEAN, STD)]
    train_set = datasets.ImageFolder(train_dir, T.Compose([T.RandomResizedCrop(args.size), T.RandomHorizontalFlip()]
                                                          + normalize))
    val_set = datasets.ImageFolder(val_dir, T.Compose([T.Resize(args.resize), T.CenterCrop(args.size)] + normalize))
    train = DataLoader(train_set, batch_size=args.batch, shuffle=True, num_workers=workers)
    val = DataLoader(val_set, batch_size=args.batch, shuffle=False, num_workers=workers)
    return train, val


def run(args, kind, workers, threads, initial_state, classes):
    """One training run; returns its figures."""
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    model = SmallCNN(len(classes))
    model.load_state_dict(initial_state)
    train_dir, val_dir = os.path.join(args.data, "train"), os.path.join(args.data, "val")

    begin = time.perf_counter()  # the whole run: the loaders' start-up counts
    if kind == "stoke":
        train, val = stoke_loaders(args, train_dir, val_dir, args.stoke_cpu_budget)
    else:
        train, val = torch_loaders(args, train_dir, val_dir, workers)
    steps = args.epochs * len(train)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4, nesterov=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    images, loss_sum = 0, 0.0
    for epoch in range(args.epochs):
        if kind == "stoke":
            train.set_epoch(epoch)
        model.train()
        loss_sum, seen = 0.0, 0
        for batch_images, labels in train:
            logits = model(batch_images)
            loss = F.cross_entropy(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            loss_sum += float(loss) * labels.shape[0]
            seen += labels.shape[0]
        images += seen
        if args.verbose:
            print(f"  {kind} epoch {epoch}: loss {loss_sum / max(1, seen):.3f}, "
                  f"{images / (time.perf_counter() - begin):.1f} images/s so far", file=sys.stderr)
    seconds = time.perf_counter() - begin

    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch_images, labels in val:
            correct += int((model(batch_images).argmax(1) == labels).sum())
            total += labels.shape[0]
    result = {"loader": kind, "workers": workers if kind == "torch" else None, "torch_threads": threads,
              "epochs": args.epochs, "images": images, "seconds": round(seconds, 2),
              "images_per_sec": round(images / seconds, 1), "train_loss": round(loss_sum / max(1, seen), 4),
              "val_accuracy": round(correct / max(1, total), 4)}
    if kind == "stoke":
        stats = train.stats()
        result["bottleneck"] = stats["bottleneck"]
        result["loop_waited_s"] = round(stats["waited_s"], 2)
        result["skipped"] = stats["skipped"]
    return result


def costs(args, classes):
    """CPU time per image of each part, one thread each: the training step (synthetic batches), stoke's
    loader (1 thread) and DataLoader's loading in its main process (num_workers 0), and the ratio of
    the CPU work per image of the two loops, (DataLoader's load + step) / (stoke's load + step): what
    the model costs is the same on both sides, so the more the step costs the less the loader can
    change (how well each loop spreads its work over the cores decides the rest)."""
    torch.set_num_threads(1)
    model = SmallCNN(len(classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(args.batch, 3, args.size, args.size), torch.randint(0, len(classes), (args.batch,))

    def timed(work, seconds=4.0):
        work()  # warm-up
        begin, n = time.perf_counter(), 0
        while time.perf_counter() - begin < seconds:
            n += work()
        return (time.perf_counter() - begin) / n * 1e3  # ms per image

    def step():
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return args.batch

    train_dir, val_dir = os.path.join(args.data, "train"), os.path.join(args.data, "val")
    loader, _ = stoke_loaders(args, train_dir, val_dir, None, threads=1, autotune=False)
    torch_loader, _ = torch_loaders(args, train_dir, val_dir, workers=0)

    def epoch_of(it):
        return lambda: sum(labels.shape[0] for _, labels in it)

    result = {"step_ms": timed(step), "stoke_load_ms": timed(epoch_of(loader)),
              "dataloader_load_ms": timed(epoch_of(torch_loader))}
    result = {k: round(v, 3) for k, v in result.items()}
    result["work_ratio"] = round((result["dataloader_load_ms"] + result["step_ms"])
                                    / (result["stoke_load_ms"] + result["step_ms"]), 2)
    print(json.dumps({"costs_per_image": result}), flush=True)
    print(f"CPU ms per image, one thread: training step {result['step_ms']}, stoke's loading "
          f"{result['stoke_load_ms']}, DataLoader's loading {result['dataloader_load_ms']} (work per image: "
          f"DataLoader's loop / stoke's = {result['work_ratio']})")


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="a folder with train/ and val/ ImageFolders")
    parser.add_argument("--loader", choices=("stoke", "torch", "both"), default="stoke")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=48, help="training crop side (default 48)")
    parser.add_argument("--resize", type=int, default=55, help="validation: shorter side before the centre crop")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int_list, default=[0, 1, 2],
                        help="DataLoader num_workers settings to try (default 0,1,2)")
    parser.add_argument("--torch-threads", type=int_list, default=[1, 2],
                        help="torch.set_num_threads settings to try with DataLoader (default 1,2)")
    parser.add_argument("--stoke-threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="torch threads of the stoke run (default: one per core, torch's own default)")
    parser.add_argument("--stoke-cpu-budget", type=int, default=None,
                        help="stoke.Loader's cpu_budget (default: every core; see stoke.Loader)")
    parser.add_argument("--verbose", action="store_true", help="a line per epoch on stderr")
    parser.add_argument("--costs", action="store_true",
                        help="first measure the CPU time per image of the step and of each loader's loading")
    args = parser.parse_args()
    for sub in ("train", "val"):
        if not os.path.isdir(os.path.join(args.data, sub)):
            parser.error(f"{os.path.join(args.data, sub)} is not a folder (--data needs train/ and val/ ImageFolders; "
                         "scripts/make-photo-corpus.py --label-by source makes them)")
    classes = classes_of(os.path.join(args.data, "train"))
    if classes != classes_of(os.path.join(args.data, "val")):
        parser.error(f"{args.data}/train and {args.data}/val have different class folders")

    if args.costs:
        costs(args, classes)
    torch.manual_seed(args.seed)
    initial_state = SmallCNN(len(classes)).state_dict()  # every run starts from these weights
    runs = []
    if args.loader in ("stoke", "both"):
        runs.append(("stoke", None, args.stoke_threads))
    if args.loader in ("torch", "both"):
        runs += [("torch", w, t) for w in args.workers for t in args.torch_threads]
    results = []
    for kind, workers, threads in runs:
        result = run(args, kind, workers, threads, initial_state, classes)
        print(json.dumps(result), flush=True)
        results.append(result)

    stoke_runs = [r for r in results if r["loader"] == "stoke"]
    torch_runs = [r for r in results if r["loader"] == "torch"]
    if stoke_runs and torch_runs:
        s = stoke_runs[0]
        best = max(torch_runs, key=lambda r: r["images_per_sec"])
        print(f"stoke.Loader  {s['images_per_sec']:7.1f} images/s, val accuracy {s['val_accuracy']:.3f} "
              f"(torch threads {s['torch_threads']})")
        print(f"DataLoader    {best['images_per_sec']:7.1f} images/s, val accuracy {best['val_accuracy']:.3f} "
              f"(best of {len(torch_runs)}: num_workers {best['workers']}, torch threads {best['torch_threads']}; "
              f"accuracy over its runs {min(r['val_accuracy'] for r in torch_runs):.3f}.."
              f"{max(r['val_accuracy'] for r in torch_runs):.3f})")
        print(f"ratio stoke / DataLoader's best: {s['images_per_sec'] / best['images_per_sec']:.2f}   (goal >= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
