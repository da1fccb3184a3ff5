#!/usr/bin/env bash
# stoke's training step against PyTorch's on the same model, batch and device: `stoke bench nn`
# and scripts/bench_nn_torch.py, alternated --repeats times (s t s t ...: the machines are shared
# and noisy, so neither side gets all the quiet minutes), then the ratio of the medians.
#
#   scripts/bench-nn.sh                                  # CPU: small_cnn, batch 64, 32 px (goal >= 0.7)
#   scripts/bench-nn.sh --gpu                            # GPU: resnet50, batch 256, 224 px, bf16 NHWC (goal >= 0.9)
#   REPEATS=5 STEPS=40 scripts/bench-nn.sh
#
# Installs PyTorch from Debian if missing (CPU); on the GPU machine the Python's own PyTorch is used.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

stoke="${STOKE:-build/release/apps/stoke}"
python="${PYTHON:-/usr/bin/python3}"
repeats="${REPEATS:-3}"
steps="${STEPS:-20}"
if [[ "${1:-}" == "--gpu" ]]; then
  common=(--model resnet50 --batch 256 --size 224 --classes 1000 --steps "${steps}" --warmup 5)
  stoke_args=(--device cuda --precision bf16 --channels-last)
  torch_args=(--device cuda --channels-last --precision bf16)
  goal=0.9
else
  common=(--model small_cnn --batch 64 --size 32 --classes 10 --steps "${steps}" --warmup 3)
  stoke_args=(--device cpu)
  torch_args=(--device cpu)
  goal=0.7
  scripts/install-deps.sh --bench
fi
if [[ ! -x "${stoke}" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release -j2 --target stoke_cli
fi

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
results=()
for ((i = 0; i < repeats; ++i)); do
  s="$("${stoke}" bench nn "${common[@]}" "${stoke_args[@]}" --json)"
  t="$("${python}" scripts/bench_nn_torch.py "${common[@]}" "${torch_args[@]}")"
  echo "stoke:   ${s}"
  echo "pytorch: ${t}"
  results+=("${s}" "${t}")
done

"${python}" - "${goal}" "${results[@]}" <<'PY'
import json, statistics, sys
goal, runs = float(sys.argv[1]), [json.loads(r) for r in sys.argv[2:]]
s = [r["images_per_sec"] for r in runs[0::2]]
t = [r["images_per_sec"] for r in runs[1::2]]
print(f"stoke   {statistics.median(s):8.1f} images/s (median of {len(s)}: {', '.join(f'{v:.1f}' for v in s)})")
print(f"pytorch {statistics.median(t):8.1f} images/s (median of {len(t)}: {', '.join(f'{v:.1f}' for v in t)}; "
      f"torch {runs[1]['torch']}, {runs[1]['threads']} threads)")
print(f"ratio stoke / pytorch: {statistics.median(s) / statistics.median(t):.2f}   (goal >= {goal})")
PY
