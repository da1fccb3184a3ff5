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
--torch-threads setting (the peer at its best on this machine), each run in a process of its own
and from the same initial weights; --repeat N does N rounds of that and takes each setting's median.
Each run prints its whole-run images/s (the training epochs' images over their wall time, the
loader's start-up and each epoch's worker start included; validation excluded) and its validation
accuracy (one JSON line); the summary, stoke's images/s over DataLoader's best.

Both loaders get the same model and loop, in channels_last (--memory-format), its forward pass
under torch.autocast(dtype=bfloat16) where the CPU computes bf16 natively (--precision: the
convolutions and the classifier in bf16; weights, gradients and the optimizer stay float32), and the
same CPU rule: torch's OpenMP threads sleep when idle (OMP_WAIT_POLICY=PASSIVE, set here before torch
is imported), so the loaders' threads or workers can use the cores they leave; stoke.Loader's threads
also run below the training loop's priority (its nice, 10 by default), so torch's threads win a core
whenever they can run. And the same memory rule: glibc's malloc keeps what torch frees between
steps (--malloc keep) rather than give it back to the kernel and fault it in again next step.

  /usr/bin/python3 scripts/make-photo-corpus.py --out photos/train --count 1200 --label-by source
  /usr/bin/python3 scripts/make-photo-corpus.py --out photos/val --count 300 --label-by source --seed 1
  PYTHONPATH=build/release/python /usr/bin/python3 examples/pytorch/train.py --data photos --loader both

--data holds train/ and val/, ImageFolders (one folder per class).

--device cuda trains on the GPU: stoke.Loader(device="cuda") yields the batches there (copied from
pinned slots on a stream of its own, ordered on torch's by an event), DataLoader gets
pin_memory=True and the loop copies its batches with .to(device, non_blocking=True).

--profile N records N steps of each run with torch.profiler (the loop's waits for its loader marked
"next batch"): a table of the operators by their own time, and a Chrome trace in --profile-dir.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

# torch's OpenMP threads, between two parallel regions, spin by default: they keep the cores that
# DataLoader's workers and stoke.Loader's threads would use. Sleeping instead (set before torch loads
# its OpenMP runtime) leaves those cores to the loaders, whichever runs; a value in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402 (after the OpenMP setting)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
MEMORY_FORMATS = {"channels_last": torch.channels_last, "contiguous": torch.contiguous_format}


def cpu_has_native_bf16():
    """True where this CPU multiplies bfloat16 natively (AVX512_BF16 or AMX-BF16, read from
    /proc/cpuinfo): there oneDNN's bf16 convolutions run faster than float32 ones; elsewhere it
    emulates them, slower."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def precision_of(args):
    """--precision resolved: "bf16" or "fp32". auto is bf16 on a CPU with native bf16 (see
    cpu_has_native_bf16), fp32 on other CPUs and on CUDA."""
    if args.precision != "auto":
        return args.precision
    return "bf16" if args.device == "cpu" and cpu_has_native_bf16() else "fp32"


def autocast(device, precision):
    """The step's forward pass in `precision`: torch.autocast to bfloat16 for bf16 (convolutions and
    the linear layer in bf16, weights, gradients and the optimizer in float32), nothing for fp32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def keep_freed_memory():
    """Tell glibc's malloc to keep the memory torch frees: True where it took the settings.

    By default glibc returns a freed block larger than its mmap threshold (128 KiB to start, raised
    to the largest such block freed, at most 32 MiB) to the kernel at once, and trims the free top of
    a heap beyond twice that threshold. A training step frees its activations (several MiB each at
    batch 64, 48 px) and allocates them again in the next step, so each step page-faults them in
    afresh: measured here, a fifth of the step's CPU time on 2 threads was the kernel's, and the step
    alone ran 15-30% slower than with these settings (any 32 MiB or smaller block comes from a heap,
    and a heap keeps up to 1 GiB of free memory). main() calls it before the model and the loaders
    allocate; DataLoader's workers, forked, inherit the settings."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # not glibc
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, 1 << 30))


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


def stoke_loader(args, folder, training, cpu_budget, **settings):
    import stoke

    if training:
        transforms = [f"random_resized_crop size={args.size}", "random_horizontal_flip", "normalize"]
    else:
        transforms = [f"resize size={args.resize}", f"center_crop size={args.size}", "normalize"]
    return stoke.Loader(folder, transforms=transforms, batch_size=args.batch, size=args.size, seed=args.seed,
                        shuffle=training, cpu_budget=cpu_budget, device=args.device, **settings)


def torch_loader(args, folder, training, workers):
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms as T

    if training:
        augment = [T.RandomResizedCrop(args.size), T.RandomHorizontalFlip()]
    else:
        augment = [T.Resize(args.resize), T.CenterCrop(args.size)]
    dataset = datasets.ImageFolder(folder, T.Compose(augment + [T.ToTensor(), T.Normalize(MEAN, STD)]))
    # On a GPU, DataLoader's usual best: pinned batches, copied with non_blocking in the loop.
    return DataLoader(dataset, batch_size=args.batch, shuffle=training, num_workers=workers,
                      pin_memory=args.device != "cpu", persistent_workers=False)


def make_loader(args, kind, folder, training, workers):
    """The run's loader of one split; each is made when its split is first needed (a stoke.Loader starts
    its threads when made, a DataLoader its workers when iterated)."""
    if kind == "stoke":
        settings = {} if args.stoke_nice is None else {"nice": args.stoke_nice}
        # Told the run's epochs, stoke.Loader stops at the last one's end rather than decode the next
        # epoch's first batches on the cores the model is using.
        settings["epochs"] = args.epochs if training else 1
        return stoke_loader(args, folder, training, args.stoke_cpu_budget, **settings)
    return torch_loader(args, folder, training, workers)


def labelled(iterable, name):
    """Each item of `iterable`, fetched inside torch.profiler.record_function(name): a profile then
    shows the loop's waits for its loader beside the step's operators."""
    items = iter(iterable)
    while True:
        with torch.profiler.record_function(name):
            item = next(items, None)
        if item is None:
            return
        yield item


def profiler_for(args, kind, workers, threads):
    """--profile: a started torch.profiler that records --profile steps after 10 of warm-up (the
    loop calls its step() after each), then prints the operators by their own time and writes a
    Chrome trace; None without --profile."""
    if not args.profile:
        return None
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device != "cpu" else [])
    name = f"profile-{kind}" + (f"-w{workers}-t{threads}" if kind == "torch" else "")
    trace = os.path.join(args.profile_dir, name + ".json")

    def report(prof):
        sort = "self_cuda_time_total" if args.device != "cpu" else "self_cpu_time_total"
        print(f"== {name}: {args.profile} steps, by {sort} (trace: {trace})\n"
              f"{prof.key_averages().table(sort_by=sort, row_limit=30)}", file=sys.stderr, flush=True)
        prof.export_chrome_trace(trace)

    profiler = profile(activities=activities, schedule=schedule(wait=8, warmup=2, active=args.profile, repeat=1),
                       on_trace_ready=report)
    profiler.start()
    return profiler


def run(args, kind, workers, threads, initial_state, classes):
    """One training run; returns its figures."""
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    model = SmallCNN(len(classes))
    model.load_state_dict(initial_state)
    memory_format = MEMORY_FORMATS[args.memory_format]
    device = torch.device(args.device)
    model = model.to(device=device, memory_format=memory_format)
    precision = precision_of(args)
    train_dir, val_dir = os.path.join(args.data, "train"), os.path.join(args.data, "val")

    begin = time.perf_counter()  # the whole run: the loaders' start-up counts
    train = make_loader(args, kind, train_dir, True, workers)
    steps = args.epochs * len(train)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4, nesterov=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    images, loss_sum = 0, 0.0
    profiler = profiler_for(args, kind, workers, threads)
    for epoch in range(args.epochs):
        if kind == "stoke":
            train.set_epoch(epoch)
        model.train()
        loss_sum, seen = torch.zeros((), device=device), 0  # summed on the device: no sync per step
        for batch_images, labels in (labelled(train, "next batch") if args.profile else train):
            # stoke.Loader(device=...) yields tensors already there (a no-op); DataLoader's are copied.
            batch_images = batch_images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            with autocast(device, precision):
                logits = model(batch_images.contiguous(memory_format=memory_format))
                loss = F.cross_entropy(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            loss_sum += loss.detach() * labels.shape[0]
            seen += labels.shape[0]
            if profiler:
                profiler.step()
        loss_sum = float(loss_sum)
        images += seen
        if args.verbose:
            print(f"  {kind} epoch {epoch}: loss {loss_sum / max(1, seen):.3f}, "
                  f"{images / (time.perf_counter() - begin):.1f} images/s so far", file=sys.stderr)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - begin
    if profiler:
        profiler.stop()

    model.eval()
    val = make_loader(args, kind, val_dir, False, workers)
    correct = total = 0
    with torch.no_grad(), autocast(device, precision):
        for batch_images, labels in val:
            batch_images, labels = batch_images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            correct += int((model(batch_images.contiguous(memory_format=memory_format)).argmax(1) == labels).sum())
            total += labels.shape[0]
    result = {"loader": kind, "device": args.device, "workers": workers if kind == "torch" else None,
              "torch_threads": threads, "precision": precision, "epochs": args.epochs, "images": images,
              "seconds": round(seconds, 2), "images_per_sec": round(images / seconds, 1),
              "train_loss": round(loss_sum / max(1, seen), 4), "val_accuracy": round(correct / max(1, total), 4)}
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
    memory_format = MEMORY_FORMATS[args.memory_format]
    model = SmallCNN(len(classes)).to(memory_format=memory_format)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, 3, args.size, args.size).contiguous(memory_format=memory_format)
    y = torch.randint(0, len(classes), (args.batch,))

    def timed(work, seconds=4.0):
        work()  # warm-up
        begin, n = time.perf_counter(), 0
        while time.perf_counter() - begin < seconds:
            n += work()
        return (time.perf_counter() - begin) / n * 1e3  # ms per image

    precision = precision_of(args)

    def step():
        with autocast(torch.device("cpu"), precision):
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return args.batch

    train_dir = os.path.join(args.data, "train")
    loader = stoke_loader(args, train_dir, True, None, threads=1, autotune=False)
    dataloader = torch_loader(args, train_dir, True, workers=0)

    def epoch_of(it):
        return lambda: sum(labels.shape[0] for _, labels in it)

    result = {"step_ms": timed(step), "stoke_load_ms": timed(epoch_of(loader)),
              "dataloader_load_ms": timed(epoch_of(dataloader))}
    result = {k: round(v, 3) for k, v in result.items()}
    result["precision"] = precision
    result["work_ratio"] = round((result["dataloader_load_ms"] + result["step_ms"])
                                    / (result["stoke_load_ms"] + result["step_ms"]), 2)
    print(json.dumps({"costs_per_image": result}), flush=True)
    print(f"CPU ms per image, one thread: training step {result['step_ms']} ({precision}), stoke's loading "
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
    parser.add_argument("--memory-format", choices=sorted(MEMORY_FORMATS), default="channels_last",
                        help="the model's and the batches' memory format, the same for both loaders (default "
                             "channels_last: torch's oneDNN convolutions are faster on it)")
    parser.add_argument("--malloc", choices=("keep", "default"), default="keep",
                        help="keep: glibc's malloc keeps the memory torch frees between steps instead of returning "
                             "it to the kernel and page-faulting it in again (the step runs 15-30%% faster on this "
                             "CPU); default: glibc's own settings. The same for both loaders (default keep)")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                        help="the step's arithmetic, the same for both loaders: bf16 runs the forward pass under "
                             "torch.autocast(dtype=bfloat16) (weights, gradients and the optimizer stay float32); "
                             "auto (the default) is bf16 on a CPU that has native bf16 (AVX512_BF16 or AMX: the "
                             "step then costs about two thirds of float32's) and fp32 elsewhere and on CUDA")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--device", default="cpu",
                        help="where the model trains: cpu, or cuda[:N] (stoke.Loader(device=...) yields batches "
                             "there; DataLoader gets pin_memory=True and the loop copies with non_blocking)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int_list, default=[0, 1, 2],
                        help="DataLoader num_workers settings to try (default 0,1,2)")
    parser.add_argument("--torch-threads", type=int_list, default=[1, 2],
                        help="torch.set_num_threads settings to try with DataLoader (default 1,2)")
    parser.add_argument("--stoke-threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="torch threads of the stoke run (default: one per core, torch's own default)")
    parser.add_argument("--stoke-cpu-budget", type=int, default=None,
                        help="stoke.Loader's cpu_budget (default: every core; see stoke.Loader)")
    parser.add_argument("--stoke-nice", type=int, default=None,
                        help="stoke.Loader's nice (default: the Loader's, 10: below the training loop)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of runs; each configuration's figure is its median (default 1)")
    parser.add_argument("--one-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--verbose", action="store_true", help="a line per epoch on stderr")
    parser.add_argument("--profile", type=int, default=0, metavar="STEPS",
                        help="profile STEPS training steps of each run (after 10) with torch.profiler, its loader's "
                             "waits marked 'next batch': a table of the operators by their own time on stderr and a "
                             "Chrome trace in --profile-dir (the runs' figures then include the profiler's cost)")
    parser.add_argument("--profile-dir", default=".", help="where --profile writes profile-<loader>.json (default .)")
    parser.add_argument("--costs", action="store_true",
                        help="first measure the CPU time per image of the step and of each loader's loading")
    args = parser.parse_args()
    if args.malloc == "keep" and not keep_freed_memory():
        print("train.py: --malloc keep needs glibc's mallopt; running with the C library's defaults", file=sys.stderr)
    for sub in ("train", "val"):
        if not os.path.isdir(os.path.join(args.data, sub)):
            parser.error(f"{os.path.join(args.data, sub)} is not a folder (--data needs train/ and val/ ImageFolders; "
                         "scripts/make-photo-corpus.py --label-by source makes them)")
    classes = classes_of(os.path.join(args.data, "train"))
    if classes != classes_of(os.path.join(args.data, "val")):
        parser.error(f"{args.data}/train and {args.data}/val have different class folders")

    if args.one_run:  # a child of the comparison below: one run, its JSON line
        torch.manual_seed(args.seed)
        initial_state = SmallCNN(len(classes)).state_dict()  # every run starts from these weights
        threads = args.stoke_threads if args.loader == "stoke" else args.torch_threads[0]
        print(json.dumps(run(args, args.loader, args.workers[0], threads, initial_state, classes)), flush=True)
        return 0
    if args.costs:
        costs(args, classes)
    configs = []
    if args.loader in ("stoke", "both"):
        configs.append(("stoke", 0, args.stoke_threads))
    if args.loader in ("torch", "both"):
        configs += [("torch", w, t) for w in args.workers for t in args.torch_threads]
    results = {config: [] for config in configs}
    for _ in range(args.repeat):  # rounds: each configuration once per round, so drifts hit them alike
        for config in configs:
            result = one_run(args, *config)
            print(json.dumps(result), flush=True)
            results[config].append(result)
    summarize(results)
    return 0


def one_run(args, kind, workers, threads):
    """One training run in a process of its own: no thread, pool or worker of an earlier run is there."""
    command = [sys.executable, os.path.abspath(__file__), "--one-run", "--data", args.data, "--loader", kind,
               "--workers", str(workers), "--torch-threads", str(threads), "--stoke-threads", str(threads)]
    for name in ("epochs", "batch", "size", "resize", "memory_format", "precision", "lr", "malloc", "device", "seed",
                 "stoke_cpu_budget", "stoke_nice", "profile", "profile_dir"):
        if getattr(args, name) is not None:
            command += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    if args.verbose:
        command.append("--verbose")
    child = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if child.returncode != 0:
        sys.exit(f"train.py: the {kind} run (num_workers {workers}, torch threads {threads}) failed with exit "
                 f"status {child.returncode}; its error is above")
    return json.loads(child.stdout.strip().splitlines()[-1])


def summarize(results):
    """Each configuration's median images/s over the rounds; stoke's over DataLoader's best."""
    def median(values):
        return statistics.median(values)

    summary = {}
    for (kind, workers, threads), runs in results.items():
        speeds = [r["images_per_sec"] for r in runs]
        accuracies = [r["val_accuracy"] for r in runs]
        summary[(kind, workers, threads)] = median(speeds)
        name = "stoke.Loader" if kind == "stoke" else f"DataLoader num_workers {workers}"
        print(f"{name:<26} torch threads {threads}: {median(speeds):6.1f} images/s (median of {len(runs)}: "
              f"{min(speeds):.1f}..{max(speeds):.1f}), val accuracy {median(accuracies):.3f} "
              f"({min(accuracies):.3f}..{max(accuracies):.3f})")
    stoke_runs = [v for k, v in summary.items() if k[0] == "stoke"]
    torch_runs = {k: v for k, v in summary.items() if k[0] == "torch"}
    if stoke_runs and torch_runs:
        best = max(torch_runs, key=torch_runs.get)
        precisions = sorted({r["precision"] for runs in results.values() for r in runs})
        print(f"ratio stoke / DataLoader's best (num_workers {best[1]}, torch threads {best[2]}): "
              f"{stoke_runs[0] / torch_runs[best]:.2f}   (goal >= 1.5; the step in {', '.join(precisions)})")


if __name__ == "__main__":
    sys.exit(main())
