#!/usr/bin/env bash
# Compares two builds of `stoke` on the training path, on this machine, in one run: the
# quickstart's job (`stoke train`: the built-in dataset, 6 epochs) with each, its validation
# accuracies, checkpoints and images/s; the second build's checkpoints at --threads 1 and 2 (they
# must be byte-identical); and `stoke bench train --device cpu`'s ratio with each, interleaved
# round by round (the machine may be shared and noisy). For a refactoring that must change
# nothing: the accuracies and checkpoints must match, the speeds should not drop.
#
#   scripts/compare-train.sh OLD_STOKE NEW_STOKE [OUT]
#
# OUT (default out/compare-train) keeps every run's JSON lines and checkpoints. STOKE_CACHE is
# shared by both builds (the built-in dataset is written once). ROUNDS (default 3): bench train
# rounds per build. About 25 minutes on 2 cores.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: scripts/compare-train.sh OLD_STOKE NEW_STOKE [OUT]" >&2
  exit 2
fi
old=$1
new=$2
out=${3:-out/compare-train}
rounds=${ROUNDS:-3}
for binary in "$old" "$new"; do
  if [[ ! -x "$binary" ]]; then
    echo "compare-train.sh: $binary is not an executable (build it with cmake --build --preset release --target stoke_cli)" >&2
    exit 2
  fi
done
rm -rf "$out"
mkdir -p "$out"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "old: $old"
echo "new: $new"

# The quickstart's job with each build.
for side in old new; do
  binary=${!side}
  echo "== $side: stoke train --checkpoint $out/$side/train --json"
  "$binary" train --checkpoint "$out/$side/train" --json > "$out/$side-train.jsonl" 2> "$out/$side-train.log"
done

# Determinism of the new build across thread counts (a short run: 1 epoch of the same job).
for threads in 1 2; do
  echo "== new: stoke train --epochs 1 --threads $threads --deterministic"
  "$new" train --epochs 1 --threads "$threads" --deterministic --device cpu --checkpoint "$out/new/threads-$threads" \
    --json > "$out/new-threads-$threads.jsonl" 2> /dev/null
done

# bench train, interleaved: old, new, old, new, ...
for ((round = 1; round <= rounds; ++round)); do
  for side in old new; do
    binary=${!side}
    echo "== $side: stoke bench train --device cpu (round $round of $rounds)"
    "$binary" bench train --device cpu --repeats 1 --json 2> /dev/null | tail -n 1 >> "$out/$side-bench.jsonl"
  done
done

python3 - "$out" << 'EOF'
import hashlib, json, pathlib, statistics, sys

out = pathlib.Path(sys.argv[1])

def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]

def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]

train = {side: lines(out / f"{side}-train.jsonl") for side in ("old", "new")}
print("\nstoke train (the quickstart's job): validation top-1 per epoch")
print(f"{'epoch':>5}  {'old':>8}  {'new':>8}  {'old img/s':>10}  {'new img/s':>10}")
same_accuracy = True
for o, n in zip([e for e in train["old"] if "epoch" in e], [e for e in train["new"] if "epoch" in e]):
    same_accuracy &= f"{o['val_top1']:.3f}" == f"{n['val_top1']:.3f}"
    print(f"{o['epoch']:>5}  {o['val_top1']:8.3f}  {n['val_top1']:8.3f}  {o['images_per_sec']:10.0f}  {n['images_per_sec']:10.0f}")
final = {side: next(e for e in train[side] if e.get("final")) for side in ("old", "new")}
print(f"whole run: old {final['old']['images_per_sec']:.0f} images/s, new {final['new']['images_per_sec']:.0f} images/s "
      f"(new/old {final['new']['images_per_sec'] / final['old']['images_per_sec']:.3f})")
print(f"the same 6 validation accuracies to 3 decimals: {'yes' if same_accuracy else 'NO'}")

checkpoints = sorted(p.name for p in (out / "old" / "train").glob("*.safetensors"))
identical = all(digest(out / "old" / "train" / name) == digest(out / "new" / "train" / name) for name in checkpoints)
print(f"checkpoints byte-identical, old vs new ({', '.join(checkpoints)}): {'yes' if identical else 'NO'}")
threads = [digest(out / "new" / f"threads-{t}" / "last.safetensors") for t in (1, 2)]
print(f"new build, --threads 1 vs 2 (1 epoch, --deterministic): {threads[0]} vs {threads[1]}: "
      f"{'identical' if threads[0] == threads[1] else 'DIFFERENT'}")

print("\nstoke bench train --device cpu: pipeline / compute bound, per round")
ratios = {}
for side in ("old", "new"):
    runs = lines(out / f"{side}-bench.jsonl")
    ratios[side] = [r["ratio"] for r in runs]
    print(f"{side}: " + ", ".join(f"{r:.3f}" for r in ratios[side]) +
          f"  (median {statistics.median(ratios[side]):.3f}; pipeline "
          + ", ".join(f"{r['pipeline_images_per_sec']:.0f}" for r in runs) + " images/s)")
print(f"median ratio new/old: {statistics.median(ratios['new']) / statistics.median(ratios['old']):.3f}")
EOF
