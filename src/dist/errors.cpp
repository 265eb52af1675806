#include "dist/error_context.h"

#include "ddp/dist/types.h"

#include <c10/util/Exception.h>

#include "dist/message.h"

namespace ddp {

std::string ErrorContext::prefix() const {
  return "[" + backend + "] rank " + std::to_string(rank) + "/" + std::to_string(size) + " " + op + ": ";
}

void throw_invalid(const ErrorContext& ctx, const std::string& what) { throw InvalidArgument(ctx.prefix() + what); }

std::string detail::current_exception_message() {
  try {
    throw;
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    std::string m = e.what();
    auto cut = m.find("\nException raised from");
    return cut == std::string::npos ? m : m.substr(0, cut);
  } catch (...) {
    return "unknown error";
  }
}

std::string to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return "SUM";
    case ReduceOp::AVG:
      return "AVG";
    case ReduceOp::PRODUCT:
      return "PRODUCT";
    case ReduceOp::MIN:
      return "MIN";
    case ReduceOp::MAX:
      return "MAX";
    case ReduceOp::BAND:
      return "BAND";
    case ReduceOp::BOR:
      return "BOR";
    case ReduceOp::BXOR:
      return "BXOR";
  }
  return "?";
}

const char* to_string(OpType op) {
  switch (op) {
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kAllReduce:
      return "all_reduce";
    case OpType::kAllReduceCoalesced:
      return "all_reduce_coalesced";
    case OpType::kReduce:
      return "reduce";
    case OpType::kAllGather:
      return "all_gather";
    case OpType::kGather:
      return "gather";
    case OpType::kScatter:
      return "scatter";
    case OpType::kReduceScatter:
      return "reduce_scatter";
    case OpType::kAllToAll:
      return "all_to_all";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kNewGroup:
      return "new_group";
    case OpType::kSend:
      return "send";
    case OpType::kRecv:
      return "recv";
  }
  return "?";
}

}  // namespace ddp
