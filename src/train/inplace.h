// In-place recovery in the fit loop (ddprun --recovery inplace): when a rank is lost, the survivors rebuild their
// group (ddp::Membership) and go on from the committed state, the one after the last optimizer step that a
// survivor completed, without reading a checkpoint or restarting.
#pragma once
#include <torch/nn/module.h>

#include <memory>
#include <vector>

#include "ddp/dist/membership.h"
#include "ddp/train/config.h"
#include "train_state.h"

namespace ddp::train::detail {

struct Job;

// The model's buffers at the last completed step. A failed step's forward has already moved them on (BatchNorm's
// running statistics and batch count), and the committed state must not hold that: a change of world puts these
// back.
class CommittedBuffers {
 public:
  void take(const torch::nn::Module& model);  // between steps: the buffers are the committed ones
  void put_back(torch::nn::Module& model) const;

 private:
  std::vector<at::Tensor> copies_;
};

// Under ddprun --recovery inplace (DDP_RECOVERY=inplace), the job's membership (its group is the job's);
// else null.
std::unique_ptr<Membership> membership_from_launcher();

// InvalidArgument naming the setting when the run cannot recover in place: only --strategy ddp, a stateless comm
// hook, no weight average (EMA) and no SyncBatchNorm (their state or their group would not survive).
void check_recoverable(const TrainConfig& cfg);

// After ddp::CommError in the loop: releases every part that holds the broken group, rebuilds the group among the
// survivors, agrees on the committed state (the highest step any survivor completed; its holder broadcasts model,
// optimizer and loop position), builds the parts again over the new world and sets `s` to that state. Every
// survivor; throws what Membership::rebuild throws (too few left, this rank counted lost).
void recover_in_place(Job& j, LoopState& s, const std::string& why);

// At a step boundary where the members found ranks waiting to join (the stop check, LoopState::admit): every
// member admits them, and the new world adopts the committed state as after a recovery.
void admit_in_place(Job& j, LoopState& s);
// A replacement (DDP_JOIN=1), set up on a world of its own: joins the running job at the members' next step
// boundary and adopts their state. `s` becomes theirs. False when the members finished the job first.
bool join_in_place(Job& j, LoopState& s);
// Whether this rank is a replacement that joins a running job (ddprun --recovery inplace set DDP_JOIN=1).
bool joining_from_launcher();

// At the end of a run that recovered in place, every rank: the ranks' models and optimizer states are the same to
// the bit (rank 0 says so, with their digest), else ddp::Error naming the ranks that differ.
void check_replicas(Job& j);

}  // namespace ddp::train::detail
