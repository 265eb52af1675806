// The checkpoint policy: when to save (checkpoint_policy.h); a checkpoint only of a finite model, every rank
// taking part; on --resume, the newest checkpoint every rank can read (fit_parts.h, trainer_job.h).
#include <ATen/ATen.h>

#include "ddp/dist/collectives.h"
#include "ddp/dist/timeline.h"
#include "ddp/errors.h"
#include "finite_check.h"
#include "fit_parts.h"

namespace ddp::train::detail {

Checkpoints::Checkpoints(const TrainConfig& cfg, GroupPtr group, int64_t micro_per_epoch)
    : every_(cfg.checkpoint_every), micro_per_epoch_(micro_per_epoch), async_(cfg.async_save) {
  CheckpointManagerOptions co;
  co.dir = cfg.out_dir + "/checkpoints";
  co.keep_last = cfg.keep_last;
  co.group = std::move(group);
  manager_ = std::make_unique<CheckpointManager>(co);
}

std::string Checkpoints::save(int64_t epoch, int64_t step, const std::function<c10::IValue()>& make) {
  return async_ ? manager_->save_async(epoch, step, make) : manager_->save(epoch, step, make);
}

bool Checkpoints::due(const LoopState& s, Moment moment) const {
  if (moment != Moment::kStep) return true;
  return every_ > 0 && s.step % every_ == 0 && s.micro < micro_per_epoch_;
}

namespace {

// Every rank checks (its weights are rank 0's): a non-finite model never becomes a checkpoint, so `latest` keeps
// naming the last finite one.
void check_finite_before_saving(Job& j, const LoopState& s) {
  auto bad = first_non_finite(*j.task.model.ptr(), /*gradients=*/false);
  if (!bad && j.average) bad = first_non_finite(*j.average.average(), false);
  if (!bad) return;
  const std::string when =
      s.micro == 0 ? "after epoch " + std::to_string(s.epoch) : "in epoch " + std::to_string(s.epoch + 1);
  throw Error(
      "the model is not finite " + when + ", step " + std::to_string(s.step) + ": " + *bad +
      "; no checkpoint written, " +
      (j.checkpoints.last().empty() ? std::string("none was written yet") : "the last one is " + j.checkpoints.last()));
}

}  // namespace

void save_checkpoint(Job& j, const LoopState& s) {
  timeline::Span span("checkpoint", "checkpoint");
  const auto full = j.strategy->full_model(/*writeback=*/false);  // a sharded model's whole weights
  check_finite_before_saving(j, s);
  auto rng = gather_rng_states(*j.group);  // collectives: every rank
  auto device_rng = gather_rng_states(*j.group, j.device);
  at::Tensor loss_sums = gather_loss_sums(s, *j.group);
  std::vector<c10::IValue> hook_states;
  if (j.hook) hook_states = gather_object(j.hook->state_dict(), 0, j.group);
  const c10::IValue optimizer = j.strategy->optimizer_state();  // rank 0's: the whole state
  j.checkpoints.set_last(j.checkpoints.save(s.epoch, s.step, [&] {
    c10::IValue c = make_checkpoint(j.cfg, s, *j.task.model.ptr(), optimizer, j.average.average(), rng, loss_sums,
                                    j.group->size(), j.data.total_steps());
    add_comm_hook_state(c, j.cfg.comm_hook, hook_states);
    add_bucket_order(c, j.strategy->bucket_order());
    add_device_rng(c, j.device, device_rng);
    if (j.membership) add_launch_world(c, j.launch_world);
    return c;
  }));
}

namespace {
// Reads a checkpoint on every rank; the ranks agree whether all of them could (the lowest rank that could not
// prints why). Returns the checkpoint, or None when some rank could not read it.
c10::IValue read_on_every_rank(Job& j, const std::string& path) {
  c10::IValue ckpt;
  std::string error;
  try {
    ckpt = load_checkpoint(path);
  } catch (const Error& e) {
    error = e.what();
  }
  const int rank = j.group->rank(), failed = lowest_rank_where(!error.empty(), j.group);
  if (failed < 0) return ckpt;
  if (failed == rank) j.logs.console().rank_message("rank " + std::to_string(rank) + ": " + error);
  return c10::IValue();
}

}  // namespace

LoopState resume_or_start(Job& j) {
  LoopState s;
  if (!j.cfg.resume) return s;
  const auto candidates = j.checkpoints.manager().candidates();
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string& path = candidates[i];
    const c10::IValue ckpt = read_on_every_rank(j, path);
    if (ckpt.isNone()) {
      if (i + 1 < candidates.size())
        j.logs.console().warning("checkpoint " + path + " is unusable; trying the one before it, " + candidates[i + 1]);
      continue;
    }
    {
      const auto full = j.strategy->full_model(/*writeback=*/true);  // a sharded model keeps what is loaded
      s = restore_checkpoint(ckpt, path, j.cfg, *j.group, *j.task.model.ptr(), *j.strategy, j.average.average(),
                             j.logs.console());
      restore_device_rng(ckpt, path, *j.group, j.device);
    }
    if (const int launch = j.membership ? launch_world_of(ckpt, path) : 0; launch > 0 && launch != j.launch_world) {
      j.launch_world = launch;  // the checkpoint's global batch and epoch order, split over this world
      set_up_data_parts(j);
      j.logs.console().line("global batch " + std::to_string(*j.cfg.batch_size * launch) + " samples (launch world " +
                            std::to_string(launch) + ") kept from " + path + ", this rank's share " +
                            std::to_string(j.data.batch_size()));
    }
    if (j.hook) restore_comm_hook(ckpt, path, j.cfg, *j.group, *j.hook, j.logs.console());
    restore_bucket_order(ckpt, path, *j.strategy, j.logs.console());
    j.checkpoints.set_last(path);
    j.logs.console().line("resumed from " + path + " at epoch " + std::to_string(s.epoch + 1) + ", step " +
                          std::to_string(s.step) +
                          (i > 0 ? " (an older checkpoint: the newer ones are corrupt, see above)" : ""));
    return s;
  }
  if (!candidates.empty())
    throw Error("ddp-train: --resume: none of the " + std::to_string(candidates.size()) + " checkpoint(s) in " +
                j.checkpoints.manager().options().dir +
                " is readable (see the errors above); move them away to start " +
                "from scratch, or restore a good copy");
  j.logs.console().line("no checkpoint in " + j.cfg.out_dir + "/checkpoints: starting from scratch");
  return s;
}

}  // namespace ddp::train::detail
