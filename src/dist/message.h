// The message of the exception being handled, without c10's backtrace.
#pragma once
#include <string>

namespace ddp::detail {

// Call only inside a catch block.
std::string current_exception_message();

}  // namespace ddp::detail
