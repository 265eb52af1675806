// The device a rank computes on, as PyTorch's DDP tutorials choose it: one process per GPU, the GPU
// numbered by LOCAL_RANK (torchrun's, ddprun's).
//
//   at::Device d = ddp::resolve_device("auto");   // cuda:LOCAL_RANK where CUDA is available, else cpu
//   model->to(d);
//
// Specs: "auto", "cpu", "cuda" (the rank's GPU), "cuda:N". The rank's GPU is LOCAL_RANK modulo the GPUs
// visible, so several ranks may share one GPU (gloo and mpi allow it; NCCL refuses two ranks on one GPU).
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string>

namespace ddp {

// Whether this ddp was built against a LibTorch with CUDA.
bool cuda_built();
// GPUs visible to this process: 0 where CUDA was not built, no driver answers, or CUDA_VISIBLE_DEVICES hides all.
int cuda_device_count();
// This process's local rank: LOCAL_RANK, else OMPI_COMM_WORLD_LOCAL_RANK (mpirun), else 0.
int local_rank_from_env();
// InvalidArgument unless `spec` reads as one of the specs above (whether that GPU exists is resolve_device's).
void check_device_spec(const std::string& spec);
// The device `spec` names for a process of local rank `local_rank` (-1: local_rank_from_env()). Throws
// ddp::InvalidArgument for a spec it cannot read, and ddp::Error for a GPU that is not there, saying why
// (no CUDA in this build, no GPU visible, cuda:N beyond the count) and what to use instead.
at::Device resolve_device(const std::string& spec, int local_rank = -1);
// Waits until the work queued so far on `device`'s current stream (kernels, and collectives a wait joined to
// it) is done: what a host clock needs before it reads a GPU's time. Nothing to wait for on the CPU.
void synchronize(const at::Device& device);

// Whether the host, reading a value computed on `device`, waits for all the work queued there before it: on a GPU
// that drains its queue (a sync). False for the CPU, where work is done when it is queued.
bool host_reads_wait(const at::Device& device);
// Whether host batches bound for `device` should be in pinned (page-locked) memory: a GPU's copies from it
// are asynchronous (PyTorch's DataLoader(pin_memory=True)). False for the CPU.
bool wants_pinned_host(const at::Device& device);
// `t` in pinned host memory: itself when already pinned, else a pinned copy. ddp::Error where this process
// has no GPU (pinned memory is CUDA's), saying so.
at::Tensor pinned(const at::Tensor& t);
// `t` on `device`: itself when already there (no copy, no op), non-blocking when it is pinned host memory
// going to a GPU (the host runs on while the copy waits in the stream), else a blocking copy.
at::Tensor to_device(const at::Tensor& t, const at::Device& device);
// Control values (flags, counts) for a collective that runs on `device` (ProcessGroup::device()): `host` itself
// on the CPU; for a GPU a copy queued from pinned memory, which waits for none of the GPU's queued work (a pageable
// copy, or the front's staging of a CPU tensor, waits for all of it); elsewhere a plain copy.
at::Tensor control_tensor(const at::Tensor& host, const at::Device& device);
// `t`'s values where the host can read them: `t` itself on the CPU, else a copy to the host (on a GPU it waits
// for the work queued before it: read control values once, where they are needed).
at::Tensor host_copy(const at::Tensor& t);

}  // namespace ddp
