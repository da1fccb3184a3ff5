#!/usr/bin/env bash
# asan.sh: the sanitizer half of CI. One clang build with AddressSanitizer + UndefinedBehavior-
# Sanitizer (build/asan) serves both:
#   1. the base, graph, nodes and apps tests (ctest in build/asan/tests/{base,graph,nodes,apps}), and the
#      train layer's Loader (its hand-off of batches between the pipeline and the caller),
#   2. every libFuzzer harness, for FUZZ_SECONDS each (default 5) on its seed corpus
#      (scripts/fuzz.sh; for a long campaign run scripts/fuzz.sh 3600 yourself).
#   3. the build without CUDA (this one is, wherever the toolkit is installed): the CPU-only gpu
#      layer's tests, NCCL's loader and rendezvous, and `stoke bench device --device cpu`.
# A leak, an overflow, undefined behaviour, a crash or a hang fails it. scripts/test.sh runs it after
# the Release suite; alone: scripts/asan.sh. Environment: JOBS (default 2), FUZZ_SECONDS, BUILD
# (default build/asan), ASAN_FOLDERS (the tests/ folders, default "base graph nodes apps").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build/asan}"
jobs="${JOBS:-2}"
read -r -a folders <<<"${ASAN_FOLDERS:-base graph nodes apps}"
cd "$root"
scripts/install-deps.sh --tests --sanitizers  # clang and its runtimes; nothing when present

phase() { printf '== asan.sh: %s (%s)\n' "$1" "$(date +%T)"; }

phase "configure $build (clang, ASan + UBSan, libFuzzer harnesses)"
# -O1 and line tables only: what ASan's reports need, and quicker to build than -O2 -g.
CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DSTOKE_SANITIZE=address -DSTOKE_FUZZ=ON -DSTOKE_CUDA=OFF -DSTOKE_MPI=OFF \
  -DSTOKE_WARNINGS_AS_ERRORS=OFF >/dev/null  # the Release (GCC) build is the warnings gate; clang warns otherwise
phase "build the tests of base, graph, nodes and apps, and the harnesses"
cpu_only_tests=(device_test device_stages_test convert_test nvml_monitor_test)
cmake --build "$build" -j"$jobs" --target "${folders[@]/#/stoke_tests_}" stoke_fuzzers \
  "${cpu_only_tests[@]}" nccl_test stoke_test_fake_nccl loader_test

for folder in "${folders[@]}"; do
  phase "tests/$folder under ASan + UBSan"
  ctest --test-dir "$build/tests/$folder" -j"$jobs" --output-on-failure --no-tests=error
done

export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$root/cmake/sanitizers/ubsan.supp"
phase "tests/train's Loader under ASan + UBSan"
"$build/tests/train/loader_test" --gtest_brief=1

phase "the build without CUDA: the CPU-only gpu layer"
for test in "${cpu_only_tests[@]}"; do
  "$build/tests/gpu/$test" --gtest_brief=1
done
"$build/tests/dist/nccl_test" --gtest_brief=1  # NCCL's loader and rendezvous without CUDA
"$build/apps/stoke" bench device --device cpu --batch 4 --size 16 --batches 8 --compute-us 100 >/dev/null
echo "CPU-only build (STOKE_CUDA=OFF): ok"

phase "fuzz every harness for ${FUZZ_SECONDS:-5} s"
BUILD="$build" JOBS="$jobs" "$root/scripts/fuzz.sh" "${FUZZ_SECONDS:-5}"
phase "done"
