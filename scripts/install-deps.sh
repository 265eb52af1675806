#!/usr/bin/env bash
# Installs everything ddp needs to build, test and run on Debian 12. Idempotent.
#   install-deps.sh                      Debian's packages, LibTorch 1.13 among them (libtorch-dev)
#   install-deps.sh --torch 2 [--venv D] the same, plus LibTorch 2.x: a venv D (default build-torch2/venv)
#                                        holding PyPI's torch==$DDP_TORCH2_VERSION and the tests' Python oracles
set -euo pipefail
cd "$(dirname "$0")/.."
# The LibTorch 2.x line: the newest torch that installs here, and a torchvision that accepts it (oracle only).
DDP_TORCH2_VERSION=${DDP_TORCH2_VERSION:-2.15.0}
DDP_TORCHVISION_VERSION=${DDP_TORCHVISION_VERSION:-0.29.2}
torch_line=1.13
venv=build-torch2/venv
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) torch_line=${2:?--torch needs 1.13 or 2}; shift 2 ;;
    --venv) venv=${2:?--venv needs a folder}; shift 2 ;;
    *) echo "install-deps: unknown argument '$1' (use --torch 2 [--venv DIR])" >&2; exit 2 ;;
  esac
done
case "$torch_line" in
  1.13|debian) torch_line=1.13 ;;
  2|2.x) torch_line=2 ;;
  *) echo "install-deps: --torch $torch_line: use 1.13 (Debian's libtorch-dev) or 2 (PyPI's torch in a venv)" >&2; exit 2 ;;
esac

PKGS=(
  build-essential cmake ninja-build ccache pkg-config
  clang-format-14                       # the one format (.clang-format; scripts/check-format.sh)
  libtorch-dev libopenblas0-pthread     # LibTorch 1.13; OpenBLAS (reference BLAS is ~35x slower)
  libgloo-dev                           # headers c10d's ProcessGroupGloo needs (both lines: docs/backends.md)
  libopenmpi-dev openmpi-bin            # MPI backend
  libgtest-dev libgmock-dev             # tests
  libcli11-dev nlohmann-json3-dev       # command lines, JSON
  libtomlplusplus-dev                   # ddp-train --config files (TOML)
  zlib1g-dev                            # gzip data files
  libturbojpeg0-dev libspng-dev         # ImageFolder: JPEG (libjpeg-turbo) and PNG decoding
  iproute2                              # network namespaces: multi-host tests on one machine
  slurm-wlm                             # tests under a real Slurm (slurmctld, slurmd, munge; started by the test)
  libzip-dev                            # checkpoint integrity: the zip's CRC-32 of every record
  dataset-fashion-mnist                 # the main job's data
  python3-torch                         # test oracle and benchmark peer only
  python3-protobuf                      # logging: oracle of the TensorBoard event-file test
  python3-pil python3-torchvision       # ImageFolder tests' oracle (decode, class order, transforms)
  libjs-chart.js                        # the run report's charts (Chart.js 3.9, embedded at build time)
  chromium                              # tests: the run report rendered in a headless browser
)
if [ "$torch_line" = 2 ]; then
  PKGS+=(python3-venv)                  # the 2.x line's venv, from Debian's Python 3.11
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ "$torch_line" = 2 ]; then
  # torch's Linux wheels are CUDA builds: their nvidia-* dependencies come along (about 5 GB); they run on CPUs.
  want="torch==$DDP_TORCH2_VERSION"
  if [ -x "$venv/bin/python" ] &&
     "$venv/bin/python" -c "import sys, torch, torchvision, PIL, numpy, google.protobuf; sys.exit(torch.__version__.split('+')[0] != '$DDP_TORCH2_VERSION')" 2>/dev/null; then
    echo "install-deps: $venv has $want"
  else
    echo "install-deps: creating $venv with $want (PyPI; about 5 GB with its CUDA libraries)"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "$want" "torchvision==$DDP_TORCHVISION_VERSION" \
      numpy pillow protobuf
  fi
  echo "install-deps: LibTorch $DDP_TORCH2_VERSION at $("$venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
fi
