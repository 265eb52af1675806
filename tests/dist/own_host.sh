#!/bin/sh
# Runs one rank as if it were on a host of its own, for NCCL on a machine with one GPU: NCCL refuses two ranks
# of one host on one GPU ("Duplicate GPU detected"); NCCL_HOSTID gives each rank its own host hash, so NCCL
# joins them over its network (socket) transport, as it joins two hosts. For tests only.
# usage: ddprun --nproc-per-node 2 --backend nccl tests/dist/own_host.sh PROGRAM [ARGS...]
NCCL_HOSTID="ddp-test-host-${RANK:?run under ddprun (RANK is not set)}"
export NCCL_HOSTID
exec "$@"
