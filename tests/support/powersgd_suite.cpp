// PowerSGD in the DDP suite, on every backend and world size. Equality with
// python3-torch's hook is tests/parallel/interop (world 2, bit for bit); here:
// what the hook must do on any world whatever the random Q.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn.h>
#include <torch/optim/sgd.h>

#include <mutex>

#include "ddp/parallel/distributed_data_parallel.h"
#include "ddp/parallel/powersgd.h"
#include "support/ddp_suite.h"

namespace ddp::testing {
namespace {

// Default: a 12x6, two 12x12 (one shape: batched together), a 3x12, biases.
// Squares: four 4x4 matrices, no bias (for the batched hook's full-rank case:
// each bucket is exactly one square, no zero padding to make it singular).
struct Mlp : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr}, d{nullptr};
  explicit Mlp(bool squares) {
    const int64_t in = squares ? 4 : 6, hidden = squares ? 4 : 12, out = squares ? 4 : 3;
    auto linear = [&](int64_t i, int64_t o) {
      return torch::nn::Linear(torch::nn::LinearOptions(i, o).bias(!squares));
    };
    a = register_module("a", linear(in, hidden));
    b = register_module("b", linear(hidden, hidden));
    c = register_module("c", linear(hidden, hidden));
    d = register_module("d", linear(hidden, out));
  }
  at::Tensor forward(at::Tensor x) { return d(torch::tanh(c(torch::tanh(b(torch::tanh(a(x))))))); }
};

std::shared_ptr<Mlp> make_mlp(at::ScalarType dtype, bool squares = false) {
  static std::mutex mu;  // ranks may be threads sharing the global generator
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(3);
  auto m = std::make_shared<Mlp>(squares);
  m->to(dtype);
  return m;
}

// This rank's batch at `step`, different on every rank: 16 samples, so that
// every weight's gradient (a sum of 16 rank-one terms) has full rank.
std::pair<at::Tensor, at::Tensor> batch(ProcessGroup& g, int step, at::ScalarType dtype, bool squares = false) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 * step + g.rank());
  return {at::randn({16, squares ? 4 : 6}, gen).to(dtype), at::randn({16, squares ? 4 : 3}, gen).to(dtype)};
}

// The exact average of this step's local gradients over ranks (float64).
std::vector<at::Tensor> averaged_local_gradients(ProcessGroup& g, Mlp& local, const at::Tensor& x,
                                                 const at::Tensor& y) {
  local.zero_grad();
  torch::mse_loss(local.forward(x), y).backward();
  std::vector<at::Tensor> avg;
  for (auto& p : local.parameters()) {
    at::Tensor s = p.grad().to(at::kDouble);
    g.all_reduce(s);
    avg.push_back(s / g.size());
  }
  return avg;
}

// Every rank holds the same tensor, to the bit.
bool same_everywhere(ProcessGroup& g, const at::Tensor& t) {
  std::vector<at::Tensor> all;
  for (int r = 0; r < g.size(); ++r) all.push_back(at::empty_like(t));
  g.all_gather(all, t);
  for (const auto& o : all)
    if (!at::equal(o, t)) return false;
  return true;
}

// Bytes one compressed step sends: the uncompressed tensors and the P and Q
// factors of the others (layerwise), or one P and one Q per bucket (batched).
int64_t compressed_bytes(const std::vector<std::vector<at::Tensor>>& buckets, const PowerSGDOptions& o, bool batched,
                         int64_t element_size) {
  int64_t numel = 0;
  for (const auto& bucket : buckets) {
    if (batched) {
      int64_t total = 0;
      for (const auto& t : bucket) total += t.numel();
      const auto side = static_cast<int64_t>(std::ceil(std::sqrt(double(total))));
      numel += 2 * side * std::min(side, o.matrix_approximation_rank);
      continue;
    }
    for (const auto& t : bucket) {
      const int64_t n = t.size(0), m = t.numel() / n, r = std::min({n, m, o.matrix_approximation_rank});
      numel += double((n + m) * r) * o.min_compression_rate < double(n * m) ? (n + m) * r : n * m;
    }
  }
  return numel * element_size;
}

// The relative rounding unit of a dtype.
double ulp(at::ScalarType dtype) { return dtype == at::kDouble ? 0x1p-52 : 0x1p-23; }

// One configuration for `steps` steps: before start_powerSGD_iter the hook
// averages as DDP's built-in path (to a few ulps: each model's local
// gradients are their own computation); after, every rank gets the same
// gradients, the bytes sent are the closed form's, and, with full rank, the
// gradients are the exact average up to rounding: PQ^T with P square
// orthogonal is the projection of the summed gradient onto all of its columns.
// In float64 the rounding is ~u n kappa (u = 1.1e-16, n <= 12, kappa the
// condition number of the summed P, well below 1e5 for these random
// gradients): 1e-9 relative to the largest average gradient holds, while a
// missing 1/W, a lost bucket or a wrong factor is off by O(1).
void run_config(ProcessGroup& g, const std::string& spec, at::ScalarType dtype, bool full_rank) {
  const std::string what = tag(g, spec);
  bool batched = false;
  const PowerSGDOptions o = parse_powersgd_spec(spec, &batched);
  const bool squares = batched && full_rank;
  auto net = make_mlp(dtype, squares), local = make_mlp(dtype, squares), plain = make_mlp(dtype, squares);
  DDPOptions opts;
  opts.group = handle(g);
  opts.first_bucket_cap_mb = batched ? 1e-6 : 4e-4;  // batched: one parameter per bucket (small squares)
  opts.bucket_cap_mb = batched ? 1e-6 : 25;
  DistributedDataParallel model(net, opts), reference(plain, opts);  // reference: built-in averaging
  auto hook = std::make_shared<PowerSGDHook>(o, batched);
  model.register_comm_hook(hook);
  for (int step = 0; step < o.start_powerSGD_iter + 4; ++step) {
    auto [x, y] = batch(g, step, dtype, squares);
    net->zero_grad();
    plain->zero_grad();
    at::Tensor loss = torch::mse_loss(model(x), y);  // the forward may broadcast (DDP's rebuild at step 1)
    const int64_t before = g.traffic().bytes;
    loss.backward();
    const int64_t sent = g.traffic().bytes - before;
    torch::mse_loss(reference(x), y).backward();
    const auto avg = averaged_local_gradients(g, *local, x, y);
    const auto params = net->parameters(), plain_params = plain->parameters();
    const bool compressed = step >= o.start_powerSGD_iter;
    const std::string at_step = what + " step " + std::to_string(step);
    EXPECT_EQ(hook->state().iter, step + 1) << at_step;
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor& got = params[i].grad();
      EXPECT_TRUE(same_everywhere(g, got)) << at_step << ": parameter " << i << " differs between ranks";
      if (!compressed) {
        // The same arithmetic as the built-in path, on local gradients of a second model: equal but for their
        // last bits (every gradient but the last bias, a plain sum, differed once in ~450 runs under load at
        // world 3 on LibTorch 2.x); an element is 4 layers of 16-term sums: 64 roundings of its scale.
        const at::Tensor& want = plain_params[i].grad();
        const double off = (got - want).abs().max().item<double>(), scale = want.abs().max().item<double>();
        EXPECT_LE(off, 64 * ulp(dtype) * scale) << at_step << ": parameter " << i << " off by " << off;
      }
      if (compressed && full_rank) {
        const double err = (got.to(at::kDouble) - avg[i]).abs().max().item<double>();
        EXPECT_LE(err, 1e-9 * avg[i].abs().max().item<double>()) << at_step << ": parameter " << i;
      }
    }
    // Layout as the hook saw it (after DDP's rebuild at step 1).
    std::vector<std::vector<at::Tensor>> buckets;
    auto named = net->named_parameters();
    for (const auto& names : model.bucket_parameter_names()) {
      buckets.emplace_back();
      for (const auto& n : names) buckets.back().push_back(named[n]);
    }
    int64_t all = 0;
    for (const auto& p : params) all += p.numel() * p.element_size();
    EXPECT_EQ(sent, compressed ? compressed_bytes(buckets, o, batched, params[0].element_size()) : all) << at_step;
  }
  // Compression is real at low rank: the bytes are far below all_reduce's.
  if (!full_rank) EXPECT_GT(hook->state().compression_rate(), 1.5) << what;
  // The state round-trips: a hook loaded from it goes on identically.
  auto copy = std::make_shared<PowerSGDHook>(o, batched);
  copy->load_state_dict(hook->state_dict());
  EXPECT_EQ(copy->state().iter, hook->state().iter) << what;
  EXPECT_TRUE(at::equal(copy->state().rng.state(), hook->state().rng.state())) << what;
  EXPECT_EQ(copy->state().error.size(), hook->state().error.size()) << what;
  for (const auto& [k, e] : hook->state().error) EXPECT_TRUE(at::equal(copy->state().error.at(k), e)) << what;
}

void powersgd_hooks(ProcessGroup& g) {
  // Full rank (12 for layerwise, the square's side for the batched hook with one 4x4 a bucket), float64.
  run_config(g, "powersgd:rank=12,start=2,min_rate=0", at::kDouble, true);
  run_config(g, "powersgd:rank=12,start=3,min_rate=0,batch_same_shape=1,warm_start=0,error_feedback=0", at::kDouble,
             true);
  run_config(g, "batched_powersgd:rank=12,start=2", at::kDouble, true);
  // Low rank, float32: Gram-Schmidt (rank 2) and QR (rank 3).
  run_config(g, "powersgd:rank=2,start=2", at::kFloat, false);
  run_config(g, "powersgd:rank=3,start=2,min_rate=1,batch_same_shape=1", at::kFloat, false);
  run_config(g, "batched_powersgd:rank=1,start=2", at::kFloat, false);
}

// A hook restored from a checkpoint of its state, with the model's weights,
// continues exactly as the run that never stopped.
void powersgd_resume(ProcessGroup& g) {
  const PowerSGDOptions o = parse_powersgd_spec("powersgd:rank=2,start=2");
  auto run = [&](std::shared_ptr<Mlp> net, std::shared_ptr<PowerSGDHook> hook, int from, int to) {
    DDPOptions opts;
    opts.group = handle(g);
    DistributedDataParallel model(net, opts);
    model.register_comm_hook(hook);
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05));
    for (int step = from; step < to; ++step) {
      auto [x, y] = batch(g, step, at::kFloat);
      opt.zero_grad();
      torch::mse_loss(model(x), y).backward();
      opt.step();
    }
  };
  auto straight = make_mlp(at::kFloat), resumed = make_mlp(at::kFloat), fresh = make_mlp(at::kFloat);
  auto hook = std::make_shared<PowerSGDHook>(o);
  run(straight, hook, 0, 5);
  const c10::IValue saved = hook->state_dict();
  {
    torch::NoGradGuard no_grad;
    auto from = straight->parameters(), to = resumed->parameters(), to_fresh = fresh->parameters();
    for (size_t i = 0; i < from.size(); ++i) {
      to[i].copy_(from[i]);
      to_fresh[i].copy_(from[i]);
    }
  }
  run(straight, hook, 5, 9);
  auto restored = std::make_shared<PowerSGDHook>(o);
  restored->load_state_dict(saved);
  run(resumed, restored, 5, 9);
  run(fresh, std::make_shared<PowerSGDHook>(o), 5, 9);
  auto a = straight->parameters(), b = resumed->parameters(), c = fresh->parameters();
  bool parted = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::equal(a[i], b[i])) << tag(g, "resumed parameter ") << i;
    parted |= !at::equal(a[i], c[i]);
  }
  // Without the state (no error feedback, averaging again until start), the runs part.
  EXPECT_TRUE(parted) << tag(g, "a hook started afresh gave the same parameters: is the state used?");
}

}  // namespace

const std::vector<SuiteCase>& powersgd_suite() {
  static const std::vector<SuiteCase> cases = {
      {"DdpPowerSGD", powersgd_hooks},
      {"DdpPowerSGDResume", powersgd_resume},
  };
  return cases;
}

}  // namespace ddp::testing
