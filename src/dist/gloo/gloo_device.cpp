#include "dist/gloo/gloo_device.h"
#include "ddp/dist/launch_env.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace ddp::gloo {
namespace {

// The source address the kernel would use to reach `host` (no packet is sent:
// connecting a UDP socket only selects a route).
std::string local_address_toward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res) return "";
  std::string out;
  for (addrinfo* a = res; a && out.empty(); a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {0};
      void* src = local.ss_family == AF_INET ? static_cast<void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                                             : static_cast<void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, src, buf, sizeof(buf))) out = buf;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

}  // namespace

std::shared_ptr<::gloo::transport::Device> make_device(const std::string& peer_host) {
  using PG = c10d::ProcessGroupGloo;
  if (auto ifname = launch_env::text(launch_env::kGlooSocketIfname)) return PG::createDeviceForInterface(*ifname);
  if (peer_host.empty()) return PG::createDeviceForHostname("127.0.0.1");
  std::string addr = local_address_toward(peer_host);
  if (!addr.empty()) return PG::createDeviceForHostname(addr);
  return PG::createDefaultDevice();
}

}  // namespace ddp::gloo
