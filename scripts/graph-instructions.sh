#!/usr/bin/env bash
# The graph executor's cost in instructions, which callgrind counts exactly (the same count on a
# quiet or a busy machine): `stoke bench graph --only stoke|tbb|dag` under callgrind at two item
# counts; the difference divided by the extra items x stage visits is the cost of one item in one
# stage, start-up and warm-up cancelling out. Prints the chain's, tbb's and their ratio, and the
# graph's (the same work split between two joined branches; per item and chain stage, as the
# benchmark counts it) against the chain's.
#
#   scripts/graph-instructions.sh [bench graph options, e.g. --ordered --threads 1]
# Environment: STOKE (default build/release/apps/stoke), ITEMS (default 20000: runs N and 2N).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
stoke=${STOKE:-build/release/apps/stoke}
items=${ITEMS:-20000}
stages=3
for ((i = 1; i <= $#; ++i)); do
  if [[ "${!i}" == "--stages" ]]; then
    next=$((i + 1))
    stages=${!next}
  fi
done
command -v valgrind > /dev/null || { echo "graph-instructions.sh: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Instructions of one `stoke bench graph --only EXECUTOR --items N --repeat 1` (a warm-up run and
# a timed one: 2 runs of N items).
count() {
  valgrind --tool=callgrind --callgrind-out-file="$work/out" "$stoke" bench graph --only "$1" --items "$2" \
    --repeat 1 "${@:3}" > /dev/null 2> "$work/log"
  sed -n 's/^summary: //p' "$work/out"
}

declare -A per_visit
for executor in stoke tbb dag; do
  small=$(count "$executor" "$items" "$@")
  large=$(count "$executor" $((2 * items)) "$@")
  per_visit[$executor]=$(python3 -c "print(($large - $small) / (2 * $items * ($stages + 2)))")
  printf '%-6s %8.1f instructions per item per stage\n' "$executor" "${per_visit[$executor]}"
done
python3 -c "print(f'ratio stoke/tbb {${per_visit[stoke]} / ${per_visit[tbb]}:.2f}')"
python3 -c "print(f'ratio dag/stoke {${per_visit[dag]} / ${per_visit[stoke]}:.2f}')"
