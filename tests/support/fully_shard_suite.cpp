// fully_shard of any model (ddp::Sharded units, ddp::FullyShard) against one process on the global batch, on
// every backend and world size: a model with what FSDP2 must handle (an embedding whose weight the output
// layer shares, a frozen parameter, a buffer, a unit run twice, a unit inside a unit, a unit of two inputs and
// two outputs, parameters of fewer rows than ranks), ZeRO-3 and ZeRO-2, with and without accumulation.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>

#include <mutex>
#include <set>

#include "ddp/errors.h"
#include "ddp/parallel/fully_shard.h"
#include "support/ddp_suite.h"

namespace ddp::testing {
namespace {

using torch::nn::Linear;
using torch::nn::LinearOptions;
constexpr int64_t kVocab = 7, kDim = 6, kHidden = 5;

struct BlockImpl : torch::nn::Module {
  torch::nn::LayerNorm ln{nullptr};
  Linear fc1{nullptr}, fc2{nullptr};
  Sharded<Linear> inner{nullptr};  // a unit inside this one, when asked
  explicit BlockImpl(bool nested) {
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    fc1 = register_module("fc1", Linear(kDim, kHidden));  // 5 rows: at world 4, rank 3's shard is empty
    fc2 = register_module("fc2", Linear(kHidden, kDim));
    if (nested) inner = register_module("inner", Sharded<Linear>(LinearOptions(kDim, kDim).bias(false)));
  }
  at::Tensor forward(at::Tensor x) {
    seen = {x.scalar_type(), fc1->weight.scalar_type()};
    at::Tensor h = x + fc2(torch::tanh(fc1(ln(x))));
    return inner.is_empty() ? h : inner(h);
  }
  std::pair<at::ScalarType, at::ScalarType> seen;  // the last forward's input and weight dtypes
};
TORCH_MODULE(Block);

// Two inputs, two outputs.
struct MixerImpl : torch::nn::Module {
  Linear a{nullptr};
  MixerImpl() { a = register_module("a", Linear(kDim, kDim)); }
  std::tuple<at::Tensor, at::Tensor> forward(at::Tensor x, at::Tensor context) {
    return {x + a(context), torch::tanh(context)};
  }
};
TORCH_MODULE(Mixer);

struct NetImpl : torch::nn::Module {
  torch::nn::Embedding wte{nullptr};
  at::Tensor head, scale, shift;  // head: wte's weight, shared; scale: frozen; shift: a buffer
  Sharded<Block> b0{nullptr}, b1{nullptr};
  Sharded<Mixer> mix{nullptr};
  NetImpl() {
    wte = register_module("wte", torch::nn::Embedding(kVocab, kDim));
    head = register_parameter("head", wte->weight);
    scale = register_parameter("scale", torch::rand({kDim}) + 0.5, /*requires_grad=*/false);
    shift = register_buffer("shift", torch::randn({kDim}));
    b0 = register_module("b0", Sharded<Block>(false));
    b1 = register_module("b1", Sharded<Block>(true));
    mix = register_module("mix", Sharded<Mixer>());
  }
  at::Tensor forward(const at::Tensor& idx) {
    at::Tensor h = b0(b0(wte(idx)));  // run twice
    auto [x, c] = mix(b1(h), h * scale + shift);
    return torch::linear(x + c, head);
  }
};
TORCH_MODULE(Net);

Net seeded_net(uint64_t seed) {
  static std::mutex mu;  // ranks may be threads sharing the global generator
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(seed);
  return Net();
}

// Each parameter once (the shared one is registered twice).
std::vector<at::Tensor> unique_parameters(torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  std::set<const c10::TensorImpl*> seen;
  for (const auto& p : m.parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  return out;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Bytes of this rank's shards: every parameter once, padded to ceil(rows / W) rows.
int64_t shard_bytes(torch::nn::Module& m, int w) {
  int64_t bytes = 0;
  for (const auto& p : unique_parameters(m))
    bytes += 4 * ceil_div(p.dim() ? p.size(0) : 1, w) * (p.dim() ? p.numel() / std::max<int64_t>(p.size(0), 1) : 1);
  return bytes;
}

// Four SGD (momentum) steps on rank-dependent tokens, `micro` micro-batches each, against one process on the
// global batch. Each gradient element differs from the reference's by the regrouping of at most 2W <= 8
// per-sample terms in float32: 2 gamma_8 S ~ 1e-6 S, S the terms' magnitudes (O(1) here), a few 1e-6 after four
// steps of lr 0.1 with momentum; so ddp_suite's bound (rtol 1.3e-6, atol 5e-5) holds, while a wrong average,
// a missed unit or a stale gather moves a weight by a whole update (>= 1e-3, checked below).
// HSDP (shard_size < W): replicas of shard_size ranks each, the same bound (the W terms of a gradient are summed
// in two stages, reduce-scatter then all_reduce, instead of one).
void train_against_one_process(ProcessGroup& g, bool reshard, int micro, int shard_size) {
  const int r = g.rank(), w = g.size();
  const std::string what =
      tag(g, std::string("fully_shard reshard_after_forward=") + (reshard ? "true" : "false") + " micro-batches " +
                 std::to_string(micro) + " shard group " + std::to_string(shard_size));
  Net ref = seeded_net(5);
  Net net = seeded_net(r == 0 ? 5 : 50 + r);  // rank 0's weights and buffers (the reference's) must win
  net->to(g.device());
  const int64_t shards = shard_bytes(*ref, shard_size);
  FullyShardOptions o;
  o.group = handle(g);
  if (shard_size < w) {
    HsdpMesh mesh = hsdp_mesh(shard_size, handle(g));
    o.group = mesh.shard;
    o.replicate_group = mesh.replicate;
    EXPECT_EQ(mesh.shard->size(), shard_size) << what;
    EXPECT_EQ(mesh.replicate->size(), w / shard_size) << what;
  }
  o.reshard_after_forward = reshard;
  FullyShard<Net> model(net, o);
  {
    auto start = model.sharded().full_state_dict();
    for (const auto& p : ref->named_parameters())
      EXPECT_TRUE(at::equal(start[p.key()].cpu(), p.value())) << what << ": rank 0's " << p.key();
    EXPECT_TRUE(at::equal(start["shift"].cpu(), ref->shift)) << what << ": rank 0's buffer";
  }
  EXPECT_EQ(model.sharded().num_units(), 5u) << what << ": root, b0, b1, b1.inner, mix";
  EXPECT_EQ(model.parameters().size(), unique_parameters(*ref).size()) << what;
  torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD ref_opt(unique_parameters(*ref), torch::optim::SGDOptions(0.1).momentum(0.9));
  std::vector<at::Tensor> initial;
  for (const auto& p : unique_parameters(*ref)) initial.push_back(p.detach().clone());
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const int64_t b = 3;  // per rank and micro-batch
  for (int step = 0; step < 4; ++step) {
    at::Tensor idx = at::randint(kVocab, {micro, w, b}, gen), y = at::randint(kVocab, {micro, w, b}, gen);
    opt.zero_grad();
    for (int k = 0; k < micro; ++k) {
      at::Tensor loss = torch::cross_entropy_loss(model(idx[k][r].to(g.device())), y[k][r].to(g.device()));
      (loss / micro).backward();
    }
    // Between backward and step: the shards of parameters and of gradients only.
    EXPECT_EQ(model.sharded().memory().parameter_bytes, shards) << what << " step " << step;
    EXPECT_EQ(model.sharded().memory().gradient_bytes, shards) << what << " step " << step;
    ref_opt.zero_grad();
    torch::cross_entropy_loss(ref(idx.reshape({-1})), y.reshape({-1})).backward();
    // From the third step on, clipped far below the norm (so that it clips): the norm over every rank's rows is
    // the whole model's (float32 sums of squares in another order: 1e-5 relative), and the clipped rows step
    // as the reference's clipped gradients.
    if (step >= 2) {
      const double norm = model.sharded().clip_grad_norm_(0.05).item<double>();
      const double want = torch::nn::utils::clip_grad_norm_(unique_parameters(*ref), 0.05);
      EXPECT_GT(want, 0.05) << what << " step " << step << ": nothing to clip";
      EXPECT_NEAR(norm, want, 1e-5 * want) << what << " step " << step << ": clip_grad_norm_";
    }
    opt.step();
    ref_opt.step();
  }
  auto full = model.sharded().full_state_dict();
  for (const auto& p : ref->named_parameters()) {
    const at::Tensor* got = full.find(p.key());
    if (!got) {
      ADD_FAILURE() << what << ": no '" << p.key() << "' in the full state dict";
      continue;
    }
    const at::Tensor mine = got->cpu(), want = p.value().detach();
    EXPECT_TRUE(at::allclose(mine, want, 1.3e-6, 5e-5))
        << what << ": '" << p.key() << "' differs by " << (mine - want).abs().max().item<double>();
  }
  size_t i = 0;
  for (const auto& p : unique_parameters(*ref)) {
    const bool frozen = !p.requires_grad();
    const double moved = (p.detach() - initial[i++]).abs().max().item<double>();
    EXPECT_TRUE(frozen ? moved == 0 : moved > 1e-3) << what << ": a parameter moved by " << moved;
  }
  // Evaluation: the same outputs, and the gathered parameters freed again.
  at::NoGradGuard no_grad;
  at::Tensor idx = at::randint(kVocab, {5}, gen);
  EXPECT_TRUE(at::allclose(model(idx.to(g.device())).cpu(), ref(idx), 1e-5, 1e-5)) << what << ": evaluation";
  EXPECT_EQ(model.sharded().memory().parameter_bytes, shards) << what << ": after evaluation";
}

void fully_shard_equals_one_process(ProcessGroup& g) {
  for (bool reshard : {true, false})
    for (int micro : {1, 2}) train_against_one_process(g, reshard, micro, g.size());
}

// HSDP at every shard group size that divides the world into several replicas (world 2: 2 x 1; 3: 3 x 1;
// 4: 2 x 2 and 4 x 1), and refused where it does not divide.
void hsdp_equals_one_process(ProcessGroup& g) {
  for (int s = 1; s < g.size(); ++s)
    if (g.size() % s == 0)
      for (bool reshard : {true, false}) train_against_one_process(g, reshard, reshard ? 1 : 2, s);
  if (g.size() > 2) EXPECT_THROW(hsdp_mesh(g.size() - 1, handle(g)), InvalidArgument) << tag(g, "hsdp_mesh");
}

// Round trips of the full state (any world size keeps its own rows), the gathered view and bad input.
void fully_shard_state_and_errors(ProcessGroup& g) {
  FullyShardOptions o;
  o.group = handle(g);
  Net a_net = seeded_net(1), b_net = seeded_net(2);
  a_net->to(g.device());
  b_net->to(g.device());
  FullyShard<Net> a(a_net, o), b(b_net, o);
  auto state = a.sharded().full_state_dict();
  b.sharded().load_full_state_dict(state);
  for (const auto& item : b.sharded().full_state_dict())
    EXPECT_TRUE(at::equal(item.value(), state[item.key()])) << tag(g, "loaded '" + item.key() + "'");
  {
    auto full = b.sharded().summon_full_params(/*writeback=*/true);
    at::NoGradGuard no_grad;
    b_net->b1->fc1->weight.fill_(-2.0);
    EXPECT_TRUE(at::equal(b_net->head, state["head"])) << tag(g, "summoned");
  }
  EXPECT_TRUE(at::equal(b.sharded().full_state_dict()["b1.fc1.weight"],
                        at::full({kHidden, kDim}, -2.0, state["head"].options())))
      << tag(g, "written back");
  auto bad = state;
  bad["b0.fc2.bias"] = at::zeros({kDim + 1});
  EXPECT_THROW(b.sharded().load_full_state_dict(bad), InvalidArgument) << tag(g, "a wrong shape");
  // A parameter in two units is refused, naming both.
  struct Tied : torch::nn::Module {
    Sharded<Linear> a{nullptr};
    Tied() {
      a = register_module("a", Sharded<Linear>(2, 2));
      register_parameter("also", a->weight);
    }
  };
  try {
    ShardedModel tied(std::make_shared<Tied>(), o);
    ADD_FAILURE() << tag(g, "a parameter shared by two units was accepted");
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'a.weight' is the same tensor as 'also'"), std::string::npos) << e.what();
  }
}

// MixedPrecisionPolicy(param_dtype bf16, reduce_dtype float32, output_dtype float32): each unit runs in bf16
// (its gathered weights and its inputs), the shards and their gradients stay float32, and the root's output is
// float32. Against the same training in float32: bf16 keeps 8 bits (relative rounding 2^-9 = 0.2%), and a
// gradient passes some 10 rounded operations (forward and back through two blocks), so each tensor's update
// (the model's change over the 4 steps) is the float32 one within ~2% of its norm, and no weight's update is
// off by more than that of the largest update; 10% leaves 5x, while a wrong average (1/W missing or doubled) is
// off by 50% or more. It must differ from float32's by more than rounding (bf16 ran).
void fully_shard_mixed_precision(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  const std::string what = tag(g, "fully_shard bf16");
  std::vector<torch::OrderedDict<std::string, at::Tensor>> results;
  torch::OrderedDict<std::string, at::Tensor> initial;
  for (bool bf16 : {false, true}) {
    Net net = seeded_net(5);
    net->to(g.device());
    FullyShardOptions o;
    o.group = handle(g);
    if (bf16) {
      o.mp_policy.param_dtype = at::kBFloat16;
      o.mp_policy.reduce_dtype = at::kFloat;
      o.mp_policy.output_dtype = at::kFloat;
    }
    FullyShard<Net> model(net, o);
    if (!bf16) initial = model.sharded().full_state_dict();
    torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(17);
    for (int step = 0; step < 4; ++step) {
      at::Tensor idx = at::randint(kVocab, {w, 3}, gen), y = at::randint(kVocab, {w, 3}, gen);
      opt.zero_grad();
      at::Tensor logits = model(idx[r].to(g.device()));
      EXPECT_EQ(logits.scalar_type(), at::kFloat) << what << ": the root's output";
      torch::cross_entropy_loss(logits, y[r].to(g.device())).backward();
      const auto want = bf16 ? at::kBFloat16 : at::kFloat;
      EXPECT_EQ(net->b0->seen, std::make_pair(want, want)) << what << ": a unit's input and weights in its forward";
      for (const auto& p : model.named_parameters()) {
        EXPECT_EQ(p.value().scalar_type(), at::kFloat) << what << ": shard " << p.key();
        if (p.value().requires_grad())
          EXPECT_EQ(p.value().grad().scalar_type(), at::kFloat) << what << ": the gradient of shard " << p.key();
      }
      opt.step();
    }
    {
      auto full = model.sharded().summon_full_params();
      EXPECT_EQ(net->b0->fc1->weight.scalar_type(), at::kFloat) << what << ": summoned, the master weights";
    }
    results.push_back(model.sharded().full_state_dict());
  }
  std::vector<at::Tensor> updates32, updates16;
  for (const auto& item : initial) {
    if (item.key() == "scale" || item.key() == "shift") continue;  // frozen, a buffer
    const at::Tensor start = item.value().cpu();
    updates32.push_back((results[0][item.key()].cpu() - start).reshape({-1}));
    updates16.push_back((results[1][item.key()].cpu() - start).reshape({-1}));
  }
  const at::Tensor a = at::cat(updates32), b = at::cat(updates16);
  const double rel = (a - b).norm().item<double>() / a.norm().item<double>();
  const double largest = (a - b).abs().max().item<double>();
  EXPECT_LE(rel, 0.1) << what << ": the model's update differs from float32's by " << rel << " of its norm";
  EXPECT_LE(largest, 0.1 * a.abs().max().item<double>())
      << what << ": a weight's update differs from float32's by " << largest << ", the largest update is "
      << a.abs().max().item<double>();
  EXPECT_GT(largest, 1e-4) << what << ": no weight differs from the float32 run (was bf16 used?)";
  (void)r;
}

}  // namespace

const std::vector<SuiteCase>& fully_shard_suite() {
  static const std::vector<SuiteCase> cases = {
      {"FullyShardEqualsOneProcess", fully_shard_equals_one_process},
      {"HsdpEqualsOneProcess", hsdp_equals_one_process},
      {"FullyShardStateAndErrors", fully_shard_state_and_errors},
      {"FullyShardMixedPrecision", fully_shard_mixed_precision},
  };
  return cases;
}

}  // namespace ddp::testing
