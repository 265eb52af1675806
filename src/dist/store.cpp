#include "ddp/dist/store.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace ddp {

StorePtr make_hash_store() { return c10::make_intrusive<c10d::HashStore>(); }

StorePtr make_tcp_store(const std::string& host, int port, bool is_server, int world_size, Milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = is_server;
  o.numWorkers = static_cast<std::size_t>(world_size);
  o.waitWorkers = false;  // the group's own rendezvous waits for everyone
  o.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, o);
}

StorePtr make_file_store(const std::string& path, int world_size) {
  return c10::make_intrusive<c10d::FileStore>(path, world_size);
}

StorePtr make_prefix_store(const std::string& prefix, StorePtr store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(store));
}

}  // namespace ddp
