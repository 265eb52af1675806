// Key-value stores used for rendezvous: LibTorch's c10d stores.
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <string>

#include "ddp/dist/types.h"

namespace ddp {

using Store = c10d::Store;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

// In-memory store shared by threads of one process (tests, local worlds).
StorePtr make_hash_store();
// TCP store: rank 0 (is_server) listens on host:port, others connect.
StorePtr make_tcp_store(const std::string& host, int port, bool is_server, int world_size, Milliseconds timeout);
// Store in a file on a shared file system.
StorePtr make_file_store(const std::string& path, int world_size);
// A view of `store` whose keys are prefixed, for independent groups.
StorePtr make_prefix_store(const std::string& prefix, StorePtr store);

}  // namespace ddp
