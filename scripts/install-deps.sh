#!/usr/bin/env bash
# Installs the Debian packages stoke builds against. Idempotent: prints nothing and touches
# nothing when they are all present. Set STOKE_SKIP_DEPS=1 to skip (dependencies installed some
# other way).
#
#   install-deps.sh              what the library and the apps need (scripts/quickstart.sh)
#   install-deps.sh --tests      also GoogleTest and GoogleMock, for the test suite
#   install-deps.sh --optional   also the optional parts' packages: OpenCV imgcodecs (PNG, BMP, WebP,
#                                GIF, TIFF input; ~50 more packages, GDAL among them), DCMTK (DICOM
#                                input) and Open MPI (multi-process training)
#   install-deps.sh --sanitizers clang and its ASan/UBSan/libFuzzer runtimes (scripts/asan.sh, fuzz.sh)
#   install-deps.sh --bench      also PyTorch and torchvision, the peer of the benchmark scripts
#   install-deps.sh --python     the Python module's build and tests: Python's headers, pybind11,
#                                DLPack's header, pip and venv, pytest, PyTorch and torchvision (the
#                                examples' DataLoader side, which the tests run)
#   install-deps.sh --print ...  prints the packages the options name, one per line, and installs nothing
set -euo pipefail

print=0
packages=(
  build-essential
  cmake
  pkg-config
  git
  libtbb-dev
  libboost-program-options-dev
  libopencv-core-dev
  libopencv-imgproc-dev
  libjpeg62-turbo-dev
  libarchive-dev
  libcurl4-openssl-dev
  libopenblas-dev
  nlohmann-json3-dev
)

for option in "$@"; do
  case "${option}" in
    --tests) packages+=(libgtest-dev libgmock-dev) ;;
    --optional) packages+=(libopencv-imgcodecs-dev libdcmtk-dev libopenmpi-dev openmpi-bin) ;;
    --print) print=1 ;;
    --sanitizers) packages+=(clang libclang-rt-14-dev) ;;
    --bench) packages+=(python3 python3-torch python3-torchvision python3-pil python3-numpy) ;;
    --python)
      packages+=(python3 python3-dev python3-venv python3-pip python3-setuptools python3-wheel pybind11-dev libdlpack-dev
        python3-pytest python3-torch python3-torchvision python3-numpy)
      ;;
    *)
      echo "install-deps: unknown option '${option}' (options: --tests, --optional, --sanitizers, --bench, --python, --print)" >&2
      exit 2
      ;;
  esac
done

if ((print)); then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

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
