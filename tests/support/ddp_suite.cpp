#include "support/ddp_suite.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>

#include "ddp/dist/collectives.h"
#include "ddp/errors.h"
#include "ddp/parallel/consistency.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "ddp/parallel/optimizer_state.h"
#include "ddp/parallel/zero.h"
#include "dist/hook_waits.h"

namespace ddp::testing {
namespace {

using torch::nn::Linear;
using torch::nn::LinearOptions;

// PyTorch's test model: Linear(2,10)-ReLU-Linear(10,50)-ReLU-Linear(50,4)-softmax, no bias.
struct Net : torch::nn::Module {
  Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  explicit Net(int hidden2 = 50) {
    fc1 = register_module("fc1", Linear(LinearOptions(2, 10).bias(false)));
    fc2 = register_module("fc2", Linear(LinearOptions(10, hidden2).bias(false)));
    fc3 = register_module("fc3", Linear(LinearOptions(hidden2, 4).bias(false)));
  }
  at::Tensor forward(at::Tensor x) {
    x = torch::relu(fc1(x));
    x = torch::relu(fc2(x));
    return torch::softmax(fc3(x), 1);
  }
};

// A small CNN with BatchNorm (running statistics are buffers).
struct Cnn : torch::nn::Module {
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  Linear fc{nullptr};
  Cnn() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
    fc = register_module("fc", Linear(4 * 4 * 4, 3));
  }
  at::Tensor forward(at::Tensor x) { return fc(torch::relu(bn(conv(x))).flatten(1)); }
};

// Three branches: a is always used, b only when `use_b`, c never.
struct Branchy : torch::nn::Module {
  Linear a{nullptr}, b{nullptr}, c{nullptr};
  bool use_b = true;
  Branchy() {
    a = register_module("a", Linear(3, 3));
    b = register_module("b", Linear(3, 3));
    c = register_module("c", Linear(3, 3));
  }
  at::Tensor forward(at::Tensor x) {
    x = a(x);
    return use_b ? b(x) : x;
  }
};

// Ranks may be threads of one process: the global generator is shared, so
// models are built under a lock and data comes from explicit generators.
template <typename M, typename... Args>
std::shared_ptr<M> seeded(uint64_t seed, Args... args) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(seed);
  return std::make_shared<M>(args...);
}

at::Tensor randn(at::IntArrayRef sizes, at::Generator& gen) { return at::randn(sizes, gen); }

// DDP against one process on the global batch. Each gradient element is a sum of
// at most W <= 4 per-sample terms grouped differently (per rank, then the
// all-reduce, against one batch): float32 regrouping moves it by at most
// 2 gamma_4 S ~ 5e-7 S (gamma_4 = 4u, u = 2^-24, S the sum of the terms'
// magnitudes, O(1-10) for these small nets), a few 1e-6 after 2-3 steps. So
// rtol 1.3e-6 (11 ulps: PyTorch's float32 default) and atol 5e-5 hold on any
// kernel path, while a wrong average (a missing or doubled 1/W) moves weights
// by a whole update: equivalence() checks the updates dwarf atol.
void expect_close(torch::nn::Module& a, torch::nn::Module& b, const std::string& what) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (const auto& p : pa) {
    const at::Tensor x = p.value().cpu();  // `a` may be on the group's GPU
    const at::Tensor y = pb[p.key()].cpu();
    EXPECT_TRUE(at::allclose(x, y, 1.3e-6, 5e-5))
        << what << ": parameter " << p.key() << " differs by " << (x - y).abs().max().item<double>();
  }
}

void sgd_step(torch::nn::Module& m, double lr) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters())
    if (p.grad().defined()) p.sub_(lr * p.grad());
}

void zero_grads(torch::nn::Module& m) {
  for (auto& p : m.parameters())
    if (p.grad().defined()) p.mutable_grad().zero_();
}

// DDP with rank-specific initial weights (the broadcast must fix them) and a
// local batch of 1 against one process on the global batch of W, 2 steps. DDP runs
// on the group's device (a GPU for nccl), the reference on the CPU.
void equivalence(ProcessGroup& g, DDPOptions opts, const std::string& what, std::shared_ptr<CommHook> hook = nullptr) {
  const int r = g.rank(), w = g.size();
  const at::Device dev = g.device();
  auto net = seeded<Net>(100 + r);
  net->to(dev);
  auto ref = seeded<Net>(100);
  std::vector<at::Tensor> initial;
  for (const auto& p : ref->parameters()) initial.push_back(p.detach().clone());
  opts.group = handle(g);
  DistributedDataParallel model(net, opts);
  if (hook) model.register_comm_hook(hook);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  for (int step = 0; step < 2; ++step) {
    at::Tensor x = randn({w, 2}, gen), y = randn({w, 4}, gen);
    zero_grads(*net);
    torch::mse_loss(model(x.narrow(0, r, 1).to(dev)), y.narrow(0, r, 1).to(dev)).backward();
    sgd_step(*net, 1.0);
    zero_grads(*ref);
    torch::mse_loss(ref->forward(x), y).backward();
    sgd_step(*ref, 1.0);
  }
  expect_close(*net, *ref, tag(g, what));
  EXPECT_TRUE(parameters_consistent(*net, 0, handle(g))) << tag(g, what);
  // The check can tell: a gradient summed instead of averaged over W ranks would
  // move the weights by (W - 1) x the update, far beyond atol 5e-5.
  double update = 0;
  auto params = ref->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    update = std::max(update, (params[i] - initial[i]).abs().max().item<double>());
  if (w > 1) EXPECT_GT(double(w - 1) * update, 100 * 5e-5) << tag(g, what) << ": updates too small to tell";
}

void gradient_equivalence(ProcessGroup& g) {
  DDPOptions tiny;
  tiny.bucket_cap_mb = 1e-6;  // one parameter per bucket: many buckets
  tiny.first_bucket_cap_mb = 1e-6;
  equivalence(g, tiny, "tiny buckets");
  equivalence(g, DDPOptions{}, "default buckets");
  // PyTorch's default: gradients copied into and out of the buckets.
  tiny.gradient_as_bucket_view = false;
  equivalence(g, tiny, "tiny buckets, gradients copied");
  DDPOptions copies;
  copies.gradient_as_bucket_view = false;
  equivalence(g, copies, "default buckets, gradients copied");
}

void bucket_view_equivalence(ProcessGroup& g) {
  DDPOptions o;
  o.gradient_as_bucket_view = true;
  o.bucket_cap_mb = 1e-3;
  o.first_bucket_cap_mb = 1e-3;
  equivalence(g, o, "gradient_as_bucket_view");
  // The gradients live in bucket memory (one bucket here) and stay there
  // across steps with LibTorch's own optimizer, whose zero_grad() detaches them
  // (1.13) or sets them to undefined (2.x: the reducer puts them back in the
  // bucket). A world of one reduces nothing and has no buckets to keep them in.
  auto net = seeded<Net>(1);
  DDPOptions big;
  big.group = handle(g);
  big.gradient_as_bucket_view = true;
  DistributedDataParallel model(net, big);
  torch::optim::SGD opt(net->parameters(), 0.1);
  const void* first = nullptr;  // after the one bucket rebuild, at the second forward
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    torch::mse_loss(model(torch::ones({1, 2})), torch::zeros({1, 4})).backward();
    opt.step();
    const at::Tensor& grad = net->fc2->weight.grad();
    if (step == 1) first = grad.data_ptr();
    if (step > 1 && g.size() > 1)
      EXPECT_EQ(grad.data_ptr(), first) << tag(g,
                                               "the gradient moved out of its bucket at step " + std::to_string(step));
    if (g.size() > 1)
      EXPECT_GT(grad.storage().nbytes(), grad.nbytes()) << tag(g, "the gradient should share its bucket's storage");
  }
}

void no_sync_accumulation(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  auto net = seeded<Net>(100 + r);
  auto ref = seeded<Net>(100);
  for (bool view : {false, true}) {
    DDPOptions o;
    o.group = handle(g);
    o.gradient_as_bucket_view = view;
    o.bucket_cap_mb = 1e-3;
    o.first_bucket_cap_mb = 1e-3;
    DistributedDataParallel model(net, o);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
    at::Tensor x = randn({3, w, 2}, gen), y = randn({3, w, 4}, gen);
    zero_grads(*net);
    {
      auto guard = model.no_sync();
      for (int m = 0; m < 2; ++m) torch::mse_loss(model(x[m].narrow(0, r, 1)), y[m].narrow(0, r, 1)).backward();
    }
    torch::mse_loss(model(x[2].narrow(0, r, 1)), y[2].narrow(0, r, 1)).backward();
    sgd_step(*net, 0.5);
    // Reference: the mean over ranks of the sum over micro-batches.
    zero_grads(*ref);
    for (int m = 0; m < 3; ++m) torch::mse_loss(ref->forward(x[m]), y[m]).backward();
    sgd_step(*ref, 0.5);
    expect_close(*net, *ref, tag(g, view ? "no_sync with bucket views" : "no_sync"));
  }
}

// BatchNorm: each rank normalises with its own batch statistics, so the
// reference averages per-rank gradients, and rank 0's running statistics win
// (broadcast_buffers).
void batchnorm_cnn(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  auto net = seeded<Cnn>(200 + r);
  auto ref = seeded<Cnn>(200);
  DDPOptions o;
  o.group = handle(g);
  o.bucket_cap_mb = 1e-3;
  o.first_bucket_cap_mb = 1e-3;
  DistributedDataParallel model(net, o);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  for (int step = 0; step < 2; ++step) {
    at::Tensor x = randn({w, 2, 1, 6, 6}, gen), y = randn({w, 2, 3}, gen);
    zero_grads(*net);
    torch::mse_loss(model(x[r]), y[r]).backward();
    sgd_step(*net, 0.1);

    std::vector<at::Tensor> start, rank0_after;
    for (auto& b : ref->buffers()) start.push_back(b.clone());
    std::vector<at::Tensor> sum;
    for (int q = 0; q < w; ++q) {
      {
        torch::NoGradGuard ng;
        auto bufs = ref->buffers();
        for (size_t i = 0; i < bufs.size(); ++i) bufs[i].copy_(start[i]);
      }
      zero_grads(*ref);
      torch::mse_loss(ref->forward(x[q]), y[q]).backward();
      auto params = ref->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        if (q == 0)
          sum.push_back(params[i].grad().clone());
        else
          sum[i] += params[i].grad();
      }
      if (q == 0)
        for (auto& b : ref->buffers()) rank0_after.push_back(b.clone());
    }
    {
      torch::NoGradGuard ng;
      auto bufs = ref->buffers();
      for (size_t i = 0; i < bufs.size(); ++i) bufs[i].copy_(rank0_after[i]);
      auto params = ref->parameters();
      for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad().copy_(sum[i] / w);
    }
    sgd_step(*ref, 0.1);
  }
  expect_close(*net, *ref, tag(g, "BatchNorm CNN"));
  // Rank 0's running statistics followed rank 0's batches, as the reference's did
  // (the others restart from rank 0's at every forward).
  // Running statistics are float32 means of at most a batch of values: the same
  // regrouping argument as expect_close's, without the steps' growth.
  if (r == 0) {
    EXPECT_TRUE(at::allclose(net->bn->running_mean, ref->bn->running_mean, 1e-5, 1e-6)) << tag(g, "running_mean");
    EXPECT_TRUE(at::allclose(net->bn->running_var, ref->bn->running_var, 1e-5, 1e-6)) << tag(g, "running_var");
  }
  // broadcast_buffers: with momentum 0 a forward leaves the statistics alone,
  // so after one forward every rank holds exactly rank 0's.
  net->bn->options.momentum(0.0);
  {
    torch::NoGradGuard ng;
    net->bn->running_mean.fill_(r == 0 ? 5.0 : -1.0);
  }
  model(at::ones({2, 1, 6, 6}));
  EXPECT_TRUE(at::equal(net->bn->running_mean, at::full({4}, 5.0))) << tag(g, "buffers broadcast from rank 0");
  auto other = seeded<Cnn>(400);
  other->bn->options.momentum(0.0);
  DDPOptions no_bcast = o;
  no_bcast.broadcast_buffers = false;
  DistributedDataParallel plain(other, no_bcast);
  {
    torch::NoGradGuard ng;
    other->bn->running_mean.fill_(r == 0 ? 5.0 : -1.0);
  }
  plain(at::ones({2, 1, 6, 6}));
  EXPECT_TRUE(at::equal(other->bn->running_mean, at::full({4}, r == 0 ? 5.0 : -1.0)))
      << tag(g, "broadcast_buffers off");
}

void unused_parameters(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  // static_graph: the unused set is learned in the first iteration and reused,
  // with or without find_unused_parameters.
  struct Mode {
    bool bucket_view, find_unused, static_graph;
  };
  for (Mode m : {Mode{false, true, false}, Mode{true, true, false}, Mode{false, true, true}, Mode{true, true, true},
                 Mode{false, false, true}, Mode{true, false, true}}) {
    const bool bucket_view = m.bucket_view, static_graph = m.static_graph;
    auto net = seeded<Branchy>(300 + r);
    auto ref = seeded<Branchy>(300);
    DDPOptions o;
    o.group = handle(g);
    o.find_unused_parameters = m.find_unused;
    o.gradient_as_bucket_view = bucket_view;
    o.static_graph = static_graph;
    o.bucket_cap_mb = 1e-4;
    o.first_bucket_cap_mb = 1e-4;
    DistributedDataParallel model(net, o);
    const std::string what = std::string(bucket_view ? "bucket views" : "copies") +
                             (static_graph ? ", static graph" : "") + (m.find_unused ? ", find unused" : "");
    auto gen = at::make_generator<at::CPUGeneratorImpl>(13);
    for (int step = 0; step < 3; ++step) {
      at::Tensor x = randn({w, 1, 3}, gen), y = randn({w, 1, 3}, gen);
      // b is used on odd ranks only (on none in a world of one); c on no rank.
      net->use_b = r % 2 == 1;
      for (auto& p : net->parameters()) p.mutable_grad() = at::Tensor();
      torch::mse_loss(model(x[r]), y[r]).backward();
      EXPECT_FALSE(net->c->weight.grad().defined())
          << tag(g, what + ": c is used on no rank: its grad stays undefined");
      EXPECT_EQ(net->b->weight.grad().defined(), w > 1) << tag(g, what + ": b is used on some rank");
      // Reference: gradient of the mean of per-rank losses.
      for (auto& p : ref->parameters()) p.mutable_grad() = at::Tensor();
      for (int q = 0; q < w; ++q) {
        ref->use_b = q % 2 == 1;
        (torch::mse_loss(ref->forward(x[q]), y[q]) / w).backward();
      }
      for (auto name : {"a.weight", "a.bias", "b.weight", "b.bias"}) {
        at::Tensor mine = net->named_parameters()[name].grad(), want = ref->named_parameters()[name].grad();
        if (!want.defined()) continue;
        // Gradients summed over W <= 4 ranks in another grouping: expect_close's bound.
        EXPECT_TRUE(mine.defined() && at::allclose(mine, want, 1.3e-6, 5e-5))
            << tag(g, what + ", step " + std::to_string(step) + ": grad of " + name);
      }
      sgd_step(*net, 0.1);
      sgd_step(*ref, 0.1);
    }
  }
}

void missing_gradient_is_an_error(ProcessGroup& g) {
  auto net = seeded<Branchy>(5);
  net->use_b = false;  // b gets no gradient, on every rank
  DDPOptions o;
  o.group = handle(g);
  DistributedDataParallel model(net, o);
  try {
    torch::mse_loss(model(torch::ones({1, 3})), torch::zeros({1, 3})).backward();
    ADD_FAILURE() << tag(g, "expected ddp::Error");
  } catch (const std::exception& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'b.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("find_unused_parameters"), std::string::npos) << msg;
  }
  // The group is still usable afterwards.
  at::Tensor t = at::ones({2});
  g.all_reduce(t);
  EXPECT_EQ(t[0].item<float>(), g.size());
}

// y = x W^T + b computed without a graph; its backward recomputes it with one
// and runs a nested (reentrant) backward, as activation checkpointing does:
// W and b get their gradients inside the outer backward pass.
struct Recompute : torch::autograd::Function<Recompute> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, at::Tensor w, at::Tensor b) {
    ctx->saved_data["x"] = x.detach();
    ctx->saved_data["w"] = w;
    ctx->saved_data["b"] = b;
    at::NoGradGuard no_grad;
    return at::linear(x, w, b);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    at::Tensor x = ctx->saved_data["x"].toTensor().requires_grad_(true);
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      y = at::linear(x, ctx->saved_data["w"].toTensor(), ctx->saved_data["b"].toTensor());
    }
    torch::autograd::backward({y}, {grad[0]});
    return {x.grad(), at::Tensor(), at::Tensor()};
  }
};

// One Linear applied twice, each time recomputed in backward: its parameters'
// gradients are accumulated twice in one backward pass, in nested backwards.
struct TwiceRecomputed : torch::nn::Module {
  Linear lin{nullptr};
  TwiceRecomputed() { lin = register_module("lin", Linear(3, 3)); }
  at::Tensor forward(at::Tensor x) {
    // The weights go in as saved data, not as inputs: the outer graph reaches
    // them only through the nested backwards.
    return Recompute::apply(Recompute::apply(x, lin->weight, lin->bias), lin->weight, lin->bias);
  }
};

// A parameter whose gradient arrives a second time in one backward (reentrant
// backward) or a second backward of one forward is an error naming it, on every
// rank, and the model trains normally afterwards.
void gradient_twice_is_an_error(ProcessGroup& g) {
  auto expect_named = [&](const std::function<void()>& fn, const std::string& what, std::vector<std::string> names) {
    try {
      fn();
      ADD_FAILURE() << tag(g, what + ": expected ddp::Error");
    } catch (const std::exception& e) {
      std::string msg = e.what();
      EXPECT_TRUE(
          std::any_of(names.begin(), names.end(),
                      [&](const std::string& n) { return msg.find("parameter '" + n + "'") != std::string::npos; }))
          << tag(g, what) << ": " << msg;
      EXPECT_NE(msg.find("second gradient"), std::string::npos) << tag(g, what) << ": " << msg;
    }
  };
  auto net = seeded<TwiceRecomputed>(21);
  DDPOptions o;
  o.group = handle(g);
  DistributedDataParallel model(net, o);
  at::Tensor x = at::ones({2, 3}).requires_grad_(true);
  expect_named([&] { model(x).sum().backward(); }, "reentrant backward", {"lin.weight", "lin.bias"});

  auto plain = seeded<Branchy>(22);
  plain->use_b = true;
  o.find_unused_parameters = true;  // c is never used
  DistributedDataParallel model2(plain, o);
  at::Tensor loss = model2(at::ones({2, 3})).sum();
  loss.backward({}, /*retain_graph=*/true);
  expect_named([&] { loss.backward(); }, "second backward of one forward",
               {"a.weight", "a.bias", "b.weight", "b.bias"});
  // The next forward and backward reduce as usual: the gradient of the mean of the ranks' losses.
  for (auto& p : plain->parameters()) p.mutable_grad() = at::Tensor();
  model2(at::full({2, 3}, double(g.rank()))).sum().backward();
  auto ref = seeded<Branchy>(22);
  for (int q = 0; q < g.size(); ++q) (ref->forward(at::full({2, 3}, double(q))).sum() / g.size()).backward();
  for (auto name : {"a.weight", "a.bias", "b.weight", "b.bias"}) {
    at::Tensor mine = plain->named_parameters()[name].grad(), want = ref->named_parameters()[name].grad();
    // Gradients summed over W <= 4 ranks in another grouping: expect_close's bound.
    EXPECT_TRUE(mine.defined() && at::allclose(mine, want, 1.3e-6, 5e-5))
        << tag(g, std::string("after the errors: ") + name);
  }
  at::Tensor t = at::ones({2});
  g.all_reduce(t);
  EXPECT_EQ(t[0].item<float>(), g.size());
}

void mismatched_models_fail_everywhere(ProcessGroup& g) {
  auto net = std::make_shared<Net>(g.rank() == g.size() - 1 && g.size() > 1 ? 40 : 50);
  DDPOptions o;
  o.group = handle(g);
  if (g.size() == 1) return;
  try {
    DistributedDataParallel model(net, o);
    ADD_FAILURE() << tag(g, "expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("the model differs across ranks: parameter 1 is 'fc2.weight' Float[50, 10] on rank 0 but "
                       "'fc2.weight' Float[40, 10] on rank " +
                       std::to_string(g.size() - 1)),
              std::string::npos)
        << msg;
  }
}

// A module with a parameter on another device (here meta: no memory) is refused on every rank, before any
// collective, naming both parameters and devices.
void models_on_two_devices_are_refused(ProcessGroup& g) {
  struct TwoDevices : torch::nn::Module {
    TwoDevices() {
      register_parameter("a", at::zeros({4}));
      register_parameter("b", at::zeros({4}, at::TensorOptions().device(at::kMeta)));
    }
  };
  auto net = std::make_shared<TwoDevices>();
  DDPOptions o;
  o.group = handle(g);
  try {
    DistributedDataParallel model(net, o);
    ADD_FAILURE() << tag(g, "expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank " + std::to_string(g.rank()) + "/" + std::to_string(g.size()) +
                       " DistributedDataParallel: the module's parameters are on two devices: 'a' on cpu, 'b' on meta; "
                       "move the whole module to one device (module->to(device))"),
              std::string::npos)
        << msg;
  }
  at::Tensor t = at::ones({2});  // the group still works: nothing was left half-done
  g.all_reduce(t);
  EXPECT_EQ(t[0].item<float>(), g.size()) << tag(g, "all_reduce after the refusal");
}

// An evaluation forward on one rank only, right when the buckets are due for
// their rebuild, must not start anything collective.
void evaluation_forward_on_one_rank(ProcessGroup& g) {
  auto net = seeded<Net>(21 + g.rank());
  DDPOptions o;
  o.group = handle(g);
  DistributedDataParallel model(net, o);
  torch::optim::SGD opt(net->parameters(), 0.1);
  auto step = [&] {
    opt.zero_grad();
    torch::mse_loss(model(at::full({1, 2}, g.rank() + 1.0)), torch::zeros({1, 4})).backward();
    opt.step();
  };
  step();
  if (g.rank() == 0) {
    torch::NoGradGuard no_grad;
    model(at::ones({1, 2}));
  }
  // Every rank's next collective must still be this one.
  at::Tensor t = at::full({3}, g.rank() + 1.0);
  g.all_reduce(t);
  EXPECT_TRUE(at::equal(t, at::full({3}, g.size() * (g.size() + 1) / 2.0))) << tag(g, "collectives out of step");
  step();
  EXPECT_TRUE(parameters_consistent(*net, 0, handle(g))) << tag(g, "replicas diverged");
}

// Training in eval mode (frozen BatchNorm statistics, as fine-tuning does): the buckets are compared in the first
// backward (in its first gradient hook, once: a wait allowed there by design, with the check on), and the
// gradients are averaged.
void eval_mode_training(ProcessGroup& g) {
  detail::set_hook_wait_check(true);
  auto net = seeded<Net>(1);
  net->eval();
  DDPOptions o;
  o.group = handle(g);
  o.bucket_cap_mb = o.first_bucket_cap_mb = 1e-6;  // a bucket per parameter
  DistributedDataParallel model(net, o);
  torch::optim::SGD opt(net->parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    EXPECT_NO_THROW(torch::mse_loss(model(at::full({1, 2}, g.rank() + 1.0)), torch::zeros({1, 4})).backward())
        << tag(g, "eval-mode step " + std::to_string(step));
    opt.step();
  }
  EXPECT_TRUE(parameters_consistent(*net, 0, handle(g))) << tag(g, "replicas diverged");
}

// An evaluation with gradients on (no NoGradGuard) on rank 0 alone, before the first step: it issues no
// collective, even though the buckets are not compared yet (that waits for a backward).
void grad_enabled_evaluation_on_one_rank(ProcessGroup& g) {
  detail::set_hook_wait_check(true);
  auto net = seeded<Net>(1);
  DDPOptions o;
  o.group = handle(g);
  DistributedDataParallel model(net, o);
  if (g.rank() == 0) {
    net->eval();
    model(at::ones({1, 2}));
    net->train();
  }
  at::Tensor t = at::full({3}, g.rank() + 1.0);
  g.all_reduce(t);  // every rank's next collective must be this one
  EXPECT_TRUE(at::equal(t, at::full({3}, g.size() * (g.size() + 1) / 2.0))) << tag(g, "collectives out of step");
  torch::optim::SGD opt(net->parameters(), 0.1);
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    torch::mse_loss(model(at::full({1, 2}, g.rank() + 1.0)), torch::zeros({1, 4})).backward();
    opt.step();
  }
  EXPECT_TRUE(parameters_consistent(*net, 0, handle(g))) << tag(g, "replicas diverged");
}

struct CountingHook : CommHook {
  int calls = 0;
  std::string name() const override { return "counting"; }
  Work run(ProcessGroup& group, GradBucket& bucket) override {
    ++calls;
    return AllReduceHook().run(group, bucket);
  }
};

// Sums, then averages in a continuation whose value is a new tensor (as a
// decompressing hook would return): DDP copies it into the bucket.
struct SumThenAverageHook : CommHook {
  std::string name() const override { return "sum-then-average"; }
  Work run(ProcessGroup& group, GradBucket& bucket) override {
    AllReduceOptions o;
    o.async_op = true;
    const double world = group.size();
    return group.all_reduce(bucket.buffer, o).then([world](at::Tensor sum) { return sum / world; });
  }
};

void comm_hook_sees_every_bucket(ProcessGroup& g) {
  auto net = seeded<Net>(1);
  DDPOptions o;
  o.group = handle(g);
  o.bucket_cap_mb = 1e-6;
  o.first_bucket_cap_mb = 1e-6;
  DistributedDataParallel model(net, o);
  auto hook = std::make_shared<CountingHook>();
  model.register_comm_hook(hook);
  torch::mse_loss(model(torch::ones({1, 2})), torch::zeros({1, 4})).backward();
  EXPECT_EQ(model.bucket_parameter_names().size(), 3u);
  EXPECT_EQ(hook->calls, 3) << tag(g, "one call per bucket (in a world of one too, as PyTorch)");
  // A registered hook's result is what DDP averages with: the default hook
  // registered explicitly, and one whose value comes from a continuation.
  DDPOptions tiny;
  tiny.bucket_cap_mb = tiny.first_bucket_cap_mb = 1e-6;
  equivalence(g, tiny, "AllReduceHook registered", std::make_shared<AllReduceHook>());
  equivalence(g, tiny, "hook with a continuation", std::make_shared<SumThenAverageHook>());
}

// A Work that completes only when opened: what a hook must never wait for.
struct Gate : Work::Impl {
  std::atomic<bool> open{false};
  bool is_completed() override { return open; }
  void wait(Milliseconds) override {
    while (!open) std::this_thread::yield();
  }
};

// Waits inside the hook (for an operation not yet complete) before reducing.
struct WaitingHook : CommHook {
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  std::string name() const override { return "waiting"; }
  Work run(ProcessGroup& group, GradBucket& bucket) override {
    Work(gate).wait();
    return AllReduceHook().run(group, bucket);
  }
};

// Nothing may wait in a gradient hook (dist/hook_waits.h): with the check on (as in every test), a hook that
// waits fails its backward with the rank and the hook named, on every rank; DDP's own path never waits there,
// as every other case of the suites shows by passing with the check on.
void hooks_never_wait(ProcessGroup& g) {
  detail::set_hook_wait_check(true);
  auto net = seeded<Net>(1);
  DDPOptions o;
  o.group = handle(g);
  DistributedDataParallel model(net, o);
  auto hook = std::make_shared<WaitingHook>();
  model.register_comm_hook(hook);
  try {
    torch::mse_loss(model(torch::ones({1, 2})), torch::zeros({1, 4})).backward();
    ADD_FAILURE() << tag(g, "a hook that waits did not fail its backward");
  } catch (const std::exception& e) {
    const std::string m = e.what();
    const std::string where = "rank " + std::to_string(g.rank()) + "/" + std::to_string(g.size()) +
                              " DistributedDataParallel's gradient hook: a wait for a collective would block here";
    EXPECT_NE(m.find(where), std::string::npos) << tag(g, m);
  }
  // Open, the gate lets the same model train: the next forward starts afresh.
  hook->gate->open = true;
  zero_grads(*net);
  torch::mse_loss(model(torch::ones({1, 2})), torch::zeros({1, 4})).backward();
  EXPECT_TRUE(parameters_consistent(*net, 0, handle(g))) << tag(g, "after the failed backward");
}

// The last bucket's reduction starts when backward's computation ends, so
// all of it is exposed: with a single bucket nothing overlaps.
void stats_count_exposed_communication(ProcessGroup& g) {
  for (bool many : {false, true}) {
    auto net = seeded<Net>(1);
    DDPOptions o;
    o.group = handle(g);
    if (many) o.bucket_cap_mb = o.first_bucket_cap_mb = 1e-6;
    DistributedDataParallel model(net, o);
    for (int step = 0; step < 3; ++step) torch::mse_loss(model(torch::ones({1, 2})), torch::zeros({1, 4})).backward();
    const DDPStats& s = model.stats();
    const std::string what = tag(g, many ? "three buckets" : "one bucket");
    EXPECT_EQ(s.iterations, 3) << what;
    EXPECT_EQ(model.bucket_parameter_names().size(), many ? 3u : 1u) << what;
    if (many) {
      EXPECT_GE(s.comm_ms, s.exposed_ms) << what;
    } else {
      EXPECT_EQ(s.comm_ms, s.exposed_ms) << what;
      EXPECT_EQ(s.overlapped_ms(), 0.0) << what;
    }
    if (g.size() > 1) EXPECT_GT(s.exposed_ms, 0.0) << what;
  }
}

// PyTorch's fp16/bf16 compression hooks: each rank sends its gradient divided
// by W and rounded to 16 bits; the sum is taken in 16 bits (or in float32 and
// rounded once). With u the unit roundoff (2^-11 fp16, 2^-8 bf16) and
// S = sum_r |g_r| / W per element: the division and the cast round at most
// twice, W - 1 additions at most W - 1 times more, so |result - average| <=
// (W + 1) u S (first order; 1.01 covers the rest), plus, for fp16, (W + 1)
// half-ulps of its subnormals (2^-25) below 6.1e-5.
void compress_hooks(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  for (at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    const double u = dtype == at::kHalf ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const double floor = dtype == at::kHalf ? (w + 1) * std::ldexp(1.0, -25) : 0.0;
    auto hook = make_comm_hook(dtype == at::kHalf ? "fp16" : "bf16");
    const std::string what = tag(g, hook->name() + " hook");
    // This rank's own gradient, and its exact average over ranks (float64).
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11 + r);
    at::Tensor x = randn({3, 2}, gen), y = randn({3, 4}, gen);
    auto local = seeded<Net>(5);
    torch::mse_loss(local->forward(x), y).backward();
    std::vector<at::Tensor> sums, magnitudes;
    for (auto& p : local->parameters()) {
      at::Tensor s = p.grad().to(at::kDouble), m = p.grad().abs().to(at::kDouble);
      g.all_reduce(s);
      g.all_reduce(m);
      sums.push_back(s / w);
      magnitudes.push_back(m / w);
    }
    for (bool tiny : {true, false}) {
      auto net = seeded<Net>(5);
      net->to(g.device());  // the hook compresses on the group's device (a GPU for nccl)
      DDPOptions o;
      o.group = handle(g);
      if (tiny) o.bucket_cap_mb = o.first_bucket_cap_mb = 1e-6;  // one bucket per parameter
      DistributedDataParallel model(net, o);
      model.register_comm_hook(hook);
      const int64_t before = g.traffic().bytes;
      torch::mse_loss(model(x.to(g.device())), y.to(g.device())).backward();
      const int64_t sent = g.traffic().bytes - before;
      int64_t numel = 0;
      bool rounded = false;
      auto params = net->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        at::Tensor got = params[i].grad().to(at::kDouble).cpu();
        at::Tensor bound = (w + 1) * u * 1.01 * magnitudes[i] + floor;
        EXPECT_TRUE(((got - sums[i]).abs() <= bound).all().item<bool>())
            << what << ": parameter " << i << " off by " << ((got - sums[i]).abs() - bound).max().item<double>()
            << " beyond the bound";
        rounded |= !at::allclose(got, sums[i], 0, 1e-9);
        numel += params[i].numel();
      }
      // A world of one runs the hook too, as PyTorch: its gradients are rounded as well.
      // Negative control: 16-bit rounding shows (the float32 path would match to ~1e-7).
      EXPECT_TRUE(rounded) << what << ": gradients match the float32 average exactly; was the hook run?";
      // Half the bytes of float32, on every backend.
      EXPECT_EQ(sent, numel * 2) << what << (tiny ? ", tiny buckets" : "");
    }
  }
  EXPECT_THROW(make_comm_hook("powersgd:rank=0"), InvalidArgument);
  EXPECT_THROW(make_comm_hook("powersgd:rank=2,start=1"), InvalidArgument);
  EXPECT_THROW(make_comm_hook("powersgd:rnk=2"), InvalidArgument);
  EXPECT_THROW(make_comm_hook("topk"), InvalidArgument);
}

// Net's parameters in two groups with their own settings: {fc1, fc2} and {fc3}.
std::vector<torch::optim::OptimizerParamGroup> two_groups(Net& net) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      std::vector<at::Tensor>{net.fc1->weight, net.fc2->weight},
      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.01).betas({0.8, 0.99})));
  groups.emplace_back(std::vector<at::Tensor>{net.fc3->weight},
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.02).amsgrad(true)));
  return groups;
}

std::unique_ptr<torch::optim::Optimizer> make_adamw(std::vector<torch::optim::OptimizerParamGroup> groups) {
  return std::make_unique<torch::optim::AdamW>(std::move(groups), torch::optim::AdamWOptions(0.5));
}

// Two optimizer state dicts hold the same settings and the same tensors, bit for bit.
void expect_same_state(const c10::IValue& got, const c10::IValue& want, const std::string& what) {
  auto g = got.toGenericDict(), w = want.toGenericDict();
  auto gs = g.at("state").toGenericDict(), ws = w.at("state").toGenericDict();
  ASSERT_EQ(gs.size(), ws.size()) << what << ": states for different parameters";
  for (const auto& item : ws) {
    ASSERT_TRUE(gs.contains(item.key())) << what << ": no state for parameter " << item.key().toInt();
    auto a = gs.at(item.key()).toGenericDict(), b = item.value().toGenericDict();
    ASSERT_EQ(a.size(), b.size()) << what;
    for (const auto& kv : b) {
      const at::Tensor mine = a.at(kv.key()).toTensor();
      EXPECT_TRUE(mine.is_cpu()) << what << ": state[" << item.key().toInt() << "][" << kv.key().toStringRef()
                                 << "] is on " << mine.device() << ", not the CPU";
      EXPECT_TRUE(at::equal(mine.cpu(), kv.value().toTensor().cpu()))
          << what << ": state[" << item.key().toInt() << "][" << kv.key().toStringRef() << "]";
    }
  }
  EXPECT_EQ(c10::str(g.at("param_groups")), c10::str(w.at("param_groups"))) << what;
}

// ZeRO-1 with AdamW over DDP against plain AdamW over DDP: after 10 steps every
// parameter is equal bit for bit (the same elementwise update of the same averaged
// gradients; the broadcast copies bits), partitions uneven and, at world 4, one empty.
void zero_redundancy_optimizer(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  const at::Device dev = g.device();  // a GPU for nccl
  auto a = seeded<Net>(5), b = seeded<Net>(5);
  a->to(dev);
  b->to(dev);
  DDPOptions o;
  o.group = handle(g);
  DistributedDataParallel plain_model(a, o), zero_model(b, o);
  auto plain = make_adamw(two_groups(*a));
  ZeroRedundancyOptimizer zero(two_groups(*b), make_adamw, ZeroOptions{handle(g)});
  // PyTorch's partition: fc2 (500) first to rank 0, fc1 (20) to the least loaded, then fc3 (200).
  const std::vector<int> expected_owner = {w > 1 ? 1 : 0, 0, w == 1 ? 0 : w == 2 ? 1 : 2};  // fc1, fc2, fc3
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(zero.owner(i), expected_owner[i]) << tag(g, "owner of " + std::to_string(i));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(40 + r);
  auto pa = a->parameters(), pb = b->parameters();
  std::string first_difference;  // the first step whose reduced gradients or parameters differ, and by how much
  const auto differs = [](const std::vector<at::Tensor>& x, const std::vector<at::Tensor>& y, bool grads) {
    std::string out;
    for (size_t i = 0; i < x.size(); ++i) {
      const at::Tensor u = grads ? x[i].grad() : x[i], v = grads ? y[i].grad() : y[i];
      if (!at::equal(u, v))
        out += " " + std::string(grads ? "grad" : "param") + std::to_string(i) + " by " +
               std::to_string((u - v).abs().max().item<double>());
    }
    return out;
  };
  for (int step = 0; step < 10; ++step) {
    at::Tensor x = randn({3, 2}, gen).to(dev), y = randn({3, 4}, gen).to(dev);
    plain->zero_grad();
    torch::mse_loss(plain_model(x), y).backward();
    zero.zero_grad();
    torch::mse_loss(zero_model(x), y).backward();
    const std::string grads = differs(pa, pb, true);
    plain->step();
    zero.step();
    const std::string params = differs(pa, pb, false);
    if (first_difference.empty() && !(grads + params).empty())
      first_difference = "step " + std::to_string(step) + ":" + grads + params;
  }
  EXPECT_EQ(first_difference, "") << tag(g, "ZeRO against plain AdamW, both over DDP");
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(at::equal(pa[i], pb[i])) << tag(g, "ZeRO parameter " + std::to_string(i));
  // Each rank holds its partition's state only; together, exactly the plain optimizer's.
  at::Tensor bytes = at::full({1}, double(zero.local_state_bytes()), at::kDouble);
  g.all_reduce(bytes);
  // Plain AdamW holds two float32 moments per element of fc1 (20) and fc2 (500), three (amsgrad) of fc3 (200).
  const int64_t plain_bytes = optimizer_state_bytes(*plain);
  EXPECT_EQ(plain_bytes, (20 + 500) * 4 * 2 + 200 * 4 * 3) << tag(g, "plain AdamW's state bytes");
  EXPECT_EQ(int64_t(bytes.item<double>()), plain_bytes) << tag(g, "state bytes over all ranks");
  // Consolidated at the last rank: the plain optimizer's state dict.
  const int to = w - 1;
  zero.consolidate_state_dict(to);
  if (r == to)
    expect_same_state(zero.state_dict(), optimizer_state_dict(*plain), tag(g, "consolidated"));
  else
    EXPECT_THROW(zero.state_dict(), InvalidArgument);
  // Loaded into a fresh ZeRO (and the state into the plain one's copy), one more step agrees.
  c10::IValue full = broadcast_object(r == to ? zero.state_dict() : c10::IValue(), to, handle(g));
  auto c = seeded<Net>(9);
  c->to(dev);
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < pb.size(); ++i) c->parameters()[i].copy_(pb[i]);
  }
  DistributedDataParallel resumed_model(c, o);
  // Built from an optimizer as the Task made it (its type, groups and their options), not from a factory.
  const auto like = make_adamw(two_groups(*c));
  ZeroRedundancyOptimizer resumed(*like, ZeroOptions{handle(g)});
  resumed.load_state_dict(full);
  EXPECT_THROW(ZeroRedundancyOptimizer(*plain, ZeroOptions{handle(g)}), InvalidArgument)  // it stepped: has state
      << tag(g, "sharding a stepped optimizer");
  torch::optim::RMSprop rmsprop(c->parameters(), torch::optim::RMSpropOptions(0.1));
  EXPECT_THROW(ZeroRedundancyOptimizer(rmsprop, ZeroOptions{handle(g)}), InvalidArgument) << tag(g, "RMSprop");
  at::Tensor x = randn({3, 2}, gen).to(dev), y = randn({3, 4}, gen).to(dev);
  zero.zero_grad();
  for (auto* m : {&zero_model, &resumed_model}) torch::mse_loss((*m)(x), y).backward();
  zero.step();
  resumed.step();
  auto pc = c->parameters();
  for (size_t i = 0; i < pb.size(); ++i)
    EXPECT_TRUE(at::equal(pb[i], pc[i])) << tag(g, "resumed ZeRO parameter " + std::to_string(i));
}

}  // namespace

const std::vector<SuiteCase>& ddp_suite() {
  static const std::vector<SuiteCase> cases = [] {
    std::vector<SuiteCase> all = {
        {"DdpGradientEquivalence", gradient_equivalence},
        {"DdpBucketViewEquivalence", bucket_view_equivalence},
        {"DdpNoSyncAccumulation", no_sync_accumulation},
        {"DdpBatchNormCnn", batchnorm_cnn},
        {"DdpUnusedParameters", unused_parameters},
        {"DdpMissingGradientIsAnError", missing_gradient_is_an_error},
        {"DdpGradientTwiceIsAnError", gradient_twice_is_an_error},
        {"DdpMismatchedModels", mismatched_models_fail_everywhere},
        {"DdpModelsOnTwoDevices", models_on_two_devices_are_refused},
        {"DdpCommHook", comm_hook_sees_every_bucket},
        {"DdpHooksNeverWait", hooks_never_wait},
        {"DdpCompressHooks", compress_hooks},
        {"DdpZeroRedundancyOptimizer", zero_redundancy_optimizer},
        {"DdpEvaluationForwardOnOneRank", evaluation_forward_on_one_rank},
        {"DdpEvalModeTraining", eval_mode_training},
        {"DdpGradEnabledEvaluationOnOneRank", grad_enabled_evaluation_on_one_rank},
        {"DdpStatsCountExposedCommunication", stats_count_exposed_communication},
    };
    for (const auto& c : powersgd_suite()) all.push_back(c);
    for (const auto& c : fsdp_suite()) all.push_back(c);
    for (const auto& c : fully_shard_suite()) all.push_back(c);
    for (const auto& c : join_suite()) all.push_back(c);
    for (const auto& c : step_reads_suite()) all.push_back(c);
    for (const auto& more : sync_batch_norm_suite()) all.push_back(more);
    return all;
  }();
  return cases;
}

}  // namespace ddp::testing
