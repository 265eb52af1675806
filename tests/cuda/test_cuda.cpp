// CUDA tensors through every layer that communicates, on a GPU machine (label cuda; scripts/device-check.sh runs
// them there). Where no GPU is visible each test reports itself skipped. Ranks are threads sharing the one GPU:
// nccl at world 1 (NCCL refuses two ranks on one GPU), gloo at worlds 1-3, local at 1.
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <limits>
#include <mutex>

#include "ddp/dist.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "dist/device_mark.h"
#include "dist/pending_read.h"
#include "support/fused_kernels_case.h"
#include "support/rank_threads.h"

namespace ddp::testing {
namespace {

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0)
      GTEST_SKIP() << "no GPU is visible (cuda_built() = " << cuda_built() << "): these run on a GPU machine";
  }
};

// (backend, world) pairs that run on one GPU.
std::vector<std::pair<std::string, int>> groups() {
  std::vector<std::pair<std::string, int>> out{{"local", 1}};
  if (is_backend_available("nccl")) out.emplace_back("nccl", 1);
  if (is_backend_available("gloo"))
    for (int w = 1; w <= 3; ++w) out.emplace_back("gloo", w);
  return out;
}

at::TensorOptions gpu(at::ScalarType t = at::kFloat) { return at::TensorOptions().dtype(t).device(at::kCUDA, 0); }

void expect_on(at::Device dev, const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  EXPECT_EQ(got.device(), dev) << what << ": the result left " << dev;
  EXPECT_TRUE(at::equal(got.cpu().to(at::kDouble), want.cpu().to(at::kDouble)))
      << what << ": got " << got.cpu().to(at::kDouble).slice(0, 0, 4) << " want "
      << want.to(at::kDouble).slice(0, 0, 4);
}
void expect_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  expect_on(at::Device(at::kCUDA, 0), got, want, what);
}

// Every collective on tensors of `dev` (a GPU's, or the CPU's where the case itself is checked): closed-form
// results, on `dev` afterwards.
void collectives_on(ProcessGroup& g, at::Device dev) {
  const int r = g.rank(), w = g.size();
  auto gpu = [dev](at::ScalarType t = at::kFloat) { return at::TensorOptions().dtype(t).device(dev); };
  auto expect_equal = [dev](const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    expect_on(dev, got, want, what);
  };
  const std::string at = g.backend() + " rank " + std::to_string(r) + "/" + std::to_string(w) + " ";
  for (auto dt : {at::kFloat, at::kBFloat16, at::kHalf, at::kLong}) {
    at::Tensor t = at::full({1000}, r + 1, gpu(dt));
    g.all_reduce(t);
    expect_equal(t, at::full({1000}, w * (w + 1) / 2, at::kDouble), at + "all_reduce SUM " + c10::toString(dt));
  }
  at::Tensor avg = at::full({17}, 2.0 * (r + 1), gpu());
  AllReduceOptions ao;
  ao.op = ReduceOp::AVG;
  g.all_reduce(avg, ao);
  expect_equal(avg, at::full({17}, double(w + 1), at::kDouble), at + "all_reduce AVG");
  at::Tensor b = at::full({5}, r == w - 1 ? 7.0 : 0.0, gpu());
  BroadcastOptions bo;
  bo.src = w - 1;
  g.broadcast(b, bo);
  expect_equal(b, at::full({5}, 7.0, at::kDouble), at + "broadcast");
  std::vector<at::Tensor> outs;
  for (int i = 0; i < w; ++i) outs.push_back(at::empty({3}, gpu()));
  g.all_gather(outs, at::full({3}, double(r), gpu()));
  for (int i = 0; i < w; ++i)
    expect_equal(outs[i], at::full({3}, double(i), at::kDouble), at + "all_gather " + std::to_string(i));
  std::vector<at::Tensor> ins;
  for (int i = 0; i < w; ++i) ins.push_back(at::full({4}, double(r * 10 + i), gpu()));
  at::Tensor mine = at::empty({4}, gpu());
  g.reduce_scatter(mine, ins);
  expect_equal(mine, at::full({4}, 10.0 * w * (w - 1) / 2 + w * r, at::kDouble), at + "reduce_scatter");
  std::vector<at::Tensor> got;
  for (int i = 0; i < w; ++i) got.push_back(at::empty({4}, gpu()));
  g.all_to_all(got, ins);
  for (int i = 0; i < w; ++i) expect_equal(got[i], at::full({4}, double(i * 10 + r), at::kDouble), at + "all_to_all");
  std::vector<at::Tensor> gathered;
  if (r == 0)
    for (int i = 0; i < w; ++i) gathered.push_back(at::empty({2}, gpu()));
  g.gather(at::full({2}, double(r), gpu()), gathered);
  for (int i = 0; r == 0 && i < w; ++i) expect_equal(gathered[i], at::full({2}, double(i), at::kDouble), at + "gather");
  at::Tensor part = at::empty({2}, gpu());
  std::vector<at::Tensor> parts;
  if (r == 0)
    for (int i = 0; i < w; ++i) parts.push_back(at::full({2}, double(100 + i), gpu()));
  g.scatter(part, parts);
  expect_equal(part, at::full({2}, double(100 + r), at::kDouble), at + "scatter");
  if (w > 1) {  // a ring of sends: even ranks send first, odd ones receive first (a send completes once its peer
                // receives, on nccl and gloo alike: every rank sending first would hang)
    at::Tensor out = at::full({6}, double(r), gpu()), in = at::empty({6}, gpu());
    if (r % 2 == 0) g.send(out, (r + 1) % w);
    g.recv(in, (r + w - 1) % w);
    if (r % 2 == 1) g.send(out, (r + 1) % w);
    expect_equal(in, at::full({6}, double((r + w - 1) % w), at::kDouble), at + "recv");
  }
  // A CPU tensor on a GPU backend (nccl stages it through its GPU) stays on the CPU.
  at::Tensor host = at::full({9}, double(r + 1));
  g.all_reduce(host);
  EXPECT_TRUE(host.device().is_cpu()) << at << "a CPU tensor came back on " << host.device();
  EXPECT_TRUE(at::equal(host, at::full({9}, w * (w + 1) / 2.0))) << at << "all_reduce of a CPU tensor";
  g.barrier();
}

TEST_F(Cuda, EveryCollectiveOnGpuTensors) {
  for (auto [backend, world] : groups()) {
    SCOPED_TRACE(backend + " world " + std::to_string(world));
    run_ranks(backend, world, [](ProcessGroup& g) { collectives_on(g, at::Device(at::kCUDA, 0)); });
  }
}

// The case above on the CPU, where it runs in every build: its own calls and expected values are checked before
// a GPU runs it (its ring, every rank sending first, hung gloo), over the nccl stand-in's contract too.
TEST(CudaCaseOnTheCpu, EveryCollective) {
  std::vector<std::pair<std::string, int>> cases{{"local", 1}};
  if (is_backend_available("gloo"))
    for (int w = 1; w <= 3; ++w) {
      cases.emplace_back("gloo", w);
      cases.emplace_back("nccl-standin", w);
    }
  for (auto [backend, world] : cases) {
    SCOPED_TRACE(backend + " world " + std::to_string(world));
    run_ranks(backend, world, [](ProcessGroup& g) { collectives_on(g, at::Device(at::kCPU)); });
  }
}

// The Trainer's batch path: pinned host memory, copied to the GPU without blocking the host, equal once the
// stream is synchronised; a tensor already on the GPU is itself.
TEST_F(Cuda, PinnedBatchesCopyToTheGpuWithoutBlocking) {
  const at::Tensor host = at::arange(1 << 20, at::kFloat);
  const at::Tensor p = pinned(host);
  EXPECT_TRUE(p.is_pinned());
  EXPECT_TRUE(pinned(p).is_same(p));
  const at::Device gpu0(at::kCUDA, 0);
  const at::Tensor d = to_device(p, gpu0);
  EXPECT_EQ(d.device(), gpu0);
  EXPECT_TRUE(to_device(d, gpu0).is_same(d));
  synchronize(gpu0);
  EXPECT_TRUE(at::equal(d.cpu(), host));
  EXPECT_TRUE(at::equal(to_device(host, gpu0).cpu(), host));  // pageable: a blocking copy, the same values
}

// --nan-check-at next-step's read (a GPU's default): a copy queued behind the GPU's work, started without the host
// waiting for that work (a mark queued after it is not yet reached: ~0.1 s of matrix products ahead of it), and
// the right values once read.
TEST_F(Cuda, PendingReadsDoNotWaitForTheQueue) {
  const at::Device gpu0(at::kCUDA, 0);
  const at::Tensor a = at::randn({4096, 4096}, at::TensorOptions().device(gpu0)) / 64.0;
  (void)detail::PendingRead(a.sum(1, false, at::kDouble).slice(0, 0, 8)).get();  // pinned memory allocated, cached
  synchronize(gpu0);
  at::Tensor x = a;
  for (int i = 0; i < 50; ++i) x = at::tanh(at::mm(x, a));  // 50 x 137 GFLOP
  const at::Tensor sums = x.sum(1, /*keepdim=*/false, at::kDouble).slice(0, 0, 8);
  const detail::PendingRead read(sums);
  EXPECT_FALSE(detail::DeviceMark::now(gpu0).reached()) << "starting the read waited for the GPU's queue";
  const at::Tensor& host = read.get();
  EXPECT_TRUE(host.is_cpu());
  EXPECT_TRUE(at::equal(host, sums.cpu()));
}

TEST_F(Cuda, OneCallsTensorsMustShareADevice) {
  run_ranks(groups().back().first, 1, [](ProcessGroup& g) {
    std::vector<at::Tensor> outs{at::empty({3})};
    try {
      g.all_gather(outs, at::ones({3}, gpu()));
      ADD_FAILURE() << "expected InvalidArgument";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("outputs[0] is on cpu but input is on cuda:0"), std::string::npos)
          << e.what();
    }
  });
}

// A continuation runs on the stream its caller had current (c10's Future does the same): a caller on a side stream
// finds the continuation's kernels there, ordered after the collective and before its own next ones.
TEST_F(Cuda, ContinuationsRunOnTheCallersStream) {
  for (auto [backend, world] : groups()) {
    SCOPED_TRACE(backend + " world " + std::to_string(world));
    run_ranks(backend, world, [](ProcessGroup& g) {
      const at::Device gpu0(at::kCUDA, 0);
      const auto* cuda = c10::impl::getDeviceGuardImpl(at::kCUDA);
      const c10::Stream side = cuda->getStreamFromGlobalPool(gpu0);
      c10::StreamGuard on_side(side);
      at::Tensor t = at::full({1 << 16}, double(g.rank() + 1), gpu());
      AllReduceOptions o;
      o.async_op = true;
      c10::Stream seen = cuda->getStream(gpu0);
      Work w = g.all_reduce(t, o).then([&](at::Tensor v) {
        seen = cuda->getStream(gpu0);
        return v * 2;
      });
      at::Tensor doubled = w.value() + 0;  // on the side stream, after the continuation's kernel
      EXPECT_EQ(seen, side) << "the continuation ran on stream " << seen.id() << ", the caller's is " << side.id();
      const int w_ = g.size();
      expect_equal(doubled, at::full({1 << 16}, double(w_ * (w_ + 1)), at::kDouble), "the continuation's result");
    });
  }
}

// The course MLP's shape, small: DDP trains it on the GPU to CPU DDP's weights, within float32 rounding.
constexpr int kSteps = 4, kBatch = 16, kIn = 32, kHidden = 64, kOut = 10;

torch::nn::Sequential mlp() {
  return torch::nn::Sequential(torch::nn::Linear(kIn, kHidden), torch::nn::ReLU(), torch::nn::Linear(kHidden, kOut));
}

// Rank 0's parameters after kSteps of DDP SGD over `backend` at `world`, on `device`; step 1 accumulates under
// no_sync. Models and data are made before the rank threads (the global generator is not thread-safe).
std::vector<at::Tensor> train(const std::string& backend, int world, at::Device device) {
  torch::manual_seed(0);
  auto base = mlp();
  std::vector<torch::nn::Sequential> models;
  std::vector<std::vector<at::Tensor>> xs(world), ys(world);
  for (int r = 0; r < world; ++r) {
    models.push_back(torch::nn::Sequential(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(base->clone())));
    models.back()->to(device);
    for (int s = 0; s < kSteps; ++s) {
      xs[r].push_back(at::randn({kBatch, kIn}).to(device));
      ys[r].push_back(at::randn({kBatch, kOut}).to(device));
    }
  }
  std::vector<at::Tensor> result;
  std::mutex mu;
  run_ranks(backend, world, [&](ProcessGroup& g) {
    const int r = g.rank();
    DDPOptions o;
    o.group = g.shared_from_this();
    DistributedDataParallel<torch::nn::Sequential> model(models[r], o);
    torch::optim::SGD opt(models[r]->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < kSteps; ++s) {
      auto loss = [&] { return (model(xs[r][s]) - ys[r][s]).pow(2).mean(); };
      if (s == 1) {
        auto guard = model.no_sync();
        loss().backward();
        continue;
      }
      loss().backward();
      opt.step();
      opt.zero_grad();
    }
    if (r != 0) return;
    std::lock_guard<std::mutex> lock(mu);
    for (auto& p : models[0]->parameters()) {
      EXPECT_EQ(p.device(), device);
      result.push_back(p.detach().cpu());
    }
  });
  return result;
}

// DDP on the GPU against DDP on the CPU for the groups whose world is in [lo, hi].
void ddp_on_the_gpu(int lo, int hi) {
  // float32 on both; the GPU's sums may run in another order: per step, each weight moves by lr * a gradient
  // summed over kBatch * kHidden products, so a few ulps of that many terms, compounded over the steps.
  const double eps = std::numeric_limits<float>::epsilon();
  const double tol = 4 * eps * kBatch * kHidden * kSteps;
  for (auto [backend, world] : groups()) {
    if (world < lo || world > hi) continue;
    SCOPED_TRACE(backend + " world " + std::to_string(world));
    auto want = train(world == 1 ? "local" : "gloo", world, at::kCPU);
    auto got = train(backend, world, at::Device(at::kCUDA, 0));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const double diff = (got[i] - want[i]).abs().max().item<double>();
      const double scale = std::max(1.0, want[i].abs().max().item<double>());
      EXPECT_LE(diff, tol * scale) << "parameter " << i;
    }
  }
}

TEST_F(Cuda, DdpOnTheGpuTrainsToDdpOnTheCpu) { ddp_on_the_gpu(1, 1); }

// SyncBatchNorm takes ATen's fused CUDA kernels for a GPU's tensors, and they compute what the CPU's composite
// passes do (support/fused_kernels_case.h); the CPU has none. The suite over nccl checks the whole layer at world 2.
TEST_F(Cuda, SyncBatchNormFusedKernelsEqualTheCpusOwn) {
  EXPECT_FALSE(detail::SyncBatchNormKernels(at::randn({4, 3})).fused()) << "the CPU has no fused kernels";
  fused_kernels_against_composite(at::Device(at::kCUDA, 0), /*moments_in_float32=*/true);
}

// Rank threads sharing one GPU share autograd's one thread for it: see test_cuda_trainer.cpp's
// ThreadRanksOnOneGpu case (predicted to fail by the timeout; the device check runs these apart, last).
TEST_F(Cuda, ThreadRanksOnOneGpuDdpAtWorlds2And3) { ddp_on_the_gpu(2, 3); }

}  // namespace
}  // namespace ddp::testing
