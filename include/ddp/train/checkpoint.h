// Checkpoints: one file per save, a pickled dict with string keys in PyTorch's
// convention, that Python's torch.load() reads ("model" loads into a plain
// module, "optimizer" into torch.optim.SGD, Adam or AdamW). Rank 0 writes it atomically; the
// last K are kept; every rank meets at a barrier. save_async writes it in the background instead
// (PyTorch's dcp.async_save): the state is copied to host memory at the call, training goes on.
//
//   ddp::train::CheckpointManager ckpt({"runs/a", /*keep_last=*/3});
//   if (auto path = ckpt.latest()) {                       // --resume
//     auto c = ddp::train::checkpoint_from_ivalue(ddp::train::load_checkpoint(*path), *path);
//     ddp::train::load_state_dict(*net, c.model);
//     ddp::train::load_optimizer_state_dict(opt, c.optimizer);
//     ddp::train::set_rng_state(c.rng);
//   }
//   ckpt.save(epoch, step, [&] {                           // make() runs on rank 0 only
//     ddp::train::CheckpointContents c;
//     c.model = ddp::train::state_dict(*net);
//     c.optimizer = ddp::train::optimizer_state_dict(opt);
//     c.epoch = epoch; c.step = step; c.rng = ddp::train::get_rng_state();
//     return ddp::train::to_ivalue(c);
//   });
//
// File: {"model": {name: tensor}, "optimizer": {"state", "param_groups"}, "epoch": int, "step": int,
//        "rng": {"cpu": uint8 tensor}, "sampler": {...}, "schedule": {...}, "config": {...}, "extra": {...}}
// sampler, schedule and config hold ints, doubles, bools and strings only; extra anything picklable.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/dist/init.h"
#include "ddp/dist/process_group.h"
#include "ddp/parallel/optimizer_state.h"
#include "ddp/train/state_dict.h"

namespace ddp::train {

// PyTorch's optimizer.state_dict() format for SGD, Adam and AdamW (ddp/parallel/optimizer_state.h).
using ddp::load_optimizer_state_dict;
using ddp::optimizer_state_dict;
// The CPU default generator's state (torch.get_rng_state() bytes) and back.
at::Tensor get_rng_state();
void set_rng_state(const at::Tensor& state);
// The same for `device`'s default generator (torch.cuda.get_rng_state(device) for a GPU, where dropout draws; the
// CPU's for the CPU): a uint8 CPU tensor.
at::Tensor get_rng_state(const at::Device& device);
void set_rng_state(const at::Device& device, const at::Tensor& state);

// Writes obj to path atomically: path + ".tmp.<pid>" in the same directory, write, fsync, rename, fsync the directory.
// On any failure the temporary file is removed, path is untouched, and ddp::Error names the path and errno text.
void save_atomic(const c10::IValue& obj, const std::string& path);
c10::IValue load_checkpoint(const std::string& path);  // ddp::Error naming the path on missing/truncated/corrupt files

struct CheckpointManagerOptions {
  std::string dir;
  int keep_last = 3;  // older checkpoints are deleted after a successful save (0: keep all)
  GroupPtr group;     // null: the default group (none initialised: a world of one)
};

class CheckpointManager {
 public:
  explicit CheckpointManager(CheckpointManagerOptions options);
  // Rank 0 writes <dir>/checkpoint-e<epoch 4 digits>-s<step 8 digits>.pt atomically and updates <dir>/latest (a text
  // file naming the newest checkpoint, itself written atomically), prunes to keep_last; then every rank meets at a
  // barrier. Returns the path. `make` is called on rank 0 only. If rank 0 fails, it rethrows its error and the other
  // ranks throw ddp::Error.
  // A save in flight (save_async) is waited for first.
  std::string save(int64_t epoch, int64_t step, const std::function<c10::IValue()>& make);
  // As save, without waiting for the disk: rank 0 calls make(), copies the result's tensors to host memory
  // (host_snapshot) and returns while a background thread (at a lower priority) writes, updates latest and prunes.
  // At most one save is in flight: a save in flight is waited for first (wait(): every rank). No other collective.
  std::string save_async(int64_t epoch, int64_t step, const std::function<c10::IValue()>& make);
  // Every rank: waits for the save in flight and agrees on its outcome: rank 0's failure is rethrown on rank 0,
  // the other ranks throw ddp::Error naming the file. Returns the file written, nullopt if none was in flight.
  std::optional<std::string> wait();
  // This rank alone, when its group is broken (in-place recovery): waits for the save in flight, agreeing with no one.
  // Returns its error ("" when it was written or none was in flight).
  std::string abandon();
  // Rank 0, without waiting: whether the save in flight has failed (its error then comes from wait()). Others: false.
  bool failed() const;
  // Waits for a save in flight (its error, if any, printed to stderr: wait() was not called).
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;
  // The newest complete checkpoint (from latest, else the highest-numbered file), or nullopt if none.
  std::optional<std::string> latest() const;
  // Every checkpoint file, newest first: latest's file, then the others by (epoch, step) descending. Resuming
  // tries them in this order, so a corrupt newest file falls back to the one before it.
  std::vector<std::string> candidates() const;
  // Deletes the temporary files (<name>.tmp.<pid>) that a save killed mid-write left in dir, where no process
  // <pid> runs any more; returns their names. Call on the writing rank before the first save.
  std::vector<std::string> remove_stale_temporaries() const;

  // The file name save(epoch, step) writes, inside dir.
  std::string path_for(int64_t epoch, int64_t step) const;
  const CheckpointManagerOptions& options() const { return opts_; }

 private:
  void write_and_prune(int64_t epoch, int64_t step, const std::function<c10::IValue()>& make);
  GroupPtr group() const;
  CheckpointManagerOptions opts_;
  std::optional<std::string> pending_;  // the file save_async is writing, on every rank
  struct InFlight;                      // rank 0's background write (checkpoint_manager.cpp)
  std::unique_ptr<InFlight> in_flight_;
};

// A deep copy of a checkpoint whose tensors live in host memory: each storage copied once (views and tied
// tensors stay views of one copy, with their offsets and strides), containers rebuilt; what save_async writes.
c10::IValue host_snapshot(const c10::IValue& checkpoint);

// --- Additions: the checkpoint dict, typed ---

// A dict with string keys (Dict[str, Any]); like all c10 dicts, copies share their entries.
using PlainDict = c10::impl::GenericDict;
inline PlainDict plain_dict() { return PlainDict(c10::StringType::get(), c10::AnyType::get()); }

struct CheckpointContents {
  StateDict model;
  c10::IValue optimizer;  // optimizer_state_dict(opt); None if absent
  int64_t epoch = 0;
  int64_t step = 0;
  at::Tensor rng;                     // get_rng_state(); undefined if absent
  PlainDict sampler = plain_dict();   // values: ints, doubles, bools, strings
  PlainDict schedule = plain_dict();  // ditto
  PlainDict config = plain_dict();    // ditto
  PlainDict extra = plain_dict();     // anything picklable
};

// The dict layout above. InvalidArgument if sampler/schedule/config hold anything but ints, doubles, bools, strings.
c10::IValue to_ivalue(const CheckpointContents& contents);
// The reverse; `where` (the file) starts the InvalidArgument message for a missing "model" or a wrongly typed entry.
// Entries other than "model" may be absent (Python checkpoints); epoch and step then read 0.
CheckpointContents checkpoint_from_ivalue(const c10::IValue& value, const std::string& where);

}  // namespace ddp::train
