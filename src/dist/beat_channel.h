// How a heartbeat reaches the other ranks: a small mailbox per rank.
//   store (gloo over env:// or tcp://): key "ddp_hb/<rank>" in rank 0's store,
//     over the heartbeat's own connection;
//   mpi: one int64 message per beat to every peer on a communicator of its own
//     (src/dist/mpi/mpi_beat.cpp).
// Called from the heartbeat's beater thread only, and once from finish().
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "ddp/dist/store.h"

namespace ddp::detail {

class BeatChannel {
 public:
  static constexpr int64_t kDone = -1;  // "this rank ended normally"
  static constexpr int64_t kNone = 0;   // nothing heard from the peer yet

  virtual ~BeatChannel() = default;
  // Tells every peer this rank's counter (>= 1), or kDone. Throws: an error that mentions a timeout is
  // silence (the monitor judges its age); any other means the channel closed (peers are ending).
  virtual void publish(int64_t value) = 0;
  // The newest value heard from `peer`: a counter, kDone, or kNone. Throws as publish().
  virtual int64_t latest(int peer) = 0;
  // What carries the beats, for messages: "rank 0's store at host:port", "MPI".
  virtual std::string where() const = 0;
  // Whether silence of the channel itself means rank 0 stopped (a store rank 0 hosts).
  virtual bool hosted_by_rank0() const { return false; }
};

// Beats through `store` (a connection of the heartbeat's own) under "ddp_hb/<rank>".
std::unique_ptr<BeatChannel> store_beat_channel(StorePtr store, int rank, std::string address);

}  // namespace ddp::detail
