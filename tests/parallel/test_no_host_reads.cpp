// No host code reads device memory: the 16-bit conversion and the comm hooks run on tensors whose memory the
// host cannot read (the meta device: shapes and dtypes, no data), as they would on a GPU; and a loop that reads
// memory on the host refuses such a tensor with the place named (dist/host_memory.h) instead of reading it.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "ddp/dist/backend.h"
#include "ddp/dist/collectives.h"
#include "ddp/dist/half.h"
#include "ddp/errors.h"
#include "ddp/parallel/clip_grad.h"
#include "ddp/parallel/comm_hook.h"
#include "ddp/parallel/powersgd.h"
#include "dist/host_memory.h"
#include "dist/ivalue_tensors.h"
#include "support/rank_threads.h"

namespace ddp {
namespace {

at::Tensor meta_floats(std::vector<int64_t> shape) { return at::empty(shape, at::TensorOptions().device(at::kMeta)); }

TEST(NoHostReads, To16BitOnTheTensorsDevice) {
  const at::Tensor x = meta_floats({1000});
  for (auto dtype : {at::kHalf, at::kBFloat16}) {
    for (double divisor : {1.0, 3.0}) {
      at::Tensor y = to_16bit(x, dtype, divisor);
      EXPECT_TRUE(y.is_meta()) << c10::toString(dtype);
      EXPECT_EQ(y.scalar_type(), dtype);
      EXPECT_EQ(y.sizes(), x.sizes());
    }
  }
}

// Clipping computes the norm and the factor where the gradients are, and scales them there: nothing is read.
TEST(NoHostReads, ClipGradNormStaysOnTheDevice) {
  std::vector<at::Tensor> grads = {meta_floats({30, 20}), meta_floats({7})};
  const at::Tensor norm = clip_grad_norm(grads, 1.0);
  EXPECT_TRUE(norm.is_meta());
  EXPECT_EQ(norm.dim(), 0);
  EXPECT_EQ(norm.scalar_type(), at::kFloat);
}

TEST(NoHostReads, HostLoopsRefuseDeviceTensors) {
  const at::Tensor x = meta_floats({4});
  try {
    detail::host_data<float>(x, "the test's loop");
    ADD_FAILURE() << "a meta tensor's memory was handed to a host loop";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(
        std::string(e.what()).find("the test's loop: its loop reads memory on the host, and the tensor is on meta"),
        std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(detail::host_data<float>(at::zeros({4}), "a CPU tensor"));
}

// A bucket of two parameters (a 40x30 matrix, which PowerSGD compresses, and a vector), on `device` (meta: no data).
GradBucket bucket_on(const at::Device& device, size_t index, size_t count) {
  const auto on = at::TensorOptions().device(device);
  GradBucket b;
  b.index = index;
  b.num_buckets = count;
  b.buffer = device.is_meta() ? at::empty({40 * 30 + 7}, on) : at::randn({40 * 30 + 7}, on);
  b.gradients = {b.buffer.narrow(0, 0, 1200).view({40, 30}), b.buffer.narrow(0, 1200, 7)};
  b.parameters = {at::empty({40, 30}, on), at::empty({7}, on)};
  return b;
}
GradBucket meta_bucket(size_t index, size_t count) { return bucket_on(at::kMeta, index, count); }

// Every hook over a group whose collectives accept any device (local): each value is the bucket's shape on meta.
TEST(NoHostReads, CommHooksUseDeviceOps) {
  BackendOptions o;
  o.rank = 0;
  o.world_size = 1;
  GroupPtr g = create_backend("local", o);
  PowerSGDOptions start_now;
  start_now.start_powerSGD_iter = 2;  // compresses from the second step on
  for (const std::string& name : {"allreduce", "fp16", "bf16"}) {
    auto hook = make_comm_hook(name);
    GradBucket b = meta_bucket(0, 1);
    at::Tensor out = hook->run(*g, b).value();
    EXPECT_TRUE(out.is_meta()) << name;
    EXPECT_EQ(out.sizes(), b.buffer.sizes()) << name;
  }
  for (bool batched : {false, true}) {
    PowerSGDHook hook(start_now, batched);
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < 2; ++i) {
        GradBucket b = meta_bucket(i, 2);
        at::Tensor out = hook.run(*g, b).value();
        EXPECT_TRUE(out.is_meta()) << hook.name() << " step " << step;
        EXPECT_EQ(out.sizes(), b.buffer.sizes()) << hook.name() << " step " << step;
      }
    }
    EXPECT_GT(hook.state().numel_after_compression, 0) << hook.name() << ": never compressed";
  }
}

// PowerSGD's state as a checkpoint gives it back (on the CPU: object collectives and checkpoint files hold CPU
// tensors), loaded into a hook whose buckets are on another device: P, Q and the error feedback move to the bucket's
// device at its next step instead of meeting its tensors there.
TEST(NoHostReads, PowerSgdStateFromACheckpointMovesToTheBucketsDevice) {
  BackendOptions o;
  GroupPtr g = create_backend("local", o);
  PowerSGDOptions start_now;
  start_now.start_powerSGD_iter = 2;  // compresses from the second step on
  for (bool batched : {false, true}) {
    PowerSGDHook trained(start_now, batched);
    for (int step = 0; step < 3; ++step)
      for (size_t i = 0; i < 2; ++i) {
        GradBucket b = bucket_on(at::kCPU, i, 2);
        trained.run(*g, b).wait();
      }
    PowerSGDHook resumed(start_now, batched);
    resumed.load_state_dict(trained.state_dict());
    for (size_t i = 0; i < 2; ++i) {
      GradBucket b = meta_bucket(i, 2);
      at::Tensor out = resumed.run(*g, b).value();
      EXPECT_TRUE(out.is_meta()) << resumed.name() << " bucket " << i;
      for (const auto* kept : {&resumed.state().error, &resumed.state().p, &resumed.state().q})
        EXPECT_TRUE(kept->at(i).is_meta()) << resumed.name() << " bucket " << i;
    }
  }
}

// The object collectives move every tensor of a value, however nested, to the CPU before pickling it (a GPU
// tensor would otherwise be loaded onto the sender's device index): the mapping reaches each one and keeps the rest.
TEST(NoHostReads, ObjectCollectivesMapEveryTensor) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  c10::impl::GenericList l(c10::AnyType::get());
  l.push_back(at::ones({2}));
  l.push_back(c10::ivalue::Tuple::create({at::zeros({3}), c10::IValue(int64_t(7))}));
  d.insert("list", l);
  d.insert("tensors", c10::List<at::Tensor>({at::ones({1}), at::ones({4})}));
  d.insert("name", std::string("state"));
  int mapped = 0;
  const c10::IValue out = detail::map_tensors(d, [&](const at::Tensor& t) {
    ++mapped;
    return t.to(at::kMeta);
  });
  EXPECT_EQ(mapped, 4);
  const auto od = out.toGenericDict();
  const auto ol = od.at("list").toList();
  EXPECT_TRUE(ol.get(0).toTensor().is_meta());
  EXPECT_TRUE(ol.get(1).toTupleRef().elements()[0].toTensor().is_meta());
  EXPECT_EQ(ol.get(1).toTupleRef().elements()[1].toInt(), 7);
  for (const at::Tensor& t : od.at("tensors").toTensorList()) EXPECT_TRUE(t.is_meta());
  EXPECT_EQ(od.at("name").toStringRef(), "state");
  // Through a collective: the value arrives whole, its tensors on the CPU.
  BackendOptions o;
  GroupPtr g = create_backend("local", o);
  const auto got = all_gather_object(c10::IValue(d), g).at(0).toGenericDict();
  EXPECT_TRUE(at::equal(got.at("list").toList().get(0).toTensor(), at::ones({2})));
  EXPECT_EQ(got.at("name").toStringRef(), "state");
}

// A backend that does not run on meta says so, naming itself (its staging would have to read the memory).
TEST(NoHostReads, OtherBackendsRefuseMetaTensors) {
  testing::run_ranks("gloo", 1, [](ProcessGroup& g) {
    at::Tensor t = meta_floats({3});
    try {
      g.all_reduce(t);
      ADD_FAILURE() << "gloo took a meta tensor";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("[gloo] rank 0/1 all_reduce: a tensor is on meta (no data); the gloo "
                                           "backend takes CPU and CUDA tensors"),
                std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace ddp
