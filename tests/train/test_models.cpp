// The models: shapes, parameter names and counts, patch whitening, FashionNet's layers.
#include <gtest/gtest.h>

#include "ddp/dist/backend.h"
#include "ddp/parallel/fully_shard.h"
#include "ddp/train/models/airbench.h"
#include "ddp/train/models/fashion_cnn.h"
#include "ddp/train/models/fashion_net.h"
#include "ddp/train/models/resnet.h"
#include "ddp/train/models/resnet50.h"

namespace ddp::models {
namespace {

int64_t count(const torch::nn::Module& m, bool trainable_only) {
  int64_t n = 0;
  for (const auto& p : m.parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

// FashionNet's layers as its header documents them, composed by hand from its own tensors (training mode:
// BatchNorm on the batch's statistics).
TEST(FashionNet, LayersAsDocumentedAndSize) {
  FashionNet net;
  // convs 1*16*9 + 16*32*9 + 32*32*9 + 32*64*9, BatchNorms 2*(16+32+32+64), head 576*10 + 10.
  EXPECT_EQ(count(*net, false), 144 + 4608 + 9216 + 18432 + 2 * 144 + 5770);
  at::manual_seed(0);
  const at::Tensor x = at::randn({8, 1, 28, 28});
  auto p = net->named_parameters();
  auto conv = [&](const char* name, const at::Tensor& h) {
    return at::conv2d(h, p[std::string(name) + ".weight"], {}, 1, 1);
  };
  auto norm_relu = [&](const char* name, const at::Tensor& h) {
    return at::relu(at::batch_norm(h, p[std::string(name) + ".weight"], p[std::string(name) + ".bias"], {}, {},
                                   /*training=*/true, 0.1, 1e-5, false));
  };
  at::Tensor h = norm_relu("norm1", at::max_pool2d(conv("conv1", x), 2));  // in NCHW
  h = norm_relu("norm2", conv("conv2", h));
  h = norm_relu("norm3", at::max_pool2d(conv("conv3", h), 2));
  h = norm_relu("norm4", at::max_pool2d(conv("conv4", h), 2));
  const at::Tensor want = at::linear(h.flatten(1), p["head.weight"], p["head.bias"]);
  const at::Tensor got = net->forward(x);  // in NHWC: the same values up to the order of float32 sums
  EXPECT_EQ(got.sizes(), (std::vector<int64_t>{8, 10}));
  // Each logit sums 576 products of O(1) activations after ~300-term convolution sums: a relative error of a few
  // hundred float32 epsilons bounds what a different summation order can change.
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4)) << (got - want).abs().max().item<double>();
  try {
    net->forward(at::randn({2, 3, 32, 32}));
    ADD_FAILURE() << "a CIFAR-sized batch was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("[N, 1, 28, 28], got [2, 3, 32, 32]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(FashionNet(0), std::invalid_argument);
}

TEST(ResNet18, TorchvisionLayoutAndSize) {
  ResNet18 net;
  // torchvision.models.resnet18(num_classes=10) has 11,181,642 parameters.
  EXPECT_EQ(count(*net, false), 11181642);
  auto params = net->named_parameters();
  for (const char* key : {"conv1.weight", "bn1.weight", "layer1.0.conv1.weight", "layer2.0.downsample.0.weight",
                          "layer2.0.downsample.1.bias", "layer4.1.bn2.weight", "fc.weight", "fc.bias"})
    EXPECT_NE(params.find(key), nullptr) << key;
  EXPECT_NE(net->named_buffers().find("layer3.0.downsample.1.running_var"), nullptr);
  net->eval();
  EXPECT_EQ(net->forward(at::randn({2, 3, 32, 32})).sizes(), (std::vector<int64_t>{2, 10}));
  ResNet18 cifar(ResNet18Options{10, true});
  EXPECT_EQ(count(*cifar, false), 11181642 - 64 * 3 * 49 + 64 * 3 * 9);
  EXPECT_EQ(cifar->forward(at::randn({2, 3, 32, 32})).sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(ResNet50, TorchvisionLayoutAndSize) {
  ResNet50 net(10);
  // torchvision.models.resnet50(num_classes=10): 23,528,522 parameters, 320 state_dict entries.
  EXPECT_EQ(count(*net, false), 23528522);
  EXPECT_EQ(net->named_parameters().size() + net->named_buffers().size(), 320u);
  auto params = net->named_parameters();
  // v1.5: the stride is in the 3x3 convolution; the 1x1 downsample carries it too.
  for (const char* key : {"conv1.weight", "layer1.0.downsample.0.weight", "layer2.0.conv2.weight",
                          "layer3.5.bn3.weight", "layer4.2.conv3.weight", "fc.weight"})
    ASSERT_NE(params.find(key), nullptr) << key;
  EXPECT_EQ(params["layer2.0.conv2.weight"].sizes(), (std::vector<int64_t>{128, 128, 3, 3}));
  EXPECT_EQ(params["fc.weight"].sizes(), (std::vector<int64_t>{10, 2048}));
  net->eval();
  EXPECT_EQ(net->forward(at::randn({2, 3, 64, 64})).sizes(), (std::vector<int64_t>{2, 10}));
}

// Sharded (--strategy fsdp-*), each residual block is a unit of its own: the root (stem, fc) and one unit per
// block, named as torchvision names them, and the sharded forward equals the plain one.
TEST(ResNets, EachBlockIsAUnitWhenSharded) {
  const auto units_of = [](const std::shared_ptr<torch::nn::Module>& net) {
    FullyShardOptions o;
    o.group = create_backend("local", {});
    ShardedModel sharded(net, o);
    std::vector<std::string> firsts;  // each unit's first parameter, the root's too
    for (const auto& names : sharded.unit_parameter_names()) firsts.push_back(names.front());
    return firsts;
  };
  EXPECT_EQ(units_of(ResNet18(ResNet18Options{10, true}).ptr()),
            (std::vector<std::string>{"conv1.weight", "layer1.0.conv1.weight", "layer1.1.conv1.weight",
                                      "layer2.0.conv1.weight", "layer2.1.conv1.weight", "layer3.0.conv1.weight",
                                      "layer3.1.conv1.weight", "layer4.0.conv1.weight", "layer4.1.conv1.weight"}));
  ResNet18 r18(ResNet18Options{10, true});
  r18->eval();
  const at::Tensor x = at::randn({2, 3, 32, 32});
  const at::Tensor plain = r18->forward(x);
  {
    FullyShardOptions o;
    o.group = create_backend("local", {});
    FullyShard<ResNet18> sharded(r18, o);
    EXPECT_TRUE(at::equal(sharded(x), plain));
  }
  ResNet50 r50(10);
  const auto units50 = units_of(r50.ptr());
  ASSERT_EQ(units50.size(), 1u + 3 + 4 + 6 + 3);
  EXPECT_EQ(units50[1], "layer1.0.conv1.weight");
  EXPECT_EQ(units50.back(), "layer4.2.conv1.weight");
}

// The covariance of whitened patches is diag(lambda / (lambda + 0.01)).
TEST(PatchWhitening, DecorrelatesPatches) {
  at::manual_seed(1);
  at::Tensor data = at::randn({64, 3, 8, 8}) * at::tensor({1.0f, 2.0f, 0.5f}).view({1, 3, 1, 1});
  data = data + data.roll(1, 3);  // neighbouring pixels correlate
  at::Tensor w = patch_whitening(data);
  ASSERT_EQ(w.sizes(), (std::vector<int64_t>{27, 3, 3, 3}));
  at::Tensor patches = data.unfold(2, 3, 1).unfold(3, 3, 1).permute({0, 2, 3, 1, 4, 5}).reshape({-1, 27});
  at::Tensor out = patches.to(at::kDouble).mm(w.reshape({27, 27}).t().to(at::kDouble));
  at::Tensor cov = out.t().mm(out) / double(out.size(0) - 1);
  at::Tensor x = patches.to(at::kDouble) / std::sqrt(double(patches.size(0) - 1));
  at::Tensor lambda = std::get<0>(at::linalg_eigh(x.t().mm(x))).flip(0);
  at::Tensor expected = at::diag(lambda / (lambda + 1e-2));
  // The filters come from a float32 eigendecomposition of a 27x27 covariance:
  // backward error ~ 27 u |C| (u = 6e-8), magnified up to 1/(lambda_min + 0.01)
  // <= 100 by the whitening: ~1.6e-4 on entries <= 1. Without the whitening (or
  // with the wrong eigenvectors) off-diagonal entries are of order 0.1-1.
  EXPECT_TRUE(at::allclose(cov, expected, 0, 2e-4)) << (cov - expected).abs().max();
}

// airbench's filters: the 2x2 patches' covariance after the first 12 filters is diag(l / (l + eps)) over the
// eigenvalues l of the patch covariance (1/n), and the last 12 filters are the first 12 negated.
TEST(AirbenchWhitening, WhitensPatchesAndMirrorsTheFilters) {
  at::manual_seed(3);
  at::Tensor data = at::randn({64, 3, 8, 8}) * at::tensor({1.0f, 2.0f, 0.5f}).view({1, 3, 1, 1});
  data = data + data.roll(1, 3);
  const double eps = 5e-4;
  at::Tensor w = airbench_whitening(data, 2, eps);
  ASSERT_EQ(w.sizes(), (std::vector<int64_t>{24, 3, 2, 2}));
  EXPECT_TRUE(at::equal(w.narrow(0, 12, 12), -w.narrow(0, 0, 12)));
  at::Tensor patches = data.unfold(2, 2, 1).unfold(3, 2, 1).permute({0, 2, 3, 1, 4, 5}).reshape({-1, 12});
  at::Tensor p = patches.to(at::kDouble);
  at::Tensor out = p.mm(w.narrow(0, 0, 12).reshape({12, 12}).t().to(at::kDouble));
  at::Tensor cov = out.t().mm(out) / double(out.size(0));
  at::Tensor lambda = std::get<0>(at::linalg_eigh(p.t().mm(p) / double(p.size(0)))).flip(0);
  at::Tensor expected = at::diag(lambda / (lambda + eps));
  // Double-precision filters rounded to float32 (relative 6e-8 each), so the whitened covariance is off by
  // ~2 x 12 x 6e-8 relative on entries <= 1: 1e-5 bounds it. Unwhitened, off-diagonals are of order 0.1-1.
  EXPECT_TRUE(at::allclose(cov, expected, 0, 1e-5)) << (cov - expected).abs().max();
  EXPECT_THROW(airbench_whitening(at::randn({3, 8, 8})), std::invalid_argument);
}

// airbench94's layout: 1,972,792 parameters (1,970,176 trainable: 3x3 convs, the head, BatchNorm biases and the
// whitening bias), frozen whitening weights and BatchNorm scales, identity-initialised convolutions.
TEST(Airbench, LayoutFrozenTensorsAndDiracInit) {
  at::manual_seed(4);
  Airbench net(airbench_whitening(at::randn({16, 3, 8, 8})));
  EXPECT_EQ(count(*net, false), 1972792);
  EXPECT_EQ(count(*net, true), 1972792 - 288 - 2 * (64 + 256 + 256));
  auto params = net->named_parameters();
  EXPECT_FALSE(params["whiten.weight"].requires_grad());
  EXPECT_TRUE(params["whiten.bias"].requires_grad());
  EXPECT_TRUE(at::equal(params["whiten.bias"], at::zeros({24})));
  EXPECT_FALSE(params["group2.norm1.weight"].requires_grad());
  EXPECT_TRUE(params["group2.norm1.bias"].requires_grad());
  EXPECT_FALSE(params.contains("head.bias"));
  // group1.conv1 (24 -> 64): its first 24 filters are the identity on their channel, the rest random.
  at::Tensor w = params["group1.conv1.weight"];
  at::Tensor dirac = at::zeros({24, 24, 3, 3});
  for (int64_t i = 0; i < 24; ++i) dirac[i][i][1][1] = 1;
  EXPECT_TRUE(at::equal(w.narrow(0, 0, 24), dirac));
  EXPECT_GT(w.narrow(0, 24, 40).abs().sum().item<double>(), 0);
  auto bn = net->named_modules()["group3.norm2"]->as<torch::nn::BatchNorm2d>();
  EXPECT_DOUBLE_EQ(bn->options.eps(), 1e-12);
  EXPECT_DOUBLE_EQ(*bn->options.momentum(), 0.4);
  at::Tensor out = net->forward(at::randn({4, 3, 32, 32}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{4, 10}));
  out.sum().backward();
  EXPECT_FALSE(params["whiten.weight"].grad().defined());
  EXPECT_TRUE(params["whiten.bias"].grad().defined());
  EXPECT_TRUE(params["head.weight"].grad().defined());
}

// A channels-last batch (GELU then runs on the NHWC view) gives the NCHW batch's logits and gradients, up to
// float32 summation order and GELU's vectorized vs scalar erf (a few ulp): 1e-4 relative on O(1) values.
TEST(Airbench, ChannelsLastEqualsNchw) {
  at::manual_seed(5);
  Airbench net(airbench_whitening(at::randn({16, 3, 8, 8})));
  const at::Tensor x = at::randn({4, 3, 32, 32});
  auto logits_and_grad = [&](const at::Tensor& input) {
    net->zero_grad();
    at::Tensor out = net->forward(input);
    out.square().sum().backward();
    return std::make_pair(out.detach(), net->named_parameters()["group2.conv1.weight"].grad().clone());
  };
  auto [a, ga] = logits_and_grad(x);
  auto [b, gb] = logits_and_grad(x.contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(at::allclose(a, b, 1e-4, 1e-4)) << (a - b).abs().max();
  EXPECT_TRUE(at::allclose(ga, gb, 1e-4, 1e-4 * ga.abs().max().item<double>())) << (ga - gb).abs().max();
}

TEST(ResNet9BagOfTricks, ShapesFrozenLayersAndGhostBatchNorm) {
  at::manual_seed(2);
  at::Tensor w = patch_whitening(at::randn({32, 3, 8, 8}));
  ResNet9BagOfTricks net(w, 10, 0.125, 4);
  EXPECT_FALSE(net->named_parameters()["conv1.weight"].requires_grad());
  EXPECT_TRUE(at::equal(net->named_parameters()["conv1.weight"], w));
  EXPECT_FALSE(net->named_parameters()["conv3.norm.weight"].requires_grad());
  EXPECT_TRUE(net->named_parameters()["conv3.norm.bias"].requires_grad());
  EXPECT_EQ(net->named_buffers()["conv3.norm.running_mean"].numel(), 128 * 4);
  at::Tensor out = net->forward(at::randn({8, 3, 32, 32}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{8, 10}));
  out.sum().backward();
  EXPECT_FALSE(net->named_parameters()["conv1.weight"].grad().defined());
  EXPECT_TRUE(net->named_parameters()["linear.weight"].grad().defined());
  EXPECT_THROW(net->forward(at::randn({6, 3, 32, 32})), std::invalid_argument);  // 6 does not divide by 4
  net->eval();
  EXPECT_EQ(net->forward(at::randn({3, 3, 32, 32})).sizes(), (std::vector<int64_t>{3, 10}));
}

// Ghost batch norm over 2 splits equals plain batch norm on each slice: slice s holds
// the samples s, s + 2, s + 4 (the [N, C] -> [N / 2, 2C] reshape interleaves them).
TEST(GhostBatchNorm, EqualsBatchNormPerSlice) {
  at::manual_seed(4);
  GhostBatchNorm gbn(5, 2);
  at::Tensor x = at::randn({6, 5, 4, 4});
  at::Tensor ours = gbn->forward(x);
  for (int s = 0; s < 2; ++s) {
    at::Tensor half = x.view({3, 2, 5, 4, 4}).select(1, s);
    at::Tensor rm = at::zeros({5}), rv = at::ones({5});
    at::Tensor ref = at::batch_norm(half, {}, {}, rm, rv, true, 0.1, 1e-5, false);
    // Both float32 batch norms over 48 values per channel: sums within gamma_48 = 2.9e-6
    // of exact, so normalised outputs (of order 1) agree to a few 1e-6.
    EXPECT_TRUE(at::allclose(ours.view({3, 2, 5, 4, 4}).select(1, s), ref, 1e-5, 1e-5));
    EXPECT_TRUE(at::allclose(gbn->running_mean.view({2, 5}).select(0, s), rm, 1e-6, 1e-6));
  }
}

}  // namespace
}  // namespace ddp::models
