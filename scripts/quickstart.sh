#!/usr/bin/env bash
# From a fresh Debian checkout to a trained classifier: installs the dependencies, builds the
# release preset, and trains the small CNN on the built-in shapes dataset with `stoke train`
# (read -> decode -> flip -> normalize -> batch -> train step), then runs the example pipeline.
# Works from any directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh

# Only what this script runs: the `stoke` executable and the example, no test (the test suite is
# scripts/test.sh's, in its own build folder). Optional parts whose packages are missing (the
# Python module, other image formats, DICOM, MPI, CUDA) are left out with a one-line notice each;
# CUDA code is built for this machine's GPU, or for one architecture when it has none.
cmake --preset release -DSTOKE_BUILD_TESTS=OFF
cmake --build --preset release -j2 --target stoke_cli stoke_example_pipeline

stoke=build/release/apps/stoke
# The main job: the built-in shapes dataset (written once to ~/.cache/stoke, or $STOKE_CACHE) and
# the small CNN trained on it through the whole graph, on the GPU when there is one; over 90%
# validation accuracy after its 6 epochs, about a minute each on 2 CPU cores (docs/benchmarks.md,
# "The quickstart's time to the first epoch"). A checkpoint per epoch and an HTML report
# (scripts/check-report.sh renders it) in build/train.
"${stoke}" train --checkpoint build/train --report build/train/report.html
# The example of composing your own pipeline from stoke's stages.
build/release/examples/pipeline/stoke_example_pipeline
