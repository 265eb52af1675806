// Reduction operators and the option structs every collective takes.
#pragma once
#include <chrono>
#include <string>

namespace ddp {

enum class ReduceOp { SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR };
std::string to_string(ReduceOp op);

// What a call does (c10d's OpType); to_string gives the name in messages: "all_reduce".
enum class OpType {
  kBroadcast,
  kAllReduce,
  kAllReduceCoalesced,
  kReduce,
  kAllGather,
  kGather,
  kScatter,
  kReduceScatter,
  kAllToAll,
  kBarrier,
  kNewGroup,
  kSend,
  kRecv,
};
constexpr int kNumOpTypes = static_cast<int>(OpType::kRecv) + 1;
const char* to_string(OpType op);
// Point-to-point calls are not numbered among the group's collectives.
inline bool is_p2p(OpType op) { return op == OpType::kSend || op == OpType::kRecv; }

using Milliseconds = std::chrono::milliseconds;
// Timeout 0 means "use the group's timeout".
constexpr Milliseconds kDefaultTimeout{0};
constexpr Milliseconds kNoTimeout{-1};

// Shared by every collective: per-call timeout and asynchrony. With
// async_op = false (the default) the call returns once the operation is done.
struct CollectiveOptions {
  Milliseconds timeout = kDefaultTimeout;
  bool async_op = false;
};

struct AllReduceOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::SUM;
};
struct BroadcastOptions : CollectiveOptions {
  int src = 0;  // the rank whose tensor everyone receives
};
struct ReduceOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::SUM;
  int dst = 0;  // the rank that receives the reduction
};
struct ReduceScatterOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::SUM;
};
struct GatherOptions : CollectiveOptions {
  int dst = 0;  // the rank that receives every rank's tensor
};
struct ScatterOptions : CollectiveOptions {
  int src = 0;  // the rank whose list is scattered
};
struct P2POptions : CollectiveOptions {  // send, recv
  int tag = 0;
};

// Convenience constructor: ddp::op(ReduceOp::MAX).
inline AllReduceOptions op(ReduceOp o) {
  AllReduceOptions opts;
  opts.op = o;
  return opts;
}

}  // namespace ddp
