#!/usr/bin/env python3
"""PyTorch's side of `stoke bench nn`: the same model, step and synthetic data in PyTorch.

Each timed step is forward, cross-entropy, backward and an SGD step (momentum 0.9, weight decay
5e-4), on a batch of random images already on the device, after --warmup untimed steps. Prints
one JSON line like `stoke bench nn --json`. scripts/bench-nn.sh runs both and prints the ratio.

  python3 scripts/bench_nn_torch.py --model small_cnn --batch 64 --size 32 --device cpu
  python3 scripts/bench_nn_torch.py --model resnet50 --batch 256 --size 224 --device cuda \
      --channels-last --precision bf16
"""
import argparse
import json
import statistics
import sys
import time

import torch
from torch import nn


def small_cnn(classes, width=32):
    """stoke's small_cnn (gpu/src/nn/models.cpp), layer for layer."""
    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
    w = width
    return nn.Sequential(*block(3, w), nn.MaxPool2d(2), *block(w, 2 * w), nn.MaxPool2d(2), *block(2 * w, 4 * w),
                         nn.MaxPool2d(2), *block(4 * w, 8 * w), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8 * w, classes))


def mobilenet(classes, width=32):
    """stoke's mobilenet: a stride-2 stem and six depthwise-separable blocks."""
    def cbr(cin, cout, k, s, g):
        return [nn.Conv2d(cin, cout, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
    layers = cbr(3, width, 3, 2, 1)
    channels = width
    for multiple, stride in ((2, 1), (4, 2), (4, 1), (8, 2), (8, 1), (16, 2)):
        out = width * multiple
        layers += cbr(channels, channels, 3, stride, channels) + cbr(channels, out, 1, 1, 1)
        channels = out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes))


def make_model(name, classes):
    if name == "small_cnn":
        return small_cnn(classes)
    if name == "mobilenet":
        return mobilenet(classes)
    import torchvision
    return getattr(torchvision.models, name)(num_classes=classes)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="small_cnn", help="small_cnn, mobilenet, resnet18, resnet50")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: every core)")
    parser.add_argument("--channels-last", action="store_true", help="NHWC memory format")
    parser.add_argument("--precision", default="f32", choices=("f32", "bf16", "f16"),
                        help="f32, or bf16 / f16 autocast (f16 with a GradScaler), as stoke's --precision")
    parser.add_argument("--bf16", action="store_true", help="the same as --precision bf16")
    args = parser.parse_args()
    if args.bf16:
        args.precision = "bf16"

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    else:
        import os
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    device = torch.device(args.device)
    if device.type == "cuda":
        # cuDNN picks its algorithms by timing them, as stoke's CUDA backend does.
        torch.backends.cudnn.benchmark = True
        # stoke computes f32 in f32 (no TF32, whose 10-bit inputs would drift from the CPU's
        # results): PyTorch does the same arithmetic here, not its TF32 convolution default.
        torch.backends.cudnn.allow_tf32 = args.precision != "f32"
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(1)
    model = make_model(args.model, args.classes).to(device)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    images = (torch.rand(args.batch, 3, args.size, args.size, device=device) * 4 - 2).to(memory_format=memory_format)
    labels = torch.randint(0, args.classes, (args.batch,), device=device)

    autocast = args.precision != "f32"
    dtype = torch.float16 if args.precision == "f16" else torch.bfloat16
    if hasattr(torch.amp, "GradScaler"):
        scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "f16")
    else:  # PyTorch before 2.3 (Debian 12's): CUDA's own
        scaler = torch.cuda.amp.GradScaler(enabled=args.precision == "f16")

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=dtype, enabled=autocast):
            loss = loss_fn(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss

    model.train()
    for _ in range(args.warmup):
        step()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    step_ms = []
    start = time.perf_counter()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        if device.type == "cpu":
            loss = loss.item()
        step_ms.append((time.perf_counter() - t0) * 1000)
    sync()
    seconds = time.perf_counter() - start
    print(json.dumps({"bench": "nn_torch", "model": args.model, "device": str(device), "batch": args.batch,
                      "size": args.size, "steps": args.steps, "threads": torch.get_num_threads(),
                      "torch": torch.__version__, "precision": args.precision,
                      "channels_last": args.channels_last, "images_per_sec": args.batch * args.steps / seconds,
                      "median_step_ms": statistics.median(step_ms), "last_loss": float(loss)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
