// State dicts and checkpoints both ways with python3-torch (checkpoint_interop.py), values compared bit for bit.
#include <c10/util/string_utils.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

#include "checkpoint_test_util.h"
#include "ddp/train/checkpoint.h"

namespace ddp::testing {
namespace {

// (a) Python's torch.load reads our state dict and checkpoint into a plain nn.Module and SGD.
TEST(CheckpointInterop, PythonLoadsOurFiles) {
  TempDir dir;
  at::manual_seed(1);
  Net net;
  torch::optim::SGD opt(net->parameters(),
                        torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-4));
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    net->forward(at::randn({4, 1, 4, 4})).pow(2).mean().backward();
    opt.step();
  }
  train::save_state_dict(train::state_dict(*net), dir.file("cpp_sd.pt"));
  train::CheckpointContents c;
  c.model = train::state_dict(*net);
  c.optimizer = train::optimizer_state_dict(opt);
  c.epoch = 3;
  c.step = 12;
  c.rng = train::get_rng_state();
  const at::Tensor draw = at::rand({5});  // what Python must draw after set_rng_state(ckpt["rng"]["cpu"])
  c.config.insert("lr", 0.05);
  c.config.insert("name", std::string("interop"));
  c.config.insert("flag", true);
  c.sampler.insert("epoch", int64_t(3));
  c.sampler.insert("seed", int64_t(17));
  c.schedule.insert("warmup", 0.5);
  c.extra.insert("note", std::string("from C++"));
  train::save_atomic(train::to_ivalue(c), dir.file("cpp_ckpt.pt"));

  RefTensors ref;
  for (const auto& [name, t] : train::state_dict(*net)) ref.emplace_back("model/" + name, t);
  const auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& st = static_cast<const torch::optim::SGDParamState&>(
        *opt.state().at(c10::guts::to_string(params[i].unsafeGetTensorImpl())));
    ref.emplace_back("momentum/" + std::to_string(i), st.momentum_buffer());
  }
  ref.emplace_back("rng_draw", draw);
  write_ref(dir.file("cpp_ref"), ref);

  auto [status, out] = run_oracle("check " + dir.path());
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("OK"), std::string::npos) << out;
}

// (b) We load what Python saved: model.state_dict() (an OrderedDict), DDP-style "module." keys, a plain
// dict, one saved "on a GPU", and a checkpoint with the optimizer, a step beyond 32 bits and the RNG state.
TEST(CheckpointInterop, WeLoadPythonsFiles) {
  TempDir dir;
  auto [status, out] = run_oracle("write " + dir.path());
  ASSERT_EQ(status, 0) << out;
  const auto ref = read_ref(dir.file("py_ref"));

  auto check_net = [&](Net& net, const std::string& what) {
    for (const auto& [name, t] : train::state_dict(*net))
      EXPECT_EQ(bitwise_difference(t, ref.at("model/" + name)), "") << what << ": " << name;
  };
  for (const char* file : {"py_ordered.pt", "py_module.pt", "py_plain.pt", "py_cuda.pt", "py_ckpt.pt"}) {
    const train::StateDict sd = train::load_state_dict_file(dir.file(file));
    ASSERT_EQ(sd.size(), net_keys().size()) << file;
    const std::string prefix = std::string(file) == "py_module.pt" ? "module." : "";
    for (size_t i = 0; i < sd.size(); ++i) EXPECT_EQ(sd[i].first, prefix + net_keys()[i]) << file;
    at::manual_seed(99);
    Net net;
    train::load_state_dict(*net, sd);
    check_net(net, file);
  }

  const auto c = train::checkpoint_from_ivalue(train::load_checkpoint(dir.file("py_ckpt.pt")), "py_ckpt.pt");
  EXPECT_EQ(c.epoch, 7);
  EXPECT_EQ(c.step, (int64_t(1) << 33) + 5);
  EXPECT_EQ(c.config.at("lr").toDouble(), 0.1);
  EXPECT_EQ(c.config.at("name").toStringRef(), "py");
  EXPECT_EQ(c.config.at("neg").toInt(), -3);
  EXPECT_EQ(c.config.at("big").toInt(), -(int64_t(1) << 40));
  EXPECT_TRUE(c.config.at("flag").toBool());
  EXPECT_EQ(c.sampler.at("epoch").toInt(), 7);

  Net net;
  train::load_state_dict(*net, c.model);
  check_net(net, "py_ckpt.pt [model]");
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1.0));
  train::load_optimizer_state_dict(opt, c.optimizer);
  const auto& o = static_cast<const torch::optim::SGDOptions&>(opt.param_groups()[0].options());
  EXPECT_EQ(o.lr(), 0.1);
  EXPECT_EQ(o.momentum(), 0.9);
  const auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& st = static_cast<const torch::optim::SGDParamState&>(
        *opt.state().at(c10::guts::to_string(params[i].unsafeGetTensorImpl())));
    EXPECT_EQ(bitwise_difference(st.momentum_buffer(), ref.at("momentum/" + std::to_string(i))), "") << i;
  }
  train::set_rng_state(c.rng);
  EXPECT_EQ(bitwise_difference(at::rand({5}), ref.at("rng_draw")), "");
}

}  // namespace
}  // namespace ddp::testing
