#!/usr/bin/env bash
# stoke's input pipeline on WebDataset tar shards against the same images in a folder: the photo
# corpus is packed with `stoke pack --format tar`, then `stoke bench pipeline` (the same options on
# both) reads the folder and the shards alternately, ROUNDS times each, and the images/s of both
# and the ratio shards / folder are printed.
#
#   scripts/bench-shards.sh [CORPUS_DIR] [SECONDS] [ROUNDS]
#
# CORPUS_DIR (default build/photo-corpus) is built, when it does not exist yet, as
# scripts/bench-vs-pytorch.sh builds it: 1000 photo-like JPEGs (~500x375) from tests/data/photos
# by scripts/make-photo-corpus.py. The shards go to SHARDS (default CORPUS_DIR-shards, beside the
# corpus, not in it), cut at SHARD_BYTES (default 32M, so that the corpus makes a few shards); the
# script replaces the train-*.tar files there at every run. STOKE selects the binary (default
# build/release/apps/stoke, else build/ci/apps/stoke when only that one is built; the release one
# is built when neither is).
#
# Both are read from the page cache (it is warmed first): this compares the ways of reading, not
# the disks.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

corpus="${1:-build/photo-corpus}"
seconds="${2:-20}"
rounds="${3:-2}"
corpus="${corpus%/}"
shards="${SHARDS:-${corpus}-shards}"
shard_bytes="${SHARD_BYTES:-32M}"
photos="${PHOTOS:-tests/data/photos}"

if [[ -n "${STOKE:-}" ]]; then
  stoke="${STOKE}"
elif [[ ! -x build/release/apps/stoke && -x build/ci/apps/stoke ]]; then
  stoke=build/ci/apps/stoke
else
  stoke=build/release/apps/stoke
fi
if [[ ! -x "${stoke}" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release -j2 --target stoke_cli
fi
if [[ ! -d "${corpus}" ]]; then
  /usr/bin/python3 scripts/make-photo-corpus.py --source "${photos}" --out "${corpus}" --count 1000
fi

mkdir -p "${shards}"
rm -f "${shards}"/train-*.tar "${shards}"/train-*.tar.stoke-idx
"${stoke}" pack --data "${corpus}" --out "${shards}/train-%06d.tar" --format tar --shard-bytes "${shard_bytes}" \
  2>/dev/null | grep -v '^  '

echo "corpus: ${corpus} ($(find "${corpus}" -name '*.jpg' | wc -l) files, $(du -sh "${corpus}" | cut -f1))"
echo "shards: ${shards} ($(find "${shards}" -name '*.tar' | wc -l) shards, $(du -ch "${shards}"/*.tar | tail -1 | cut -f1))"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); ${stoke}"

# Warm the page cache so that neither side pays for the disk.
cat $(find "${corpus}" -name '*.jpg') "${shards}"/*.tar >/dev/null

results=()
for round in $(seq 1 "${rounds}"); do
  for what in folder shards; do
    data="${corpus}"
    [[ "${what}" == shards ]] && data="${shards}"
    json="$("${stoke}" bench pipeline --data "${data}" --seconds "${seconds}" --json 2>/dev/null | tail -1)"
    echo "round ${round} ${what}: ${json}"
    results+=("${what}" "${json}")
  done
done

/usr/bin/python3 - "${results[@]}" <<'PY'
import json, statistics, sys
args = sys.argv[1:]
rates = {"folder": [], "shards": []}
for what, line in zip(args[0::2], args[1::2]):
    rates[what].append(json.loads(line)["images_per_sec"])
for what, values in rates.items():
    print(f"{what:7s} {statistics.mean(values):8.1f} images/s (runs: {', '.join(f'{v:.1f}' for v in values)})")
ratio = statistics.mean(rates["shards"]) / statistics.mean(rates["folder"])
print(f"ratio shards / folder: {ratio:.3f}")
PY
