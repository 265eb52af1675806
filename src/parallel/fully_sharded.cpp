#include "ddp/parallel/fully_sharded.h"

#include <ATen/core/grad_mode.h>

#include "ddp/dist/collectives.h"
#include "ddp/dist/init.h"
#include "ddp/errors.h"
#include "dist/error_context.h"
#include "parallel/sharded_backward.h"
#include "parallel/sharded_unit.h"

namespace ddp {
namespace {

int64_t parameter_count(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(torch::nn::Sequential module, FSDPOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  if (!module_) throw InvalidArgument("FullyShardedDataParallel: the module is null");
  if (options_.min_unit_params < 0)
    throw InvalidArgument("FullyShardedDataParallel: min_unit_params must be >= 0, got " +
                          std::to_string(options_.min_unit_params));
  group_ = options_.group ? options_.group : default_group();
  gathered_ = std::make_shared<detail::GatheredBytes>();
  // The wrap policy: which children form each unit.
  const auto children = module_->named_children();
  unit_of_child_.assign(children.size(), -1);
  std::vector<std::vector<size_t>> members;
  int64_t open = 0;  // parameters in the last unit so far
  for (size_t k = 0; k < children.size(); ++k) {
    const int64_t n = parameter_count(*children[k].value());
    const bool join = !members.empty() && options_.min_unit_params > 0 && open < options_.min_unit_params &&
                      unit_of_child_[k - 1] == int(members.size()) - 1;
    if (join) {
      members.back().push_back(k);
      open += n;
    } else if (n > 0) {
      members.push_back({k});
      open = n;
    } else {
      continue;
    }
    unit_of_child_[k] = int(members.size()) - 1;
  }
  // Rank 0's buffers everywhere (parameters travel with their units).
  std::vector<at::Tensor> buffers = module_->buffers();
  if (group_->size() > 1 && !buffers.empty()) broadcast_coalesced(buffers, 0, group_);
  for (const auto& ids : members) {
    std::vector<at::Tensor> params;
    std::vector<std::string> names;
    for (size_t k : ids)
      for (const auto& p : children[k].value()->named_parameters()) {
        params.push_back(p.value());
        names.push_back(children[k].key() + "." + p.key());
      }
    units_.push_back(std::make_shared<detail::ShardedUnit>(std::move(params), std::move(names), *group_, gathered_));
  }
  backward_ = std::make_unique<detail::ShardedBackward>(units_);
  reset_peak_memory();
}

FullyShardedDataParallel::~FullyShardedDataParallel() = default;

// Each unit: gathered before its children run; after them, at rest again when
// no backward will follow, released until backward gathers it again
// (FullShard), or kept until its backward (ShardGradOp).
at::Tensor FullyShardedDataParallel::forward(const at::Tensor& input) {
  const bool backward_follows = at::GradMode::is_enabled();
  at::Tensor x = input;
  size_t k = 0;
  for (auto& child : *module_) {
    const int u = unit_of_child_[k];
    const bool first = u >= 0 && (k == 0 || unit_of_child_[k - 1] != u);
    const bool last = u >= 0 && (k + 1 == unit_of_child_.size() || unit_of_child_[k + 1] != u);
    if (first) units_[size_t(u)]->gather(/*refresh=*/true);
    x = child.forward(x);
    if (last) {
      auto unit = units_[size_t(u)];
      if (!backward_follows || !x.requires_grad()) {
        unit->rest();
      } else if (options_.sharding_strategy == ShardingStrategy::FullShard && size_t(u) + 1 < units_.size()) {
        // (The last unit stays: its backward comes next.)
        unit->release();
        // Runs as backward reaches this unit's output, before the unit's own backward.
        x.register_hook([unit](const at::Tensor& grad) {
          unit->gather();
          return grad;
        });
      }
    }
    ++k;
  }
  return x;
}

std::vector<at::Tensor> FullyShardedDataParallel::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& unit : units_) out.push_back(unit->shard());
  return out;
}

void FullyShardedDataParallel::zero_grad() {
  for (const auto& unit : units_) {
    at::Tensor grad = unit->shard().grad();
    if (grad.defined()) grad.zero_();
  }
}

torch::OrderedDict<std::string, at::Tensor> FullyShardedDataParallel::full_state_dict() {
  torch::OrderedDict<std::string, at::Tensor> out;
  for (const auto& unit : units_) {
    at::Tensor flat = unit->gather_flat();
    for (size_t i = 0; i < unit->names().size(); ++i)
      out.insert(unit->names()[i],
                 flat.narrow(0, unit->offset(i), c10::multiply_integers(unit->shape(i))).view(unit->shape(i)).clone());
  }
  for (const auto& b : module_->named_buffers()) out.insert(b.key(), b.value().detach().clone());
  return out;
}

void FullyShardedDataParallel::load_full_state_dict(const torch::OrderedDict<std::string, at::Tensor>& state) {
  ErrorContext ctx{group_->backend(), group_->rank(), group_->size(), "FullyShardedDataParallel load_full_state_dict"};
  size_t used = 0;
  auto find = [&](const std::string& name, at::IntArrayRef shape) -> const at::Tensor& {
    const at::Tensor* t = state.find(name);
    if (!t) throw_invalid(ctx, "the state has no '" + name + "'");
    if (t->sizes() != shape)
      throw_invalid(ctx, "'" + name + "' has shape " + c10::str(t->sizes()) + " in the state but " + c10::str(shape) +
                             " in the model");
    ++used;
    return *t;
  };
  for (const auto& unit : units_) {
    at::Tensor flat = at::zeros({unit->numel()}, unit->shard().options().requires_grad(false));
    for (size_t i = 0; i < unit->names().size(); ++i)
      flat.narrow(0, unit->offset(i), c10::multiply_integers(unit->shape(i)))
          .copy_(find(unit->names()[i], unit->shape(i)).reshape({-1}));
    unit->load_flat(flat);
  }
  at::NoGradGuard no_grad;
  for (const auto& b : module_->named_buffers()) b.value().copy_(find(b.key(), b.value().sizes()));
  if (used != state.size()) {
    for (const auto& item : state) {
      bool known = module_->named_buffers().contains(item.key());
      for (const auto& unit : units_)
        for (const auto& n : unit->names()) known = known || n == item.key();
      if (!known) throw_invalid(ctx, "the state has '" + item.key() + "', which the model does not");
    }
  }
}

namespace {

// The units gathered while it lives (summon_full_params); at its end, written back if asked, then at rest.
struct Summoned {
  std::vector<std::shared_ptr<detail::ShardedUnit>> units;
  bool writeback = false;
  ~Summoned() {
    at::NoGradGuard no_grad;
    for (const auto& unit : units) {
      if (writeback) {
        std::vector<at::Tensor> flat;
        for (const auto& p : unit->params()) flat.push_back(p.detach().reshape({-1}));
        unit->load_flat(at::cat(flat));
      }
      unit->rest();
    }
  }
};

}  // namespace

std::shared_ptr<void> FullyShardedDataParallel::summon_full_params(bool writeback) {
  for (const auto& unit : units_) unit->gather(/*refresh=*/true);
  auto s = std::make_shared<Summoned>();
  s->units = units_;
  s->writeback = writeback;
  return s;
}

std::vector<std::vector<std::string>> FullyShardedDataParallel::unit_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& unit : units_) out.push_back(unit->names());
  return out;
}

void FullyShardedDataParallel::reset_peak_memory() { gathered_->peak = gathered_->now; }

FSDPMemory FullyShardedDataParallel::memory() const {
  FSDPMemory m;
  m.peak_parameter_bytes = gathered_->peak;
  for (const auto& unit : units_) {
    m.peak_parameter_bytes += unit->shard().nbytes();
    m.parameter_bytes += unit->shard().nbytes() + unit->full_bytes_now();
    if (unit->shard().grad().defined()) m.gradient_bytes += unit->shard().grad().nbytes();
    m.gradient_bytes += unit->gradient_bytes_now();
  }
  return m;
}

}  // namespace ddp
