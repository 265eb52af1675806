#!/usr/bin/env bash
# Images decoded per second on one thread: ddp (libjpeg-turbo, libspng) vs PIL, the same files.
#   bench/decode.sh [BUILD_BIN] [DATA_DIR]
# Without DATA_DIR, generates 10 classes x 40 ImageNet-sized images (sides 300-500 px; JPEGs
# and PNGs as tests/data/make_image_folder.py mixes them) under a temporary directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/bin}
data=${2:-}
if [ -z "$data" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  ${DDP_PYTHON:-/usr/bin/python3} "$here/../tests/data/make_image_folder.py" "$tmp" --train 40 --val 0 --sizes 300,500
  data=$tmp/train
fi
for mode in decode train eval; do
  "$bin/ddp-bench" decode "$data" --mode "$mode"
  ${DDP_PYTHON:-/usr/bin/python3} "$here/decode_peer.py" "$data" --mode "$mode"
done
