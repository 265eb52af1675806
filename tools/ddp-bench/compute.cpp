// ddp-bench compute: how much of this CPU's (or GPU's) arithmetic each recipe's model uses.
//
//   OMP_NUM_THREADS=1 build/bin/ddp-bench compute --models mlp,cnn,resnet9,airbench --json out.json
//   build/bin/ddp-bench compute --device cuda --models airbench --batch 1024 --layouts nhwc   # bench/compute_peer.py's
//
// First the peak: the best GFLOP/s of a square GEMM (at::mm, --gemm-n) in float32 and in bfloat16,
// on this process's threads. Then per model: its FLOPs per sample, counted from the shapes of the
// convolutions and matrix products of one forward pass (observed through ATen's RecordFunction),
// times 3 for a training step (forward, and backward's two products per layer: the usual estimate),
// and the achieved rate of full training steps (forward, cross-entropy, backward, SGD step) at
// --batch, in float32 and under bfloat16 autocast (as ddp-train's --precision bf16). On --device, the
// model and the batch live there and each step is timed once the device has run it.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/container/any.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "bench.h"
#include "ddp/dist/device.h"
#include "ddp/errors.h"
#include "ddp/train/machine.h"
#include "ddp/train/models/airbench.h"
#include "ddp/train/models/fashion_cnn.h"
#include "ddp/train/models/fashion_net.h"
#include "ddp/train/models/mlp.h"
#include "ddp/train/models/resnet.h"
#include "ddp/train/precision.h"

namespace ddp::bench {
namespace {

using Clock = std::chrono::steady_clock;
using train::Precision;

struct ComputeOptions {
  std::string models = "mlp,cnn,fashionnet,resnet9,airbench,resnet18";
  int64_t batch = 128;
  int64_t steps = 6;  // timed steps per model and precision (after 2 untimed)
  int64_t gemm_n = 2048;
  std::vector<std::string> precisions{"fp32", "bf16"};
  std::vector<std::string> layouts{"nchw", "nhwc"};  // images' layouts; the others have one
  std::string device = "cpu";
  std::string json;
};

struct Model {
  torch::nn::AnyModule net;
  std::vector<int64_t> input;  // one sample's shape
  int64_t classes = 10;
};

Model make_model(const std::string& name) {
  using namespace ddp::models;
  if (name == "mlp") return {torch::nn::AnyModule(MLP(MLPOptions{})), {1024}, 32};
  if (name == "cnn") return {torch::nn::AnyModule(FashionCNN()), {1, 28, 28}, 10};
  if (name == "fashionnet") return {torch::nn::AnyModule(FashionNet()), {1, 28, 28}, 10};
  if (name == "resnet18") return {torch::nn::AnyModule(ResNet18(ResNet18Options{10, false})), {3, 32, 32}, 10};
  if (name == "resnet9")
    return {torch::nn::AnyModule(ResNet9BagOfTricks(patch_whitening(at::randn({64, 3, 24, 24})), 10, 0.125, 16)),
            {3, 32, 32},
            10};
  if (name == "airbench")
    return {torch::nn::AnyModule(Airbench(airbench_whitening(at::randn({64, 3, 32, 32})))), {3, 32, 32}, 10};
  throw InvalidArgument("ddp-bench compute: unknown model '" + name +
                        "'; valid: mlp, cnn, fashionnet, resnet9, airbench, resnet18");
}

// Multiply-adds x 2 of the convolutions and matrix products one call of `fn` runs, from their input shapes.
double count_flops(const std::function<void()>& fn) {
  static thread_local double flops = 0;
  flops = 0;
  auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& f) -> std::unique_ptr<at::ObserverContext> {
        const std::string name = f.name();
        const auto in = f.inputs();
        auto sizes = [&](size_t i) { return in[i].toTensor().sizes(); };
        if (name == "aten::convolution" && in.size() >= 9) {
          auto x = sizes(0), w = sizes(1);
          auto stride = in[3].toIntVector(), pad = in[4].toIntVector(), dil = in[5].toIntVector();
          double out_pixels = 1;
          for (size_t d = 2; d < x.size(); ++d)
            out_pixels *= double((x[d] + 2 * pad[d - 2] - dil[d - 2] * (w[d] - 1) - 1) / stride[d - 2] + 1);
          double per_output = 1;
          for (size_t d = 1; d < w.size(); ++d) per_output *= double(w[d]);  // C/groups x kernel
          flops += 2.0 * double(x[0]) * double(w[0]) * out_pixels * per_output;
        } else if ((name == "aten::addmm" && in.size() >= 3) || (name == "aten::mm" && in.size() >= 2)) {
          const size_t a = name == "aten::addmm" ? 1 : 0;
          auto m = sizes(a), n = sizes(a + 1);
          flops += 2.0 * double(m[0]) * double(m[1]) * double(n[1]);
        }
        return nullptr;
      })
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION}));
  try {
    fn();
  } catch (...) {
    at::removeCallback(handle);
    throw;
  }
  at::removeCallback(handle);
  return flops;
}

double seconds(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Best GFLOP/s of at::mm on n x n matrices of this dtype on `device`.
double gemm_peak(int64_t n, at::ScalarType dtype, const at::Device& device) {
  // As training would run it: a bf16 scope turns oneDNN off where ONEDNN_MAX_CPU_ISA caps it below bf16.
  train::Autocast scope(dtype == at::kBFloat16 ? Precision::BF16 : Precision::FP32, device.type());
  at::Tensor a = at::randn({n, n}).to(device, dtype), b = at::randn({n, n}).to(device, dtype);
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    synchronize(device);
    const auto t = Clock::now();
    at::Tensor c = at::mm(a, b);
    synchronize(device);
    best = std::max(best, 2.0 * double(n) * double(n) * double(n) / seconds(t) / 1e9);
  }
  return best;
}

// Seconds per training step of `m` (on `device`) at this batch, precision and input layout (best of the
// timed steps, each timed once the device has run it).
double step_seconds(Model& m, int64_t batch, int64_t steps, Precision p, bool channels_last, const at::Device& device) {
  std::vector<int64_t> shape{batch};
  shape.insert(shape.end(), m.input.begin(), m.input.end());
  at::Tensor x = at::randn(shape).to(device), y = at::randint(0, m.classes, {batch}, at::kLong).to(device);
  if (channels_last) x = x.contiguous(at::MemoryFormat::ChannelsLast);
  torch::optim::SGD opt(m.net.ptr()->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  double best = 1e30;
  for (int64_t i = 0; i < steps + 2; ++i) {
    synchronize(device);
    const auto t = Clock::now();
    opt.zero_grad();
    at::Tensor logits;
    {
      train::Autocast autocast(p, device.type());
      logits = m.net.forward(x).to(at::kFloat);
    }
    torch::nn::functional::cross_entropy(logits, y).backward();
    opt.step();
    synchronize(device);
    if (i >= 2) best = std::min(best, seconds(t));
  }
  return best;
}

int run_compute(const ComputeOptions& o) {
  const at::Device device = resolve_device(o.device);
  if (device.is_cpu())
    std::printf("ddp-bench compute: on the CPU, %d thread(s); bf16 %s\n", at::get_num_threads(),
                train::bf16_support().native ? "native" : "not native (emulated, slow)");
  else
    std::printf("ddp-bench compute: on %s\n", device.str().c_str());
  print_machine_lines();
  auto has = [](const std::vector<std::string>& v, const char* x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  const bool with_bf16 = has(o.precisions, "bf16");
  const double peak32 = gemm_peak(o.gemm_n, at::kFloat, device),
               peak16 = with_bf16 ? gemm_peak(o.gemm_n, at::kBFloat16, device) : 0;
  std::printf("GEMM peak (at::mm, n=%ld): fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n", long(o.gemm_n), peak32, peak16);
  std::printf("%-9s %-6s %-5s %12s %10s %9s %8s\n", "model", "layout", "dtype", "GFLOP/sample", "samples/s", "GFLOP/s",
              "of peak");
  nlohmann::ordered_json doc = {{"cpu", train::describe(train::cpu_info())},
                                {"device", device.str()},
                                {"threads", at::get_num_threads()},
                                {"gemm_n", o.gemm_n},
                                {"gemm_fp32_gflops", peak32},
                                {"gemm_bf16_gflops", peak16},
                                {"batch", o.batch},
                                {"runs", nlohmann::ordered_json::array()}};
  std::stringstream names(o.models);
  for (std::string name; std::getline(names, name, ',');) {
    Model m = make_model(name);
    std::vector<int64_t> one{2};
    one.insert(one.end(), m.input.begin(), m.input.end());
    m.net.ptr()->eval();  // any batch (ghost batch norm splits training batches)
    const double forward = count_flops([&] {
                             at::NoGradGuard no_grad;
                             m.net.forward(at::randn(one));
                           }) /
                           2;
    m.net.ptr()->train();
    m.net.ptr()->to(device);
    const double per_sample = 3 * forward;
    int64_t params = 0, trainable = 0;
    for (const at::Tensor& t : m.net.ptr()->parameters()) (t.requires_grad() ? trainable : params) += t.numel();
    params += trainable;
    // Images: as stored (NCHW) and channels-last (NHWC, oneDNN's own layout); each in float32 and bfloat16.
    std::vector<bool> channels_last{false};  // what is not an image has one layout
    if (m.input.size() == 3) {
      channels_last.clear();
      for (bool cl : {false, true})
        if (has(o.layouts, cl ? "nhwc" : "nchw")) channels_last.push_back(cl);
    }
    for (bool cl : channels_last) {
      for (const std::string& pname : o.precisions) {
        const Precision p = pname == "bf16" ? Precision::BF16 : Precision::FP32;
        const double rate = double(o.batch) / step_seconds(m, o.batch, o.steps, p, cl, device);
        const double gflops = rate * per_sample / 1e9, peak = p == Precision::FP32 ? peak32 : peak16;
        const char* layout = m.input.size() == 3 ? (cl ? "nhwc" : "nchw") : "-";
        std::printf("%-9s %-6s %-5s %12.4f %10.1f %9.1f %7.1f%%\n", name.c_str(), layout, train::to_string(p).c_str(),
                    per_sample / 1e9, rate, gflops, 100 * gflops / peak);
        std::fflush(stdout);
        doc["runs"].push_back({{"model", name},
                               {"params", params},
                               {"trainable", trainable},
                               {"layout", layout},
                               {"precision", train::to_string(p)},
                               {"gflop_per_sample", per_sample / 1e9},
                               {"samples_per_s", rate},
                               {"gflops", gflops},
                               {"of_peak", gflops / peak}});
      }
    }
  }
  if (!o.json.empty()) write_json(o.json, doc);
  return 0;
}

}  // namespace

void add_compute_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<ComputeOptions>();
  CLI::App* c =
      app.add_subcommand("compute", "achieved GFLOP/s of each model's training step against this CPU's GEMM peak");
  c->add_option("--models", o->models, "comma-separated: mlp, cnn, fashionnet, resnet9, airbench, resnet18")
      ->capture_default_str();
  c->add_option("--batch", o->batch, "samples per step")->capture_default_str()->check(CLI::PositiveNumber);
  c->add_option("--steps", o->steps, "timed steps per model and precision")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--gemm-n", o->gemm_n, "GEMM size for the peak")->capture_default_str()->check(CLI::PositiveNumber);
  c->add_option("--precisions", o->precisions, "comma-separated: fp32, bf16 (bf16 is minutes per model where emulated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  c->add_option("--layouts", o->layouts, "comma-separated, for image models: nchw, nhwc (channels-last)")
      ->delimiter(',')
      ->check(CLI::IsMember({"nchw", "nhwc"}))
      ->capture_default_str();
  c->add_option("--device", o->device, "where the models and batches live: cpu | cuda | cuda:N | auto")
      ->check(refused_by([](const std::string& spec) { check_device_spec(spec); }))
      ->capture_default_str();
  c->add_option("--json", o->json, "also write the results as JSON");
  c->callback([&run, o] { run = [o] { return run_compute(*o); }; });
}

}  // namespace ddp::bench
