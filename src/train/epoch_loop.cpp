// The epoch loop: the steps of one epoch (fit_parts.h).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <atomic>
#include <optional>

#include "ddp/dist/device.h"
#include "ddp/dist/timeline.h"
#include "ddp/errors.h"
#include "dist/host_memory.h"
#include "finite_check.h"
#include "fit_parts.h"
#include "rank_metrics.h"
#include "running_loss.h"
#include "stop_check.h"

namespace ddp::train::detail {
namespace {

// SIGTERM while training (preemption): noted here, acted on at the next step boundary.
std::atomic<int> g_stop_signal{0};
extern "C" void note_stop_signal(int sig) { g_stop_signal.store(sig); }

// This rank's sample order for an epoch: the DistributedSampler's, or a seeded shuffle of its shard.
std::vector<int64_t> epoch_order(Job& j, int64_t epoch) {
  if (j.sampler) {
    j.sampler->set_epoch(epoch);
    auto idx = j.sampler->indices();
    return std::vector<int64_t>(idx.begin(), idx.end());
  }
  auto gen =
      at::make_generator<at::CPUGeneratorImpl>(stream_seed(j.cfg.seed, Stream::kShardOrder, j.group->rank(), epoch));
  at::Tensor perm = at::randperm(j.task.train_y.size(0), gen, at::kLong);
  const int64_t* p = ddp::detail::host_data<int64_t>(perm, "the epoch's order");
  return std::vector<int64_t>(p, p + perm.numel());
}

// Each optimizer group's lr: its lr at creation times the schedule's multiplier (0 once a group with
// train_epochs is past them). Returns the lr logged: settings.lr's.
double set_lr(Job& j, int64_t step) {
  const double m = j.schedule(step, j.total_steps);
  const int64_t epoch = step / j.steps_per_epoch;
  auto& groups = j.strategy->optimizer().param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    const bool frozen = j.train_epochs[i] > 0 && epoch >= j.train_epochs[i];
    groups[i].options().set_lr(frozen ? 0.0 : j.base_lrs[i] * m);
  }
  return *j.cfg.lr * m;
}

// One micro-batch: forward (under autocast for bf16), loss, backward. DDP averages
// the gradients across ranks during backward unless `sync` is false (accumulating).
// The loss and hits stay on the device, summed into `running`: nothing here waits for the GPU.
// Returns whether the batch is a classification's (hits counted).
bool forward_backward(Job& j, const data::Batch& batch, bool sync, RunningLoss& running) {
  const std::shared_ptr<void> no_sync = sync ? nullptr : j.strategy->no_sync();
  at::Tensor logits;
  timeline::Span forward("compute", "forward");
  const at::Tensor target = to_device(batch.target, j.device);  // non-blocking from the loader's pinned memory
  {
    Autocast autocast(j.precision.precision, j.device.type());  // bf16: the forward pass only
    // in NHWC already where the Task asks (set_up_data)
    logits = j.strategy->forward(to_device(batch.data, j.device)).to(at::kFloat);
  }
  at::Tensor loss = j.loss(logits, target);
  if (loss.numel() != 1)
    throw InvalidArgument("Trainer: the Task's loss gave " + std::to_string(loss.numel()) +
                          " values for a batch; it must return the batch's mean, one value");
  const bool classification = is_classification(logits, target);
  running.add_micro(loss, classification ? logits.detach().argmax(1).eq(target).sum() : at::Tensor());
  forward.end();
  timeline::Span backward("compute", "backward");  // the buckets' reductions overlap it (tracks "bucket N")
  (loss / double(j.cfg.accumulate)).backward();
  return classification;
}

// --nan-check: after the gradients are reduced and before the step, so a NaN or inf never reaches the weights.
// The reduced gradients are the same on every rank, so every rank stops at the same step.
// (One read per step: whether to step must be known on the host, as GradScaler's found_inf.)
void check_finite_step(Job& j, const LoopState& s, RunningLoss& running, int64_t window) {
  if (!j.cfg.nan_check) return;
  const auto bad = j.strategy->non_finite_gradient();
  if (!bad) return;
  std::ostringstream loss;
  loss << running.read().step / double(window);
  throw Error("the gradients are not finite at epoch " + std::to_string(s.epoch + 1) + ", step " +
              std::to_string(s.step + 1) + " (this rank's loss " + loss.str() + "); first non-finite gradient: " +
              *bad + "; the weights were not updated and no checkpoint was written (the last: " +
              (j.last_checkpoint.empty() ? std::string("none") : j.last_checkpoint) +
              "). Lower --lr, check the data, or resume from that checkpoint; --no-nan-check trains on regardless");
}

// The weight average's update after `step`; lookahead puts the average back into the model, and at the
// last step the model ends as the average.
void update_average(Job& j, int64_t step) {
  if (!j.task.lookahead_rho) return j.ema->update(*j.task.model.ptr());
  j.ema->update(*j.task.model.ptr(), j.task.lookahead_rho(step, j.total_steps));
  j.ema->copy_to(*j.task.model.ptr());
}

}  // namespace

StopSignalHandler::StopSignalHandler() {
  g_stop_signal.store(0);  // a SIGTERM after an earlier fit's last step is not this one's
  struct sigaction sa {};
  sa.sa_handler = note_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, &old_);
}

StopSignalHandler::~StopSignalHandler() { ::sigaction(SIGTERM, &old_, nullptr); }

// One epoch from micro-batch s.micro on. Returns the mean training loss of this rank.
double train_epoch(Job& j, LoopState& s) {
  const TrainConfig& c = j.cfg;
  j.loader->start_epoch(epoch_order(j, s.epoch), s.epoch, s.micro);
  j.logs.begin_epoch(s.epoch, *c.epochs, j.steps_per_epoch);
  RunningLoss running(j.device, s.loss_sum);
  int64_t window = 0;  // micro-batches in the step in progress
  double counted = 0;  // samples since the last log point (classification)
  bool classification = true;
  std::optional<double> shown_loss;  // the progress line's loss: the last log point's (read there, not per step)
  const auto t0 = Clock::now();
  const int64_t first_micro = s.micro;
  StopSchedule stop(*j.group);
  LogWindow since_log{t0, s.micro, j.strategy->stats()};  // each rank's own numbers since the last log point
  const auto flush = [&] {  // the epoch's losses onto the host, for a checkpoint or the epoch's mean
    s.loss_sum = running.read().epoch;
  };
  while (s.micro < j.micro_per_epoch) {
    timeline::Span waiting("data", "data wait");
    auto batch = j.loader->next();
    waiting.end();
    if (!batch) break;
    const bool sync = (s.micro + 1) % c.accumulate == 0;  // the last micro-batch of a step reduces gradients
    const double lr = set_lr(j, s.step);
    if (s.micro % c.accumulate == 0) {
      j.strategy->zero_grad();
      stop.begin(s.step, g_stop_signal.load());
    }
    classification = forward_backward(j, *batch, sync, running) && classification;
    ++s.micro;
    ++window;
    counted += double(batch->target.size(0));
    if (!sync) continue;
    check_finite_step(j, s, running, window);
    {
      timeline::Span span("compute", "optimizer step");
      j.strategy->step();
    }
    ++s.step;
    if (j.ema && s.step % *c.ema_every == 0) update_average(j, s.step);
    if (j.ema && j.task.lookahead_rho && s.step == j.total_steps) j.ema->copy_to(*j.task.model.ptr());

    s.loss_count += window;
    if (s.step % c.log_every == 0) {  // means over ranks of the loss and accuracy, and each rank's numbers
      const RunningLoss::Read now = running.read();
      shown_loss = now.step / double(window);
      const double acc = classification && counted > 0 ? now.hits / counted : -1;
      const auto ranks = log_point(*j.group, *shown_loss, acc, since_log, s.micro, *c.batch_size, j.strategy->stats());
      std::vector<std::pair<std::string, double>> values = {{"Loss/train", ranks.mean_loss}};
      if (ranks.mean_accuracy >= 0) values.emplace_back("acc1/train", ranks.mean_accuracy);
      values.emplace_back("lr", lr);
      j.logs.scalars("train", s.step, values, ranks.fields);
      running.clear_hits();
      counted = 0;
      classification = true;
    }
    running.end_step();
    const double rate = double((s.micro - first_micro) * *c.batch_size * j.group->size()) / seconds_since(t0);
    j.logs.step(s.micro / c.accumulate, shown_loss, lr, rate);
    window = 0;
    if (stop.requested()) {  // preemption: this step's state, saved where a restart resumes exactly
      flush();
      save_checkpoint(j, s);
      s.preempted = true;
      break;
    }
    if (c.checkpoint_every > 0 && s.step % c.checkpoint_every == 0 && s.micro < j.micro_per_epoch) {
      flush();
      save_checkpoint(j, s);
    }
    // Not within half an interval of the epoch's end, which has its own evaluation.
    if (*c.eval_every > 0 && (s.micro / c.accumulate) % *c.eval_every == 0 &&
        2 * (j.micro_per_epoch - s.micro) >= *c.eval_every * c.accumulate)
      evaluate_within_epoch(j, s);
  }
  stop.drain();  // a step begun but not finished (none with drop_last): keep the ranks in step
  flush();
  return s.loss_count ? s.loss_sum / double(s.loss_count) : 0.0;
}

}  // namespace ddp::train::detail
