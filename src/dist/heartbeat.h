// The heartbeat of a store-based group (gloo over env:// or tcp://). Each rank
// runs two threads while its group lives:
//   beater:  every timeout/10 writes its counter to the store ("ddp_hb/<rank>")
//            over its own store connection and reads the other ranks' counters;
//   monitor: touches no socket; ends the rank when a peer's counter has not
//            moved for `timeout`, or the store has not answered for `timeout`
//            (rank 0 hosts it: its silence means rank 0 stopped), and reports
//            synchronous collectives waiting for 30 s (and every 30 s after).
// Ending a rank: one line on stderr ("[gloo] rank 0/4: rank 1 stopped
// answering: no heartbeat for 30 s; ending this rank"), the JSON error file
// (TORCHELASTIC_ERROR_FILE) unless already written, then _exit(1): a blocked
// gloo collective cannot be cancelled in c10d 1.13 (as NCCL's watchdog does).
// A rank that ends normally writes "done" instead of a counter, and peers
// stop watching it; a store that closes its connections (rank 0 ended) ends
// the watching quietly, the launcher reporting rank 0's exit if it failed.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "ddp/dist/store.h"
#include "ddp/dist/types.h"

namespace ddp::detail {

struct HeartbeatConfig {
  std::string backend;             // for the "[gloo] rank 0/4: " prefix
  int rank = 0;
  int world_size = 1;
  Milliseconds timeout{30000};     // > 0
  std::string store_address;       // "host:port", for messages
  std::function<StorePtr()> open;  // opens the beater's own store connection
  double report_interval_s = 30;   // reports of long waits (DDP_WAIT_REPORT_INTERVAL)
};

class Heartbeat {
 public:
  // Opens its store connection (throws like the store does), then starts.
  explicit Heartbeat(HeartbeatConfig config);
  // Writes "done" (bounded by the store's timeout) and stops both threads.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// The heartbeat timeout from InitOptions::heartbeat_timeout (-1: from
// DDP_HEARTBEAT_TIMEOUT, seconds, else 30 s); 0 turns it off. Throws
// ddp::InvalidArgument for a value that is not a number >= 0.
Milliseconds resolve_heartbeat_timeout(Milliseconds option);
// DDP_WAIT_REPORT_INTERVAL (seconds > 0), else 30.
double wait_report_interval_s();

// Writes {"message", "timestamp_us", "rank"} to TORCHELASTIC_ERROR_FILE when set
// and the file is absent or empty (a launcher-side writer may have been first).
void write_error_file(const std::string& message, int rank);
// Prints `message` on stderr, writes the error file naming `silent_rank` as the rank that failed (a PeerFailure:
// ddprun's root cause names that rank, not this one), flushes, _exit(code).
[[noreturn]] void end_rank(const std::string& message, int silent_rank, int code = 1);

}  // namespace ddp::detail
