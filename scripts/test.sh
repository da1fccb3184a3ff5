#!/usr/bin/env bash
# Builds stoke with the `ci` preset and runs every test. Warnings are errors when the CI
# environment variable is set. Works from any directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The tests cover the optional OpenCV imgcodecs decoder too.
scripts/install-deps.sh --optional

werror=OFF
if [[ -n "${CI:-}" ]]; then
  werror=ON
fi

cmake --preset ci -DSTOKE_WARNINGS_AS_ERRORS="${werror}"
cmake --build --preset ci -j2
ctest --preset ci -j2

# The build without CUDA must keep working where the toolkit is installed too (where it is not,
# the build above was one): build the CPU-only gpu layer, the app and their tests, and run them.
# (cuda_runtime_test exists only in a build with CUDA.)
if [[ -e build/ci/tests/gpu/cuda_runtime_test ]]; then
  cpu_tests=(device_test device_stages_test convert_test nvml_monitor_test)
  cmake -S . -B build/ci-cpu -DCMAKE_BUILD_TYPE=Release -DSTOKE_CUDA=OFF -DSTOKE_BUILD_EXAMPLES=OFF \
    -DSTOKE_WARNINGS_AS_ERRORS="${werror}"
  cmake --build build/ci-cpu -j2 --target stoke_cli nccl_test stoke_test_fake_nccl "${cpu_tests[@]}"
  for test in "${cpu_tests[@]}"; do
    build/ci-cpu/tests/gpu/"${test}" --gtest_brief=1
  done
  build/ci-cpu/tests/dist/nccl_test --gtest_brief=1  # NCCL's loader and rendezvous without CUDA
  build/ci-cpu/apps/stoke bench device --device cpu --batch 4 --size 16 --batches 8 --compute-us 100 >/dev/null
  echo "CPU-only build (STOKE_CUDA=OFF): ok"
fi
