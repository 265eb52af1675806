// Join (uneven inputs) in the DDP suite, on every backend and world size:
// rank r trains on its own number of batches, the ranks out of inputs shadow
// the others, and the result is compared with one process that replays the
// same iterations (each step: the sum of the active ranks' gradients over the
// divisor). Equality with python3-torch's Join is tests/parallel/interop.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn.h>

#include <algorithm>
#include <mutex>

#include "ddp/errors.h"
#include "ddp/parallel/consistency.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "ddp/parallel/join.h"
#include "support/ddp_suite.h"

namespace ddp::testing {
namespace {

using torch::nn::Linear;

// Linear(4,8)-tanh-Linear(8,3), or with a BatchNorm between (buffers), or
// with a branch `b` some forwards skip (unused parameters).
struct Net : torch::nn::Module {
  Linear a{nullptr}, b{nullptr}, c{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  bool use_b = true;
  Net(bool batch_norm, bool branch) {
    a = register_module("a", Linear(4, 8));
    if (batch_norm) bn = register_module("bn", torch::nn::BatchNorm1d(8));
    if (branch) b = register_module("b", Linear(8, 8));
    c = register_module("c", Linear(8, 3));
  }
  at::Tensor forward(at::Tensor x) {
    x = a(x);
    if (bn) x = bn(x);
    x = torch::tanh(x);
    if (b && use_b) x = torch::tanh(b(x));
    return c(x);
  }
};

std::shared_ptr<Net> make_net(uint64_t seed, bool batch_norm, bool branch) {
  static std::mutex mu;  // ranks may be threads sharing the global generator
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(seed);
  return std::make_shared<Net>(batch_norm, branch);
}

// Rank r's batch at step s; the branch is used on (r + s) even only.
std::pair<at::Tensor, at::Tensor> batch(int r, int s) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 * r + s);
  return {at::randn({6, 4}, gen), at::randn({6, 3}, gen)};
}
bool uses_branch(int r, int s) { return (r + s) % 2 == 0; }

struct Setup {
  std::string what;
  JoinOptions join;
  std::shared_ptr<CommHook> hook;
  bool batch_norm = false, branch = false;  // branch: find_unused_parameters
  bool rank0_without_data = false;          // rank r has 2r batches instead of 3 + 2r
  bool hook_divides_by_world = false;       // a hook divides by W whatever divide_by_initial_world_size
};

int batches(const Setup& s, int r) { return s.rank0_without_data ? 2 * r : 3 + 2 * r; }

constexpr double kLr = 0.1;

void sgd_step(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters())
    if (p.grad().defined()) p.sub_(kLr * p.grad());
}

void zero_grads(torch::nn::Module& m) {
  for (auto& p : m.parameters())
    if (p.grad().defined()) p.mutable_grad().zero_();
}

// One process replays the run: at step s the ranks with more than s batches
// are active; the update is the sum of their gradients over the divisor (W,
// or their number). Buffers (BatchNorm statistics) are those of the highest
// active rank, which Join broadcasts before each forward: here, the last rank
// (it has the most batches), whose final state every rank gets.
std::shared_ptr<Net> reference(const Setup& s, int world, bool per_active_count) {
  auto ref = make_net(5, s.batch_norm, s.branch);
  int steps = 0;
  for (int r = 0; r < world; ++r) steps = std::max(steps, batches(s, r));
  for (int step = 0; step < steps; ++step) {
    std::vector<at::Tensor> saved;
    for (auto& b : ref->buffers()) saved.push_back(b.clone());
    std::vector<at::Tensor> last;
    zero_grads(*ref);
    int active = 0;
    for (int r = 0; r < world; ++r) {
      if (step >= batches(s, r)) continue;
      ++active;
      auto bufs = ref->buffers();
      {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < bufs.size(); ++i) bufs[i].copy_(saved[i]);
      }
      ref->use_b = !s.branch || uses_branch(r, step);
      auto [x, y] = batch(r, step);
      torch::mse_loss(ref->forward(x), y).backward();
      if (r == world - 1)
        for (auto& b : bufs) last.push_back(b.clone());
    }
    {
      torch::NoGradGuard no_grad;
      auto bufs = ref->buffers();
      for (size_t i = 0; i < bufs.size(); ++i) bufs[i].copy_(last[i]);
      const double divisor = per_active_count ? active : world;
      for (auto& p : ref->parameters())
        if (p.grad().defined()) p.mutable_grad().div_(divisor);
    }
    sgd_step(*ref);
  }
  return ref;
}

// Parameters and buffers against the reference. Each gradient element is a sum
// over at most 4 ranks, divided before the all_reduce here and after the sum
// in the reference: a few ulps per step (2 gamma_4 ~ 5e-7 relative), over at
// most 9 steps of lr 0.1 on O(1) values: far below atol 5e-5 (the suite's,
// PyTorch's float32 tolerance with rtol 1.3e-6); a wrong divisor or a missing
// rank's gradient moves the weights by O(1e-2): the negative control checks
// that the other divide mode's reference is that far.
double worst_difference(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0;
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (const auto& p : pa) worst = std::max(worst, (p.value() - pb[p.key()]).abs().max().item<double>());
  auto ba = a.named_buffers(), bb = b.named_buffers();
  for (const auto& x : ba)
    worst = std::max(worst, (x.value().to(at::kDouble) - bb[x.key()].to(at::kDouble)).abs().max().item<double>());
  return worst;
}

void uneven(ProcessGroup& g, const Setup& s) {
  const int r = g.rank(), w = g.size();
  auto net = make_net(r == 0 ? 5 : 50 + r, s.batch_norm, s.branch);  // DDP broadcasts rank 0's: the reference's
  DDPOptions o;
  o.group = handle(g);
  o.bucket_cap_mb = o.first_bucket_cap_mb = 1e-4;  // ~100 bytes: several buckets, rebuilt after step 0
  o.find_unused_parameters = s.branch;
  DistributedDataParallel model(net, o);
  if (s.hook) model.register_comm_hook(s.hook);
  Join join(model, s.join);
  for (int step = 0; step < batches(s, r); ++step) {
    net->use_b = !s.branch || uses_branch(r, step);
    auto [x, y] = batch(r, step);
    zero_grads(*net);
    torch::mse_loss(model(x), y).backward();
    sgd_step(*net);
  }
  join.finish();
  int steps = 0;
  for (int q = 0; q < w; ++q) steps = std::max(steps, batches(s, q));
  EXPECT_EQ(join.shadowed_iterations(), steps - batches(s, r)) << tag(g, s.what);
  EXPECT_TRUE(parameters_consistent(*net, 0, handle(g))) << tag(g, s.what + ": replicas differ after finish()");

  const bool per_active = !s.join.divide_by_initial_world_size && !s.hook_divides_by_world;
  auto ref = reference(s, w, per_active);
  const double diff = worst_difference(*net, *ref);
  EXPECT_LE(diff, 5e-5) << tag(g, s.what + ": against the single-process replay");
  // Negative control: the other divisor's replay must be far (any world > 1 has
  // steps with fewer active ranks than W), or the comparison could not tell.
  if (w > 1 && steps > 0) {
    auto other = reference(s, w, !per_active);
    EXPECT_GT(worst_difference(*net, *other), 1e-3) << tag(g, s.what + ": the divisor does not show");
  }
}

void join_initial_world_size(ProcessGroup& g) { uneven(g, {"divide by W"}); }

void join_active_ranks(ProcessGroup& g) {
  Setup s{"divide by the active ranks"};
  s.join.divide_by_initial_world_size = false;
  uneven(g, s);
}

// Rank 0 has no batch at all: it shadows every iteration, the bucket rebuild
// (a broadcast from rank 0) included.
void join_rank_without_data(ProcessGroup& g) {
  Setup s{"rank 0 without data"};
  s.rank0_without_data = true;
  s.join.divide_by_initial_world_size = false;
  uneven(g, s);
}

// The hook's all_reduces are shadowed through the hook; the hook divides by W
// in both modes (as PyTorch's hooks do).
void join_comm_hook(ProcessGroup& g) {
  for (bool initial : {true, false}) {
    Setup s{std::string("allreduce hook, divide_by_initial_world_size ") + (initial ? "true" : "false")};
    s.hook = make_comm_hook("allreduce");
    s.join.divide_by_initial_world_size = initial;
    s.hook_divides_by_world = true;
    uneven(g, s);
  }
}

void join_batch_norm(ProcessGroup& g) {
  Setup s{"BatchNorm buffers"};
  s.batch_norm = true;
  uneven(g, s);
}

void join_unused_parameters(ProcessGroup& g) {
  Setup s{"find_unused_parameters"};
  s.branch = true;
  s.join.divide_by_initial_world_size = false;
  uneven(g, s);
}

// Rank r has 3 + 2r batches: with throw_on_early_termination every rank
// throws in the fourth iteration (rank 0 in finish(), the others in their
// forward), and they are still in step afterwards. Even inputs: no error.
void join_throw_on_early_termination(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  auto net = make_net(5, false, false);
  DDPOptions o;
  o.group = handle(g);
  DistributedDataParallel model(net, o);
  JoinOptions jo;
  jo.throw_on_early_termination = true;
  auto train = [&](int steps, int& done) {
    std::string error;
    Join join(model, jo);
    try {
      for (int step = 0; step < steps; ++step, ++done) {
        auto [x, y] = batch(r, step);
        zero_grads(*net);
        torch::mse_loss(model(x), y).backward();
        sgd_step(*net);
      }
      join.finish();
    } catch (const Error& e) {
      error = e.what();
    }
    return error;
  };
  int done = 0;
  std::string error = train(3 + 2 * r, done);
  if (w == 1) {
    EXPECT_EQ(error, "") << tag(g, "a world of one never runs out early");
  } else {
    EXPECT_EQ(done, 3) << tag(g, "iterations before the error");
    const std::string prefix = "[" + g.backend() + "] rank " + std::to_string(r) + "/" + std::to_string(w) + " Join: ";
    EXPECT_EQ(error.rfind(prefix, 0), 0u) << tag(g, error);
    const std::string says = r == 0 ? "this rank ran out of inputs while rank(s) 1" : "rank(s) 0 ran out of inputs";
    EXPECT_NE(error.find(says), std::string::npos) << tag(g, error);
  }
  EXPECT_TRUE(parameters_consistent(*net, 0, handle(g))) << tag(g, "replicas after the error");
  done = 0;
  EXPECT_EQ(train(2, done), "") << tag(g, "even inputs");
  EXPECT_TRUE(parameters_consistent(*net, 0, handle(g))) << tag(g, "replicas after even inputs");
}

// Inside a Join, evaluation forwards (no gradients: no communication) on odd
// ranks only, and two micro-batches per step, the first under no_sync: the
// ranks out of inputs follow what the join all_reduce says the others do.
void join_no_sync_and_evaluation(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  auto net = make_net(r == 0 ? 5 : 50 + r, false, false);
  DDPOptions o;
  o.group = handle(g);
  DistributedDataParallel model(net, o);
  Join join(model);
  for (int step = 0; step < 3 + 2 * r; ++step) {
    if (r % 2) {
      torch::NoGradGuard no_grad;
      model(batch(r, 200 + step).first);
    }
    zero_grads(*net);
    {
      auto guard = model.no_sync();
      auto [x, y] = batch(r, 100 + step);
      torch::mse_loss(model(x), y).backward();
    }
    auto [x, y] = batch(r, step);
    torch::mse_loss(model(x), y).backward();
    sgd_step(*net);
  }
  join.finish();
  auto ref = make_net(5, false, false);
  for (int step = 0; step < 3 + 2 * (w - 1); ++step) {
    zero_grads(*ref);
    for (int q = 0; q < w; ++q) {
      if (step >= 3 + 2 * q) continue;
      for (int micro : {100 + step, step}) {
        auto [x, y] = batch(q, micro);
        torch::mse_loss(ref->forward(x), y).backward();
      }
    }
    {
      torch::NoGradGuard no_grad;
      for (auto& p : ref->parameters()) p.mutable_grad().div_(w);
    }
    sgd_step(*ref);
  }
  EXPECT_LE(worst_difference(*net, *ref), 5e-5) << tag(g, "no_sync and evaluation inside a Join");
}

// PowerSGD (compressing from step 2) issues two all_reduces per bucket, the
// second from a continuation: the ranks out of inputs run the hook on zeros,
// so its collectives match (a mismatch would hang or fail on sizes). No closed
// form: the replicas must be equal to the bit, finite, and have moved.
void join_powersgd(ProcessGroup& g) {
  const int r = g.rank();
  auto net = make_net(5, false, false);
  std::vector<at::Tensor> initial;
  for (auto& p : net->parameters()) initial.push_back(p.detach().clone());
  DDPOptions o;
  o.group = handle(g);
  o.bucket_cap_mb = o.first_bucket_cap_mb = 1e-4;
  DistributedDataParallel model(net, o);
  model.register_comm_hook(make_comm_hook("powersgd:rank=1,start=2"));
  Join join(model);
  for (int step = 0; step < 3 + 2 * r; ++step) {
    auto [x, y] = batch(r, step);
    zero_grads(*net);
    torch::mse_loss(model(x), y).backward();
    sgd_step(*net);
  }
  join.finish();
  EXPECT_EQ(join.shadowed_iterations(), 2 * (g.size() - 1 - r)) << tag(g, "PowerSGD");
  EXPECT_TRUE(parameters_consistent(*net, 0, handle(g))) << tag(g, "PowerSGD: replicas differ after finish()");
  double moved = 0;
  auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(params[i].isfinite().all().item<bool>()) << tag(g, "PowerSGD: parameter not finite");
    moved = std::max(moved, (params[i] - initial[i]).abs().max().item<double>());
  }
  EXPECT_GT(moved, 1e-3) << tag(g, "PowerSGD: no training happened");
}

// One Join per model at a time (a second is an InvalidArgument on every rank,
// before any communication); finish() twice, or on a disabled Join, does nothing.
void join_api(ProcessGroup& g) {
  auto net = make_net(5, false, false);
  DDPOptions o;
  o.group = handle(g);
  DistributedDataParallel model(net, o);
  {
    Join join(model);
    std::string error;
    try {
      Join second(model);
    } catch (const InvalidArgument& e) {
      error = e.what();
    }
    EXPECT_NE(error.find(" Join: the model already has a Join attached"), std::string::npos) << tag(g, error);
    join.finish();
    join.finish();
    EXPECT_EQ(join.shadowed_iterations(), 0) << tag(g, "no iteration to shadow");
  }
  JoinOptions off;
  off.enable = false;
  Join disabled(model, off);
  auto [x, y] = batch(g.rank(), 0);
  torch::mse_loss(model(x), y).backward();  // plain DDP: no join all_reduce
  disabled.finish();                        // nothing: no rank waits for another
  at::Tensor t = at::full({2}, 1.0);
  g.all_reduce(t);  // every rank's next collective is still this one
  EXPECT_TRUE(at::equal(t, at::full({2}, double(g.size())))) << tag(g, "collectives out of step");
}

}  // namespace

const std::vector<SuiteCase>& join_suite() {
  static const std::vector<SuiteCase> cases = {
      {"DdpJoinInitialWorldSize", join_initial_world_size},
      {"DdpJoinActiveRanks", join_active_ranks},
      {"DdpJoinRankWithoutData", join_rank_without_data},
      {"DdpJoinCommHook", join_comm_hook},
      {"DdpJoinPowerSGD", join_powersgd},
      {"DdpJoinBatchNorm", join_batch_norm},
      {"DdpJoinUnusedParameters", join_unused_parameters},
      {"DdpJoinThrowOnEarlyTermination", join_throw_on_early_termination},
      {"DdpJoinNoSyncAndEvaluation", join_no_sync_and_evaluation},
      {"DdpJoinApi", join_api},
  };
  return cases;
}

}  // namespace ddp::testing
