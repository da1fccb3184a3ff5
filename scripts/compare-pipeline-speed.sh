#!/usr/bin/env bash
# Compares the input pipeline's cost per image in two builds of `stoke` (or two settings of one),
# interleaved: `stoke bench pipeline --threads N --autotune off --epochs 1 --json` on a corpus, for
# float output (the default transforms, ending in normalize) and uint8 output (the same without
# normalize), old then new, ROUNDS times (default 5). Prints each run's images/s and CPU
# milliseconds per image (user + system time of the process over the images it made), the medians
# and new/old. The machine may be shared and noisy: interleaving spreads its moods over both sides.
#
#   scripts/compare-pipeline-speed.sh OLD_STOKE NEW_STOKE CORPUS
#   OLD_ARGS="--normalize-in decode" scripts/compare-pipeline-speed.sh stoke stoke CORPUS
#
# THREADS (default 1) sets --threads; OLD_ARGS and NEW_ARGS are added to each side's command.
# CORPUS: an image folder of photo-sized JPEGs (scripts/make-photo-corpus.py makes one).
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: scripts/compare-pipeline-speed.sh OLD_STOKE NEW_STOKE CORPUS" >&2
  exit 2
fi
for binary in "$1" "$2"; do
  if [[ ! -x "$binary" ]]; then
    echo "compare-pipeline-speed.sh: $binary is not an executable" >&2
    exit 2
  fi
done
if [[ ! -d "$3" ]]; then
  echo "compare-pipeline-speed.sh: $3 is not a folder (make one with scripts/make-photo-corpus.py)" >&2
  exit 2
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "old: $1 ${OLD_ARGS:-}"
echo "new: $2 ${NEW_ARGS:-}"
echo "corpus: $3, threads ${THREADS:-1}, rounds ${ROUNDS:-5}"

exec python3 - "$@" << 'EOF'
import json, os, resource, shlex, statistics, subprocess, sys

old, new, corpus = sys.argv[1:4]
rounds = int(os.environ.get("ROUNDS", "5"))
threads = os.environ.get("THREADS", "1")
sides = {"old": [old] + shlex.split(os.environ.get("OLD_ARGS", "")),
         "new": [new] + shlex.split(os.environ.get("NEW_ARGS", ""))}
outputs = {"float": [], "uint8": ["--transform", "random_resized_crop size=224", "--transform",
                                  "random_horizontal_flip"]}
runs = {(o, s): [] for o in outputs for s in sides}

def run(command):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(out.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result["images_per_sec"], 1000 * cpu / result["images"]

for r in range(1, rounds + 1):
    for output, extra in outputs.items():
        for side, binary in sides.items():
            command = binary[:1] + ["bench", "pipeline", "--data", corpus, "--threads", threads, "--autotune", "off",
                                    "--epochs", "1", "--json"] + extra + binary[1:]
            rate, cpu_ms = run(command)
            runs[(output, side)].append((rate, cpu_ms))
            print(f"round {r} of {rounds}: {output:5} {side}: {rate:7.1f} images/s  {cpu_ms:6.3f} CPU ms/image",
                  flush=True)

for output in outputs:
    median = {}
    for side in sides:
        rates = [x[0] for x in runs[(output, side)]]
        cpu = [x[1] for x in runs[(output, side)]]
        median[side] = (statistics.median(rates), statistics.median(cpu))
        print(f"{output:5} {side}: median {median[side][0]:.1f} images/s ({min(rates):.1f}-{max(rates):.1f}), "
              f"{median[side][1]:.3f} CPU ms/image ({min(cpu):.3f}-{max(cpu):.3f})")
    print(f"{output:5} new/old: images/s {median['new'][0] / median['old'][0]:.3f}, "
          f"CPU per image {median['new'][1] / median['old'][1]:.3f}")
EOF
