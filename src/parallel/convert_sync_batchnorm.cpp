// convert_sync_batchnorm and batch_norm_child: swapping BatchNorm children for
// SyncBatchNorms in a LibTorch module tree, and calling them by name.
//
// A LibTorch module may reach a child three ways: through the registry
// (named_children, what state dicts and replace_module see), through a
// container's own list (Sequential's AnyModules, ModuleList's and ModuleDict's
// pointers), or through a typed member of its parent. The first two are updated
// here; the third cannot be, so a BatchNorm referenced from anywhere but those
// is refused before anything changes (its forward would keep running the old,
// unsynchronized layer).
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include "ddp/errors.h"
#include "ddp/parallel/sync_batch_norm.h"

namespace ddp {
namespace {

using torch::nn::Module;

// "torch::nn::BatchNorm2d" for a BatchNorm2dImpl: the name users write.
std::string type_name(const Module& m) {
  std::string n = m.name();
  const std::string impl = "Impl";
  if (n.size() > impl.size() && n.compare(n.size() - impl.size(), impl.size(), impl) == 0)
    n.resize(n.size() - impl.size());
  return n;
}

// A SyncBatchNorm taking over a BatchNorm1d/2d/3d's options and tensors; null for other modules.
std::shared_ptr<SyncBatchNormImpl> to_sync(Module& m, const GroupPtr& group) {
  if (auto* b = dynamic_cast<torch::nn::BatchNorm1dImpl*>(&m)) return std::make_shared<SyncBatchNormImpl>(*b, group);
  if (auto* b = dynamic_cast<torch::nn::BatchNorm2dImpl*>(&m)) return std::make_shared<SyncBatchNormImpl>(*b, group);
  if (auto* b = dynamic_cast<torch::nn::BatchNorm3dImpl*>(&m)) return std::make_shared<SyncBatchNormImpl>(*b, group);
  return nullptr;
}

bool is_batch_norm(const Module& m) {
  return dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&m) || dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&m) ||
         dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&m);
}

// Containers that keep a reference of their own to each child, besides the registry.
bool keeps_own_list(const Module& m) {
  return dynamic_cast<const torch::nn::SequentialImpl*>(&m) || dynamic_cast<const torch::nn::ModuleListImpl*>(&m) ||
         dynamic_cast<const torch::nn::ModuleDictImpl*>(&m);
}

// Refuses a BatchNorm below `m` that something other than the registry and its
// container's list references (a typed member, most likely).
void check_replaceable(const Module& m, const std::string& prefix) {
  auto children = m.named_children();  // one more reference to each child while it lives
  const long expected = 2 + (keeps_own_list(m) ? 1 : 0);
  for (const auto& child : children) {
    const std::string path = prefix + child.key();
    if (is_batch_norm(*child.value()) && child.value().use_count() > expected)
      throw InvalidArgument(
          "convert_sync_batchnorm: '" + path + "' (" + type_name(*child.value()) + ") is also held outside its " +
          "parent's registry, e.g. by a typed member such as `torch::nn::BatchNorm2d " + child.key() +
          ";`, whose forward " +
          "would keep calling the unsynchronized layer; call it with ddp::batch_norm_child(*this, \"" + child.key() +
          "\", x) or keep it in a Sequential, ModuleList or ModuleDict. Nothing was converted");
    check_replaceable(*child.value(), path + ".");
  }
}

// Puts `now` in place of `old` (registered as `name`) in m's registry and, for a container, its list.
void replace_child(Module& m, const std::string& name, const std::shared_ptr<Module>& old,
                   const std::shared_ptr<SyncBatchNormImpl>& now) {
  if (auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(&m)) {
    for (auto& any : *seq)
      if (any.ptr() == old) any = torch::nn::AnyModule(now);
  } else if (auto* list = dynamic_cast<torch::nn::ModuleListImpl*>(&m)) {
    for (auto& p : *list)
      if (p == old) p = now;
  } else if (auto* dict = dynamic_cast<torch::nn::ModuleDictImpl*>(&m)) {
    dict->update(std::vector<std::pair<std::string, std::shared_ptr<Module>>>{{name, now}});
    return;  // update() replaced the registry's entry too
  }
  m.replace_module(name, std::static_pointer_cast<Module>(now));
}

void convert_children(Module& m, const GroupPtr& group) {
  for (const auto& child : m.named_children()) {
    if (auto sync = to_sync(*child.value(), group))
      replace_child(m, child.key(), child.value(), sync);
    else if (auto* s = dynamic_cast<SyncBatchNormImpl*>(child.value().get()))
      s->group = group;
    else
      convert_children(*child.value(), group);
  }
}

}  // namespace

std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module, GroupPtr group) {
  if (!module) throw InvalidArgument("convert_sync_batchnorm: the module is null");
  if (auto sync = to_sync(*module, group)) return sync;
  if (auto* s = dynamic_cast<SyncBatchNormImpl*>(module.get())) {
    s->group = std::move(group);
    return module;
  }
  check_replaceable(*module, "");
  convert_children(*module, group);
  return module;
}

at::Tensor batch_norm_child(const Module& parent, const std::string& name, const at::Tensor& x) {
  const auto children = parent.named_children();
  const auto* child = children.find(name);
  if (!child) throw InvalidArgument("batch_norm_child: " + type_name(parent) + " has no child '" + name + "'");
  Module& m = **child;
  if (auto* s = dynamic_cast<SyncBatchNormImpl*>(&m)) return s->forward(x);
  if (auto* b = dynamic_cast<torch::nn::BatchNorm2dImpl*>(&m)) return b->forward(x);
  if (auto* b = dynamic_cast<torch::nn::BatchNorm1dImpl*>(&m)) return b->forward(x);
  if (auto* b = dynamic_cast<torch::nn::BatchNorm3dImpl*>(&m)) return b->forward(x);
  throw InvalidArgument("batch_norm_child: '" + name + "' of " + type_name(parent) + " is a " + type_name(m) +
                        ", not a BatchNorm1d/2d/3d or SyncBatchNorm");
}

}  // namespace ddp
