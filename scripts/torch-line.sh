# Sourced by build.sh, test.sh and demo.sh: which LibTorch line to build against.
#   DDP_TORCH=1.13 (default): Debian's libtorch-dev, build folder build/
#   DDP_TORCH=2             : PyPI's torch in BUILD_DIR/venv (scripts/install-deps.sh --torch 2), build folder build-torch2/
DDP_TORCH=${DDP_TORCH:-1.13}
case "$DDP_TORCH" in
  1.13|debian) DDP_TORCH=1.13; BUILD_DIR=${BUILD_DIR:-build} ;;
  2|2.x) DDP_TORCH=2; BUILD_DIR=${BUILD_DIR:-build-torch2} ;;
  *) echo "DDP_TORCH=$DDP_TORCH: use 1.13 (Debian's libtorch-dev) or 2 (PyPI's torch in a venv)" >&2; exit 2 ;;
esac
DDP_VENV=${DDP_VENV:-$BUILD_DIR/venv}
# install_deps: scripts/install-deps.sh for this line.
install_deps() {
  if [ "$DDP_TORCH" = 2 ]; then ./scripts/install-deps.sh --torch 2 --venv "$DDP_VENV"; else ./scripts/install-deps.sh; fi
}
# torch_cmake_args: what cmake needs to find this line's LibTorch (its Python, the tests' oracles, follows).
# DDP_OTHER_LINE_BUILD: a build against the other line, for the cross-line checkpoint tests.
torch_cmake_args() {
  if [ -n "${DDP_OTHER_LINE_BUILD:-}" ]; then echo "-DDDP_OTHER_LINE_BUILD=$(cd "$DDP_OTHER_LINE_BUILD" && pwd)"; fi
  if [ "$DDP_TORCH" = 2 ]; then
    # The README's way: DDP_PYTHON follows (the venv's python, cmake/DdpPython.cmake).
    echo "-DCMAKE_PREFIX_PATH=$("$DDP_VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
  fi
}
