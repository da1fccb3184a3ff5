#!/usr/bin/env bash
# stoke.Loader against torch's DataLoader inside a PyTorch program (issue 23's figures), on a
# labelled corpus of photo-sized JPEGs (~500x375, ~105 KB; 1200 training and 300 validation
# images in 12 classes: the source photo and the half of it a crop is centred in):
#   1. examples/pytorch/bench_loader.py: the loaders alone at 224 px, 3 epochs: images/s, peak
#      PSS (DataLoader's workers included), stoke's RSS at each epoch's end;
#   2. examples/pytorch/train.py --loader both --repeat 3 --costs: the small CNN at 48 px, 4 epochs,
#      with stoke.Loader and with DataLoader at every num_workers (0, 1, 2) x torch threads (1, 2),
#      each run in its own process, 3 rounds: each setting's median whole-run images/s, validation
#      accuracy, and what each part costs per image (about 7 minutes). The step's forward pass runs
#      in bf16 where the CPU has native bf16 (train.py's --precision auto); PRECISION=fp32 in the
#      environment runs it in float32.
#
#   scripts/bench-pytorch-loop.sh [CORPUS_DIR]       (default build/photo-corpus-labelled)
#
# Builds the Python module (in BUILD, default build/release: the release preset; any Release build
# folder will do) and the corpus when missing; installs PyTorch, torchvision and the module's build
# dependencies from Debian.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

corpus="${1:-build/photo-corpus-labelled}"
scripts/install-deps.sh --python --bench
build="${BUILD:-build/release}"
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake --preset release >/dev/null
fi
cmake --build "$build" -j2 --target stoke_python stoke_python_package >/dev/null
for split in train:1200:0 val:300:1; do
  IFS=: read -r name count seed <<<"$split"
  if [[ ! -d "$corpus/$name" ]]; then
    /usr/bin/python3 scripts/make-photo-corpus.py --out "$corpus/$name" --count "$count" --seed "$seed" \
      --label-by source-half
  fi
done

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
export PYTHONPATH="$build/python"
/usr/bin/python3 examples/pytorch/bench_loader.py --data "$corpus/train" --size 224 --epochs 3
/usr/bin/python3 examples/pytorch/train.py --data "$corpus" --loader both --epochs 4 --repeat 3 --costs \
  --precision "${PRECISION:-auto}"
