#include "support/host_reads.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <mutex>
#include <sstream>
#include <stdexcept>

namespace ddp::testing {
namespace {

constexpr auto kMode = c10::DispatchKey::TESTING_ONLY_GenericMode;
using Counts = std::map<std::string, int64_t>;
thread_local Counts* t_counts = nullptr;  // the live HostReads' counts on this thread
// While exactly one HostReads lives: its counts, for threads that inherit its mode without being its own
// (autograd's device threads, which run a GPU's backward with the caller's dispatch keys).
std::mutex g_mu;
int g_live = 0;
Counts* g_only = nullptr;

// A copy whose destination device is the CPU: aten::to / _to_copy with a Device argument naming it.
bool to_host(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& name = op.schema().name();
  if (name != "aten::to" && name != "aten::_to_copy") return false;
  const size_t n = op.schema().arguments().size();
  for (size_t i = stack.size() - n; i < stack.size(); ++i)
    if (stack[i].isDevice() && stack[i].toDevice().is_cpu()) return true;
  return false;
}

bool reads_value(const std::string& name) {
  return name == "aten::item" || name == "aten::_local_scalar_dense" || name == "aten::is_nonzero" ||
         name == "aten::equal" || name == "aten::allclose";
}

void count_reads(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (Counts* counts = t_counts ? t_counts : g_only) {
      const auto& name = op.schema().name();
      if (reads_value(name))
        ++(*counts)[name];
      else if (to_host(op, *stack))
        ++(*counts)[name + " to cpu"];
    }
  }
  c10::impl::ExcludeDispatchKeyGuard inner(kMode);  // what the op calls is not counted again
  op.callBoxed(stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, TESTING_ONLY_GenericMode, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&count_reads>());
}

struct HostReads::Impl {
  std::map<std::string, int64_t> counts;
  c10::impl::IncludeDispatchKeyGuard mode{kMode};
};

HostReads::HostReads() {
  if (t_counts) throw std::logic_error("HostReads: one at a time per thread");
  impl_ = std::make_unique<Impl>();
  std::lock_guard<std::mutex> lock(g_mu);
  t_counts = &impl_->counts;
  g_only = ++g_live == 1 ? t_counts : nullptr;
}

HostReads::~HostReads() {
  std::lock_guard<std::mutex> lock(g_mu);
  t_counts = nullptr;
  --g_live;
  g_only = nullptr;
}

int64_t HostReads::count() const {
  int64_t n = 0;
  for (const auto& [name, k] : impl_->counts) n += k;
  return n;
}

const std::map<std::string, int64_t>& HostReads::by_op() const { return impl_->counts; }

std::string HostReads::describe() const {
  std::ostringstream out;
  for (const auto& [name, k] : impl_->counts) out << (out.tellp() > 0 ? ", " : "") << name << " x" << k;
  return out.tellp() > 0 ? out.str() : "none";
}

}  // namespace ddp::testing
