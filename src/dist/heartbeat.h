// The heartbeat of a default group (gloo over env:// or tcp://, mpi). Each rank
// runs two threads while its group lives:
//   beater:  every timeout/10 publishes its counter on the BeatChannel (the
//            store, or MPI messages) and reads the other ranks' counters;
//   monitor: touches no socket; ends the rank when a peer's counter has not
//            moved for `timeout`, or a store rank 0 hosts has not answered for
//            `timeout` (its silence means rank 0 stopped), and reports
//            synchronous collectives waiting for 30 s (and every 30 s after).
// Ending a rank: one line on stderr ("[gloo] rank 0/4: rank 1 stopped
// answering: no heartbeat for 30 s; ending this rank"), the JSON error file
// (TORCHELASTIC_ERROR_FILE) unless already written, then _exit(1): a blocked
// collective cannot be cancelled (gloo in c10d 1.13, MPI), as NCCL's watchdog
// does. A rank that ends normally publishes "done", and peers stop watching
// it; a channel that closes (rank 0's store ended, MPI_Finalize) ends the
// watching quietly, the launcher reporting a failed rank's exit.
#pragma once
#include <memory>
#include <string>

#include "ddp/dist/types.h"
#include "dist/beat_channel.h"

namespace ddp::detail {

struct HeartbeatConfig {
  std::string backend;  // for the "[gloo] rank 0/4: " prefix
  int rank = 0;
  int world_size = 1;
  Milliseconds timeout{30000};           // > 0
  std::unique_ptr<BeatChannel> channel;  // the beats' way to the peers
  double report_interval_s = 30;         // reports of long waits (DDP_WAIT_REPORT_INTERVAL)
};

class Heartbeat {
 public:
  explicit Heartbeat(HeartbeatConfig config);
  // Stops both threads and publishes "done" (a store call is bounded by the store's timeout).
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
