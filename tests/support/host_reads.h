// Counts what on a GPU would make the host wait for the device, on the CPU where nothing waits: reads of a
// tensor's value (`.item()`, a tensor in an `if`, `at::equal`, `at::allclose`) and copies to the host
// (`.to(kCPU)`, `.cpu()`). While a HostReads lives, every ATen call on its thread passes through a dispatcher
// mode (c10's TESTING_ONLY_GenericMode key) that counts those by name; ops they call inside are not counted.
// Threads that inherit the mode count too while this is the only HostReads alive (a GPU's backward runs on
// autograd's device thread, with the caller's dispatch keys; a CPU's on the calling thread); other threads the
// counting thread starts are not counted.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace ddp::testing {

class HostReads {
 public:
  HostReads();
  ~HostReads();
  HostReads(const HostReads&) = delete;
  HostReads& operator=(const HostReads&) = delete;

  int64_t count() const;                                // every read and host copy so far
  const std::map<std::string, int64_t>& by_op() const;  // the same by op name, for a failure's message
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::testing
