// The c10d rendezvous store of the multi-node agents: LibTorch's TCPStore on --rdzv-endpoint, hosted by the
// agent whose host owns the endpoint's address (the first that can bind it), the others connect to it.
// Every operation has a deadline, so a store whose host died or whose link is cut is an error, never a hang.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <string>

#include "rendezvous/rendezvous.h"

namespace ddprun {

struct RdzvStore {
  std::shared_ptr<RdzvKV> kv;
  bool is_host = false;
};

// Opens the store at host:port: serves it when host is an address of this machine and the port is free,
// else connects (retrying for up to connect_timeout_s while the host agent starts). Every operation fails
// with a RendezvousError naming host:port when it gets no answer within op_timeout_s.
RdzvStore open_rdzv_store(const std::string& host, int port, double connect_timeout_s, double op_timeout_s);

// The same guarded operations over any c10d store (tests use a HashStore); `what` names it in the errors.
std::shared_ptr<RdzvKV> guard_store(c10::intrusive_ptr<c10d::Store> store, const std::string& where,
                                    double op_timeout_s, const std::string& what = "the rendezvous store");

}  // namespace ddprun
