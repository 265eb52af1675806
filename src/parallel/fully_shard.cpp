// ShardedModel: finds the units in a model's tree (marked by Sharded holders), shards their parameters and
// answers for the whole (shards, state dicts, memory). The marks live in one table keyed by the module, which
// also tells a Sharded holder its unit while a ShardedModel holds it.
#include <ATen/core/grad_mode.h>

#include <map>
#include <mutex>
#include <unordered_map>

#include "ddp/dist/collectives.h"
#include "ddp/dist/init.h"
#include "ddp/errors.h"
#include "ddp/parallel/clip_grad.h"
#include "ddp/parallel/fully_shard.h"
#include "dist/error_context.h"
#include "parallel/fsdp_state.h"

namespace ddp {
namespace detail {
namespace {

struct Mark {
  std::weak_ptr<torch::nn::Module> module;
  std::weak_ptr<FsdpState> state;  // while a ShardedModel holds the module
  size_t unit = 0;
};

struct Marks {
  std::mutex mu;
  std::unordered_map<const torch::nn::Module*, Mark> by_module;
};

Marks& marks() {
  static Marks m;
  return m;
}

// The units of a model: its tree walked from the root, a marked module starting a unit of its own.
struct Walk {
  // Units 1..N: the given sets of modules; marked modules found in the tree follow.
  Walk(ErrorContext c, const std::vector<std::vector<torch::nn::Module*>>& given) : ctx(std::move(c)) {
    for (const auto& unit : given) {
      names.emplace_back();
      params.emplace_back();
      for (const torch::nn::Module* m : unit) given_unit[m] = names.size() - 1;
    }
  }
  ErrorContext ctx;
  std::vector<std::string> names = {""};                            // unit 0: the root
  std::vector<std::pair<const torch::nn::Module*, size_t>> marked;  // marked module -> its unit
  std::vector<std::vector<ShardedParam>> params = {{}};
  std::map<const torch::nn::Module*, size_t> given_unit;
  std::map<const c10::TensorImpl*, std::pair<size_t, size_t>> seen;  // parameter -> unit, index

  void visit(const torch::nn::Module& m, const std::string& prefix, size_t unit) {
    for (const auto& p : m.named_parameters(/*recurse=*/false)) {
      const std::string name = prefix + p.key();
      auto it = seen.find(p.value().unsafeGetTensorImpl());
      if (it == seen.end()) {
        seen[p.value().unsafeGetTensorImpl()] = {unit, params[unit].size()};
        ShardedParam sp;
        sp.param = p.value();
        sp.names = {name};
        params[unit].push_back(std::move(sp));
      } else if (it->second.first == unit) {
        params[unit][it->second.second].names.push_back(name);  // shared within the unit: one shard
      } else {
        const ShardedParam& other = params[it->second.first][it->second.second];
        throw_invalid(ctx, "parameter '" + name + "' is the same tensor as '" + other.names[0] +
                               "', which is in another unit ('" + names[it->second.first] + "' and '" + names[unit] +
                               "'); a parameter shared by two units cannot be sharded: mark a module holding both "
                               "(or leave both to the root)");
      }
    }
    for (const auto& c : m.named_children()) {
      const torch::nn::Module* child = c.value().get();
      size_t child_unit = unit;
      if (auto it = given_unit.find(child); it != given_unit.end()) {
        child_unit = it->second;
        if (names[child_unit].empty()) names[child_unit] = prefix + c.key();
      } else if (is_marked_unit(child)) {
        for (const auto& [module, u] : marked)
          if (module == child)
            throw_invalid(ctx, "the module '" + prefix + c.key() + "' is registered twice in the model ('" + names[u] +
                                   "'); a unit is registered once");
        child_unit = names.size();
        names.push_back(prefix + c.key());
        marked.emplace_back(child, child_unit);
        params.emplace_back();
      }
      visit(*c.value(), prefix + c.key() + ".", child_unit);
    }
  }
};

// Makes the units' modules find their state; refuses a module another live ShardedModel holds.
void claim(const Walk& walk, const std::shared_ptr<FsdpState>& state) {
  std::lock_guard<std::mutex> lock(marks().mu);
  for (const auto& [module, unit] : walk.marked) {
    Mark& mark = marks().by_module[module];
    if (!mark.state.expired())
      throw_invalid(walk.ctx, "the module '" + walk.names[unit] + "' is already sharded by another ShardedModel");
    mark.state = state;
    mark.unit = unit;
  }
}

}  // namespace

void mark_unit(const std::shared_ptr<torch::nn::Module>& module) {
  std::lock_guard<std::mutex> lock(marks().mu);
  auto& table = marks().by_module;
  Mark& mark = table[module.get()];
  if (mark.module.expired()) mark = Mark{module, {}, 0};  // new, or a new module where a dead one lived
  if (table.size() > 64 && table.size() % 64 == 0)
    for (auto it = table.begin(); it != table.end();) it = it->second.module.expired() ? table.erase(it) : ++it;
}

bool is_marked_unit(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(marks().mu);
  auto it = marks().by_module.find(module);
  return it != marks().by_module.end() && !it->second.module.expired();
}

UnitForward::UnitForward(const torch::nn::Module* module) {
  if (!module) return;
  {
    std::lock_guard<std::mutex> lock(marks().mu);
    auto it = marks().by_module.find(module);
    if (it == marks().by_module.end()) return;
    state_ = it->second.state.lock();
    unit_ = it->second.unit;
  }
  if (!state_) return;
  set_dtypes();
  state_->pre_forward(unit_);
}

UnitForward::UnitForward(std::shared_ptr<FsdpState> state, size_t unit) : state_(std::move(state)), unit_(unit) {
  set_dtypes();
  if (unit_ == 0) state_->begin_forward();
  state_->pre_forward(unit_);
}

void UnitForward::set_dtypes() {
  const MixedPrecisionPolicy& mp = state_->policy();
  if (mp.cast_forward_inputs) input_dtype_ = mp.param_dtype;
  if (unit_ == 0) output_dtype_ = mp.output_dtype;
}

at::Tensor UnitForward::cast(const at::Tensor& t, std::optional<at::ScalarType> dtype) {
  if (!dtype || !t.defined() || !t.is_floating_point() || t.scalar_type() == *dtype) return t;
  return t.to(*dtype);
}

void UnitForward::after(const std::vector<at::Tensor>& outputs) {
  if (state_) state_->post_forward(unit_, outputs);
}

}  // namespace detail

HsdpMesh hsdp_mesh(int shard_size, GroupPtr world) {
  if (!world) world = default_group();
  const int n = world->size();
  if (shard_size < 1 || n % shard_size != 0)
    throw InvalidArgument("hsdp_mesh: a shard group of " + std::to_string(shard_size) + " ranks does not divide " +
                          "the world of " + std::to_string(n) + "; give a divisor of " + std::to_string(n));
  HsdpMesh mesh;
  for (int replica = 0; replica < n / shard_size; ++replica) {  // every rank makes every group, in one order
    std::vector<int> ranks;
    for (int k = 0; k < shard_size; ++k) ranks.push_back(replica * shard_size + k);
    if (GroupPtr g = world->new_group(ranks)) mesh.shard = g;
  }
  for (int k = 0; k < shard_size; ++k) {
    std::vector<int> ranks;
    for (int replica = 0; replica < n / shard_size; ++replica) ranks.push_back(replica * shard_size + k);
    if (GroupPtr g = world->new_group(ranks)) mesh.replicate = g;
  }
  return mesh;
}

ShardedModel::ShardedModel(std::shared_ptr<torch::nn::Module> root, FullyShardOptions options)
    : root_(std::move(root)) {
  build({}, std::move(options));
}

ShardedModel::ShardedModel(std::shared_ptr<torch::nn::Module> root,
                           const std::vector<std::vector<torch::nn::Module*>>& units, FullyShardOptions options)
    : root_(std::move(root)) {
  build(units, std::move(options));
}

void ShardedModel::build(const std::vector<std::vector<torch::nn::Module*>>& units, FullyShardOptions options) {
  if (!root_) throw InvalidArgument("fully_shard: the model is null");
  GroupPtr group = options.group ? options.group : default_group();
  detail::Walk walk(ErrorContext{group->backend(), group->rank(), group->size(), "fully_shard"}, units);
  walk.visit(*root_, "", 0);
  state_ = std::make_shared<detail::FsdpState>(group, options.reshard_after_forward, options.mp_policy);
  state_->set_replicate_group(options.replicate_group);
  // Rank 0's buffers everywhere (parameters travel with their units); HSDP: replica 0's first.
  std::vector<at::Tensor> buffers = root_->buffers();
  GroupPtr replicate = options.replicate_group;
  if (replicate && replicate->size() > 1 && !buffers.empty()) broadcast_coalesced(buffers, 0, replicate);
  if (group->size() > 1 && !buffers.empty()) broadcast_coalesced(buffers, 0, group);
  for (size_t u = 0; u < walk.params.size(); ++u)
    state_->add(std::make_shared<detail::FsdpUnit>(
        walk.names[u].empty() ? "(root)" : walk.names[u], std::move(walk.params[u]), *group, state_->bytes(),
        detail::UnitPrecision{options.mp_policy.param_dtype, options.mp_policy.reduce_dtype}, replicate.get()));
  detail::claim(walk, state_);
  state_->hook_gradients();
  reset_peak_memory();
}

ShardedModel::~ShardedModel() = default;

detail::UnitForward ShardedModel::forward_scope() { return detail::UnitForward(state_, 0); }

detail::UnitForward ShardedModel::unit_scope(size_t unit) {
  if (unit == 0 || unit >= state_->units().size())
    throw InvalidArgument("ShardedModel::unit_scope: no unit " + std::to_string(unit) + " (units 1.." +
                          std::to_string(state_->units().size() - 1) + ")");
  return detail::UnitForward(state_, unit);
}

torch::OrderedDict<std::string, at::Tensor> ShardedModel::named_parameters() const {
  torch::OrderedDict<std::string, at::Tensor> out;
  for (const auto& unit : state_->units())
    for (const auto& p : unit->params()) out.insert(p.names[0], p.shard);
  return out;
}

std::vector<at::Tensor> ShardedModel::parameters() const { return named_parameters().values(); }

at::Tensor ShardedModel::shard_of(const at::Tensor& param) const {
  for (const auto& unit : state_->units())
    for (const auto& p : unit->params())
      if (p.param.unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) return p.shard;
  throw InvalidArgument("ShardedModel::shard_of: a tensor of shape " + c10::str(param.sizes()) +
                        " that is not one of the model's parameters");
}

void ShardedModel::zero_grad() {
  for (const auto& unit : state_->units())
    for (const auto& p : unit->params())
      if (p.shard.grad().defined()) p.shard.grad().zero_();
}

const DDPStats& ShardedModel::stats() const { return state_->stats(); }

at::Tensor ShardedModel::clip_grad_norm_(double max_norm) {
  std::vector<at::Tensor> grads;
  for (const auto& p : parameters())
    if (p.grad().defined()) grads.push_back(p.grad());
  return clip_grad_norm(grads, max_norm, group().get());  // each rank's rows: squares summed over the shards
}

torch::OrderedDict<std::string, at::Tensor> ShardedModel::full_state_dict() {
  torch::OrderedDict<std::string, at::Tensor> out;
  for (const auto& unit : state_->units()) {
    std::vector<at::Tensor> values = unit->full_values();
    for (size_t i = 0; i < values.size(); ++i)
      for (const auto& name : unit->params()[i].names) out.insert(name, values[i]);
  }
  for (const auto& b : root_->named_buffers()) out.insert(b.key(), b.value().detach().clone());
  return out;
}

void ShardedModel::load_full_state_dict(const torch::OrderedDict<std::string, at::Tensor>& state) {
  const ProcessGroup& g = state_->group();
  ErrorContext ctx{g.backend(), g.rank(), g.size(), "ShardedModel load_full_state_dict"};
  size_t used = 0;
  auto find = [&](const std::string& name, at::IntArrayRef shape) -> const at::Tensor& {
    const at::Tensor* t = state.find(name);
    if (!t) throw_invalid(ctx, "the state has no '" + name + "'");
    if (t->sizes() != shape)
      throw_invalid(ctx, "'" + name + "' has shape " + c10::str(t->sizes()) + " in the state but " + c10::str(shape) +
                             " in the model");
    return *t;
  };
  for (const auto& unit : state_->units())
    for (size_t i = 0; i < unit->params().size(); ++i) {
      const auto& p = unit->params()[i];
      unit->load_full(i, find(p.names[0], p.shape));
      for (const auto& name : p.names) used += state.contains(name) ? 1 : 0;
    }
  at::NoGradGuard no_grad;
  for (const auto& b : root_->named_buffers()) {
    b.value().copy_(find(b.key(), b.value().sizes()));
    ++used;
  }
  if (used != state.size())
    for (const auto& item : state) {
      bool known = root_->named_buffers().contains(item.key());
      for (const auto& unit : state_->units())
        for (const auto& p : unit->params())
          known = known || std::find(p.names.begin(), p.names.end(), item.key()) != p.names.end();
      if (!known) throw_invalid(ctx, "the state has '" + item.key() + "', which the model does not");
    }
}

namespace {

// The units gathered while it lives; at its end, written back if asked, then at rest.
struct Summoned {
  std::vector<std::shared_ptr<detail::FsdpUnit>> units;
  bool writeback = false;
  ~Summoned() {
    for (const auto& unit : units) {
      if (writeback)
        for (size_t i = 0; i < unit->params().size(); ++i) unit->load_full(i, unit->params()[i].param.detach());
      unit->rest();
      unit->set_full_precision(false);
    }
  }
};

}  // namespace

std::shared_ptr<void> ShardedModel::summon_full_params(bool writeback) {
  for (const auto& unit : state_->units()) {
    unit->set_full_precision(true);  // the master weights, whatever the policy's param_dtype
    unit->start_gather(/*stale=*/true);
    unit->finish_gather();
  }
  auto s = std::make_shared<Summoned>();
  s->units = state_->units();
  s->writeback = writeback;
  return s;
}

size_t ShardedModel::num_units() const { return unit_parameter_names().size(); }

std::vector<std::vector<std::string>> ShardedModel::unit_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& unit : state_->units()) {
    if (unit->params().empty()) continue;
    out.emplace_back();
    for (const auto& p : unit->params()) out.back().push_back(p.names[0]);
  }
  return out;
}

void ShardedModel::reset_peak_memory() { state_->bytes()->peak = state_->bytes()->now; }

FSDPMemory ShardedModel::memory() const {
  FSDPMemory m;
  int64_t shards = 0;
  for (const auto& unit : state_->units()) {
    shards += unit->packed_bytes();
    m.parameter_bytes += unit->packed_bytes() + unit->full_bytes_now();
    m.gradient_bytes += unit->shard_gradient_bytes() + unit->gradient_bytes_now();
  }
  m.peak_parameter_bytes = shards + state_->bytes()->peak;
  return m;
}

GroupPtr ShardedModel::group() const { return state_->group_ptr(); }

}  // namespace ddp
