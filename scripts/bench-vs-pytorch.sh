#!/usr/bin/env bash
# stoke's input pipeline against PyTorch's DataLoader doing the same work (RandomResizedCrop 224,
# horizontal flip, ToTensor + Normalize, batch 64; DataLoader with 2 workers), one after the other
# on the same corpus, and the ratio. Also prints stoke's efficiency against a plain one-thread
# C++ loop (pipeline / (threads x loop rate)).
#
#   scripts/bench-vs-pytorch.sh [CORPUS_DIR] [SECONDS]
#
# Builds the corpus (1000 photo-like JPEGs, ~500x375, >= 100 KB each on average) from
# tests/data/photos when CORPUS_DIR does not exist yet; installs PyTorch from Debian if missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

corpus="${1:-build/photo-corpus}"
seconds="${2:-30}"
stoke="${STOKE:-build/release/apps/stoke}"
photos="${PHOTOS:-tests/data/photos}"

scripts/install-deps.sh --bench
if [[ ! -x "${stoke}" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release -j2 --target stoke_cli
fi
if [[ ! -d "${corpus}" ]]; then
  /usr/bin/python3 scripts/make-photo-corpus.py --source "${photos}" --out "${corpus}" --count 1000
fi

echo "corpus: ${corpus} ($(find "${corpus}" -name '*.jpg' | wc -l) files, $(du -sh "${corpus}" | cut -f1))"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

# Warm the page cache so that neither side pays for the disk.
cat $(find "${corpus}" -name '*.jpg') >/dev/null

stoke_json="$("${stoke}" bench pipeline --data "${corpus}" --seconds "${seconds}" --baseline 300 --json)"
torch_json="$(/usr/bin/python3 scripts/pytorch_loader_bench.py --data "${corpus}" --seconds "${seconds}")"
echo "stoke:   ${stoke_json}"
echo "pytorch: ${torch_json}"

/usr/bin/python3 - "${stoke_json}" "${torch_json}" <<'PY'
import json, sys
s, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"stoke   {s['images_per_sec']:8.1f} images/s ({s['threads']} threads, fused decode: {s['fuse']})")
print(f"pytorch {t['images_per_sec']:8.1f} images/s (DataLoader, {t['workers']} workers, torch {t['torch']})")
print(f"ratio stoke / pytorch: {s['images_per_sec'] / t['images_per_sec']:.2f}   (goal >= 2.5)")
if "efficiency" in s:
    print(f"stoke / ({s['threads']} x one-thread C++ loop at {s['baseline_images_per_sec']:.1f} images/s): "
          f"{s['efficiency']:.2f}   (goal >= 0.90)")
PY
