#!/usr/bin/env bash
# tsan.sh: runs stoke's threaded tests under ThreadSanitizer against a oneTBB that is itself built
# with TSan, then prints per test executable whether TSan reported anything. Exits 1 when TSan
# reported a race (or another problem) in any of them, or a test that does not measure speed failed.
#
#   scripts/tsan.sh [TEST...]        e.g. scripts/tsan.sh                       (every test below)
#                                         scripts/tsan.sh pipeline_dag_test cache_test
#
# Why: Debian's libtbb is not instrumented, so TSan cannot see how TBB hands a task from one
# thread to another, and reports races in TBB's inline header code that are not races. This
# script builds the very oneTBB Debian ships (the source of the installed libtbb-dev, with
# Debian's patches) with clang -fsanitize=thread, and builds stoke against it.
#
# Phases (each timed; the first two are done once, a stamp file remembers them):
#   1. fetch   Debian 12's onetbb source package from deb.debian.org's pool, check the .dsc against
#              the SHA-256 pinned below and the tarballs against the SHA-256 sums the .dsc lists,
#              unpack into $TBB_WORK/src and apply debian/patches in the order of their series.
#   2. tbb     build libtbb only (stoke links TBB::tbb, not tbbmalloc) with clang, TBB_SANITIZE=thread,
#              RelWithDebInfo; install it into $TBB_WORK/install.
#   3. config  configure stoke in $BUILD with clang, STOKE_SANITIZE=thread, CPU only, and TBB_DIR
#              pointing at that install; checks that CMake found it.
#   4. build   the graph tests (target stoke_tests_graph) and the nodes tests that run pipelines,
#              TBB arenas or their own threads (nodes_tests below).
#   5. test    runs each executable directly (gtest), after checking with ldd that it loads the
#              instrumented libtbb (through the RUNPATH CMake gives build-tree binaries), with
#              cmake/sanitizers/tsan.supp (reports that are not races, each explained there).
#
# Environment: JOBS (build jobs, default 2), BUILD (default build/tsan), TBB_WORK (default
# build/tsan-tbb), TSAN_OPTIONS (default below), REPEAT (runs of each executable's tests,
# --gtest_repeat, default 3: a race shows only when the threads meet, so one clean run proves
# little), TEST_TIMEOUT (seconds per executable, default 1800), TIMING_TESTS (executables whose failures are about speed, reported apart from TSan's
# findings and not failing the run; default pipeline_autotune_test).
# Logs: $BUILD/tsan-logs/<test>.log. Run it under `nice -n 10` on a shared machine.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build/tsan}"
tbb_work="${TBB_WORK:-$root/build/tsan-tbb}"
jobs="${JOBS:-2}"
test_timeout="${TEST_TIMEOUT:-1800}"
repeat="${REPEAT:-3}"
read -r -a timing_tests <<<"${TIMING_TESTS:-pipeline_autotune_test}"

# The source of Debian 12's libtbb-dev 2021.8.0-2+deb12u1. The .dsc's own SHA-256 is pinned here
# (deb-src indexes are not configured, so apt cannot vouch for it); it lists the tarballs' sums.
tbb_upstream=2021.8.0
tbb_debian_revision=2+deb12u1
tbb_pool=http://deb.debian.org/debian/pool/main/o/onetbb
tbb_dsc=onetbb_${tbb_upstream}-${tbb_debian_revision}.dsc
tbb_dsc_sha256=f01de0ed79cb49b48beb2cdb6e1b3c5f625ca65f07d7959bebfbbd89a2e941ad

# Nodes tests that run a graph::Pipeline (pack_dataset_test through pack_dataset), a TBB arena
# (shapes_test) or their own threads on shared state (batch_pool_test, cache_test).
nodes_tests=(augment_determinism_test bad_input_test coco_dataset_test collate_test decode_augment_test
  image_folder_test tar_shards_test pack_dataset_test shapes_test batch_pool_test cache_test)

# ---- phase timing ----------------------------------------------------------------------------

phase_names=()
phase_times=()
phase_begin() {
  phase_name="$1"
  phase_t0=$(date +%s.%N)
  echo
  echo "==== tsan.sh: $1"
}
phase_end() {  # [note]
  local t1
  t1=$(date +%s.%N)
  phase_names+=("$phase_name${1:+ ($1)}")
  phase_times+=("$(awk -v a="$phase_t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')")
}
print_phase_times() {
  echo
  echo "==== tsan.sh: time per phase (seconds)"
  local i
  for i in "${!phase_names[@]}"; do
    printf '  %-44s %8s\n' "${phase_names[$i]}" "${phase_times[$i]}"
  done
}
trap print_phase_times EXIT

# ---- 1. fetch and patch Debian's oneTBB source ------------------------------------------------

src="$tbb_work/src"
downloads="$tbb_work/downloads"
src_stamp="$tbb_work/src.stamp"
src_id="onetbb ${tbb_upstream}-${tbb_debian_revision}"

fetch() {  # name: download $tbb_pool/name into $downloads, '+' escaped
  echo "fetch $tbb_pool/$1"
  curl -fsSL --retry 3 -o "$downloads/$1.part" "$tbb_pool/${1//+/%2B}"
  mv "$downloads/$1.part" "$downloads/$1"
}
check_sha256() {  # file sha256
  if ! echo "$2  $1" | sha256sum --check --status; then
    echo "tsan.sh: SHA-256 mismatch for $1 (want $2, got $(sha256sum "$1" | cut -d' ' -f1))" >&2
    exit 1
  fi
}

phase_begin "1. fetch + patch oneTBB source"
installed_tbb="$(dpkg-query -W -f='${Version}' libtbb-dev 2>/dev/null || true)"
if [[ "$installed_tbb" != "${tbb_upstream}-${tbb_debian_revision}" ]]; then
  echo "tsan.sh: note: installed libtbb-dev is '${installed_tbb:-none}', the instrumented build is" \
    "${tbb_upstream}-${tbb_debian_revision}" >&2
fi
if [[ -f "$src_stamp" && "$(cat "$src_stamp")" == "$src_id" ]]; then
  echo "$src_id already in $src ($src_stamp)"
  phase_end "skipped, stamp"
else
  mkdir -p "$downloads"
  fetch "$tbb_dsc"
  check_sha256 "$downloads/$tbb_dsc" "$tbb_dsc_sha256"
  # The .dsc's Checksums-Sha256 field: one " <sha256> <size> <file>" line per tarball.
  mapfile -t tarballs < <(awk '/^Checksums-Sha256:/ { on = 1; next } on && /^ / { print $1, $2, $3; next } { on = 0 }' \
    "$downloads/$tbb_dsc")
  if [[ ${#tarballs[@]} -eq 0 ]]; then
    echo "tsan.sh: no Checksums-Sha256 in $tbb_dsc" >&2
    exit 1
  fi
  orig="" debian=""
  for line in "${tarballs[@]}"; do
    read -r sum size name <<<"$line"
    fetch "$name"
    check_sha256 "$downloads/$name" "$sum"
    if [[ "$(stat -c %s "$downloads/$name")" != "$size" ]]; then
      echo "tsan.sh: $name is not $size bytes" >&2
      exit 1
    fi
    echo "ok     $name (sha256 $sum)"
    case "$name" in
      *.orig.tar.*) orig="$downloads/$name" ;;
      *.debian.tar.*) debian="$downloads/$name" ;;
    esac
  done
  rm -rf "$src"
  mkdir -p "$src"
  tar -xf "$orig" -C "$src" --strip-components=1
  tar -xf "$debian" -C "$src"  # adds src/debian/
  while read -r patch_name _; do
    [[ -z "$patch_name" || "$patch_name" == \#* ]] && continue
    echo "patch  debian/patches/$patch_name"
    patch -d "$src" -p1 --batch --forward --quiet <"$src/debian/patches/$patch_name"
  done <"$src/debian/patches/series"
  echo "$src_id" >"$src_stamp"
  rm -f "$tbb_work/install.stamp"  # a new source: build again
  phase_end
fi

# ---- 2. build and install libtbb with TSan ---------------------------------------------------

tbb_build="$tbb_work/build"
tbb_install="$tbb_work/install"
install_stamp="$tbb_work/install.stamp"
tbb_cmake_args=(-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo
  -DTBB_SANITIZE=thread -DTBB_TEST=OFF -DTBB_STRICT=OFF -DTBB_EXAMPLES=OFF
  -DTBBMALLOC_BUILD=OFF            # stoke links TBB::tbb only
  -DTBB_DISABLE_HWLOC_AUTOMATIC_SEARCH=ON  # no tbbbind: libtbb runs without it
  -DCMAKE_INSTALL_PREFIX="$tbb_install" -DCMAKE_INSTALL_LIBDIR=lib)
tbb_id="$src_id ${tbb_cmake_args[*]}"

phase_begin "2. build + install instrumented libtbb"
if [[ -f "$install_stamp" && "$(cat "$install_stamp")" == "$tbb_id" ]]; then
  echo "libtbb already in $tbb_install ($install_stamp)"
  phase_end "skipped, stamp"
else
  rm -rf "$tbb_build" "$tbb_install"
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$src" -B "$tbb_build" "${generator[@]}" "${tbb_cmake_args[@]}"
  cmake --build "$tbb_build" -j"$jobs"
  cmake --install "$tbb_build"
  # An instrumented library calls into the TSan runtime (which the executable brings).
  if ! nm -D --undefined-only "$tbb_install/lib/libtbb.so" | grep -q __tsan_func_entry; then
    echo "tsan.sh: $tbb_install/lib/libtbb.so is not instrumented" >&2
    exit 1
  fi
  echo "$tbb_id" >"$install_stamp"
  phase_end
fi

# ---- 3. configure stoke against it -----------------------------------------------------------

tbb_dir="$tbb_install/lib/cmake/TBB"
phase_begin "3. configure stoke ($build)"
generator=()
if [[ ! -f "$build/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
# Examples off (tests/nodes adds the plugin example plugin_test needs itself); MPI and CUDA off;
# imgcodecs and DICOM off: not threaded, and they would only add uninstrumented libraries.
CC=clang CXX=clang++ cmake -S "$root" -B "$build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOKE_SANITIZE=thread -DSTOKE_CUDA=OFF -DSTOKE_MPI=OFF \
  -DSTOKE_BUILD_EXAMPLES=OFF -DSTOKE_IMGCODECS=OFF -DSTOKE_DICOM=OFF \
  -DTBB_DIR="$tbb_dir" -DCMAKE_PREFIX_PATH="$tbb_install"
found_tbb_dir="$(sed -n 's/^TBB_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")"
echo "CMake found TBB in: $found_tbb_dir"
if [[ -z "$found_tbb_dir" || "$(realpath "$found_tbb_dir")" != "$(realpath "$tbb_dir")" ]]; then
  echo "tsan.sh: stoke's configure found TBB in $found_tbb_dir, not the instrumented $tbb_dir" >&2
  exit 1
fi
phase_end

# ---- 4. build the tests ----------------------------------------------------------------------

# The base and graph tests: every stoke_add_test of tests/base and tests/graph.
mapfile -t graph_tests < <(sed -n 's/^ *stoke_add_test(NAME \([A-Za-z0-9_]*\).*/\1/p' \
  "$root/tests/base/CMakeLists.txt" "$root/tests/graph/CMakeLists.txt")
if [[ $# -gt 0 ]]; then
  tests=("$@")
else
  tests=("${graph_tests[@]}" "${nodes_tests[@]}")
fi

phase_begin "4. build ${#tests[@]} test executables"
targets=("${tests[@]}")
build_targets="$(cmake --build "$build" --target help)"  # (not piped into grep -q: SIGPIPE)
if [[ $# -eq 0 ]] && grep -q '\bstoke_tests_graph\b' <<<"$build_targets"; then
  targets=(stoke_tests_base stoke_tests_graph "${nodes_tests[@]}")
fi
cmake --build "$build" -j"$jobs" --target "${targets[@]}"
phase_end

# ---- 5. run them -----------------------------------------------------------------------------

phase_begin "5. run tests under TSan"
# cmake/sanitizers/tsan.supp: reports that are not races (each explained there); with
# print_suppressions=1 TSan says how many it hid, which the summary shows.
default_tsan_options="halt_on_error=0 second_deadlock_stack=1 history_size=4"
if [[ -f "$root/cmake/sanitizers/tsan.supp" ]]; then
  default_tsan_options+=" suppressions=$root/cmake/sanitizers/tsan.supp print_suppressions=1"
fi
export TSAN_OPTIONS="${TSAN_OPTIONS:-$default_tsan_options}"
echo "TSAN_OPTIONS=$TSAN_OPTIONS"
echo "each executable runs its tests $repeat times (REPEAT)"
# clang 14's TSan cannot map its shadow memory with more than 28 bits of mmap randomisation
# ("FATAL: ThreadSanitizer: unexpected memory mapping"); such kernels run the tests without ASLR.
runner=()
if [[ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)" -gt 28 ]]; then
  runner=(setarch "$(uname -m)" -R)
  echo "vm.mmap_rnd_bits > 28: running the tests under setarch -R"
fi

logs="$build/tsan-logs"
mkdir -p "$logs"
executable() {  # test name -> its path in $build
  local dir
  for dir in tests/base tests/graph tests/nodes; do
    if [[ -x "$build/$dir/$1" ]]; then
      echo "$build/$dir/$1"
      return
    fi
  done
  find "$build/tests" -type f -name "$1" -perm -u+x | head -n 1
}

tsan_hits=() test_failures=() timing_failures=() summary=()
for t in "${tests[@]}"; do
  exe="$(executable "$t")"
  if [[ -z "$exe" ]]; then
    summary+=("$(printf '%-32s %s' "$t" "NOT BUILT")")
    test_failures+=("$t: not built")
    continue
  fi
  # Every libtbb the executable loads must be the instrumented one.
  tbb_libs="$(ldd "$exe" | awk '$1 ~ /^libtbb\.so/ { print $3 }' | xargs -r realpath | sort -u)"
  if [[ "$tbb_libs" != "$(realpath "$tbb_install/lib/libtbb.so")" ]]; then
    echo "tsan.sh: $t loads '$tbb_libs', not the instrumented $tbb_install/lib/libtbb.so" >&2
    exit 1
  fi
  log="$logs/$t.log"
  echo "run    $t (log: $log)"
  t0=$(date +%s)
  rc=0
  (cd "$(dirname "$exe")" && timeout "$test_timeout" "${runner[@]}" "$exe" --gtest_repeat="$repeat") >"$log" 2>&1 || rc=$?
  seconds=$(($(date +%s) - t0))
  reports=$(grep -c "WARNING: ThreadSanitizer" "$log" || true)
  fatal=$(grep -c "FATAL: ThreadSanitizer\|ThreadSanitizer: CHECK failed" "$log" || true)
  mapfile -t failed < <(sed -n 's/^\[  FAILED  \] \([^ ]*\.[^ ]*\).*/\1/p' "$log" | sort -u)
  ran=$(sed -n 's/^\[==========\] \([0-9]*\) tests\? from .* ran\..*/\1/p' "$log" | tail -n 1)
  status="tests ${ran:-?} x$repeat, ${seconds}s: "
  if ((reports > 0)); then
    status+="TSAN $reports report(s)"
    tsan_hits+=("$t: $reports report(s), $(grep -c '^SUMMARY: ThreadSanitizer' "$log" || true) summary line(s)")
  elif ((fatal > 0)); then
    status+="TSAN FATAL"
    tsan_hits+=("$t: TSan runtime error (see log)")
  else
    status+="TSan clean"
  fi
  suppressed=$(sed -n 's/^ThreadSanitizer: Matched \([0-9]*\) suppressions.*/\1/p' "$log" | tail -n 1)
  if [[ -n "$suppressed" ]]; then status+=" ($suppressed suppressed, see tsan.supp)"; fi
  if ((rc == 124)); then
    status+=", TIMED OUT after ${test_timeout}s"
    test_failures+=("$t: timed out")
  elif ((${#failed[@]} > 0)); then
    status+=", ${#failed[@]} failed"
    if [[ " ${timing_tests[*]} " == *" $t "* ]]; then
      timing_failures+=("$t: ${failed[*]}")
      status+=" (timing)"
    else
      test_failures+=("$t: ${failed[*]}")
    fi
  elif ((rc != 0 && rc != 66)); then  # 66: TSan's exit code after reports, counted above
    status+=", exit $rc"
    test_failures+=("$t: exit $rc")
  fi
  summary+=("$(printf '%-32s %s' "$t" "$status")")
done
phase_end

echo
echo "==== tsan.sh: results ($build, REPEAT=$repeat, TSAN_OPTIONS=$TSAN_OPTIONS)"
printf '  %s\n' "${summary[@]}"
if ((${#tsan_hits[@]} > 0)); then
  echo "TSan reported in ${#tsan_hits[@]} executable(s):"
  printf '  %s\n' "${tsan_hits[@]}"
  echo "  (stacks: grep -A40 'WARNING: ThreadSanitizer' $logs/<test>.log)"
fi
if ((${#test_failures[@]} > 0)); then
  echo "Test failures:"
  printf '  %s\n' "${test_failures[@]}"
fi
if ((${#timing_failures[@]} > 0)); then
  echo "Timing failures (speed checks under TSan's slowdown; not counted):"
  printf '  %s\n' "${timing_failures[@]}"
fi
if ((${#tsan_hits[@]} > 0 || ${#test_failures[@]} > 0)); then
  exit 1
fi
echo "tsan.sh: no ThreadSanitizer reports"
