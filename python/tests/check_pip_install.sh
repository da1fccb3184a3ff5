#!/usr/bin/env bash
# ctest python.pip_install: what a PyTorch user does to get stoke, checked end to end.
#
# Installs the build tree into a scratch prefix, makes a fresh virtual environment that sees the
# system's packages (torch), runs `pip install --no-build-isolation` of the package (a copy of
# python/, so that pip's build folders stay out of the source tree) against that prefix
# (STOKE_PREFIX: only the module's own sources are compiled; the default, from the repository's
# sources, builds all of stoke and is what docs/python.md times), then, from a folder that is
# neither the source nor the build, imports stoke with each binding and iterates a Loader over a
# tiny folder of JPEGs. Fails naming the step that failed, with its output.
#
#   check_pip_install.sh BUILD_DIR SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail

if (($# != 4)); then
  echo "usage: $0 BUILD_DIR SOURCE_DIR WORK_DIR PYTHON" >&2
  exit 2
fi
build="$1" source="$2" work="$3" python="$4"

rm -rf "${work}"
mkdir -p "${work}"
log="${work}/step.log"

step() {
  local name="$1"
  shift
  if ! "$@" >"${log}" 2>&1; then
    echo "pip install check: ${name} failed: $*" >&2
    tail -n 60 "${log}" >&2
    exit 1
  fi
}

step "installing the build tree" cmake --install "${build}" --prefix "${work}/prefix"
step "copying the package" cp -r "${source}/python" "${work}/package"
rm -rf "${work}/package/build" "${work}/package"/*.egg-info
step "making the virtual environment" "${python}" -m venv --system-site-packages "${work}/venv"
venv_python="${work}/venv/bin/python"
# --no-index: nothing may come from the network; --no-deps: the package declares none anyway.
step "pip install" env STOKE_PREFIX="${work}/prefix" CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-2}" \
  "${venv_python}" -m pip install --no-build-isolation --no-index --no-deps "${work}/package"

step "writing a tiny dataset" "${work}/prefix/bin/stoke" gen-shapes --out "${work}/shapes" --classes 2 --train 12 \
  --val 2 --size 16

mkdir -p "${work}/elsewhere"
cd "${work}/elsewhere"
for binding in pybind11 ctypes; do
  step "iterating a Loader through the ${binding} binding" env STOKE_BINDING="${binding}" PYTHONPATH= \
    "${venv_python}" -c '
import os, sys
import stoke, torch
site = os.path.join(sys.prefix, "lib")
assert stoke.__file__.startswith(site), f"stoke was imported from {stoke.__file__}, not the venv ({site})"
loader = stoke.Loader(sys.argv[1], batch_size=4, size=16, seed=0, epochs=1,
                      transforms=["random_resized_crop size=16", "random_horizontal_flip", "normalize"])
images = 0
for batch_images, labels in loader:
    assert isinstance(batch_images, torch.Tensor) and batch_images.shape[1:] == (3, 16, 16), batch_images.shape
    assert labels.shape == (batch_images.shape[0],)
    images += batch_images.shape[0]
assert images == 24, images  # 2 classes x 12
print("stoke", stoke.binding.__name__, "from", stoke.__file__, ":", images, "images")
' "${work}/shapes/train"
  echo "pip install check (${binding}): $(tail -n 1 "${log}")"
done
