// The device a rank computes on (ddp/dist/device.h): specs, the rank's GPU, and what is said where there is none.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "ddp/dist.h"
#include "dist/device_mark.h"
#include "dist/env.h"

using namespace ddp;

namespace {

template <typename E, typename Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

}  // namespace

TEST(Device, CpuIsTheCpu) { EXPECT_EQ(resolve_device("cpu"), at::Device(at::kCPU)); }

TEST(Device, AutoIsTheRanksGpuWhereThereIsOne) {
  const int n = cuda_device_count();
  EXPECT_EQ(resolve_device("auto", 0), n == 0 ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0));
  if (n > 0) EXPECT_EQ(resolve_device("auto", 5), at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(5 % n)));
  if (!cuda_built()) EXPECT_EQ(n, 0);
}

TEST(Device, UnreadableSpecsSayWhatIsExpected) {
  for (const char* spec : {"gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", " cpu", "cuda:1234"}) {
    const std::string msg = message_of<InvalidArgument>([&] { resolve_device(spec); });
    EXPECT_NE(msg.find(std::string("device '") + spec + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
  }
}

TEST(Device, AGpuThatIsNotThereIsRefusedWithTheReason) {
  const int n = cuda_device_count();
  const std::string beyond = "cuda:" + std::to_string(n);
  const std::string msg = message_of<Error>([&] { resolve_device(beyond); });
  EXPECT_NE(msg.find("device '" + beyond + "'"), std::string::npos) << msg;
  if (!cuda_built())
    EXPECT_NE(msg.find("built against a LibTorch without CUDA"), std::string::npos) << msg;
  else if (n == 0)
    EXPECT_NE(msg.find("no GPU is visible"), std::string::npos) << msg;
  else
    EXPECT_NE(msg.find(std::to_string(n) + " GPU"), std::string::npos) << msg;
  if (n == 0) {
    const std::string cuda = message_of<Error>([] { resolve_device("cuda"); });
    EXPECT_NE(cuda.find("--device cpu"), std::string::npos) << cuda;
  }
}

TEST(Device, LocalRankComesFromTheLauncher) {
  setenv("LOCAL_RANK", "3", 1);
  EXPECT_EQ(local_rank_from_env(), 3);
  unsetenv("LOCAL_RANK");
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  EXPECT_EQ(local_rank_from_env(), 2);
  setenv("LOCAL_RANK", "two", 1);
  const std::string msg = message_of<InvalidArgument>([] { local_rank_from_env(); });
  EXPECT_NE(msg.find("LOCAL_RANK='two'"), std::string::npos) << msg;
  unsetenv("LOCAL_RANK");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_EQ(local_rank_from_env(), 0);
}

// backend "auto" picks nccl only for a job on a GPU; a CPU job keeps gloo where nccl is built and usable.
TEST(Device, AutoBackendFollowsTheDevice) {
  InitOptions o;
  o.rank = 0;
  o.world_size = 2;
  o.init_method = "tcp://127.0.0.1:29999";
  auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  auto r = ddp::detail::resolve_rendezvous(o, env, /*mpi_available=*/false, /*nccl_available=*/true);
  EXPECT_EQ(r.backend, "gloo");
  EXPECT_TRUE(r.device.is_cpu());
  o.device = "auto";
  r = ddp::detail::resolve_rendezvous(o, env, false, is_backend_available("nccl"));
  EXPECT_EQ(r.backend, cuda_device_count() > 0 && is_backend_available("nccl") ? "nccl" : "gloo");
  if (r.backend == "nccl") EXPECT_EQ(r.backend_reason, "auto: the job's device is cuda:0");
  // ddprun's auto launch for a node with GPUs: a CPU rank keeps gloo; a GPU rank takes nccl where usable.
  auto launched = [](const std::string& k) -> std::optional<std::string> {
    if (k == "DDP_BACKEND") return std::string("gloo");
    if (k == "DDP_BACKEND_ON_GPU") return std::string("nccl");
    if (k == "DDP_BACKEND_REASON")
      return std::string("auto: 1 GPU on this node: a rank on a GPU takes nccl, one on the CPU gloo");
    return std::nullopt;
  };
  o.device = "cpu";
  EXPECT_EQ(ddp::detail::resolve_rendezvous(o, launched, false, true).backend, "gloo");
  o.device = "auto";
  EXPECT_EQ(ddp::detail::resolve_rendezvous(o, launched, false, is_backend_available("nccl")).backend,
            cuda_device_count() > 0 && is_backend_available("nccl") ? "nccl" : "gloo");
  o.device = "tpu";
  EXPECT_NE(
      message_of<InvalidArgument>([&] { ddp::detail::resolve_rendezvous(o, env, false, true); }).find("device 'tpu'"),
      std::string::npos);
}

// A tensor already on the device moves without a copy or an op; pinning says where there is no GPU to pin for.
TEST(Device, ToDeviceKeepsATensorThatIsThereAndPinningNeedsAGpu) {
  const at::Tensor t = at::arange(6, at::kFloat);
  EXPECT_TRUE(to_device(t, at::Device(at::kCPU)).is_same(t));
  EXPECT_FALSE(wants_pinned_host(at::Device(at::kCPU)));
  EXPECT_TRUE(wants_pinned_host(at::Device(at::kCUDA, 0)));
  if (cuda_device_count() == 0) {
    const std::string m = message_of<Error>([&] { pinned(t); });
    EXPECT_NE(m.find("pin_memory: pinned host memory needs a GPU"), std::string::npos) << m;
  } else {
    const at::Tensor p = pinned(t);
    EXPECT_TRUE(p.is_pinned());
    EXPECT_TRUE(pinned(p).is_same(p));
    EXPECT_TRUE(at::equal(p, t));
  }
}

// Control values (Join's flags, the unused-parameter map, the stop check) go where the group's collectives run: on
// the CPU the host tensor itself, elsewhere a copy there (meta here: a device whose memory the host cannot read;
// a GPU's from pinned memory); host_copy reads them back only off the CPU.
TEST(Device, ControlValuesGoWhereTheCollectivesRun) {
  const at::Tensor flags = at::tensor({1, 0, 3}, at::kInt);
  EXPECT_TRUE(control_tensor(flags, at::Device(at::kCPU)).is_same(flags));
  EXPECT_TRUE(host_copy(flags).is_same(flags));
  const at::Tensor on_meta = control_tensor(flags, at::Device(at::kMeta));
  EXPECT_TRUE(on_meta.is_meta());
  EXPECT_EQ(on_meta.sizes(), flags.sizes());
  EXPECT_EQ(on_meta.scalar_type(), at::kInt);
  std::vector<at::Device> gpus;
  for (int i = 0; i < cuda_device_count(); ++i) gpus.emplace_back(at::kCUDA, static_cast<c10::DeviceIndex>(i));
  for (const at::Device& d : gpus) {
    const at::Tensor there = control_tensor(flags, d);
    EXPECT_EQ(there.device(), d);
    EXPECT_TRUE(control_tensor(there, d).is_same(there));
    EXPECT_TRUE(at::equal(host_copy(there), flags)) << d;
  }
}
// Marks time what ran on a device (dist/device_mark.h): the host clock on the CPU, an event on the stream of a GPU
// (whose host does not wait for the work); the interval covers the work queued between the two marks.
TEST(DeviceMarks, TimeTheWorkBetweenThem) {
  std::vector<at::Device> devices{at::Device(at::kCPU)};
  if (cuda_device_count() > 0) devices.emplace_back(at::kCUDA, 0);
  for (const at::Device& d : devices) {
    at::Tensor a = at::rand({256, 256}, at::TensorOptions().device(d)) / 256;
    const auto start = ddp::detail::DeviceMark::now(d);
    for (int i = 0; i < 50; ++i) a = at::mm(a, a).tanh_();
    const auto end = ddp::detail::DeviceMark::now(d);
    EXPECT_TRUE(start.valid() && end.valid()) << d;
    EXPECT_GT(end.ms_since(start), 0.0) << d;
    EXPECT_TRUE(end.reached()) << d;  // ms_since waited for it
  }
  EXPECT_FALSE(ddp::detail::DeviceMark().valid());
  EXPECT_THROW(ddp::detail::DeviceMark().ms_since(ddp::detail::DeviceMark::now(at::Device(at::kCPU))),
               std::logic_error);
}
