#!/usr/bin/env bash
# Installs everything ddp needs to build, test and run on Debian 12. Idempotent.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libopenblas0-pthread     # LibTorch; OpenBLAS (reference BLAS is ~35x slower)
  libgloo-dev                           # headers c10d's ProcessGroupGloo needs
  libopenmpi-dev openmpi-bin            # MPI backend
  libgtest-dev libgmock-dev             # tests
  libcli11-dev nlohmann-json3-dev       # command lines, JSON
  zlib1g-dev                            # gzip data files
  libturbojpeg0-dev libspng-dev         # ImageFolder: JPEG (libjpeg-turbo) and PNG decoding
  iproute2                              # network namespaces: multi-host tests on one machine
  libzip-dev                            # checkpoint integrity: the zip's CRC-32 of every record
  dataset-fashion-mnist                 # the main job's data
  python3-torch                         # test oracle and benchmark peer only
  python3-protobuf                      # logging: oracle of the TensorBoard event-file test
  python3-pil python3-torchvision       # ImageFolder tests' oracle (decode, class order, transforms)
  libjs-chart.js                        # the run report's charts (Chart.js 3.9, embedded at build time)
  chromium                              # tests: the run report rendered in a headless browser
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
