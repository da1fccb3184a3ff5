#!/usr/bin/env bash
# check-without-optional.sh: proves that nothing optional is required. In a private mount
# namespace, the files of every optional package that is installed -- the Python module's
# (pybind11, DLPack, Python's headers), OpenCV imgcodecs, DCMTK, Open MPI, GoogleTest -- and the
# CUDA toolkit are made invisible (an overlay on /usr whose upper layer holds a whiteout for each
# of their files), as on a machine that never had them. There the script configures and builds
# what scripts/quickstart.sh builds (`stoke` and the example pipeline, no tests; unoptimized, to
# be quick), checks that the configure said, one line each, that every optional part is left out,
# and trains one short epoch with the `stoke` it built. Fails when any optional part becomes
# required (the configure or the build fails), or when one was still found (the hiding missed it).
#
#   scripts/check-without-optional.sh        in build/without-optional (BUILD), with JOBS (2) jobs
#
# Needs root (or a user namespace that allows mounts) for unshare and the overlay. scripts/test.sh
# runs it; a fresh clone on a machine without those packages is the real thing it stands for.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build/without-optional}"
jobs="${JOBS:-2}"

if [[ "${1:-}" == --inside ]]; then
  # ---- in the namespace, with the packages hidden (see the end of this file) ------------------
  cd "$root"
  unset CUDACXX CUDAARCHS CMAKE_CUDA_COMPILER
  for header in dlpack/dlpack.h pybind11/pybind11.h opencv4/opencv2/imgcodecs.hpp dcmtk/config/osconfig.h \
    gtest/gtest.h; do
    if [[ -e "/usr/include/${header}" ]]; then
      echo "check-without-optional: /usr/include/${header} is still visible; the hiding is incomplete" >&2
      exit 1
    fi
  done
  rm -rf "$build"
  log="$build.configure.log"
  # What quickstart.sh configures (its release preset, -DSTOKE_BUILD_TESTS=OFF), minus optimization.
  if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE= -DSTOKE_BUILD_TESTS=OFF >"$log" 2>&1; then
    cat "$log" >&2
    echo "check-without-optional: the configure failed without the optional packages (log above: $log)" >&2
    exit 1
  fi
  missing=()
  for notice in "stoke: CUDA off" "stoke::imgcodecs (non-JPEG formats) is not built" \
    "stoke::dicom (DICOM input) is not built" "stoke: MPI not found" "stoke: no Python module"; do
    grep -qF -- "$notice" "$log" || missing+=("'$notice'")
  done
  if ((${#missing[@]} > 0)); then
    grep '^-- stoke' "$log" >&2 || true
    echo "check-without-optional: the configure did not say ${missing[*]}: an optional part was found or the" \
      "notice changed (its lines above)" >&2
    exit 1
  fi
  echo "check-without-optional: configured without the optional parts, each left out with a notice:"
  grep '^-- stoke' "$log" | sed 's/^-- /  /'
  cmake --build "$build" -j"$jobs" --target stoke_cli stoke_example_pipeline >"$build.build.log" 2>&1 || {
    tail -n 60 "$build.build.log" >&2
    echo "check-without-optional: the build failed without the optional packages (log: $build.build.log)" >&2
    exit 1
  }
  data="$build/shapes"
  "$build/apps/stoke" gen-shapes --out "$data" --classes 2 --train 64 --val 16 --size 16 >/dev/null 2>&1
  "$build/apps/stoke" train --data "$data/train" --val "$data/val" --size 16 --epochs 1 --batch 16 \
    >"$build.train.log" 2>&1 || {
    cat "$build.train.log" >&2
    echo "check-without-optional: stoke train failed in the build without the optional parts" >&2
    exit 1
  }
  grep -q "no GPU support: this stoke was built without CUDA" "$build.train.log" || {
    cat "$build.train.log" >&2
    echo "check-without-optional: stoke train did not say it runs on the CPU for want of CUDA" >&2
    exit 1
  }
  echo "check-without-optional: built stoke and the example, and trained an epoch: ok"
  exit 0
fi

# ---- outside: hide the packages, then run the above in the namespace --------------------------

optional_packages() {
  # install-deps.sh's optional sets, less its base set; then the -dev packages behind python3-dev.
  comm -13 <("$root/scripts/install-deps.sh" --print | sort -u) \
    <("$root/scripts/install-deps.sh" --print --tests --optional --python --sanitizers | sort -u)
  dpkg-query -W -f='${Package}\n' 'libpython3*-dev' 'python3*-dev' 2>/dev/null || true
}

if [[ "$(id -u)" != 0 ]]; then
  exec unshare --map-root-user --mount -- "$0" --hidden "$@"
fi
if [[ "${1:-}" != --hidden ]]; then
  exec unshare --mount -- "$0" --hidden "$@"
fi

# Now in a mount namespace of our own: whatever is mounted here vanishes with the process.
layer="$(mktemp -d -t stoke-without-optional.XXXXXX)"
mount -t tmpfs stoke-hidden "$layer"
mkdir -p "$layer/upper" "$layer/work"
installed=()
while read -r package; do
  status="$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)"
  [[ "$status" == "install ok installed" ]] && installed+=("$package")
done < <(optional_packages | sort -u)
# A whiteout (a 0/0 character device in the upper layer) for each file and link they put under
# /usr; the CUDA toolkit (not a Debian package here) by whiteouts of its folders.
{
  ((${#installed[@]} == 0)) || dpkg -L "${installed[@]}" 2>/dev/null
  ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null || true
} | python3 -c '
import os, stat, sys
upper, hidden = sys.argv[1], 0
for path in sorted(set(line.strip() for line in sys.stdin)):
    if not path.startswith("/usr/") or not os.path.lexists(path):
        continue
    if os.path.isdir(path) and not path.startswith("/usr/local/cuda"):
        continue  # a folder the package shares; its files are hidden one by one
    target = upper + path[len("/usr"):]
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.mknod(target, stat.S_IFCHR | 0o600, os.makedev(0, 0))
    hidden += 1
print(f"check-without-optional: hid {hidden} files and folders of {sys.argv[2]} optional packages and the CUDA toolkit")
' "$layer/upper" "${#installed[@]}"
mount -t overlay stoke-without-optional -o "lowerdir=/usr,upperdir=$layer/upper,workdir=$layer/work" /usr
exec "$0" --inside
