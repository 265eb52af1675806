// Bucket assignment, and the one rebuild after the first iteration in the
// order gradients actually arrived.
#include <gtest/gtest.h>
#include <torch/nn.h>

#include "ddp/ddp.h"
#include "parallel/bucketing.h"

namespace ddp {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

std::vector<at::Tensor> floats(std::vector<int64_t> numels, at::ScalarType dtype = at::kFloat) {
  std::vector<at::Tensor> out;
  for (auto n : numels) out.push_back(at::zeros({n}, dtype));
  return out;
}

TEST(Bucketing, CapsCloseBucketsFirstBucketSmaller) {
  // 4-byte floats of 100 elements = 400 B each; first cap 500 B, then 1000 B.
  auto p = floats({100, 100, 100, 100, 100, 100, 100});
  std::vector<size_t> order{6, 5, 4, 3, 2, 1, 0};
  EXPECT_EQ(detail::assign_buckets(p, order, 500, 1000), (Buckets{{6, 5}, {4, 3, 2}, {1, 0}}));
  EXPECT_EQ(detail::assign_buckets(p, order, 1, 1), (Buckets{{6}, {5}, {4}, {3}, {2}, {1}, {0}}));
  EXPECT_EQ(detail::assign_buckets(p, order, 1 << 20, 1 << 20), (Buckets{{6, 5, 4, 3, 2, 1, 0}}));
}

TEST(Bucketing, OneDtypePerBucket) {
  std::vector<at::Tensor> p = {at::zeros({10}), at::zeros({10}, at::kDouble), at::zeros({10}),
                               at::zeros({10}, at::kDouble)};
  EXPECT_EQ(detail::assign_buckets(p, {0, 1, 2, 3}, 1 << 20, 1 << 20), (Buckets{{0, 2}, {1, 3}}));
}

// Registered a, b, c but used c -> b -> a in forward, so gradients arrive a, b, c.
struct Reordered : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
  Reordered() {
    a = register_module("a", torch::nn::Linear(torch::nn::LinearOptions(4, 4).bias(false)));
    b = register_module("b", torch::nn::Linear(torch::nn::LinearOptions(4, 4).bias(false)));
    c = register_module("c", torch::nn::Linear(torch::nn::LinearOptions(4, 4).bias(false)));
  }
  at::Tensor forward(at::Tensor x) { return a(b(c(x))); }
};

TEST(Bucketing, RebuiltOnceInArrivalOrder) {
  auto net = std::make_shared<Reordered>();
  DDPOptions o;
  o.group = create_backend("local", {});
  o.bucket_cap_mb = 1e-6;
  o.first_bucket_cap_mb = 1e-6;
  DistributedDataParallel model(net, o);
  using Names = std::vector<std::vector<std::string>>;
  EXPECT_EQ(model.bucket_parameter_names(), (Names{{"c.weight"}, {"b.weight"}, {"a.weight"}}));
  model(at::ones({1, 4})).sum().backward();
  model(at::ones({1, 4})).sum().backward();  // the forward before this backward rebuilt the buckets
  EXPECT_EQ(model.bucket_parameter_names(), (Names{{"a.weight"}, {"b.weight"}, {"c.weight"}}));
}

// A resumed run builds the buckets of the run it continues (the order a checkpoint keeps), not the initial
// ones, and does not rebuild after its first step.
TEST(Bucketing, ALoadedOrderIsBuiltAtOnceAndKept) {
  DDPOptions o;
  o.group = create_backend("local", {});
  o.bucket_cap_mb = 1e-6;
  o.first_bucket_cap_mb = 1e-6;
  using Names = std::vector<std::vector<std::string>>;
  DistributedDataParallel first(std::make_shared<Reordered>(), o);
  EXPECT_TRUE(first.bucket_order().empty());  // no backward yet
  first(at::ones({1, 4})).sum().backward();
  // a, b, c: the arrival order, which the next forward builds (a checkpoint here must hold it already)
  EXPECT_EQ(first.bucket_order(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(first.bucket_parameter_names(), (Names{{"c.weight"}, {"b.weight"}, {"a.weight"}}));
  first(at::ones({1, 4})).sum().backward();
  EXPECT_EQ(first.bucket_order(), (std::vector<int64_t>{0, 1, 2}));

  DistributedDataParallel resumed(std::make_shared<Reordered>(), o);
  resumed.load_bucket_order({2, 0, 1});  // not the arrival order, so a rebuild would show
  EXPECT_EQ(resumed.bucket_parameter_names(), (Names{{"c.weight"}, {"a.weight"}, {"b.weight"}}));
  for (int i = 0; i < 3; ++i) resumed(at::ones({1, 4})).sum().backward();
  EXPECT_EQ(resumed.bucket_parameter_names(), (Names{{"c.weight"}, {"a.weight"}, {"b.weight"}}));
  EXPECT_EQ(resumed.bucket_order(), (std::vector<int64_t>{2, 0, 1}));
}

TEST(Bucketing, LoadBucketOrderRefusesWhatIsNotAPermutation) {
  DDPOptions o;
  o.group = create_backend("local", {});
  DistributedDataParallel model(std::make_shared<Reordered>(), o);
  for (const std::vector<int64_t>& bad : {std::vector<int64_t>{0, 1}, {0, 1, 1}, {0, 1, 3}, {-1, 0, 1}, {0, 1, 2, 0}}) {
    try {
      model.load_bucket_order(bad);
      ADD_FAILURE() << "accepted an order of " << bad.size();
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("DistributedDataParallel"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(model.bucket_order().empty());  // nothing was built from them
}

}  // namespace
}  // namespace ddp
