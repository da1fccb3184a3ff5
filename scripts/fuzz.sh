#!/usr/bin/env bash
# fuzz.sh: builds stoke's libFuzzer harnesses (nodes/fuzz/; clang, ASan + UBSan) in build/fuzz and
# runs each for SECONDS on its seed corpus, then prints per harness the executions, the final
# coverage (libFuzzer's "cov:") and whether it found anything. Exits 1 when any harness crashed,
# hung, leaked or tripped a sanitizer.
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]      e.g. scripts/fuzz.sh 3600          (a long campaign)
#                                                    scripts/fuzz.sh 60 tar_fuzz coco_fuzz
#
# SECONDS defaults to 60; HARNESS defaults to every harness built. Environment: JOBS (build jobs,
# default 2), BUILD (build folder, default build/fuzz), FUZZ_ARGS (more libFuzzer flags).
#
# Seeds: tests/fuzz/corpus/<harness minus _fuzz>/ (make_fuzz_seeds regenerates the generated ones).
# They are copied into a scratch corpus, $BUILD/fuzz-work/<harness>/corpus, which grows from run
# to run; the repository's seeds stay small. What a harness finds is written to
# $BUILD/fuzz-work/<harness>/ (crash-*, timeout-*, leak-*, oom-*), its log to .../fuzz.log.
# Reproduce one: $BUILD/nodes/fuzz/<harness> <file> ($BUILD/nn/fuzz/ for safetensors_fuzz). Once fixed, copy the input into the seeds.
set -euo pipefail

seconds="${1:-60}"
shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build/fuzz}"
jobs="${JOBS:-2}"

"$root/scripts/install-deps.sh" --tests --sanitizers  # clang and libFuzzer; nothing when present
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  CXX=clang++ CC=clang cmake -S "$root" -B "$build" -DSTOKE_FUZZ=ON -DSTOKE_SANITIZE=address -DSTOKE_CUDA=OFF \
    -DSTOKE_BUILD_TESTS=OFF -DSTOKE_BUILD_EXAMPLES=OFF -DSTOKE_MPI=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$build" -j"$jobs" --target stoke_fuzzers

# A harness's executable: nodes/fuzz's, or nn/fuzz's (safetensors).
binary() {
  local dir
  for dir in nodes/fuzz nn/fuzz; do
    if [[ -x "$build/$dir/$1" ]]; then
      echo "$build/$dir/$1"
      return
    fi
  done
  echo "$build/nodes/fuzz/$1"
}
if [[ $# -gt 0 ]]; then
  harnesses=("$@")
else
  harnesses=()
  for h in decode_fuzz fused_decode_fuzz packed_fuzz cifar_fuzz file_list_fuzz transform_spec_fuzz tar_fuzz \
           tar_index_fuzz coco_fuzz dicom_fuzz safetensors_fuzz; do
    [[ -x "$(binary "$h")" ]] && harnesses+=("$h")
  done
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:suppressions=$root/cmake/sanitizers/ubsan.supp}"

failed=0
summary=()
for h in "${harnesses[@]}"; do
  exe="$(binary "$h")"
  if [[ ! -x "$exe" ]]; then
    echo "fuzz.sh: no harness $exe" >&2
    exit 2
  fi
  work="$build/fuzz-work/$h"
  seeds="$root/tests/fuzz/corpus/${h%_fuzz}"
  mkdir -p "$work/corpus"
  rm -f "$work"/crash-* "$work"/timeout-* "$work"/leak-* "$work"/oom-* "$work"/slow-unit-*
  [[ -d "$seeds" ]] && find "$seeds" -maxdepth 1 -type f ! -name 'LICENSE*' ! -name 'README*' \
    -exec cp -n -t "$work/corpus" {} +
  echo "== $h: ${seconds}s on $work/corpus"
  extra=()
  # DCMTK allocates an element's declared length (up to 4 GiB) before it finds the input shorter;
  # the allocation is untouched and freed with the error, so only single mallocs past 4 GiB count.
  [[ $h == dicom_fuzz ]] && extra+=(-malloc_limit_mb=4200)
  [[ -f "$root/nn/fuzz/${h%_fuzz}.dict" ]] && extra+=(-dict="$root/nn/fuzz/${h%_fuzz}.dict")
  rc=0
  # shellcheck disable=SC2086  # FUZZ_ARGS is a list of flags
  "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${extra[@]}" \
    -artifact_prefix="$work/" ${FUZZ_ARGS:-} "$work/corpus" </dev/null >"$work/fuzz.log" 2>&1 || rc=$?
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/fuzz.log" | tail -1 | grep -o '[0-9]*$' || true)"
  cov="$(grep -o 'cov: [0-9]*' "$work/fuzz.log" | tail -1 | grep -o '[0-9]*$' || true)"
  found="$(find "$work" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'leak-*' -o -name 'oom-*' \) \
    -printf '%f ' || true)"
  if [[ $rc -ne 0 || -n "$found" ]]; then
    failed=1
    result="FOUND (exit $rc) ${found:-see $work/fuzz.log}"
    grep -m1 -E 'ERROR: |runtime error:|==[0-9]+== ?ERROR|deadly signal|uncaught exception|Timeout' "$work/fuzz.log" || true
  else
    result="nothing"
  fi
  summary+=("$(printf '%-20s execs %-10s cov %-6s %s' "$h" "${execs:-?}" "${cov:-?}" "$result")")
done

echo
echo "== fuzz.sh: ${seconds}s per harness"
printf '%s\n' "${summary[@]}"
exit "$failed"
