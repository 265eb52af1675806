// state_dict order and names (as Python lists them), load_state_dict's checks, and its file round trip.
#include <gtest/gtest.h>

#include <sstream>

#include "checkpoint_test_util.h"
#include "ddp/dist/errors.h"
#include "ddp/train/checkpoint.h"
#include "ddp/train/state_dict.h"

namespace ddp::testing {
namespace {

using train::StateDict;

std::vector<std::string> names(const StateDict& sd) {
  std::vector<std::string> out;
  for (const auto& kv : sd) out.push_back(kv.first);
  return out;
}

TEST(StateDict, OrderAndNamesAreTorchs) {
  Net net;
  const StateDict sd = train::state_dict(*net);
  EXPECT_EQ(names(sd), net_keys());
  // num_batches_tracked: int64, 0-dim, as Python saves it.
  const at::Tensor& nbt = sd[8].second;
  EXPECT_EQ(nbt.scalar_type(), at::kLong);
  EXPECT_EQ(nbt.dim(), 0);
  for (const auto& [name, t] : sd) EXPECT_FALSE(t.requires_grad()) << name;
  // Detached but sharing storage with the module's tensors.
  EXPECT_EQ(sd[2].second.data_ptr(), net->conv->weight.data_ptr());
}

TEST(StateDict, PythonListsTheSameKeys) {
  auto [status, out] = run_oracle("keys");
  ASSERT_EQ(status, 0) << out;
  std::vector<std::string> keys;
  std::istringstream s(out);
  for (std::string line; std::getline(s, line);) keys.push_back(line);
  EXPECT_EQ(keys, net_keys());
}

TEST(StateDict, LoadCopiesEveryValue) {
  at::manual_seed(1);
  Net a, b;
  a->bn->running_mean.fill_(0.25);
  a->bn->num_batches_tracked.fill_(41);
  train::load_state_dict(*b, train::state_dict(*a));
  const StateDict sa = train::state_dict(*a), sb = train::state_dict(*b);
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(bitwise_difference(sb[i].second, sa[i].second), "") << sa[i].first;
  // Copies, not aliases; parameters still require grad.
  EXPECT_NE(b->conv->weight.data_ptr(), a->conv->weight.data_ptr());
  EXPECT_TRUE(b->conv->weight.requires_grad());
}

TEST(StateDict, ModulePrefixIsStripped) {
  Net a, b;
  StateDict prefixed;
  for (const auto& [name, t] : train::state_dict(*a)) prefixed.emplace_back("module." + name, t);
  train::load_state_dict(*b, prefixed);
  EXPECT_TRUE(at::equal(b->head[0]->as<torch::nn::Linear>()->weight, a->head[0]->as<torch::nn::Linear>()->weight));
}

TEST(StateDict, StrictNamesMissingAndUnexpectedKeys) {
  Net a, b;
  StateDict sd = train::state_dict(*a);
  sd.erase(sd.begin() + 2, sd.begin() + 4);  // conv.weight, conv.bias
  sd.emplace_back("extra.weight", at::zeros({1}));
  const at::Tensor before = b->conv->weight.clone();
  b->bn->weight.data().fill_(3);
  const std::string msg = error_of([&] { train::load_state_dict(*b, sd); });
  EXPECT_NE(msg.find("2 missing keys (conv.weight, conv.bias)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 unexpected key (extra.weight)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("strict=false"), std::string::npos) << msg;
  // Nothing was copied.
  EXPECT_TRUE(at::equal(b->bn->weight, at::full({2}, 3.0)));
  // Non-strict loads the common keys.
  train::load_state_dict(*b, sd, /*strict=*/false);
  EXPECT_TRUE(at::equal(b->bn->weight, a->bn->weight));
  EXPECT_TRUE(at::equal(b->conv->weight, before));
}

TEST(StateDict, ManyMissingKeysAreCounted) {
  Net b;
  const std::string msg = error_of([&] { train::load_state_dict(*b, {{"scale", at::ones({3})}}); });
  EXPECT_NE(msg.find("12 missing keys (shift, conv.weight, conv.bias, bn.weight, bn.bias, ... 7 more)"),
            std::string::npos)
      << msg;
}

TEST(StateDict, ShapeAndDtypeMismatchesAreErrorsEvenWhenNotStrict) {
  Net a, b;
  StateDict sd = train::state_dict(*a);
  sd[9].second = at::zeros({4, 9});        // head.0.weight
  sd[8].second = at::zeros({}, at::kInt);  // bn.num_batches_tracked
  for (bool strict : {true, false}) {
    const std::string msg = error_of([&] { train::load_state_dict(*b, sd, strict); });
    EXPECT_NE(msg.find("head.0.weight: shape [4, 9] in the state dict, [4, 8] in the module"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("bn.num_batches_tracked: dtype Int in the state dict, Long in the module"), std::string::npos)
        << msg;
  }
}

TEST(StateDict, DuplicateKeyIsAnError) {
  Net a, b;
  StateDict sd = train::state_dict(*a);
  sd.push_back(sd[0]);
  EXPECT_NE(error_of([&] { train::load_state_dict(*b, sd); }).find("key scale appears twice"), std::string::npos);
}

TEST(StateDict, FileRoundTripKeepsOrderAndValues) {
  TempDir dir;
  at::manual_seed(3);
  Net a;
  a->bn->num_batches_tracked.fill_(5);
  train::save_state_dict(train::state_dict(*a), dir.file("a.pt"));
  const StateDict back = train::load_state_dict_file(dir.file("a.pt"));
  EXPECT_EQ(names(back), net_keys());
  const StateDict orig = train::state_dict(*a);
  for (size_t i = 0; i < orig.size(); ++i)
    EXPECT_EQ(bitwise_difference(back[i].second, orig[i].second), "") << orig[i].first;
}

TEST(StateDict, FileKeepsViewsSharedStoragesAndOddTensors) {
  TempDir dir;
  const at::Tensor base = at::arange(12, at::kFloat).reshape({3, 4});
  const StateDict sd = {{"t", base.t()},   // non-contiguous, same storage as "row"
                        {"row", base[1]},  // storage offset 4
                        {"empty", at::empty({0, 3})},
                        {"scalar", at::scalar_tensor(3.5, at::kDouble)},
                        {"flags", at::arange(3).remainder(2).eq(0)},
                        {"big", at::full({2}, int64_t(1) << 40)}};
  train::save_state_dict(sd, dir.file("odd.pt"));
  const StateDict back = train::load_state_dict_file(dir.file("odd.pt"));
  ASSERT_EQ(names(back), names(sd));
  for (size_t i = 0; i < sd.size(); ++i) EXPECT_EQ(bitwise_difference(back[i].second, sd[i].second), "") << sd[i].first;
  EXPECT_EQ(back[1].second.storage_offset(), 4);
  EXPECT_EQ(back[0].second.strides(), base.t().strides());
}

TEST(StateDict, FileThatIsNotAStateDictIsRejected) {
  TempDir dir;
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("epoch", int64_t(1));
  train::save_state_dict({}, dir.file("empty.pt"));
  EXPECT_TRUE(train::load_state_dict_file(dir.file("empty.pt")).empty());
  ddp::train::save_atomic(d, dir.file("other.pt"));
  const std::string msg = error_of([&] { train::load_state_dict_file(dir.file("other.pt")); });
  EXPECT_NE(msg.find(dir.file("other.pt") + ": neither a state dict"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ddp::testing
