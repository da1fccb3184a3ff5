#!/usr/bin/env bash
# Installs the Debian packages stoke builds against. Idempotent: prints nothing and touches
# nothing when they are all present. Set STOKE_SKIP_DEPS=1 to skip (dependencies installed some
# other way).
#
#   install-deps.sh              what the library, the apps and the tests need
#   install-deps.sh --optional   also OpenCV imgcodecs (PNG, BMP, WebP, GIF, TIFF input; ~50 more
#                                packages, GDAL among them), so the optional stoke::imgcodecs builds
#   install-deps.sh --sanitizers clang and its ASan/UBSan/libFuzzer runtimes (scripts/asan.sh, fuzz.sh)
#   install-deps.sh --bench      also PyTorch and torchvision, the peer of the benchmark scripts
#   install-deps.sh --python     the Python module's build and tests: Python's headers, pybind11,
#                                DLPack's header, pytest and PyTorch
set -euo pipefail

packages=(
  build-essential
  cmake
  pkg-config
  git
  libtbb-dev
  libgtest-dev
  libgmock-dev
  libboost-program-options-dev
  libopencv-core-dev
  libopencv-imgproc-dev
  libjpeg62-turbo-dev
  libarchive-dev
  libopenblas-dev
  nlohmann-json3-dev
  libdcmtk-dev
  libopenmpi-dev
  openmpi-bin
)

for option in "$@"; do
  case "${option}" in
    --optional) packages+=(libopencv-imgcodecs-dev) ;;
    --sanitizers) packages+=(clang libclang-rt-14-dev) ;;
    --bench) packages+=(python3 python3-torch python3-torchvision python3-pil python3-numpy) ;;
    --python) packages+=(python3 python3-dev pybind11-dev libdlpack-dev python3-pytest python3-torch python3-numpy) ;;
    *)
      echo "install-deps: unknown option '${option}' (options: --optional, --sanitizers, --bench, --python)" >&2
      exit 2
      ;;
  esac
done

if [[ "${STOKE_SKIP_DEPS:-0}" == 1 ]]; then
  exit 0
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: not a Debian/Ubuntu system; install the equivalents of: ${packages[*]}" \
    "(then run with STOKE_SKIP_DEPS=1)" >&2
  exit 1
fi

missing=()
for package in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "${package}" 2>/dev/null || true)"
  if [[ "${status}" != "install ok installed" ]]; then
    missing+=("${package}")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo=()
if [[ "$(id -u)" != 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-deps: missing ${missing[*]}, and not root with no sudo to install them" >&2
    exit 1
  fi
  sudo=(sudo)
fi

echo "install-deps: installing ${missing[*]}"
log="$(mktemp -t stoke-install-deps.XXXXXX)"
if ! { "${sudo[@]}" apt-get update -qq &&
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"${log}" 2>&1; then
  tail -n 40 "${log}" >&2
  echo "install-deps: apt-get failed (full log: ${log})" >&2
  exit 1
fi
rm -f "${log}"
