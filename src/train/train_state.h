// What a training checkpoint holds, and putting it back.
#pragma once
#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "console.h"
#include "ddp/dist/process_group.h"
#include "ddp/parallel/comm_hook.h"
#include "ddp/train/config.h"
#include "strategy/strategy.h"

namespace ddp::train::detail {

// Where the loop stands: `epoch` is the epoch in progress (or the next one when
// micro == 0), `micro` the micro-batches of it already trained, `step` the
// optimizer steps taken since the start of training.
struct LoopState {
  int64_t epoch = 0;
  int64_t micro = 0;
  int64_t step = 0;
  double loss_sum = 0;     // this rank's training losses so far in the epoch, for its mean train loss
  int64_t loss_count = 0;  // how many micro-batches loss_sum holds
  int stop_signal = 0;     // the signal it stopped for (the largest any rank got)
  bool preempted = false;  // a rank got SIGTERM: a checkpoint was written at this state, and training stops
  bool admit = false;      // ranks wait to join (in-place recovery): the epoch stops at this step to admit them
};

// Every rank's (loss_sum, loss_count) in rank order, as a [world, 2] float64 tensor (a collective).
at::Tensor gather_loss_sums(const LoopState& s, ProcessGroup& group);

// Every rank's generator state of `device` (default: the CPU's), in rank order (a collective).
std::vector<at::Tensor> gather_rng_states(ProcessGroup& group, const at::Device& device = at::Device(at::kCPU));

// The checkpoint as a dict PyTorch's torch.load reads: model (a plain state
// dict), optimizer (PyTorch's state_dict format), ema, epoch, micro, step, rng (one
// state per rank), world_size, sampler, schedule, config.
c10::IValue make_checkpoint(const TrainConfig& cfg, const LoopState& s, const torch::nn::Module& model,
                            const c10::IValue& optimizer, const torch::nn::Module* ema,
                            const std::vector<at::Tensor>& rng_states, const at::Tensor& loss_sums, int world,
                            int64_t total_steps);

// Loads a checkpoint into model, optimizer, EMA and this rank's generator.
// InvalidArgument when it does not fit (another recipe, architecture or world size).
// Rank 0 warns, listing each setting whose value differs from the checkpoint's.
LoopState restore_checkpoint(const c10::IValue& ckpt, const std::string& path, const TrainConfig& cfg,
                             const ProcessGroup& group, torch::nn::Module& model, Strategy& strategy,
                             torch::nn::Module* ema, const Console& console);

// The comm hook's per-rank state (PowerSGD's error feedback, Q, random stream)
// as "comm_hook": {"spec": --comm-hook, "ranks": [state of rank 0, ...]}; a
// stateless hook (its state_dict() None) adds nothing. `states`: gather_object's
// result on rank 0.
void add_comm_hook_state(c10::IValue& ckpt, const std::string& spec, const std::vector<c10::IValue>& states);
// "ddp_bucket_order": the order DDP rebuilt its buckets in (nothing when empty). On resume the strategy builds
// the same buckets, so that the resumed run's gradients equal the uninterrupted run's to the bit; a checkpoint
// without it gets the usual rebuild after the first step, one whose order does not fit the model a warning too.
void add_bucket_order(c10::IValue& ckpt, const std::vector<int64_t>& order);
void restore_bucket_order(const c10::IValue& ckpt, const std::string& path, Strategy& strategy, const Console& console);
// "device_rng": {"device": "cuda:0", "states": [rank 0's, ...]}, the default generator of the device the model
// trains on (a GPU's draws its dropout; "rng" holds the CPU's), from gather_rng_states(group, device). Restored
// to this rank's generator where the run trains on the same kind of device at the same world size (else the
// device's generator stays as seeded, as the CPU's does on another world).
void add_device_rng(c10::IValue& ckpt, const at::Device& device, const std::vector<at::Tensor>& states);
void restore_device_rng(const c10::IValue& ckpt, const std::string& path, const ProcessGroup& group,
                        const at::Device& device);
// "launch_world": an in-place run's launch world, whose global batch (batch_size x launch_world samples) and epoch
// order every later world keeps (nothing when 0). A run resumed under --recovery inplace keeps it too, at any
// world size; launch_world_of gives 0 for a checkpoint without it.
void add_launch_world(c10::IValue& ckpt, int launch_world);
int launch_world_of(const c10::IValue& ckpt, const std::string& path);
// Loads this rank's hook state, if the checkpoint has one for the same spec and
// world size; otherwise (a checkpoint of another hook or world) the hook starts
// afresh and rank 0 prints a warning saying so.
void restore_comm_hook(const c10::IValue& ckpt, const std::string& path, const TrainConfig& cfg,
                       const ProcessGroup& group, CommHook& hook, const Console& console);

}  // namespace ddp::train::detail
