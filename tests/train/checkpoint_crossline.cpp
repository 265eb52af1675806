// Checkpoints across LibTorch lines (checkpoint_crossline_test.sh): `write DIR` saves what ddp-train's
// checkpoints hold (a model; SGD with momentum; Adam with amsgrad; AdamW; the RNG state; epoch, step, config)
// and every tensor's bytes beside it; `check DIR`, run by a build against the other LibTorch, loads the files
// with ddp and compares each tensor to those bytes, bit for bit. Exit 0 and "OK", or 1 naming what differs.
// `write` also lays down cpp_sd.pt, cpp_ckpt.pt and cpp_ref as checkpoint_interop.py's `check` reads them.
#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "checkpoint_test_util.h"
#include "ddp/parallel/optimizer_state.h"
#include "ddp/train/checkpoint.h"

namespace ddp::testing {
namespace {

using Make = std::unique_ptr<torch::optim::Optimizer> (*)(Net&);
struct Kind {
  const char* name;
  Make make;
};
// Settings away from the defaults, so that loading must carry them (a fresh optimizer gets lr 1).
const Kind kKinds[] = {
    {"sgd",
     [](Net& n) -> std::unique_ptr<torch::optim::Optimizer> {
       return std::make_unique<torch::optim::SGD>(
           n->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-4));
     }},
    {"adam",
     [](Net& n) -> std::unique_ptr<torch::optim::Optimizer> {
       return std::make_unique<torch::optim::Adam>(
           n->parameters(), torch::optim::AdamOptions(0.02).betas({0.8, 0.99}).eps(1e-6).amsgrad(true));
     }},
    {"adamw",
     [](Net& n) -> std::unique_ptr<torch::optim::Optimizer> {
       return std::make_unique<torch::optim::AdamW>(n->parameters(),
                                                    torch::optim::AdamWOptions(0.01).weight_decay(0.1));
     }},
};

// Each parameter's optimizer state as named tensors (SGD: momentum; Adam(W): step, moments, max).
RefTensors state_tensors(torch::optim::Optimizer& opt, const std::string& kind) {
  RefTensors out;
  const auto params = opt.param_groups()[0].params();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& st = *opt.state().at(optimizer_state_key(params[i]));
    const std::string p = kind + "/" + std::to_string(i) + "/";
    if (kind == "sgd") {
      out.emplace_back(p + "momentum", static_cast<const torch::optim::SGDParamState&>(st).momentum_buffer());
    } else if (kind == "adam") {
      const auto& a = static_cast<const torch::optim::AdamParamState&>(st);
      out.emplace_back(p + "step", at::tensor(int64_t(a.step())));
      out.emplace_back(p + "exp_avg", a.exp_avg());
      out.emplace_back(p + "exp_avg_sq", a.exp_avg_sq());
      out.emplace_back(p + "max_exp_avg_sq", a.max_exp_avg_sq());
    } else {
      const auto& a = static_cast<const torch::optim::AdamWParamState&>(st);
      out.emplace_back(p + "step", at::tensor(int64_t(a.step())));
      out.emplace_back(p + "exp_avg", a.exp_avg());
      out.emplace_back(p + "exp_avg_sq", a.exp_avg_sq());
    }
  }
  return out;
}

void write(const std::string& dir) {
  RefTensors ref;
  for (const Kind& k : kKinds) {
    at::manual_seed(1);
    Net net;
    auto opt = k.make(net);
    for (int i = 0; i < 3; ++i) {
      opt->zero_grad();
      net->forward(at::randn({4, 1, 4, 4})).pow(2).mean().backward();
      opt->step();
    }
    at::Tensor draw;  // what the reader must draw after restoring the RNG state
    train::CheckpointContents c = interop_contents(draw);
    c.model = train::state_dict(*net);
    c.optimizer = train::optimizer_state_dict(*opt);
    train::save_atomic(train::to_ivalue(c), dir + "/cross_" + k.name + ".pt");
    RefTensors mine;
    for (const auto& [name, t] : c.model) mine.emplace_back("model/" + name, t);
    for (auto& e : state_tensors(*opt, k.name)) mine.push_back(e);
    mine.emplace_back("rng_draw", draw);
    write_ref(dir + "/cross_" + k.name + "_ref", mine);
    if (std::string(k.name) == "sgd") {  // checkpoint_interop.py check's file names and reference names
      train::save_state_dict(c.model, dir + "/cpp_sd.pt");
      train::save_atomic(train::to_ivalue(c), dir + "/cpp_ckpt.pt");
      for (const auto& [name, t] : c.model) ref.emplace_back("model/" + name, t);
      const auto st = state_tensors(*opt, "sgd");
      for (size_t i = 0; i < st.size(); ++i) ref.emplace_back("momentum/" + std::to_string(i), st[i].second);
      ref.emplace_back("rng_draw", draw);
    }
  }
  write_ref(dir + "/cpp_ref", ref);
}

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

void check(const std::string& dir) {
  for (const Kind& k : kKinds) {
    const std::string file = dir + "/cross_" + k.name + ".pt";
    const auto ref = read_ref(dir + "/cross_" + k.name + "_ref");
    const auto c = train::checkpoint_from_ivalue(train::load_checkpoint(file), file);
    expect(c.epoch == 3 && c.step == 12,
           file + ": epoch/step " + std::to_string(c.epoch) + "/" + std::to_string(c.step));
    expect(c.config.at("lr").toDouble() == 0.05 && c.config.at("name").toStringRef() == "interop" &&
               c.config.at("flag").toBool() && c.sampler.at("seed").toInt() == 17 &&
               c.schedule.at("warmup").toDouble() == 0.5 && c.extra.at("note").toStringRef() == "from C++",
           file + ": config, sampler, schedule or extra differ");
    at::manual_seed(99);  // other weights than the writer's: loading must replace them
    Net net;
    train::load_state_dict(*net, c.model);
    for (const auto& [name, t] : train::state_dict(*net)) {
      const std::string d = bitwise_difference(t, ref.at("model/" + name));
      expect(d.empty(), file + ": model " + name + ": " + d);
    }
    auto opt = [&] {  // lr 1 everywhere: the file's settings must replace it
      if (std::string(k.name) == "sgd")
        return std::unique_ptr<torch::optim::Optimizer>(
            std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(1.0)));
      if (std::string(k.name) == "adam")
        return std::unique_ptr<torch::optim::Optimizer>(
            std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(1.0).amsgrad(true)));
      return std::unique_ptr<torch::optim::Optimizer>(
          std::make_unique<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(1.0)));
    }();
    train::load_optimizer_state_dict(*opt, c.optimizer);
    const double lr = opt->param_groups()[0].options().get_lr();
    expect(lr == (std::string(k.name) == "sgd"    ? 0.05
                  : std::string(k.name) == "adam" ? 0.02
                                                  : 0.01),
           file + ": lr " + std::to_string(lr) + " was not loaded");
    for (const auto& [name, t] : state_tensors(*opt, k.name)) {
      const std::string d = bitwise_difference(t, ref.at(name));
      expect(d.empty(), file + ": " + name + ": " + d);
    }
    train::set_rng_state(c.rng);
    const std::string d = bitwise_difference(at::rand({5}), ref.at("rng_draw"));
    expect(d.empty(), file + ": the draw after the restored RNG state: " + d);
    opt->zero_grad();  // the restored optimizer steps
    net->forward(at::randn({2, 1, 4, 4})).sum().backward();
    opt->step();
  }
}

}  // namespace
}  // namespace ddp::testing

int main(int argc, char** argv) {
  const std::string mode = argc == 3 ? argv[1] : "";
  if (mode != "write" && mode != "check") {
    std::cerr << "usage: checkpoint_crossline write|check DIR\n";
    return 2;
  }
  try {
    if (mode == "write")
      ddp::testing::write(argv[2]);
    else
      ddp::testing::check(argv[2]);
  } catch (const std::exception& e) {
    std::cerr << "checkpoint_crossline " << mode << " " << argv[2] << ": MISMATCH " << e.what() << "\n";
    return 1;
  }
  std::cout << "checkpoint_crossline " << mode << " " << argv[2] << ": OK (LibTorch " << TORCH_VERSION << ")\n";
  return 0;
}
