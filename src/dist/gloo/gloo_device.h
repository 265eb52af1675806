// Picks the network device gloo listens on.
#pragma once
#include <gloo/transport/device.h>

#include <memory>
#include <string>

namespace ddp::gloo {

// GLOO_SOCKET_IFNAME if set; else the local address that routes toward
// `peer_host` (MASTER_ADDR), so multi-node runs pick the right interface;
// loopback for local runs.
std::shared_ptr<::gloo::transport::Device> make_device(const std::string& peer_host);

}  // namespace ddp::gloo
