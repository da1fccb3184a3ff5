#!/usr/bin/env bash
# Compares the training speed of two builds of `stoke` on this machine, interleaved: `stoke train
# --epochs 1 --device cpu` on the built-in dataset with the old build, then the new, ROUNDS times
# (default 5), and prints each run's training images/s and the medians. The machine may be shared
# and noisy: interleaving spreads its moods over both builds, and the median ignores outliers.
#
#   scripts/compare-train-speed.sh OLD_STOKE NEW_STOKE
#
# STOKE_CACHE is shared by both builds (the built-in dataset is written once). About 1 minute per
# run on 2 cores. compare-train.sh compares accuracies and checkpoints too.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: scripts/compare-train-speed.sh OLD_STOKE NEW_STOKE" >&2
  exit 2
fi
rounds=${ROUNDS:-5}
for binary in "$1" "$2"; do
  if [[ ! -x "$binary" ]]; then
    echo "compare-train-speed.sh: $binary is not an executable" >&2
    exit 2
  fi
done
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "old: $1"
echo "new: $2"

speeds=$(mktemp)
trap 'rm -f "$speeds"' EXIT
for ((round = 1; round <= rounds; ++round)); do
  for side in old new; do
    binary=$1
    [[ $side == new ]] && binary=$2
    # The epoch line's images_per_sec: the training pass alone.
    speed=$("$binary" train --epochs 1 --device cpu --json 2> /dev/null |
      python3 -c 'import json, sys; print(next(json.loads(l)["images_per_sec"] for l in sys.stdin if "\"epoch\"" in l))')
    echo "round $round of $rounds: $side $speed images/s"
    echo "$side $speed" >> "$speeds"
  done
done

python3 - "$speeds" << 'EOF'
import statistics, sys
runs = {"old": [], "new": []}
for line in open(sys.argv[1]):
    side, speed = line.split()
    runs[side].append(float(speed))
median = {side: statistics.median(values) for side, values in runs.items()}
for side in ("old", "new"):
    print(f"{side}: median {median[side]:.0f} images/s ({min(runs[side]):.0f}-{max(runs[side]):.0f})")
print(f"new/old: {median['new'] / median['old']:.3f}")
EOF
