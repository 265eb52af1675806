# Sourced by the interop scripts, which compare ddp with PyTorch bit for bit (or within a last-bit tolerance):
# that holds only when DDP_PYTHON's torch is the LibTorch this build links (DDP_TORCH_VERSION, from cmake).
# Another version: one line saying which and how to fix it, and exit 77 (ctest's SKIP_RETURN_CODE).
same_torch_or_skip() {
  local py=${DDP_PYTHON:-/usr/bin/python3} want=${DDP_TORCH_VERSION:-} have
  [ -n "$want" ] || return 0
  if ! have=$("$py" -c 'import re, torch; print(re.match(r"[0-9.]*[0-9]", torch.__version__).group(0))' 2>/dev/null); then
    echo "oracle: DDP_PYTHON=$py cannot import torch; configure with -DDDP_PYTHON=<a Python with torch $want>" >&2
    exit 1
  fi
  if [ "$have" != "${want%%+*}" ]; then
    echo "skipped: DDP_PYTHON=$py has torch $have, but this build links LibTorch $want, and the comparison is" \
         "exact; configure with -DDDP_PYTHON=<the Python whose torch is $want> to run it"
    exit 77
  fi
}
