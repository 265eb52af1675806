#include "ddp/parallel/distributed_data_parallel.h"

#include <ATen/core/grad_mode.h>

#include <sstream>

#include "ddp/dist/collectives.h"
#include "ddp/dist/errors.h"
#include "ddp/parallel/join.h"
#include "dist/error_context.h"
#include "parallel/reducer.h"

namespace ddp {
namespace {

std::string describe(const std::string& name, const at::Tensor& t) {
  std::ostringstream s;
  s << "'" << name << "' " << t.scalar_type() << t.sizes();
  return s.str();
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Every rank compares every rank's parameter list with rank 0's, so all of
// them fail together, with the same message naming the first difference.
void check_same_parameters(ProcessGroup& g, const torch::OrderedDict<std::string, at::Tensor>& params) {
  std::string mine;
  for (const auto& p : params) mine += describe(p.key(), p.value()) + "\n";
  auto all = all_gather_bytes(mine, g.shared_from_this());
  auto reference = split_lines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    auto theirs = split_lines(all[r]);
    for (size_t i = 0; i < std::max(reference.size(), theirs.size()); ++i) {
      std::string a = i < reference.size() ? reference[i] : "nothing";
      std::string b = i < theirs.size() ? theirs[i] : "nothing";
      if (a == b) continue;
      ErrorContext ctx{g.backend(), g.rank(), g.size(), "DistributedDataParallel"};
      throw InvalidArgument(ctx.prefix() + "the model differs across ranks: parameter " + std::to_string(i) + " is " +
                            a + " on rank 0 but " + b + " on rank " + std::to_string(r) +
                            " (every rank must build the same model)");
    }
  }
}

// Buckets are flat buffers on one device: a module whose parameters lie on two (a layer left on the CPU, one on
// another GPU) is refused here, on this rank, before any collective, as PyTorch's DDP refuses it.
void check_one_device(const ProcessGroup& g, const torch::OrderedDict<std::string, at::Tensor>& params) {
  for (const auto& p : params) {
    if (p.value().device() == params[0].value().device()) continue;
    ErrorContext ctx{g.backend(), g.rank(), g.size(), "DistributedDataParallel"};
    throw InvalidArgument(ctx.prefix() + "the module's parameters are on two devices: '" + params[0].key() + "' on " +
                          params[0].value().device().str() + ", '" + p.key() + "' on " + p.value().device().str() +
                          "; move the whole module to one device (module->to(device))");
  }
}

}  // namespace

DistributedDataParallelBase::DistributedDataParallelBase(std::shared_ptr<torch::nn::Module> module, DDPOptions options)
    : base_(std::move(module)), options_(std::move(options)) {
  if (!base_) throw InvalidArgument("DistributedDataParallel: the module is null");
  if (options_.bucket_cap_mb <= 0 || options_.first_bucket_cap_mb <= 0)
    throw InvalidArgument("DistributedDataParallel: bucket_cap_mb and first_bucket_cap_mb must be positive");
  group_ = options_.group ? options_.group : default_group();
  auto named = base_->named_parameters(/*recurse=*/true);
  check_one_device(*group_, named);
  check_same_parameters(*group_, named);

  // Rank 0's parameters and buffers everywhere.
  for (const auto& b : base_->buffers()) buffers_.push_back(b);
  std::vector<at::Tensor> state = module_state();
  if (group_->size() > 1 && !state.empty()) broadcast_coalesced(state, 0, group_);

  std::vector<at::Tensor> params;
  for (const auto& p : named) {
    if (!p.value().requires_grad()) continue;
    params.push_back(p.value());
    names_.push_back(p.key());
  }
  detail::ReducerOptions ro;
  ro.bucket_cap_bytes = static_cast<size_t>(options_.bucket_cap_mb * (1 << 20));
  ro.first_bucket_cap_bytes = static_cast<size_t>(options_.first_bucket_cap_mb * (1 << 20));
  ro.gradient_as_bucket_view = options_.gradient_as_bucket_view;
  ro.find_unused_parameters = options_.find_unused_parameters;
  ro.static_graph = options_.static_graph;
  if (!params.empty()) reducer_ = std::make_unique<detail::Reducer>(params, names_, group_, ro);
}

DistributedDataParallelBase::~DistributedDataParallelBase() {
  if (join_) join_->model_ = nullptr;  // a Join outliving its model does nothing
}

std::vector<at::Tensor> DistributedDataParallelBase::module_state() const {
  std::vector<at::Tensor> state;
  for (const auto& p : base_->named_parameters(/*recurse=*/true)) state.push_back(p.value());
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  return state;
}

bool DistributedDataParallelBase::broadcasts_buffers(bool grad, bool training) const {
  return options_.broadcast_buffers && group_->size() > 1 && !buffers_.empty() && training && grad;
}

// Under a Join: the join all_reduce first, then the same collectives as
// without (the ranks out of inputs shadow them in this order), buffers coming
// from the highest rank still training (rank 0 may have stopped).
void DistributedDataParallelBase::before_forward() {
  const bool grad = at::GradMode::is_enabled(), training = base_->is_training();
  const bool sync = reducer_ ? reducer_->sync() : true;
  if (join_ && grad) join_->on_forward(training, sync);
  if (reducer_) reducer_->prepare_for_forward(grad && training);
  if (join_ && reducer_ && grad && sync) reducer_->set_divisor_source(join_->divisor_source());
  if (broadcasts_buffers(grad, training)) broadcast_coalesced(buffers_, join_ ? join_->buffer_root() : 0, group_);
}

void DistributedDataParallelBase::after_forward(const std::vector<at::Tensor>& outputs) {
  if (!reducer_ || !at::GradMode::is_enabled()) return;
  reducer_->settle_divisor();  // Join's count of ranks still training, waited here rather than in a hook
  reducer_->prepare_for_backward(outputs);
}

DistributedDataParallelBase::NoSyncGuard::NoSyncGuard(DistributedDataParallelBase& ddp) : ddp_(ddp) {
  previous_ = ddp_.reducer_ ? ddp_.reducer_->sync() : true;
  if (ddp_.reducer_) ddp_.reducer_->set_sync(false);
}

DistributedDataParallelBase::NoSyncGuard::~NoSyncGuard() {
  if (ddp_.reducer_) ddp_.reducer_->set_sync(previous_);
}

void DistributedDataParallelBase::register_comm_hook(std::shared_ptr<CommHook> hook) {
  if (reducer_) reducer_->set_comm_hook(std::move(hook));
}

std::vector<std::vector<std::string>> DistributedDataParallelBase::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  if (!reducer_) return out;
  for (const auto& bucket : reducer_->buckets()) {
    out.emplace_back();
    for (size_t i : bucket) out.back().push_back(names_[i]);
  }
  return out;
}

std::vector<int64_t> DistributedDataParallelBase::bucket_order() const {
  if (!reducer_) return {};
  const auto order = reducer_->bucket_order();
  return {order.begin(), order.end()};
}

void DistributedDataParallelBase::load_bucket_order(const std::vector<int64_t>& order) {
  if (reducer_) reducer_->restore_order(order);  // else nothing to reduce: no buckets
}

const DDPStats& DistributedDataParallelBase::stats() const {
  static const DDPStats none;
  return reducer_ ? reducer_->stats() : none;
}

}  // namespace ddp
