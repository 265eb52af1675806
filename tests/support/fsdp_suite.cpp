// FullyShardedDataParallel (ZeRO-3 and ZeRO-2) against DDP, on every backend
// and world size: the same model, data and Adam give the same parameters, while
// each rank holds 1/W of the parameters, gradients and optimizer state.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <stdlib.h>

#include <filesystem>
#include <mutex>

#include "ddp/dist/collectives.h"
#include "ddp/errors.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "ddp/parallel/fully_sharded.h"
#include "ddp/parallel/optimizer_state.h"
#include "support/ddp_suite.h"

namespace ddp::testing {
namespace {

using torch::nn::Linear;
using torch::nn::LinearOptions;

// Units of 63, 50, 15 and 3 elements, of parameters with 9, 5, 3 and 1 rows:
// none divides evenly by 2, 3 or 4, and at world 4 the last unit's rows are
// rank 0's only.
torch::nn::Sequential make_net(uint64_t seed) {
  static std::mutex mu;  // ranks may be threads sharing the global generator
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(seed);
  return torch::nn::Sequential(Linear(6, 9), torch::nn::Tanh(), Linear(9, 5), torch::nn::Tanh(),
                               Linear(LinearOptions(5, 3).bias(false)), torch::nn::Tanh(),
                               Linear(LinearOptions(3, 1).bias(false)));
}
const std::vector<std::vector<std::string>> kUnits = {
    {"0.weight", "0.bias"}, {"2.weight", "2.bias"}, {"4.weight"}, {"6.weight"}};
const std::vector<std::vector<std::string>> kUnits60 = {
    {"0.weight", "0.bias"}, {"2.weight", "2.bias", "4.weight"}, {"6.weight"}};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Bytes of a unit's parameters: in full; this rank's rows padded to ceil(rows / W) (what it holds); its rows
// themselves (what the optimizer's state has of each).
struct UnitBytes {
  int64_t full = 0, padded = 0, rows = 0;
};
UnitBytes unit_bytes(torch::nn::Sequential& net, const std::vector<std::string>& names, int r, int w) {
  UnitBytes b;
  auto params = net->named_parameters();
  for (const auto& name : names) {
    const at::Tensor& p = params[name];
    const int64_t rows = p.size(0), row = p.numel() / rows, chunk = ceil_div(rows, w);
    b.full += 4 * p.numel();
    b.padded += 4 * chunk * row;
    b.rows += 4 * std::max<int64_t>(0, std::min(chunk, rows - r * chunk)) * row;
  }
  return b;
}

std::string strategy_name(ShardingStrategy s) { return s == ShardingStrategy::FullShard ? "FullShard" : "ShardGradOp"; }

// The optimizers: Adam (the issue's), and SGD with momentum, which unlike Adam
// is not invariant to the scale of the gradients (a wrong average shows).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(bool adam, std::vector<at::Tensor> params) {
  if (adam) return std::make_unique<torch::optim::Adam>(std::move(params), torch::optim::AdamOptions(0.01));
  return std::make_unique<torch::optim::SGD>(std::move(params), torch::optim::SGDOptions(0.1).momentum(0.9));
}

// The same net (seed) under DDP and under FSDP, each with its optimizer.
struct SideBySide {
  torch::nn::Sequential plain_net;
  std::unique_ptr<DistributedDataParallel<torch::nn::Sequential>> plain;
  std::unique_ptr<torch::optim::Optimizer> plain_opt;
  std::unique_ptr<FullyShardedDataParallel> sharded;
  std::unique_ptr<torch::optim::Optimizer> sharded_opt;

  // Both on the group's device (a GPU for nccl).
  SideBySide(ProcessGroup& g, uint64_t seed, bool adam, FSDPOptions f) : plain_net(make_net(seed)) {
    plain_net->to(g.device());
    DDPOptions d;
    d.group = handle(g);
    plain = std::make_unique<DistributedDataParallel<torch::nn::Sequential>>(plain_net, d);
    plain_opt = make_optimizer(adam, plain_net->parameters());
    f.group = handle(g);
    torch::nn::Sequential to_shard = make_net(seed);
    to_shard->to(g.device());
    sharded = std::make_unique<FullyShardedDataParallel>(to_shard, f);
    sharded_opt = make_optimizer(adam, sharded->parameters());
  }
  // One step of DDP's (the whole step) and the loss's backward of FSDP's (its step is the caller's).
  void step_plain_backward_sharded(const at::Tensor& x, const at::Tensor& y) {
    plain_opt->zero_grad();
    torch::mse_loss((*plain)(x), y).backward();
    plain_opt->step();
    sharded_opt->zero_grad();
    torch::mse_loss((*sharded)(x), y).backward();
  }
};

// Ten steps on rank-dependent data, DDP and FSDP side by side. Tolerance:
// both compute the same per-rank gradients from the same parameters; only the
// order of the W-term sums differs (all_reduce vs reduce_scatter), the optimizer's arithmetic on a flat shard vs
// per-parameter tensors (vectorised body vs scalar tail, FMA contraction) and, on a GPU, the kernels cuBLAS picks
// for FSDP's views at unaligned offsets of one flat buffer (another split of each dot product). A few float32 ulps
// of a sum are a few ulps of its largest term, not of the result: where an element nearly cancels (across ranks, or
// in Adam's division by its running RMS; 1.4e-6 seen on a Xeon with MKL under load) that is an absolute error far
// above its own ulps. So every comparison takes PyTorch's own float32 tolerance of its FSDP-vs-DDP parity tests
// (kAtol 1e-5, assertEqual's), with rtol 1e-5. A missed or doubled step moves parameters by ~1e-2: 1000x either.
constexpr double kRtol = 1e-5, kAtol = 1e-5;

void train_side_by_side(ProcessGroup& g, ShardingStrategy strategy, int64_t min_params, bool adam) {
  const int r = g.rank(), w = g.size();
  const std::string what =
      tag(g, strategy_name(strategy) + " min_unit_params " + std::to_string(min_params) + (adam ? " Adam" : " SGD"));
  FSDPOptions f;
  f.sharding_strategy = strategy;
  f.min_unit_params = min_params;
  SideBySide both(g, 7, adam, f);
  auto& plain_net = both.plain_net;
  FullyShardedDataParallel& sharded = *both.sharded;
  // The wrap policy: 60 groups {Linear 63}, {Linear 50, Tanh, Linear 15}, {Linear 3}.
  const auto& units = min_params == 0 ? kUnits : kUnits60;
  EXPECT_EQ(sharded.unit_parameter_names(), units) << what;
  int64_t shard_bytes = 0, row_bytes = 0, largest = 0, all = 0, largest_gather = 0;
  for (const auto& names : units) {
    const UnitBytes b = unit_bytes(plain_net, names, r, w);
    shard_bytes += b.padded;
    row_bytes += b.rows;
    largest = std::max(largest, b.full);
    all += b.full;
    largest_gather = std::max(largest_gather, w * b.padded);
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + r);
  for (int step = 0; step < 10; ++step) {
    both.step_plain_backward_sharded(at::randn({4, 6}, gen).to(g.device()), at::randn({4, 1}, gen).to(g.device()));
    // Between backward and step: shards of parameters and of gradients only.
    FSDPMemory m = sharded.memory();
    EXPECT_EQ(m.parameter_bytes, shard_bytes) << what << " step " << step;
    EXPECT_EQ(m.gradient_bytes, shard_bytes) << what << " step " << step;
    both.sharded_opt->step();
  }
  // The reduce-scatters' time, as DDP's stats(): every backward counted, the exposed part within the whole.
  const DDPStats& stats = sharded.sharded().stats();
  EXPECT_EQ(stats.iterations, 10) << what;
  EXPECT_GE(stats.exposed_ms, 0.0) << what;
  EXPECT_GE(stats.comm_ms, stats.exposed_ms) << what;
  // Full parameters held at once: a unit must be whole to run, and at most the one running and the one
  // prefetched are gathered, each with its gather buffer (FullShard); every unit stays from its forward to its
  // backward, beside at most two gather buffers (ShardGradOp).
  const int64_t peak = sharded.memory().peak_parameter_bytes - shard_bytes;
  const bool full_shard = strategy == ShardingStrategy::FullShard;
  EXPECT_GE(peak, full_shard ? largest : all) << what << ": peak parameter bytes";
  EXPECT_LE(peak, (full_shard ? 2 * largest : all) + 2 * (w > 1 ? largest_gather : 0))
      << what << ": peak parameter bytes";
  EXPECT_EQ(optimizer_state_bytes(*both.sharded_opt), (adam ? 2 : 1) * row_bytes)
      << what << ": the optimizer's state of this rank's rows (Adam: two moments; SGD: momentum)";
  auto full = sharded.full_state_dict();
  auto named = plain_net->named_parameters();
  EXPECT_EQ(full.size(), named.size()) << what;
  for (const auto& p : named) {
    const at::Tensor* got = full.find(p.key());
    if (!got) {
      ADD_FAILURE() << what << ": no '" << p.key() << "' in the full state dict";
      continue;
    }
    const at::Tensor want = p.value().cpu(), mine = got->cpu();
    EXPECT_TRUE(at::allclose(mine, want, kRtol, kAtol))
        << what << ": '" << p.key() << "' differs from DDP by " << (mine - want).abs().max().item<float>();
  }
  // Evaluation: the same outputs, and the gathered parameters are freed again.
  at::NoGradGuard no_grad;
  at::Tensor x = at::randn({5, 6}, gen).to(g.device());
  EXPECT_TRUE(at::allclose(sharded(x), plain_net->forward(x), kRtol, kAtol)) << what << ": evaluation";
  EXPECT_EQ(sharded.memory().parameter_bytes, shard_bytes) << what << ": after evaluation";
}

void fsdp_equals_ddp(ProcessGroup& g) {
  for (auto strategy : {ShardingStrategy::FullShard, ShardingStrategy::ShardGradOp})
    for (int64_t min_params : {int64_t(0), int64_t(60)})
      for (bool adam : {true, false}) train_side_by_side(g, strategy, min_params, adam);
}

// A full state dict saved from one FSDP model loads into another (any world
// size: each keeps its own shards), bit for bit; bad ones are refused by name.
void fsdp_full_state_dict(ProcessGroup& g) {
  FSDPOptions f;
  f.group = handle(g);
  FullyShardedDataParallel a(make_net(1), f), b(make_net(2), f);
  auto state = a.full_state_dict();
  EXPECT_EQ(state.keys(),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "6.weight"}))
      << tag(g, "names");
  // Every rank holds the same full state: rank 0's initial weights.
  auto reference = make_net(1)->named_parameters();
  for (const auto& p : reference) EXPECT_TRUE(at::equal(state[p.key()], p.value())) << tag(g, p.key());
  b.load_full_state_dict(state);
  auto loaded = b.full_state_dict();
  for (const auto& item : state) EXPECT_TRUE(at::equal(loaded[item.key()], item.value())) << tag(g, item.key());
  auto missing = state;
  missing.erase("2.bias");
  EXPECT_THROW(b.load_full_state_dict(missing), InvalidArgument) << tag(g, "missing");
  auto wrong = state;
  wrong["4.weight"] = at::zeros({3, 4});
  EXPECT_THROW(b.load_full_state_dict(wrong), InvalidArgument) << tag(g, "shape");
  auto extra = state;
  extra.insert("8.weight", at::zeros({1}));
  EXPECT_THROW(b.load_full_state_dict(extra), InvalidArgument) << tag(g, "extra");
  try {
    b.load_full_state_dict(wrong);
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'4.weight' has shape [3, 4] in the state but [3, 5]"), std::string::npos)
        << e.what();
  }
}

// Ranks 0..W-2 as a group (W = 1: rank 0 itself); null on the rank left out.
GroupPtr fewer_ranks(ProcessGroup& g) {
  std::vector<int> fewer;
  for (int k = 0; k < std::max(1, g.size() - 1); ++k) fewer.push_back(k);
  return g.new_group(fewer);
}

// Every tensor of two optimizer states is equal, bit for bit.
void expect_same_optimizer_state(const torch::optim::Optimizer& a, const torch::optim::Optimizer& b,
                                 const std::string& what) {
  auto sa = optimizer_state_dict(a).toGenericDict().at("state").toGenericDict();
  auto sb = optimizer_state_dict(b).toGenericDict().at("state").toGenericDict();
  EXPECT_EQ(sa.size(), sb.size()) << what;
  for (const auto& item : sa) {
    if (!sb.contains(item.key())) {
      ADD_FAILURE() << what << ": no state for parameter " << item.key().toInt();
      continue;
    }
    auto other = sb.at(item.key()).toGenericDict();
    for (const auto& kv : item.value().toGenericDict())
      EXPECT_TRUE(at::equal(kv.value().toTensor().cpu(), other.at(kv.key()).toTensor().cpu()))
          << what << ": state[" << item.key().toInt() << "][" << kv.key().toStringRef() << "]";
  }
}

// Sharded checkpoints: saved at world W, loaded at W (training goes on as if
// uninterrupted), and resharded through world W-1 (ranks 0..W-2) and back: the
// parameters and Adam's moments come back bit for bit.
void fsdp_sharded_checkpoint(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  std::string dir;
  if (r == 0) {
    char name[] = "/tmp/ddp-fsdp-ckpt-XXXXXX";
    dir = ::mkdtemp(name);
  }
  dir = broadcast_object(c10::IValue(dir), 0, handle(g)).toStringRef();
  FSDPOptions f;
  f.group = handle(g);
  // On the group's device: a GPU's shards are written as CPU tensors and read back onto the reader's device.
  const at::Device dev = g.device();
  auto net_on = [&](uint64_t seed) {
    auto n = make_net(seed);
    n->to(dev);
    return n;
  };
  FullyShardedDataParallel a(net_on(3), f);
  auto opt_a = make_optimizer(true, a.parameters());
  auto gen = at::make_generator<at::CPUGeneratorImpl>(200 + r);
  auto step = [&](FullyShardedDataParallel& m, torch::optim::Optimizer& o, const at::Tensor& x, const at::Tensor& y) {
    o.zero_grad();
    torch::mse_loss(m(x), y).backward();
    o.step();
  };
  for (int i = 0; i < 3; ++i) step(a, *opt_a, at::randn({4, 6}, gen).to(dev), at::randn({4, 1}, gen).to(dev));
  a.save_sharded(dir + "/w", opt_a.get());
  // The same world: one more step from the checkpoint equals one more uninterrupted step.
  FullyShardedDataParallel b(net_on(4), f);
  auto opt_b = make_optimizer(true, b.parameters());
  b.load_sharded(dir + "/w", opt_b.get());
  expect_same_optimizer_state(*opt_b, *opt_a, tag(g, "loaded at the same world"));
  at::Tensor x = at::randn({4, 6}, gen).to(dev), y = at::randn({4, 1}, gen).to(dev);
  step(a, *opt_a, x, y);
  step(b, *opt_b, x, y);
  auto sa = a.full_state_dict(), sb = b.full_state_dict();
  for (const auto& item : sa) EXPECT_TRUE(at::equal(sb[item.key()], item.value())) << tag(g, "resumed " + item.key());
  // Through world W-1 and back (W = 1: through world 1 itself).
  a.save_sharded(dir + "/w2", opt_a.get());
  GroupPtr sub = fewer_ranks(g);
  if (sub) {
    FSDPOptions fs;
    fs.group = sub;
    FullyShardedDataParallel c(net_on(5), fs);
    auto opt_c = make_optimizer(true, c.parameters());
    c.load_sharded(dir + "/w2", opt_c.get());
    auto sc = c.full_state_dict();
    for (const auto& item : sa)
      EXPECT_TRUE(at::equal(sc[item.key()], item.value())) << tag(g, "resharded " + item.key());
    c.save_sharded(dir + "/fewer", opt_c.get());
  }
  barrier({}, handle(g));
  FullyShardedDataParallel d(net_on(6), f);
  auto opt_d = make_optimizer(true, d.parameters());
  d.load_sharded(dir + "/fewer", opt_d.get());
  expect_same_optimizer_state(*opt_d, *opt_a, tag(g, "resharded twice"));
  auto sd = d.full_state_dict();
  for (const auto& item : sa)
    EXPECT_TRUE(at::equal(sd[item.key()], item.value())) << tag(g, "resharded twice " + item.key());
  // A directory without shards, and another model, are refused by name.
  EXPECT_THROW(d.load_sharded(dir), InvalidArgument) << tag(g, "no shards");
  FullyShardedDataParallel other(torch::nn::Sequential(Linear(6, 2)), f);
  try {
    other.load_sharded(dir + "/w");
    ADD_FAILURE() << tag(g, "another model loaded");
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("shard-0-of-" + std::to_string(w) + ".pt"), std::string::npos) << e.what();
  }
  barrier({}, handle(g));
  if (r == 0) std::filesystem::remove_all(dir);
}

// The optimizer's state of the shards in PyTorch's per-parameter format: what DDP's
// optimizer holds after the same steps (the tolerance of train_side_by_side), and back
// into shards at this world size and at W-1, bit for bit; a round trip changes nothing.
void fsdp_full_optimizer_state(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  for (bool adam : {true, false}) {
    const std::string what = tag(g, adam ? "Adam" : "SGD momentum");
    SideBySide both(g, 8, adam, {});
    FullyShardedDataParallel& a = *both.sharded;
    torch::optim::Optimizer& opt_a = *both.sharded_opt;
    EXPECT_TRUE(a.full_optimizer_state_dict(opt_a).isNone() == (r != 0)) << what << ": before any step";
    auto gen = at::make_generator<at::CPUGeneratorImpl>(300 + r);
    for (int step = 0; step < 3; ++step) {
      both.step_plain_backward_sharded(at::randn({4, 6}, gen).to(g.device()), at::randn({4, 1}, gen).to(g.device()));
      opt_a.step();
    }
    c10::IValue full = broadcast_object(a.full_optimizer_state_dict(opt_a, 0), 0, handle(g));
    auto expected = optimizer_state_dict(*both.plain_opt).toGenericDict();
    auto got = full.toGenericDict();
    EXPECT_EQ(got.at("param_groups").toList().get(0).toGenericDict().at("params").toIntVector(),
              (std::vector<int64_t>{0, 1, 2, 3, 4, 5}))
        << what;
    auto es = expected.at("state").toGenericDict(), gs = got.at("state").toGenericDict();
    EXPECT_EQ(gs.size(), es.size()) << what;
    for (const auto& item : es) {
      if (!gs.contains(item.key())) {
        ADD_FAILURE() << what << ": no state for parameter " << item.key().toInt();
        continue;
      }
      for (const auto& kv : item.value().toGenericDict()) {
        // DDP's on the group's device; the gathered full state, on the CPU
        const at::Tensor want = kv.value().toTensor().cpu(),
                         have = gs.at(item.key()).toGenericDict().at(kv.key()).toTensor();
        EXPECT_EQ(have.sizes(), want.sizes()) << what << ": " << kv.key().toStringRef();
        if (have.sizes() == want.sizes())
          EXPECT_TRUE(at::allclose(have, want, kRtol, kAtol))
              << what << ": state[" << item.key().toInt() << "][" << kv.key().toStringRef()
              << "] differs from DDP's by " << (have - want).abs().max().item<float>();
      }
    }
    // Back into shards: this world, then W-1 ranks; each gives the same whole state again.
    FSDPOptions f;
    f.group = handle(g);
    FullyShardedDataParallel b(make_net(9), f);
    b.load_full_state_dict(a.full_state_dict());
    auto opt_b = make_optimizer(adam, b.parameters());
    b.load_full_optimizer_state_dict(*opt_b, full);
    expect_same_optimizer_state(*opt_b, opt_a, what + ": loaded at the same world");
    GroupPtr sub = fewer_ranks(g);
    if (sub) {
      FSDPOptions fs;
      fs.group = sub;
      FullyShardedDataParallel c(make_net(10), fs);
      auto opt_c = make_optimizer(adam, c.parameters());
      c.load_full_optimizer_state_dict(*opt_c, full);
      c10::IValue again = broadcast_object(c.full_optimizer_state_dict(*opt_c, 0), 0, sub);
      auto as = again.toGenericDict().at("state").toGenericDict();
      for (const auto& item : gs)
        for (const auto& kv : item.value().toGenericDict())
          EXPECT_TRUE(at::equal(as.at(item.key()).toGenericDict().at(kv.key()).toTensor(), kv.value().toTensor()))
              << what << ": through " << sub->size() << " rank(s), state[" << item.key().toInt() << "]["
              << kv.key().toStringRef() << "]";
    }
    // Another model's state, and two param groups, are refused by name.
    FullyShardedDataParallel other(torch::nn::Sequential(Linear(6, 2)), f);
    auto opt_o = make_optimizer(adam, other.parameters());
    try {
      other.load_full_optimizer_state_dict(*opt_o, full);
      ADD_FAILURE() << what << ": another model's state loaded";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("covers 6 parameters, the model has 2"), std::string::npos) << e.what();
    }
    auto two = got.copy();
    auto groups = two.at("param_groups").toList().copy();
    groups.push_back(groups.get(0));
    two.insert_or_assign("param_groups", groups);
    EXPECT_THROW(b.load_full_optimizer_state_dict(*opt_b, two), InvalidArgument) << what << ": two groups";
  }
}

// summon_full_params: the Sequential's own parameters hold the full values while it
// lives; written values become the shards only with writeback; after it, at rest.
void fsdp_summon_full_params(ProcessGroup& g) {
  FSDPOptions f;
  f.group = handle(g);
  FullyShardedDataParallel a(make_net(11), f);
  const auto reference = make_net(11)->named_parameters();
  {
    auto full = a.summon_full_params();
    for (const auto& p : a.module()->named_parameters())
      EXPECT_TRUE(at::equal(p.value(), reference[p.key()])) << tag(g, "summoned " + p.key());
    at::NoGradGuard no_grad;
    a.module()->named_parameters()["0.bias"].fill_(5);  // lost: no writeback
  }
  for (const auto& p : a.module()->parameters()) EXPECT_EQ(p.numel(), 0) << tag(g, "at rest");
  EXPECT_TRUE(at::equal(a.full_state_dict()["0.bias"], reference["0.bias"])) << tag(g, "without writeback");
  {
    auto full = a.summon_full_params(/*writeback=*/true);
    at::NoGradGuard no_grad;
    a.module()->named_parameters()["2.weight"].fill_(-3);
  }
  EXPECT_TRUE(at::equal(a.full_state_dict()["2.weight"], at::full({5, 9}, -3.0))) << tag(g, "with writeback");
  EXPECT_TRUE(at::equal(a.full_state_dict()["0.weight"], reference["0.weight"])) << tag(g, "others kept");
}

}  // namespace

const std::vector<SuiteCase>& fsdp_suite() {
  static const std::vector<SuiteCase> cases = {
      {"FsdpEqualsDdp", fsdp_equals_ddp},
      {"FsdpFullStateDict", fsdp_full_state_dict},
      {"FsdpShardedCheckpoint", fsdp_sharded_checkpoint},
      {"FsdpFullOptimizerState", fsdp_full_optimizer_state},
      {"FsdpSummonFullParams", fsdp_summon_full_params},
  };
  return cases;
}

}  // namespace ddp::testing
