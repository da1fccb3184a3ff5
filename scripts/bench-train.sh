#!/usr/bin/env bash
# `stoke bench train`: the whole pipeline's training images/s (read, decode + augment, batch,
# train step) as a share of the compute bound (the train step on synthetic batches already on the
# device), --repeats rounds each, medians. Prints each round's figures (stderr) and each run's JSON
# line, which it also appends to $OUT/bench-train.jsonl.
#
#   scripts/bench-train.sh          CPU: small_cnn, batch 64, on the built-in shapes dataset
#   scripts/bench-train.sh --gpu    GPU (cuda:0): the same on the GPU, then resnet50, bf16, batch 256,
#                                   224 px, on photo-like JPEGs (random crops decoded by the CPU)
#
# On the GPU machine, from the bundle (scripts/make-bundle.sh, then carry bundle/):
#   scripts/run-on-device.sh scripts/bench-train.sh --gpu
# Environment: STOKE (default bundle/bin/stoke when present, else build/release/apps/stoke),
# REPEATS (3), MEASURE_SECONDS (10 per measurement), CORPUS (an ImageFolder for resnet50; default:
# build/photo-corpus, made by scripts/make-photo-corpus.py when Python has numpy and Pillow, else
# 256 px shapes from `stoke gen-shapes`, which decode faster than photos: say which in the figures),
# OUT (default out/bench-train).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -n "${STOKE:-}" ]]; then
  stoke=${STOKE}
elif [[ -x bundle/bin/stoke ]]; then
  stoke=bundle/bin/stoke
else
  stoke=build/release/apps/stoke
fi
repeats=${REPEATS:-3}
seconds=${MEASURE_SECONDS:-10}
out=${OUT:-out/bench-train}
mkdir -p "$out"
if [[ ! -x "$stoke" ]]; then
  echo "bench-train.sh: no $stoke; build it (cmake --preset release && cmake --build --preset release --target stoke_cli) or set STOKE" >&2
  exit 2
fi

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
if command -v nvidia-smi > /dev/null; then nvidia-smi -L; fi

# One configuration: the text (stdout and the progress on stderr), then the JSON line kept.
run() {
  echo "== stoke bench train $*"
  "$stoke" bench train "$@" --repeats "$repeats" --seconds "$seconds" --json | tee -a "$out/bench-train.jsonl"
}

if [[ "${1:-}" != "--gpu" ]]; then
  run --device cpu
  exit 0
fi

run --device cuda --model small_cnn --batch 256

corpus=${CORPUS:-build/photo-corpus}
if [[ ! -d "$corpus" ]]; then
  if python3 -c 'import numpy, PIL' 2> /dev/null; then
    python3 scripts/make-photo-corpus.py --source tests/data/photos --out "$corpus" --count 2000
  else
    corpus=build/shapes-256
    echo "bench-train.sh: no numpy/Pillow for photo-like JPEGs; using 256 px shapes in $corpus (cheaper to decode)"
    [[ -d "$corpus" ]] || "$stoke" gen-shapes --out "$corpus" --classes 10 --train 200 --val 0 --size 256 --quiet
    corpus=$corpus/train
  fi
fi
run --device cuda --data "$corpus" --model resnet50 --batch 256 --precision bf16
