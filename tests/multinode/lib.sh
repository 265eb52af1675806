# Shared by the multi-node tests (sourced): HOSTS hosts as network namespaces (scripts/netns.sh) under a prefix
# of this test's own, removed at exit with the temporary folder $work. Expects $1 = BIN_DIR and $hosts; sets
# $bin, $here, $netns, $work, $master (host 0's address) and fail().
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
netns=$here/../../scripts/netns.sh
export DDP_NETNS_PREFIX=mn$$
fail() { echo "FAIL: $*"; exit 1; }
if [ "$(id -u)" != 0 ]; then  # ctest reports a skip (SKIP_RETURN_CODE 77), not a failure
  echo "SKIP: needs root to create network namespaces (ip netns)"
  exit 77
fi
work=$(mktemp -d)
cleanup() { "$netns" down "$DDP_NETNS_PREFIX"; rm -rf "$work"; }
trap cleanup EXIT
"$netns" up "$hosts" "$DDP_NETNS_PREFIX"
master=$("$netns" addr 0)
export OMP_NUM_THREADS=1
