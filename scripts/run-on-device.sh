#!/usr/bin/env bash
# Runs the bundle (scripts/make-bundle.sh) on the GPU machine, from the repository root there:
# unpacks bundle.tar.xz when it was carried, then runs every test executable in
# bundle/libexec/stoke/tests, then the command given as arguments, if any.
#
#   scripts/run-on-device.sh
#   scripts/run-on-device.sh bundle/bin/stoke bench device --batch 256 --size 224
#
# cuDNN and cuBLAS come from the machine's Python packages (site-packages/nvidia/*/lib, as PyTorch
# installs them), the driver from the system; everything else from bundle/lib. Writes the log to
# $OUT/run.log and each test's JUnit XML to $OUT/<test>.xml ($OUT defaults to out/device).
# Exits non-zero when a test or the command fails, or when a GPU-labelled test (*_gpu_test) skips
# on a machine where nvidia-smi lists a GPU (the runtime cannot use it: an old driver, say).
#
# Environment: OUT, PYTHON (default python3), TEST_TIMEOUT (seconds per test executable, default
# 300), GTEST_FILTER (passed on to the tests as usual), RUN_TESTS=0 (only the command: for a lease
# spent on something the tests do not touch).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

out=${OUT:-out/device}
mkdir -p "$out"
bundle=bundle

main() {
  # What travels is the archive (scripts/make-bundle.sh): unpack it unless the bundle is newer.
  if [[ -f "$bundle.tar.xz" && ( ! -x "$bundle/bin/stoke" || "$bundle.tar.xz" -nt "$bundle/bin/stoke" ) ]]; then
    echo "run-on-device.sh: unpacking $bundle.tar.xz"
    rm -rf "$bundle"
    tar -xJf "$bundle.tar.xz" || return 2
  fi
  if [[ ! -x "$bundle/bin/stoke" ]]; then
    echo "run-on-device.sh: no $bundle/bin/stoke here; build it with scripts/make-bundle.sh and carry $bundle.tar.xz"
    return 2
  fi

  # ---- library path: the bundle, then the CUDA libraries of the machine's Python packages
  python=${PYTHON:-python3}
  nvidia_dirs=""
  if command -v "$python" > /dev/null; then
    # Every site-packages/nvidia/<package>/lib (cudnn/lib, cublas/lib, cu13/lib, ...).
    nvidia_dirs=$("$python" -c '
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
dirs = sorted({d for r in roots for p in ("nvidia/*/lib", "nvidia/*/lib64") for d in glob.glob(os.path.join(r, p))})
print(":".join(dirs))') || nvidia_dirs=""
  else
    echo "run-on-device.sh: $python not found; cuDNN and cuBLAS must then be on the system's library path"
  fi
  export LD_LIBRARY_PATH="$PWD/$bundle/lib${nvidia_dirs:+:$nvidia_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

  echo "== machine"
  uname -srm
  echo "glibc $(ldd --version | head -1 | awk '{print $NF}') (scripts/make-bundle.sh printed the oldest the bundle runs with)"
  gpu_present=0
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi -L | grep -q '^GPU ' && gpu_present=1
    nvidia-smi -L
    nvidia-smi --query-gpu=driver_version --format=csv,noheader | sed 's/^/driver /'
  else
    echo "nvidia-smi not found"
  fi
  echo "== LD_LIBRARY_PATH"
  tr ':' '\n' <<< "$LD_LIBRARY_PATH" | sed 's/^/  /'

  tests=()
  if [[ ${RUN_TESTS:-1} != 0 ]]; then
    mapfile -t tests < <(find "$bundle/libexec/stoke/tests" -maxdepth 1 -type f -perm -u+x 2>/dev/null | sort)
  fi

  # ---- before running anything: libraries that no directory provides (e.g. cuBLAS 12 installed
  # where the bundle was built against cuBLAS 13)
  echo "== libraries"
  missing=0
  for exe in "$bundle/bin/stoke" "${tests[@]}"; do
    while read -r line; do
      echo "  ${exe#"$bundle"/}: $line"
      missing=$((missing + 1))
    done < <(ldd "$exe" 2>&1 | grep 'not found' | sed 's/^[[:space:]]*//')
  done
  if [[ $missing -eq 0 ]]; then
    echo "  every executable finds all its libraries"
    ldd "$bundle/bin/stoke" | grep -E 'libcudnn|libcublas|libcuda\.' | sed 's/^[[:space:]]*/  stoke: /' || true
  else
    echo "  $missing unresolved (above); the executables that need them will fail to start"
  fi

  # ---- the tests
  timeout_s=${TEST_TIMEOUT:-300}
  passed=()
  failed=()
  skipped_total=0
  for test in "${tests[@]}"; do
    name=$(basename "$test")
    echo "== $name"
    rm -f "$out/$name.xml"  # so that a crash before it writes one leaves none from an older run
    timeout --signal=TERM --kill-after=10 "$timeout_s" "$test" --gtest_output="xml:$out/$name.xml"
    rc=$?
    counts=""
    if [[ -f "$out/$name.xml" ]]; then
      # A skipped test on the GPU machine means the device was not usable: worth a look.
      ran=$(grep -c '<testcase ' "$out/$name.xml")
      skipped=$(grep -c 'result="skipped"' "$out/$name.xml")
      counts=" ($ran tests, $skipped skipped)"
      skipped_total=$((skipped_total + skipped))
      # A GPU-labelled test skips only when it finds no usable GPU: on a machine with one (a driver
      # too old for the CUDA 13 runtime linked in, say), that is a failure, not a quiet skip.
      if [[ $name == *_gpu_test && $skipped -gt 0 && $gpu_present -eq 1 && $rc -eq 0 ]]; then
        echo "$name: $skipped tests skipped although nvidia-smi lists a GPU: the CUDA runtime cannot use it (see the skip reasons above; an old driver says cudaErrorInsufficientDriver)"
        rc=3
      fi
    fi
    if [[ $rc -eq 0 ]]; then
      passed+=("$name$counts")
    else
      [[ $rc -eq 124 ]] && echo "$name: timed out after ${timeout_s} s"
      failed+=("$name$counts: exit $rc")
    fi
  done

  # ---- the command
  if [[ $# -gt 0 ]]; then
    echo "== $*"
    "$@"
    rc=$?
    if [[ $rc -eq 0 ]]; then
      passed+=("command: $*")
    else
      failed+=("command: $*: exit $rc")
    fi
  fi

  echo "== summary"
  echo "passed: ${#passed[@]}"
  for item in "${passed[@]}"; do echo "  ok    $item"; done
  echo "failed: ${#failed[@]}"
  for item in "${failed[@]}"; do echo "  FAIL  $item"; done
  if [[ $skipped_total -gt 0 ]]; then
    echo "skipped: $skipped_total tests (see their reasons above)"
  fi
  [[ ${#failed[@]} -eq 0 ]]
}

main "$@" 2>&1 | tee "$out/run.log"
exit "${PIPESTATUS[0]}"
