#include "ddp/dist/device.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cstdlib>

#include "ddp/dist/errors.h"
#include "ddp/dist/launch_env.h"
#include "ddp/dist/slurm_env.h"
#include "dist/env.h"

namespace ddp {

bool cuda_built() {
#ifdef DDP_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
  if (!cuda_built()) return 0;
  try {
    return at::hasCUDA() ? static_cast<int>(at::getNumGPUs()) : 0;
  } catch (const std::exception&) {
    return 0;  // a driver that fails to answer: no GPU
  }
}

void synchronize(const at::Device& device) {
  if (device.is_cpu()) return;
  at::zeros({1}, at::TensorOptions().device(device)).item<float>();  // a copy to the host, in the stream's order
}

bool host_reads_wait(const at::Device& device) { return !device.is_cpu(); }

bool wants_pinned_host(const at::Device& device) { return device.is_cuda(); }

at::Tensor pinned(const at::Tensor& t) {
  if (cuda_device_count() == 0)
    throw Error("pin_memory: pinned host memory needs a GPU (CUDA) and this process sees none (" +
                std::string(cuda_built() ? "no GPU visible" : "this ddp was built without CUDA") +
                "); batches for the CPU need no pinning");
  return t.is_pinned() ? t : t.pin_memory();
}

at::Tensor to_device(const at::Tensor& t, const at::Device& device) {
  if (t.device() == device) return t;
  const bool async = device.is_cuda() && t.is_cpu() && t.is_pinned();
  return t.to(device, /*non_blocking=*/async);
}

at::Tensor control_tensor(const at::Tensor& host, const at::Device& device) {
  if (device.is_cpu() || host.device() == device) return host;
  return to_device(wants_pinned_host(device) ? pinned(host) : host, device);
}

at::Tensor host_copy(const at::Tensor& t) { return t.is_cpu() ? t : t.to(at::kCPU); }

int local_rank_from_env() {
  return launch_env::first_count({&launch_env::kLocalRank, &launch_env::kOmpiLocalRank}, slurm::process()).value_or(0);
}

namespace {
// -1 for auto, cpu and cuda; N for cuda:N. InvalidArgument for anything else.
int spec_index(const std::string& spec) {
  const std::string where = "device '" + spec + "'";
  if (spec.rfind("cuda:", 0) == 0) {
    const std::string n = spec.substr(5);
    if (n.empty() || n.size() > 3 || n.find_first_not_of("0123456789") != std::string::npos)
      throw InvalidArgument(where + ": expected cuda:N with N a GPU number (cuda:0, cuda:1, ...)");
    return std::stoi(n);
  }
  if (spec != "cuda" && spec != "auto" && spec != "cpu")
    throw InvalidArgument(where + ": expected auto, cpu, cuda or cuda:N");
  return -1;
}
}  // namespace

void check_device_spec(const std::string& spec) { (void)spec_index(spec); }

at::Device resolve_device(const std::string& spec, int local_rank) {
  const std::string where = "device '" + spec + "'";
  int index = spec_index(spec);
  if (spec == "cpu") return at::Device(at::kCPU);
  const int count = cuda_device_count();
  if (spec == "auto" && count == 0) return at::Device(at::kCPU);
  if (!cuda_built())
    throw Error(where +
                ": this ddp was built against a LibTorch without CUDA; build it against a CUDA LibTorch "
                "(PyPI's torch wheel, or LibTorch's cu* download), or use --device cpu or auto");
  if (count == 0) {
    const auto visible = launch_env::kCudaVisibleDevices.name;
    const char* value = std::getenv(visible);
    throw Error(where + ": no GPU is visible to this process (" +
                (value ? std::string(visible) + "=" + value + " hides them, or no NVIDIA driver answered"
                       : std::string("no NVIDIA driver answered")) +
                "); use --device cpu or auto");
  }
  if (index >= count)
    throw Error(where + ": " + std::to_string(count) + " GPU" + (count == 1 ? " is" : "s are") +
                " visible (cuda:0 to cuda:" + std::to_string(count - 1) + ")");
  if (index < 0) index = (local_rank < 0 ? local_rank_from_env() : local_rank) % count;
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace ddp
