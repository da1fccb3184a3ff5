#!/usr/bin/env bash
# Builds the relocatable bundle ./bundle: the `stoke` executable and the GPU test executables with
# every shared library they need except the C library, the CUDA driver, cuDNN and cuBLAS, which the
# GPU machine provides (docs/bundle.md). Then checks that every executable in it finds every other
# library in bundle/lib without LD_LIBRARY_PATH (through its RPATH $ORIGIN/../lib), packs it into
# ./bundle.tar.xz (what travels to the GPU machine) and checks that the archive fits the size limit.
# Run it again after a change: the build is incremental.
#
#   scripts/make-bundle.sh           CUDA build for the H200 (sm_90 only), in build/bundle
#   scripts/make-bundle.sh --cpu     the same without CUDA, in build/bundle-cpu (any machine)
#   scripts/make-bundle.sh -DSTOKE_BUNDLE_EXTRA_TESTS=device_stages_test
#                                    -D... go to cmake (and stay in the build dir's cache)
#
# Environment: JOBS (build and xz jobs, default 2), BUNDLE_MAX_MIB (largest allowed archive, default 60).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh --tests  # nothing when present

cuda=ON
build=build/bundle
configure_args=()
for arg in "$@"; do
  case "$arg" in
    --cpu) cuda=OFF; build=build/bundle-cpu ;;
    -D*) configure_args+=("$arg") ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "make-bundle.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
bundle=bundle
jobs=${JOBS:-2}
max_mib=${BUNDLE_MAX_MIB:-60}

cmake -S . -B "$build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DSTOKE_CUDA="$cuda" \
  -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DSTOKE_BUILD_TESTS=ON \
  -DSTOKE_BUILD_EXAMPLES=OFF \
  -DSTOKE_IMGCODECS=OFF \
  -DSTOKE_DICOM=OFF \
  -DSTOKE_MPI=OFF \
  -DSTOKE_INSTALL_TESTS=ON \
  -DSTOKE_BUNDLE_RUNTIME_DEPS=ON \
  "${configure_args[@]}"
# Only what is installed: stoke_installed (top-level CMakeLists.txt), not every CPU test.
cmake --build "$build" --target stoke_installed -j"$jobs"

# A fresh copy each time, so that nothing stale (a removed test, an old library) stays behind.
rm -rf "$bundle"
cmake --install "$build" --prefix "$bundle" --strip > "$build/bundle-install.log"
# The bundle runs executables only: the static libraries, headers and CMake package are not needed.
rm -rf "$bundle/include" "$bundle/lib/cmake"
rm -f "$bundle"/lib/*.a

# ---- every executable finds its libraries in bundle/lib, or leaves them to the machine
provided_file="$build/stoke_bundle_provided.txt"  # "system <regex>" / "gpu <regex>" (cmake/StokeBundle.cmake)
kind_of() {  # prints system, gpu or nothing for a soname
  local name=$1 kind regex
  while read -r kind regex; do
    if [[ "$name" =~ $regex ]]; then echo "$kind"; return; fi
  done < "$provided_file"
}

lib_dir=$(cd "$bundle/lib" && pwd -P)
mapfile -t executables < <(find "$bundle/bin" "$bundle/libexec/stoke/tests" -type f -perm -u+x 2>/dev/null | sort)
if [[ ${#executables[@]} -eq 0 ]]; then
  echo "make-bundle.sh: no executables in $bundle/bin or $bundle/libexec/stoke/tests" >&2
  exit 1
fi
declare -A gpu_libs=() system_libs=()
failures=0
# The Python package's C ABI (python/) is loaded by a Python from anywhere: it must resolve too.
checked=("${executables[@]}")
[[ -f "$bundle/lib/libstoke_c.so" ]] && checked+=("$bundle/lib/libstoke_c.so")
for exe in "${checked[@]}"; do
  if ! head -c 4 "$exe" | grep -q $'\x7fELF'; then continue; fi
  while read -r name arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    kind=$(kind_of "$name")
    if [[ "$kind" == gpu ]]; then gpu_libs[$name]=1; continue; fi
    if [[ "$kind" == system ]]; then system_libs[$name]=1; continue; fi
    if [[ "$path" == not ]]; then
      echo "MISSING  $exe: $name is not found" >&2
      failures=$((failures + 1))
    elif [[ "$(cd "$(dirname "$path")" && pwd -P)" != "$lib_dir" ]]; then
      echo "MISSING  $exe: $name resolves to $path, outside $bundle/lib" >&2
      failures=$((failures + 1))
    fi
  done < <(env -u LD_LIBRARY_PATH ldd "$exe")
done
# ... and bundle/lib holds none of the libraries left to the machine: a copy of this machine's
# libc.so.6 there breaks every program started with bundle/lib on LD_LIBRARY_PATH elsewhere.
for lib in "$bundle"/lib/*.so*; do
  kind=$(kind_of "$(basename "$lib")")
  if [[ -n "$kind" ]]; then
    echo "CARRIED  $lib is left to the machine ($kind) but was installed (StokeBundle not included?)" >&2
    failures=$((failures + 1))
  fi
done

echo "bundle: ${#executables[@]} executables:"
for exe in "${executables[@]}"; do echo "  ${exe#"$bundle"/}"; done
echo "bundle: $(find "$bundle/lib" -maxdepth 1 -name '*.so*' -type f | wc -l) libraries in $bundle/lib"
echo "bundle: left to the machine's C library: ${!system_libs[*]}"
if [[ ${#gpu_libs[@]} -gt 0 ]]; then
  echo "bundle: provided by the GPU machine: ${!gpu_libs[*]}"
fi
if [[ $failures -gt 0 ]]; then
  echo "make-bundle.sh: $failures libraries are missing from the bundle or carried by mistake (MISSING, CARRIED above)" >&2
  exit 1
fi

# ---- the oldest C library it runs with (the newest GLIBC_ symbol version any of its files uses)
glibc=$(find "$bundle" -type f \( -name '*.so*' -o -perm -u+x \) -exec objdump -T {} + 2>/dev/null |
  grep -o 'GLIBC_2\.[0-9.]*' | sort -uV | tail -1)
echo "bundle: needs the machine's glibc >= ${glibc#GLIBC_} (this machine: $(ldd --version | head -1 | awk '{print $NF}'))"

# ---- size: the device tool carries at most 64 MiB, so what travels is an xz archive of the bundle
# (OpenBLAS alone is 35 MiB unpacked; the archive is about a sixth of the bundle)
bytes=$(du -sb "$bundle" | cut -f1)
echo "bundle: largest files:"
find "$bundle" -type f -printf '%s %P\n' | sort -rn | head -8 |
  awk '{ printf "  %6.1f MiB  %s\n", $1 / 1048576, $2 }'
echo "bundle: $bundle is $(( (bytes + 1048575) / 1048576 )) MiB unpacked"
archive=$bundle.tar.xz
tar -cf - "$bundle" | xz -T"$jobs" -6 > "$archive.partial"
mv "$archive.partial" "$archive"
archive_bytes=$(stat -c %s "$archive")
mib=$(( (archive_bytes + 1048575) / 1048576 ))
echo "bundle: $archive is ${mib} MiB (limit ${max_mib} MiB)"
if [[ $mib -gt $max_mib ]]; then
  echo "make-bundle.sh: $archive is over ${max_mib} MiB; the GPU machine's tool carries at most 64 MiB" >&2
  exit 1
fi
echo "bundle: ready. Carry $archive (an ignored path); on the GPU machine scripts/run-on-device.sh unpacks it"
echo "        and runs the tests [and a command] (docs/bundle.md)"
