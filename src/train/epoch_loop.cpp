// The epoch loop: the steps of one epoch (fit_parts.h).
#include <ATen/ATen.h>

#include <atomic>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/dist/device.h"
#include "ddp/dist/timeline.h"
#include "ddp/errors.h"
#include "dist/pending_read.h"
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

// One micro-batch: forward (under autocast for bf16), loss, backward. DDP averages
// the gradients across ranks during backward unless `sync` is false (accumulating).
// The loss and hits stay on the device, summed into `running`: nothing here waits for the GPU.
// Returns whether the batch is a classification's (hits counted).
bool forward_backward(Job& j, const data::Batch& batch, bool sync, RunningLoss& running) {
  const std::shared_ptr<void> no_sync = sync ? nullptr : j.strategy->no_sync();
  at::Tensor logits;
  timeline::DeviceSpan forward("compute", "forward", j.device);  // a GPU's own time on its track too
  const at::Tensor target = to_device(batch.target, j.device);   // non-blocking from the loader's pinned memory
  {
    Autocast autocast(j.precision.precision, j.device.type());  // bf16: the forward pass only
    // prepared on the loader's threads (Task::prepare_input)
    logits = j.strategy->forward(to_device(batch.data, j.device)).to(at::kFloat);
  }
  at::Tensor loss = j.loss(logits, target);
  if (loss.numel() != 1)
    throw InvalidArgument("Trainer: the Task's loss gave " + std::to_string(loss.numel()) +
                          " values for a batch; it must return the batch's mean, one value");
  const bool classification = is_classification(logits, target);
  running.add_micro(loss, classification ? logits.detach().argmax(1).eq(target).sum() : at::Tensor());
  forward.end();
  timeline::DeviceSpan backward("compute", "backward", j.device);  // the buckets' reductions overlap it ("bucket N")
  // After a world change a rank's share of the global batch may differ from the others': scaled, the averaged
  // gradients are still the global batch's mean (train_data.h).
  const double scale = j.data.loss_scale();
  (scale == 1.0 ? loss / double(j.cfg.accumulate) : loss * (scale / double(j.cfg.accumulate))).backward();
  return classification;
}

// --nan-check's error: the step whose reduced gradients are not finite, the first such gradient, this rank's loss.
// `applied`: --nan-check-at next-step found it a step later, the update made (and never saved).
[[noreturn]] void throw_not_finite(const Job& j, int64_t epoch, int64_t step, double loss, const std::string& bad,
                                   bool applied) {
  std::ostringstream text;
  text << "the gradients are not finite at epoch " << epoch + 1 << ", step " << step + 1 << " (this rank's loss ";
  if (std::isnan(loss))
    text << "nan";  // whatever its sign bit (the C library may print "-nan")
  else
    text << loss;
  text << "); first non-finite gradient: " << bad << "; "
       << (applied ? "its update was applied (--nan-check-at next-step reads the check a step later) and no "
                     "checkpoint was written since"
                   : "the weights were not updated and no checkpoint was written")
       << " (the last: " << (j.checkpoints.last().empty() ? std::string("none") : j.checkpoints.last())
       << "). Lower --lr, check the data, or resume from that checkpoint; --no-nan-check trains on regardless";
  throw Error(text.str());
}

// --nan-check-at step: after the gradients are reduced and before the step, so a NaN or inf never reaches the
// weights. The reduced gradients are the same on every rank, so every rank stops at the same step.
// (One read per step: whether to step must be known on the host, as GradScaler's found_inf.)
void check_finite_step(Job& j, const LoopState& s, RunningLoss& running, int64_t window) {
  if (!j.cfg.nan_check) return;
  const auto bad = j.strategy->non_finite_gradient();
  if (!bad) return;
  throw_not_finite(j, s.epoch, s.step, running.read().step / double(window), *bad, /*applied=*/false);
}

// --nan-check-at next-step: a step's gradient sums and loss on their way to the host, read at the next step's
// update, or before anything saves, evaluates or logs (settle): the host never waits for the GPU's queue, and no
// checkpoint holds a non-finite step's update. Every rank holds the same sums, so every rank stops together.
class DeferredFiniteCheck {
 public:
  void start(Job& j, const LoopState& s, const RunningLoss& running, int64_t window) {
    GradientSums g = j.strategy->gradient_sums();
    if (!g.sums.defined()) return;
    read_ = ddp::detail::PendingRead(at::cat({g.sums, to_device(running.step_sum().reshape({1}), g.sums.device())}));
    names_ = std::move(g.names);
    epoch_ = s.epoch;
    step_ = s.step;
    window_ = window;
  }

  void settle(const Job& j) {
    if (!read_.valid()) return;
    const at::Tensor host = read_.get();  // [the sums..., the step's loss sum]
    read_ = ddp::detail::PendingRead();
    if (auto bad = first_non_finite_sum(host, names_))
      throw_not_finite(j, epoch_, step_, host[int64_t(names_.size())].item<double>() / double(window_), *bad,
                       /*applied=*/true);
  }

 private:
  ddp::detail::PendingRead read_;
  std::vector<std::string> names_;
  int64_t epoch_ = 0, step_ = 0, window_ = 1;
};

// One epoch's run from micro-batch s.micro on: what the epoch keeps between its steps, and the steps.
class EpochRun {
 public:
  EpochRun(Job& j, LoopState& s)
      : j_(j),
        s_(s),
        running_(j.device, s.loss_sum),
        t0_(Clock::now()),
        first_micro_(s.micro),
        stop_(*j.group),
        since_log_{t0_, s.micro, j.strategy->stats()} {
    if (j.membership) j.committed_buffers.take(*j.task.model.ptr());  // between steps
    j.data.start_epoch(s.epoch, s.micro);
    j.logs.begin_epoch(s.epoch, *j.cfg.epochs, j.data.steps_per_epoch());
  }

  bool more() const { return s_.micro < j_.data.micro_per_epoch(); }

  // Loading, forward and backward of the next micro-batch; true once it completes a step (its gradients are
  // reduced), false while accumulating. nullopt at the data's end.
  std::optional<bool> micro_batch() {
    timeline::Span waiting("data", "data wait");
    auto batch = j_.data.next();
    waiting.end();
    if (!batch) return std::nullopt;
    const int64_t accumulate = j_.cfg.accumulate;
    const bool sync = (s_.micro + 1) % accumulate == 0;  // the last micro-batch of a step reduces gradients
    lr_ = j_.lr.apply(j_.strategy->optimizer(), s_.step);
    if (s_.micro % accumulate == 0) {
      j_.strategy->zero_grad();
      stop_.begin(s_.step, g_stop_signal.load(), j_.checkpoints.failed(), stop_.due(s_.step) ? joiners_waiting() : 0);
    }
    classification_ = forward_backward(j_, *batch, sync, running_) && classification_;
    ++s_.micro;
    ++window_;
    counted_ += double(batch->target.size(0));
    return sync;
  }

  // The optimizer step, once the gradients are known finite (--nan-check), and the weight average's update.
  void step() {
    deferred_.settle(j_);  // the last step's (--nan-check-at next-step): its copy has long landed
    // With clipping (on the device), its norm is --nan-check-at step's one read: finite, so are all the gradients.
    bool finite = false;
    if (*j_.cfg.clip_grad > 0) {
      const at::Tensor norm = j_.strategy->clip_grad_norm(*j_.cfg.clip_grad);
      finite = j_.cfg.nan_check && !next_step_ && std::isfinite(norm.item<double>());
    }
    if (next_step_)
      deferred_.start(j_, s_, running_, window_);
    else if (!finite)
      check_finite_step(j_, s_, running_, window_);
    {
      timeline::DeviceSpan span("compute", "optimizer step", j_.device);
      j_.strategy->step();
    }
    ++s_.step;
    if (j_.membership) j_.committed_buffers.take(*j_.task.model.ptr());  // a failure from here on keeps them
    j_.average.after_step(*j_.task.model.ptr(), s_.step, j_.data.total_steps());
    s_.loss_count += window_;
  }

  // Each --log-every steps the means over ranks of the loss and accuracy, and each rank's numbers; every step
  // the progress line.
  void log() {
    if (s_.step % j_.cfg.log_every == 0) {
      deferred_.settle(j_);  // a read here anyway: no step's loss is logged before its check
      const RunningLoss::Read now = running_.read();
      shown_loss_ = now.step / double(window_);
      const double acc = classification_ && counted_ > 0 ? now.hits / counted_ : -1;
      const auto ranks =
          log_point(*j_.group, *shown_loss_, acc, since_log_, s_.micro, *j_.cfg.batch_size, j_.strategy->stats());
      std::vector<std::pair<std::string, double>> values = {{"Loss/train", ranks.mean_loss}};
      if (ranks.mean_accuracy >= 0) values.emplace_back("acc1/train", ranks.mean_accuracy);
      values.emplace_back("lr", lr_);
      j_.logs.scalars("train", s_.step, values, ranks.fields);
      running_.clear_hits();
      counted_ = 0;
      classification_ = true;
    }
    running_.end_step();
    const double samples = double((s_.micro - first_micro_) * *j_.cfg.batch_size * j_.group->size());
    j_.logs.step(s_.micro / j_.cfg.accumulate, shown_loss_, lr_, samples / seconds_since(t0_));
    window_ = 0;
  }

  // A checkpoint when the policy says (a SIGTERM's stops the epoch: false), and --eval-every's evaluation.
  bool after_step() {
    const Moment moment = stop_.requested() ? Moment::kPreempted : Moment::kStep;
    if (stop_.save_failed()) j_.checkpoints.wait();  // throws rank 0's error, on every rank
    // Not within half an interval of the epoch's end, which has its own evaluation.
    const int64_t every = *j_.cfg.eval_every, accumulate = j_.cfg.accumulate;
    const bool evaluate = every > 0 && (s_.micro / accumulate) % every == 0 &&
                          2 * (j_.data.micro_per_epoch() - s_.micro) >= every * accumulate;
    const bool save = j_.checkpoints.due(s_, moment);
    if (save || evaluate || moment == Moment::kPreempted || stop_.joiners_waiting())
      deferred_.settle(j_);  // nothing saves, shows or hands on a step not yet checked
    if (save) {
      flush();
      save_checkpoint(j_, s_);
    }
    if (moment == Moment::kPreempted) {  // this step's state is saved where a restart resumes exactly
      s_.preempted = true;
      s_.stop_signal = stop_.signal();
      return false;
    }
    if (stop_.joiners_waiting()) {  // the fit loop admits them at this step boundary (inplace.h)
      s_.admit = true;
      return false;
    }
    if (evaluate) evaluate_within_epoch(j_, s_);
    return true;
  }

  // The epoch's end: a step begun but not finished (none with drop_last) drained, keeping the ranks in step.
  // Returns this rank's mean training loss.
  double finish() {
    stop_.drain();
    deferred_.settle(j_);  // the epoch's last step, before its end saves or evaluates
    flush();
    return s_.loss_count ? s_.loss_sum / double(s_.loss_count) : 0.0;
  }

 private:
  void flush() { s_.loss_sum = running_.read().epoch; }  // the epoch's losses onto the host
  // Rank 0 of an in-place job asks the store on check steps; the check's MAX tells every rank.
  int64_t joiners_waiting() const {
    return j_.membership && j_.group->rank() == 0 ? j_.membership->joiners_waiting() : 0;
  }

  Job& j_;
  LoopState& s_;
  RunningLoss running_;
  const Clock::time_point t0_;
  const int64_t first_micro_;
  StopSchedule stop_;
  LogWindow since_log_;  // each rank's own numbers since the last log point
  int64_t window_ = 0;   // micro-batches in the step in progress
  double counted_ = 0;   // samples since the last log point (classification)
  bool classification_ = true;
  std::optional<double> shown_loss_;  // the progress line's loss: the last log point's (read there, not per step)
  const bool next_step_ = j_.cfg.nan_check && j_.cfg.nan_check_at == "next-step";
  DeferredFiniteCheck deferred_;
  double lr_ = 0;
};

}  // namespace

int stop_signal_number(const std::string& name) { return name == "USR1" ? SIGUSR1 : name == "USR2" ? SIGUSR2 : 0; }

std::string stop_signal_name(int sig) {
  return sig == SIGTERM   ? "SIGTERM"
         : sig == SIGUSR1 ? "SIGUSR1"
         : sig == SIGUSR2 ? "SIGUSR2"
                          : "signal " + std::to_string(sig);
}

StopSignalHandler::StopSignalHandler(const std::string& stop_signal) {
  g_stop_signal.store(0);  // a signal after an earlier fit's last step is not this one's
  struct sigaction sa {};
  sa.sa_handler = note_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, stop_signal_number(stop_signal)}) {
    if (sig == 0) continue;
    struct sigaction old {};
    ::sigaction(sig, &sa, &old);
    old_.emplace_back(sig, old);
  }
}

StopSignalHandler::~StopSignalHandler() {
  for (auto& [sig, old] : old_) ::sigaction(sig, &old, nullptr);
}

double train_epoch(Job& j, LoopState& s) {
  EpochRun epoch(j, s);
  while (epoch.more()) {
    const std::optional<bool> stepped = epoch.micro_batch();
    if (!stepped) break;
    if (!*stepped) continue;  // accumulating
    epoch.step();
    epoch.log();
    if (!epoch.after_step()) break;  // preempted
  }
  return epoch.finish();
}

}  // namespace ddp::train::detail
