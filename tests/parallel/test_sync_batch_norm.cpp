// convert_sync_batchnorm on module trees: the project's models keep their
// tensors and their forward, containers are updated, typed members refused.
// (SyncBatchNorm's numbers across ranks: the DDP suite, sync_batch_norm_suite.cpp.)
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/nn.h>

#include <sstream>

#include "ddp/errors.h"
#include "ddp/parallel/sync_batch_norm.h"
#include "ddp/train/models/airbench.h"
#include "ddp/train/models/fashion_cnn.h"
#include "ddp/train/models/resnet.h"
#include "support/rank_threads.h"

namespace ddp::testing {
namespace {

using torch::nn::Module;

GroupPtr handle(ProcessGroup& g) { return g.shared_from_this(); }

// Every parameter and buffer by name, as a state dict lists them.
std::vector<std::pair<std::string, at::Tensor>> state(const Module& m) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : m.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

int count_sync(const Module& m) {
  int n = 0;
  for (const auto& c : m.modules()) n += dynamic_cast<const SyncBatchNormImpl*>(c.get()) != nullptr;
  return n;
}

// Converts `net` (a world of one: SyncBatchNorm is BatchNorm there) and checks
// that it keeps its very tensors and computes what `twin`, unconverted, does:
// outputs, gradients and running statistics equal bit for bit.
template <typename Net>
void expect_converted_like(Net net, Net twin, const at::Tensor& x, int expected_layers) {
  run_ranks("gloo", 1, [&](ProcessGroup& g) {
    const auto before = state(*net);
    EXPECT_EQ(convert_sync_batchnorm(net.ptr(), handle(g)), net.ptr());
    EXPECT_EQ(count_sync(*net), expected_layers);
    const auto after = state(*net);
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_EQ(after[i].first, before[i].first);
      EXPECT_TRUE(after[i].second.is_same(before[i].second)) << after[i].first << " is a new tensor";
    }
    for (int step = 0; step < 2; ++step) {
      at::Tensor a = net->forward(x), b = twin->forward(x);
      EXPECT_TRUE(at::equal(a, b)) << "output, step " << step;
      a.square().sum().backward();
      b.square().sum().backward();
    }
    const auto mine = state(*net), theirs = state(*twin);
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_TRUE(at::equal(mine[i].second, theirs[i].second)) << mine[i].first;
      if (mine[i].second.grad().defined())
        EXPECT_TRUE(at::equal(mine[i].second.grad(), theirs[i].second.grad())) << "gradient of " << mine[i].first;
    }
  });
}

template <typename Net, typename... Args>
std::pair<Net, Net> twins(Args... args) {
  torch::manual_seed(3);
  Net a(args...);
  torch::manual_seed(3);
  Net b(args...);
  return {a, b};
}

TEST(ConvertSyncBatchnorm, FashionCnnKeepsTensorsAndForward) {
  at::set_num_threads(1);
  auto [net, twin] = twins<models::FashionCNN>();
  for (auto* m : {&net, &twin}) (*m)->named_children()["drop"]->eval();  // deterministic
  expect_converted_like(net, twin, at::randn({4, 1, 28, 28}), 2);
  std::ostringstream s;
  s << *net;
  const std::string printed =
      "(bn1): ddp::SyncBatchNorm(32, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)";
  EXPECT_NE(s.str().find(printed), std::string::npos) << s.str();
}

TEST(ConvertSyncBatchnorm, ResNet18InBlocksAndSequentials) {
  at::set_num_threads(1);
  auto [net, twin] = twins<models::ResNet18>(models::ResNet18Options{10, /*cifar_stem=*/true});
  // bn1, two per BasicBlock (8) and one per downsample Sequential (3).
  expect_converted_like(net, twin, at::randn({2, 3, 16, 16}), 1 + 16 + 3);
  auto seq = net->named_modules()["layer2.0.downsample"]->as<torch::nn::Sequential>();
  ASSERT_NE(seq, nullptr);
  EXPECT_EQ(seq->ptr(1), seq->named_children()["1"]) << "the Sequential still calls the old BatchNorm";
  EXPECT_NE(seq->ptr(1)->as<SyncBatchNormImpl>(), nullptr);
}

// The cifar10-airbench recipe's model (--sync-bn): two BatchNorms per group, called by name.
TEST(ConvertSyncBatchnorm, AirbenchGroups) {
  at::set_num_threads(1);
  torch::manual_seed(5);
  const at::Tensor whitening = models::airbench_whitening(at::randn({16, 3, 8, 8}));
  auto [net, twin] = twins<models::Airbench>(whitening);
  expect_converted_like(net, twin, at::randn({2, 3, 32, 32}), 6);
}

// Containers: Sequential, ModuleList and ModuleDict call the new layer; options,
// training mode and frozen parameters carry over; groups are set.
TEST(ConvertSyncBatchnorm, ContainersOptionsAndModes) {
  struct Tree : Module {
    torch::nn::Sequential seq{torch::nn::Linear(3, 4),
                              torch::nn::BatchNorm1d(torch::nn::BatchNorm1dOptions(4).eps(1e-3))};
    torch::nn::ModuleList list{torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(2).momentum(c10::nullopt))};
    torch::nn::ModuleDict dict{std::vector<std::pair<std::string, std::shared_ptr<Module>>>{
        {"norm", torch::nn::BatchNorm3d(torch::nn::BatchNorm3dOptions(5).affine(false)).ptr()}}};
    SyncBatchNorm already{torch::nn::BatchNormOptions(6)};
    Tree() {
      register_module("seq", seq);
      register_module("list", list);
      register_module("dict", dict);
      register_module("already", already);
    }
  };
  auto tree = std::make_shared<Tree>();
  tree->list[0]->eval();
  tree->seq[1]->as<torch::nn::BatchNorm1dImpl>()->weight.set_requires_grad(false);
  run_ranks("gloo", 1, [&](ProcessGroup& g) {
    convert_sync_batchnorm(tree, handle(g));
    auto* s = tree->seq->ptr(1)->as<SyncBatchNormImpl>();
    ASSERT_NE(s, nullptr) << "Sequential's list";
    EXPECT_EQ(tree->seq->named_children()["1"], tree->seq->ptr(1));
    EXPECT_EQ(s->options.eps(), 1e-3);
    EXPECT_FALSE(s->weight.requires_grad());
    EXPECT_TRUE(s->bias.requires_grad());
    EXPECT_TRUE(s->is_training());
    EXPECT_EQ(s->group.get(), &g);
    auto* l = tree->list[0]->as<SyncBatchNormImpl>();
    ASSERT_NE(l, nullptr) << "ModuleList's list";
    EXPECT_EQ(tree->list->named_children()["0"], tree->list[0]);
    EXPECT_FALSE(l->is_training());
    EXPECT_FALSE(l->options.momentum().has_value());
    auto* d = tree->dict["norm"]->as<SyncBatchNormImpl>();
    ASSERT_NE(d, nullptr) << "ModuleDict's dict";
    EXPECT_EQ(tree->dict->named_children()["norm"], tree->dict["norm"]);
    EXPECT_FALSE(d->weight.defined());
    EXPECT_FALSE(d->options.affine());
    EXPECT_EQ(tree->already->group.get(), &g) << "an existing SyncBatchNorm moves to the group";
    EXPECT_EQ(tree->seq->forward(at::randn({3, 3})).sizes(), (at::IntArrayRef{3, 4}));
    // A BatchNorm itself: a new SyncBatchNorm with its tensors.
    torch::nn::BatchNorm2d bn(3);
    auto converted = convert_sync_batchnorm(bn.ptr(), handle(g));
    auto* c = converted->as<SyncBatchNormImpl>();
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(c->running_var.is_same(bn->running_var));
    EXPECT_TRUE(c->num_batches_tracked.is_same(bn->num_batches_tracked));
  });
}

// A BatchNorm its parent also holds in a typed member is refused, and nothing changes.
TEST(ConvertSyncBatchnorm, RefusesTypedMembers) {
  struct Inner : Module {
    torch::nn::BatchNorm2d bn{nullptr};
    Inner() { bn = register_module("bn", torch::nn::BatchNorm2d(2)); }
  };
  struct Outer : Module {
    Outer() {
      register_module("seq", torch::nn::Sequential(torch::nn::BatchNorm1d(2)));
      register_module("inner", std::make_shared<Inner>());
    }
  };
  auto outer = std::make_shared<Outer>();
  try {
    convert_sync_batchnorm(outer);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("convert_sync_batchnorm: 'inner.bn' (torch::nn::BatchNorm2d) is also held "
                                         "outside its parent's registry"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("ddp::batch_norm_child(*this, \"bn\", x)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(count_sync(*outer), 0) << "a refused conversion must change nothing";
}

TEST(BatchNormChild, CallsTheRegisteredLayerOrSaysWhy) {
  torch::nn::Sequential seq(torch::nn::BatchNorm1d(2), torch::nn::Linear(2, 2));
  seq->eval();
  at::Tensor x = at::randn({3, 2});
  EXPECT_TRUE(at::equal(batch_norm_child(*seq, "0", x), seq[0]->as<torch::nn::BatchNorm1dImpl>()->forward(x)));
  EXPECT_THROW(
      {
        try {
          batch_norm_child(*seq, "1", x);
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("'1' of torch::nn::Sequential is a torch::nn::Linear, not a "
                                               "BatchNorm1d/2d/3d or SyncBatchNorm"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      InvalidArgument);
  EXPECT_THROW(batch_norm_child(*seq, "bn", x), InvalidArgument);
  EXPECT_THROW(SyncBatchNorm(torch::nn::BatchNormOptions(0)), InvalidArgument);
  SyncBatchNorm bn(torch::nn::BatchNormOptions(3));
  bn->eval();
  EXPECT_THROW(bn(at::ones({3})), InvalidArgument);
  EXPECT_THROW(bn(at::ones({2, 4})), InvalidArgument);
}

}  // namespace
}  // namespace ddp::testing
