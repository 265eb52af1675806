// Join: training DDP on uneven inputs, PyTorch's torch.distributed.algorithms.Join.
// A rank whose data ran out calls finish(); it then shadows the collectives of
// the ranks still training (contributing zero gradients) until every rank has
// called finish(), and the model is synchronised from the last rank to finish.
//
//   ddp::Join join(model);                 // every rank, before its loop
//   for (auto& batch : my_batches) {       // a different count on each rank
//     opt.zero_grad();
//     loss_fn(model(batch.x), batch.y).backward();
//     opt.step();
//   }
//   join.finish();                         // every rank, once: collective
//
// While the Join is alive, every forward of the model with gradients enabled
// joins one small all_reduce (which ranks are still training, and what they
// will synchronise); forwards without gradients (evaluation) communicate
// nothing, as without a Join. A rank must call finish() after its last
// iteration: the destructor only detaches (it cannot communicate, nor throw).
// Each forward with gradients enabled outside no_sync must be followed by its
// backward (as with PyTorch).
#pragma once
#include <functional>
#include <vector>

#include "ddp/dist/work.h"
#include "ddp/parallel/distributed_data_parallel.h"

namespace ddp {

struct JoinOptions {
  // Gradients are divided by the initial world size whatever the number of
  // ranks still training (PyTorch's default); false: by that number, in each
  // iteration. With a comm hook registered the hook divides (as in PyTorch).
  bool divide_by_initial_world_size = true;
  bool enable = true;  // false: the Join does nothing
  // Every rank throws ddp::Error in the first iteration in which some rank has
  // called finish(): for training that must not continue on fewer ranks.
  bool throw_on_early_termination = false;
};

class Join {
 public:
  // Attaches to the model (one Join per model at a time). Not collective.
  explicit Join(DistributedDataParallelBase& model, JoinOptions options = {});
  ~Join();  // detaches from the model; no communication
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // This rank has no more inputs: shadows the other ranks' iterations until all
  // have called finish(), then broadcasts parameters and buffers from the
  // highest rank among those that finished last. Collective; a second call does
  // nothing. Throws ddp::Error with throw_on_early_termination if some rank
  // was still training.
  void finish();
  // Iterations this rank shadowed in finish() (0 on the last ranks to finish).
  int64_t shadowed_iterations() const { return shadowed_; }

 private:
  friend class DistributedDataParallelBase;
  // Flags an active rank sends in the join all_reduce (after one slot per rank).
  enum Flag { kTraining = 0, kSync, kNumFlags };
  // Called by the model's forward with gradients enabled on an active rank:
  // launches the join all_reduce.
  void on_forward(bool training, bool sync);
  // Waits for the last join all_reduce; throws with throw_on_early_termination
  // if a rank has finished. Returns its result (one count per rank, then flags).
  const std::vector<float>& joined_counts();
  // The reducer's divisor: the ranks training in this iteration (waits for the
  // join all_reduce); empty with divide_by_initial_world_size.
  std::function<double()> divisor_source();
  int buffer_root() { return highest_active_rank(joined_counts()); }
  int active_ranks(const std::vector<float>& counts) const;
  int highest_active_rank(const std::vector<float>& counts) const;
  void shadow_iteration(const std::vector<float>& counts);
  void sync_final_model(bool last_joiner);
  void detach();

  DistributedDataParallelBase* model_;
  JoinOptions options_;
  int rank_ = 0, world_ = 1;
  at::Tensor pending_tensor_;  // the join all_reduce in flight
  Work pending_;
  std::vector<float> counts_;  // its result, once waited for
  bool have_counts_ = true;    // nothing in flight
  bool finished_ = false;
  int64_t shadowed_ = 0;
};

}  // namespace ddp
