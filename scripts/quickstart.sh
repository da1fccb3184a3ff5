#!/usr/bin/env bash
# From a fresh Debian checkout to a running pipeline: installs the dependencies, builds the
# release preset, generates the built-in shapes dataset, runs the input pipeline on it
# (read -> decode -> random resized crop -> flip -> normalize -> batch), batches through the
# device stages (to-device, compute; on the CPU without a GPU) and the example pipeline.
# Works from any directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh

cmake --preset release
cmake --build --preset release -j2

stoke=build/release/apps/stoke
"${stoke}" gen-shapes --out build/shapes --classes 10 --train 200 --val 20 --size 64 --seed 1 --force
"${stoke}" bench pipeline --data build/shapes/train --size 56 --epochs 3
# Batches through the device stages: on the GPU when there is one, else on the CPU (logged).
"${stoke}" bench device --batch 64 --size 64 --batches 100 --compute-us 500
build/release/examples/pipeline/stoke_example_pipeline
