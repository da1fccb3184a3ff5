#!/usr/bin/env bash
# Builds stoke with the `ci` preset and runs every test. Warnings are errors when the CI
# environment variable is set. Works from any directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The tests cover the optional OpenCV imgcodecs decoder and the Python module too.
scripts/install-deps.sh --tests --optional --sanitizers --python

werror=OFF
if [[ -n "${CI:-}" ]]; then
  werror=ON
fi

cmake --preset ci -DSTOKE_WARNINGS_AS_ERRORS="${werror}"
cmake --build --preset ci -j2
ctest --preset ci -j2

# The quickstart's build with every optional package made invisible, as on a fresh machine that
# has only what the quickstart installs: nothing optional may fail the configure or the build.
scripts/check-without-optional.sh

# The sanitizer half: the base, graph, nodes and apps tests under ASan + UBSan (clang, build/asan), every
# fuzz harness for a few seconds on its seeds, and -- that build being one without CUDA -- the
# CPU-only gpu layer's tests (scripts/asan.sh).
scripts/asan.sh
