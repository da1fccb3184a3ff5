#!/usr/bin/env bash
# From a fresh Debian checkout to a running pipeline: installs the dependencies, builds the
# release preset, runs the example pipeline and the graph benchmark. Works from any directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh

cmake --preset release
cmake --build --preset release -j2

build/release/examples/pipeline/stoke_example_pipeline
build/release/apps/stoke bench graph
