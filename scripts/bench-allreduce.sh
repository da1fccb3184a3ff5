#!/usr/bin/env bash
# Data-parallel gradient sync on CPU ranks of this machine: stoke_bench_allreduce alone (1 rank)
# and under mpirun with 2 ranks, 1 oneTBB thread per rank each time, then the images/s of the 2
# ranks over the 1 rank's per model and configuration. Builds nothing.
#
#   scripts/bench-allreduce.sh [BINARY] [--] [options for stoke_bench_allreduce]
#   scripts/bench-allreduce.sh build/ci/apps/stoke_bench_allreduce -- --steps 10 --batch 16
#
# RANKS (default 2) and THREADS (default 1) change the comparison. Running as root needs Open
# MPI's consent variables, set here; --oversubscribe lets the ranks share cores.
set -euo pipefail

binary=build/ci/apps/stoke_bench_allreduce
if [[ $# -gt 0 && $1 != -* ]]; then
  binary=$1
  shift
fi
[[ ${1:-} == -- ]] && shift
ranks=${RANKS:-2}
threads=${THREADS:-1}

if [[ ! -x $binary ]]; then
  echo "bench-allreduce: $binary is not an executable; build it: cmake --build build/ci --target stoke_bench_allreduce" >&2
  exit 2
fi
if ! command -v mpirun >/dev/null; then
  echo "bench-allreduce: no mpirun (Debian: apt-get install openmpi-bin libopenmpi-dev)" >&2
  exit 2
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none  # containers without CMA / ptrace rights

one=$(mktemp)
many=$(mktemp)
trap 'rm -f "$one" "$many"' EXIT

echo "== 1 rank x $threads thread(s): $binary --threads $threads $*"
"$binary" --threads "$threads" "$@" | tee "$one"
echo
echo "== $ranks ranks x $threads thread(s): mpirun -np $ranks --oversubscribe --bind-to none $binary --threads $threads $*"
mpirun -np "$ranks" --oversubscribe --bind-to none "$binary" --threads "$threads" "$@" | tee "$many"
echo

# "result <model> <config> world=N images_per_s=X ..." lines of both runs, joined on model + config.
echo "== images/s, $ranks ranks over 1 rank (all ranks' images; ideal scaling would be $ranks.00)"
awk -v ranks="$ranks" '
  function field(name,   i) { for (i = 4; i <= NF; ++i) if (index($i, name "=") == 1) return substr($i, length(name) + 2); return "" }
  $1 != "result" { next }
  FNR == NR { one[$2 " " $3] = field("images_per_s"); next }
  ($2 " " $3) in one {
    base = one[$2 " " $3]; now = field("images_per_s")
    printf "ratio %-10s %-14s 1 rank %8.1f  %d ranks %8.1f  ratio %.2f\n", $2, $3, base, ranks, now, (base > 0 ? now / base : 0)
  }' "$one" "$many"
