// DistributedDataParallel: wrap a module, train on N processes, no other
// change to the training loop. Gradients are averaged across ranks inside
// loss.backward(), bucket by bucket, overlapping the rest of backward.
//
//   auto net = std::make_shared<Net>();
//   ddp::DistributedDataParallel model(net);          // broadcasts rank 0's weights
//   torch::optim::SGD opt(net->parameters(), 0.1);
//   for (auto& batch : *loader) {
//     opt.zero_grad();
//     auto loss = torch::mse_loss(model(batch.data), batch.target);
//     loss.backward();                                // gradients are averaged here
//     opt.step();
//   }
#pragma once
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/parallel/comm_hook.h"
#include "ddp/parallel/ddp_stats.h"

namespace ddp {

struct DDPOptions {
  GroupPtr group;                  // null: the default group
  double bucket_cap_mb = 25;       // bucket size cap
  double first_bucket_cap_mb = 1;  // the first bucket is small, so reduction starts early
  // Gradients alias bucket memory: no copies, less memory. On by default,
  // unlike PyTorch (false there): see docs/ddp.md.
  bool gradient_as_bucket_view = true;
  bool find_unused_parameters = false;  // parameters may get no gradient on some ranks
  bool broadcast_buffers = true;        // rank 0's buffers (BatchNorm statistics) before each forward
  bool static_graph = false;  // the set of used parameters never changes: unused ones learned once (docs/ddp.md)
};

namespace detail {
class Reducer;
}
class Join;

class DistributedDataParallelBase {
 public:
  DistributedDataParallelBase(std::shared_ptr<torch::nn::Module> module, DDPOptions options);
  virtual ~DistributedDataParallelBase();
  DistributedDataParallelBase(const DistributedDataParallelBase&) = delete;
  DistributedDataParallelBase& operator=(const DistributedDataParallelBase&) = delete;

  // While alive, backward passes accumulate gradients locally without
  // communication; the next backward outside it reduces the accumulated sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallelBase& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallelBase& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Replaces how buckets are reduced (default: AllReduceHook).
  void register_comm_hook(std::shared_ptr<CommHook> hook);
  GroupPtr group() const { return group_; }
  const DDPOptions& options() const { return options_; }
  // Names of the parameters in each bucket, in bucket order.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  // The parameter order (indices into the parameters that require gradients) the buckets are rebuilt in after the
  // first iteration: the order gradients arrived (rank 0's is every rank's); empty before the first synchronised
  // backward. A checkpoint (written by rank 0) keeps it so that
  // load_bucket_order() can give a resumed run the same buckets: a sum over 3 or more ranks depends on where
  // a value falls in the buffer, so other buckets change the last bit of the gradients.
  std::vector<int64_t> bucket_order() const;
  // Builds the buckets in `order` now and skips the rebuild (every rank alike, before a forward).
  // InvalidArgument unless it lists every parameter index once.
  void load_bucket_order(const std::vector<int64_t>& order);
  const DDPStats& stats() const;

 protected:
  void before_forward();
  void after_forward(const std::vector<at::Tensor>& outputs);

 private:
  friend class Join;  // join.h: shadows this model's collectives on ranks out of inputs
  // Buffers are broadcast before a forward in training with gradients enabled.
  bool broadcasts_buffers(bool grad, bool training) const;
  // Every parameter and buffer: what the construction and Join::finish() broadcast.
  std::vector<at::Tensor> module_state() const;

  std::shared_ptr<torch::nn::Module> base_;
  DDPOptions options_;
  GroupPtr group_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> buffers_;
  std::unique_ptr<detail::Reducer> reducer_;
  Join* join_ = nullptr;  // the Join attached, if any
};

namespace detail {
inline void collect_tensors(const at::Tensor& t, std::vector<at::Tensor>& out) { out.push_back(t); }
inline void collect_tensors(const std::vector<at::Tensor>& ts, std::vector<at::Tensor>& out) {
  out.insert(out.end(), ts.begin(), ts.end());
}
template <typename... Ts>
void collect_tensors(const std::tuple<Ts...>& t, std::vector<at::Tensor>& out) {
  std::apply([&](const auto&... x) { (collect_tensors(x, out), ...); }, t);
}
// Other output types: no graph walk; unused parameters are found at the end of backward.
template <typename T>
void collect_tensors(const T&, std::vector<at::Tensor>&) {}

template <typename P>
std::shared_ptr<torch::nn::Module> as_module(const P& p) {
  if constexpr (std::is_convertible_v<P, std::shared_ptr<torch::nn::Module>>)
    return p;
  else
    return p.ptr();  // a torch::nn::ModuleHolder such as torch::nn::Sequential
}
}  // namespace detail

// P is a std::shared_ptr to the user's module or a LibTorch module holder.
template <typename P>
class DistributedDataParallel : public DistributedDataParallelBase {
 public:
  explicit DistributedDataParallel(P module, DDPOptions options = {})
      : DistributedDataParallelBase(detail::as_module(module), std::move(options)), module_(std::move(module)) {}

  template <typename... Args>
  auto forward(Args&&... args) {
    before_forward();
    auto out = module_->forward(std::forward<Args>(args)...);
    std::vector<at::Tensor> outputs;
    detail::collect_tensors(out, outputs);
    after_forward(outputs);
    return out;
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }
  // The wrapped module: its parameters and state dict carry no "module." prefix.
  P& module() { return module_; }
  P& operator->() { return module_; }

 private:
  P module_;
};

}  // namespace ddp
