// SGD state round trip (a resumed run continues bit for bit), its format and checks; RNG state; the checkpoint dict.
#include <gtest/gtest.h>

#include <torch/optim/sgd.h>
#include <cstdlib>

#include "checkpoint_test_util.h"
#include "ddp/dist/errors.h"
#include "ddp/train/checkpoint.h"
#include "train/trainer_job.h"

namespace ddp::testing {
namespace {

using torch::optim::SGD;
using torch::optim::SGDOptions;

Net seeded_net(uint64_t seed) {
  at::manual_seed(seed);
  return Net();
}

void train_step(Net& net, SGD& opt, const at::Tensor& x) {
  opt.zero_grad();
  net->forward(x).pow(2).mean().backward();
  opt.step();
}

SGDOptions options() { return SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(1e-3); }

TEST(OptimizerState, ResumedRunIsBitIdentical) {
  at::manual_seed(9);
  std::vector<at::Tensor> batches;
  for (int i = 0; i < 4; ++i) batches.push_back(at::randn({4, 1, 4, 4}));

  Net straight = seeded_net(5);
  SGD straight_opt(straight->parameters(), options());
  for (const auto& x : batches) train_step(straight, straight_opt, x);

  TempDir dir;
  {
    Net first = seeded_net(5);
    SGD opt(first->parameters(), options());
    for (int i = 0; i < 3; ++i) train_step(first, opt, batches[i]);
    train::CheckpointContents c;
    c.model = train::state_dict(*first);
    c.optimizer = train::optimizer_state_dict(opt);
    c.epoch = 0;
    c.step = 3;
    train::save_atomic(train::to_ivalue(c), dir.file("c.pt"));
  }
  Net resumed = seeded_net(77);                     // other weights ...
  SGD opt(resumed->parameters(), SGDOptions(1.0));  // ... and other options, all replaced
  const auto c = train::checkpoint_from_ivalue(train::load_checkpoint(dir.file("c.pt")), dir.file("c.pt"));
  EXPECT_EQ(c.step, 3);
  train::load_state_dict(*resumed, c.model);
  train::load_optimizer_state_dict(opt, c.optimizer);
  const auto& o = static_cast<const SGDOptions&>(opt.param_groups()[0].options());
  EXPECT_EQ(o.lr(), 0.1);
  EXPECT_EQ(o.dampening(), 0.1);
  train_step(resumed, opt, batches[3]);

  const auto want = train::state_dict(*straight), got = train::state_dict(*resumed);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(bitwise_difference(got[i].second, want[i].second), "") << want[i].first;
}

TEST(OptimizerState, FormatIsPytorchs) {
  Net net = seeded_net(1);
  SGD opt(net->parameters(), SGDOptions(0.05).momentum(0.9).nesterov(true));
  auto before = train::optimizer_state_dict(opt).toGenericDict();
  EXPECT_TRUE(before.at(std::string("state")).toGenericDict().empty());
  train_step(net, opt, at::randn({2, 1, 4, 4}));
  const auto sd = train::optimizer_state_dict(opt).toGenericDict();
  const auto groups = sd.at(std::string("param_groups")).toList();
  ASSERT_EQ(groups.size(), 1u);
  const auto g = groups.get(0).toGenericDict();
  std::vector<std::string> keys;
  for (const auto& item : g) keys.push_back(item.key().toStringRef());
  EXPECT_EQ(keys, (std::vector<std::string>{"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize",
                                            "foreach", "differentiable", "params"}));
  EXPECT_EQ(g.at(std::string("params")).toIntVector(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_TRUE(g.at(std::string("nesterov")).toBool());
  const auto state = sd.at(std::string("state")).toGenericDict();
  ASSERT_EQ(state.size(), 9u);
  const auto params = net->parameters();
  for (int64_t i = 0; i < 9; ++i) {
    const at::Tensor buf = state.at(i).toGenericDict().at(std::string("momentum_buffer")).toTensor();
    EXPECT_EQ(buf.sizes(), params[i].sizes());
  }
}

TEST(OptimizerState, LoadRejectsWhatDoesNotFit) {
  Net net = seeded_net(1);
  SGD opt(net->parameters(), SGDOptions(0.1).momentum(0.9));
  train_step(net, opt, at::randn({2, 1, 4, 4}));
  const c10::IValue good = train::optimizer_state_dict(opt);

  std::vector<at::Tensor> two = {net->parameters()[0], net->parameters()[1]};
  SGD fewer(two, SGDOptions(0.1));
  EXPECT_NE(error_of([&] {
              train::load_optimizer_state_dict(fewer, good);
            }).find("param_groups[0] has 9 parameters in the state, 2 in the optimizer"),
            std::string::npos);

  SGD split(std::vector<torch::optim::OptimizerParamGroup>{{two}, {{net->parameters()[2]}}}, SGDOptions(0.1));
  EXPECT_NE(error_of([&] {
              train::load_optimizer_state_dict(split, good);
            }).find("the state has 1 param groups, the optimizer 2"),
            std::string::npos);

  auto state_of = [](const c10::IValue& sd, int64_t i) {
    return sd.toGenericDict().at(std::string("state")).toGenericDict().at(i).toGenericDict();
  };
  c10::IValue wrong_shape = train::optimizer_state_dict(opt);
  state_of(wrong_shape, 1).insert_or_assign(std::string("momentum_buffer"), at::zeros({5}));
  EXPECT_NE(error_of([&] {
              train::load_optimizer_state_dict(opt, wrong_shape);
            }).find("state[1][\"momentum_buffer\"] has shape [5], its parameter [2, 1, 3, 3]"),
            std::string::npos);

  c10::IValue unknown = train::optimizer_state_dict(opt);
  c10::impl::GenericDict no_buffer(c10::StringType::get(), c10::AnyType::get());
  unknown.toGenericDict().at(std::string("state")).toGenericDict().insert(int64_t(40), no_buffer);
  EXPECT_NE(error_of([&] {
              train::load_optimizer_state_dict(opt, unknown);
            }).find("\"state\" has an entry for parameter 40, which no param group lists"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              train::load_optimizer_state_dict(opt, c10::IValue(int64_t(3)));
            }).find("expected optimizer.state_dict()'s dict"),
            std::string::npos);
  // The failed loads changed nothing.
  const c10::IValue after = train::optimizer_state_dict(opt);
  for (int64_t i = 0; i < 9; ++i)
    EXPECT_TRUE(at::equal(state_of(after, i).at(std::string("momentum_buffer")).toTensor(),
                          state_of(good, i).at(std::string("momentum_buffer")).toTensor()))
        << i;
}

TEST(RngState, RoundTripRepeatsTheDraws) {
  const at::Tensor state = train::get_rng_state();
  EXPECT_EQ(state.scalar_type(), at::kByte);
  EXPECT_EQ(state.numel(), 5056);  // torch.get_rng_state()'s size
  const at::Tensor first = at::rand({10});
  EXPECT_FALSE(at::equal(at::rand({10}), first));
  train::set_rng_state(state);
  EXPECT_TRUE(at::equal(at::rand({10}), first));
  EXPECT_NE(error_of([] {
              train::set_rng_state(at::zeros({7}, at::kByte));
            }).find("expected torch.get_rng_state()'s 1-D uint8 CPU tensor of 5056 bytes, got Byte [7]"),
            std::string::npos);
}

// A device's default generator, through the device-generic calls (the CPU's here; test_cuda.cpp's twin on a GPU):
// its state is the CPU one's, and setting it repeats the draws.
TEST(RngState, TheDevicesGeneratorRoundTrips) {
  const at::Device cpu(at::kCPU);
  const at::Tensor state = train::get_rng_state(cpu);
  EXPECT_TRUE(at::equal(state, train::get_rng_state()));
  const at::Tensor first = at::rand({10});
  train::set_rng_state(cpu, state);
  EXPECT_TRUE(at::equal(at::rand({10}), first));
  EXPECT_NE(error_of([&] {
              train::set_rng_state(cpu, at::zeros({7}, at::kByte));
            }).find("expected torch.get_rng_state()'s 1-D uint8 CPU tensor of 5056 bytes"),
            std::string::npos);
}

// --deterministic: ATen's, cuDNN's and cuBLAS's deterministic settings while the fit runs, the previous ones after.
TEST(Deterministic, TheScopeSetsAndRestores) {
  auto& ctx = at::globalContext();
  ASSERT_FALSE(ctx.deterministicAlgorithms());
  const bool benchmark = ctx.benchmarkCuDNN(), cudnn = ctx.deterministicCuDNN();
  {
    const train::detail::DeterministicScope off(false);
    EXPECT_FALSE(ctx.deterministicAlgorithms());
  }
  {
    const train::detail::DeterministicScope on(true);
    EXPECT_TRUE(ctx.deterministicAlgorithms());
    EXPECT_FALSE(ctx.deterministicAlgorithmsWarnOnly());
    EXPECT_TRUE(ctx.deterministicCuDNN());
    EXPECT_FALSE(ctx.benchmarkCuDNN());
    ASSERT_NE(std::getenv("CUBLAS_WORKSPACE_CONFIG"), nullptr);
  }
  EXPECT_FALSE(ctx.deterministicAlgorithms());
  EXPECT_EQ(ctx.benchmarkCuDNN(), benchmark);
  EXPECT_EQ(ctx.deterministicCuDNN(), cudnn);
}

TEST(CheckpointContents, RoundTripAndChecks) {
  TempDir dir;
  Net net = seeded_net(2);
  train::CheckpointContents c;
  c.model = train::state_dict(*net);
  c.epoch = 4;
  c.step = 1234;
  c.rng = train::get_rng_state();
  c.sampler.insert("epoch", int64_t(4));
  c.schedule.insert("lr", 0.25);
  c.config.insert("model", std::string("fashion_cnn"));
  c.config.insert("amp", false);
  c.extra.insert("losses", c10::List<double>({1.5, 0.5}));
  train::save_atomic(train::to_ivalue(c), dir.file("c.pt"));
  const auto back = train::checkpoint_from_ivalue(train::load_checkpoint(dir.file("c.pt")), "c.pt");
  EXPECT_EQ(back.epoch, 4);
  EXPECT_EQ(back.step, 1234);
  EXPECT_TRUE(at::equal(back.rng, c.rng));
  EXPECT_EQ(back.sampler.at("epoch").toInt(), 4);
  EXPECT_EQ(back.schedule.at("lr").toDouble(), 0.25);
  EXPECT_EQ(back.config.at("model").toStringRef(), "fashion_cnn");
  EXPECT_FALSE(back.config.at("amp").toBool());
  const auto losses = back.extra.at("losses").toListRef();  // a plain list now, as Python would see it
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_EQ(losses[0].toDouble(), 1.5);
  EXPECT_EQ(losses[1].toDouble(), 0.5);
  EXPECT_TRUE(back.optimizer.isNone());
  ASSERT_EQ(back.model.size(), c.model.size());

  c.config.insert("bad", at::ones({1}));
  EXPECT_NE(error_of([&] { train::to_ivalue(c); }).find("checkpoint config[\"bad\"] is a Tensor"), std::string::npos);
  c10::impl::GenericDict no_model(c10::StringType::get(), c10::AnyType::get());
  no_model.insert("epoch", int64_t(1));
  EXPECT_NE(error_of([&] {
              train::checkpoint_from_ivalue(no_model, "x.pt");
            }).find("x.pt: not a checkpoint: it has no \"model\" entry"),
            std::string::npos);
}

}  // namespace
}  // namespace ddp::testing
