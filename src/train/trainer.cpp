// The training loop of ddp-train: set_up, resume, epochs of train_epoch (one
// micro-batch is forward_backward), distributed evaluation, logs and checkpoints.
#include "ddp/train/trainer.h"

#include <ATen/ATen.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>

#include "ddp/dist/backend_choice.h"
#include "ddp/dist/collectives.h"
#include "ddp/dist/init.h"
#include "ddp/dist/timeline.h"
#include "ddp/errors.h"
#include "ddp/train/recipe.h"
#include "config_agreement.h"
#include "finite_check.h"
#include "rank_metrics.h"
#include "stop_check.h"
#include "trainer_job.h"

namespace ddp::train {
namespace {

using detail::Job;
using detail::Stream;
using detail::stream_seed;
using detail::percent;
using Clock = std::chrono::steady_clock;

// SIGTERM while training (preemption): noted here, acted on at the next step boundary.
std::atomic<int> g_stop_signal{0};
extern "C" void note_stop_signal(int sig) { g_stop_signal.store(sig); }

class StopSignalHandler {
 public:
  StopSignalHandler() {
    g_stop_signal.store(0);  // a SIGTERM after an earlier fit's last step is not this one's
    struct sigaction sa {};
    sa.sa_handler = note_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGTERM, &sa, &old_);
  }
  ~StopSignalHandler() { ::sigaction(SIGTERM, &old_, nullptr); }

 private:
  struct sigaction old_ {};
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// This rank's sample order for an epoch: the DistributedSampler's, or a seeded shuffle of its shard.
std::vector<int64_t> epoch_order(Job& j, int64_t epoch) {
  if (j.sampler) {
    j.sampler->set_epoch(epoch);
    auto idx = j.sampler->indices();
    return std::vector<int64_t>(idx.begin(), idx.end());
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(stream_seed(j.cfg.seed, Stream::ShardOrder, j.group->rank(), epoch));
  at::Tensor perm = at::randperm(j.task.train_y.size(0), gen, at::kLong);
  return std::vector<int64_t>(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + perm.numel());
}

// Each optimizer group's lr: its lr at creation times the schedule's multiplier (0 once a group with
// train_epochs is past them). Returns the lr logged: settings.lr's.
double set_lr(Job& j, int64_t step) {
  const double m = j.schedule(step, j.total_steps);
  const int64_t epoch = step / j.steps_per_epoch;
  for (size_t i = 0; i < j.opt->param_groups().size(); ++i) {
    const bool frozen = j.train_epochs[i] > 0 && epoch >= j.train_epochs[i];
    j.opt->param_groups()[i].options().set_lr(frozen ? 0.0 : j.base_lrs[i] * m);
  }
  return *j.cfg.lr * m;
}

// Every rank checks (its weights are rank 0's): a non-finite model never becomes a checkpoint, so `latest` keeps
// naming the last finite one.
void check_finite_before_saving(Job& j, const detail::LoopState& s) {
  auto bad = detail::first_non_finite(*j.task.model.ptr(), /*gradients=*/false);
  if (!bad && j.ema) bad = detail::first_non_finite(j.ema->module(), false);
  if (!bad) return;
  const std::string when = s.micro == 0 ? "after epoch " + std::to_string(s.epoch) : "in epoch " + std::to_string(s.epoch + 1);
  throw Error("the model is not finite " + when + ", step " + std::to_string(s.step) + ": " + *bad +
              "; no checkpoint written, " +
              (j.last_checkpoint.empty() ? std::string("none was written yet") : "the last one is " + j.last_checkpoint));
}

void save_checkpoint(Job& j, const detail::LoopState& s) {
  timeline::Span span("checkpoint", "checkpoint");
  check_finite_before_saving(j, s);
  auto rng = detail::gather_rng_states(*j.group);  // collectives: every rank
  at::Tensor loss_sums = detail::gather_loss_sums(s, *j.group);
  std::vector<c10::IValue> hook_states;
  if (j.hook) hook_states = gather_object(j.hook->state_dict(), 0, j.group);
  j.last_checkpoint = j.checkpoints->save(s.epoch, s.step, [&] {
    c10::IValue c = detail::make_checkpoint(j.cfg, s, *j.task.model.ptr(), *j.opt,
                                            j.ema ? &j.ema->module() : nullptr, rng, loss_sums, j.group->size(),
                                            j.total_steps);
    detail::add_comm_hook_state(c, j.cfg.comm_hook, hook_states);
    return c;
  });
}

// The evaluated model: the EMA's average when it is separate from the trained one (lookahead's is the model).
EvalResult evaluate_epoch(Job& j, bool last = false) {
  timeline::Span span("compute", "evaluation");
  torch::nn::AnyModule& net = j.ema && !j.task.lookahead_rho ? j.shadow : j.task.model;
  const Tta tta = last ? std::max(j.task.final_tta, j.task.eval_tta) : j.task.eval_tta;
  const auto layout = j.task.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  net.ptr()->eval();
  auto logits = [&](const at::Tensor& x) { return net.forward(x.contiguous(layout)).to(at::kFloat); };
  auto forward = [&](const at::Tensor& x) {
    Autocast autocast(j.precision.precision);
    return tta_logits(logits, x, tta);
  };
  EvalResult r;
  if (j.task.test_fetch) {  // files: decoded by the loader's workers, this rank's share only
    data::BatchLoaderOptions lo;
    lo.batch_size = j.cfg.eval_batch;
    lo.workers = static_cast<int>(j.cfg.workers);
    lo.prefetch = lo.workers + 1;
    data::BatchLoader loader(j.task.test_total, j.task.test_fetch, lo);
    loader.start_epoch(j.task.test_indices, 0);
    r = evaluate_batches(forward, [&] { return loader.next(); }, *j.group, j.eval_options);
  } else {
    r = evaluate(forward, j.task.test_x, j.task.test_y, j.cfg.eval_batch, *j.group, j.eval_options);
  }
  net.ptr()->train();
  return r;
}

struct MicroResult {
  double loss = 0;
  double hits = -1;  // top-1 hits in the batch; -1: not a classification batch
};

// One micro-batch: forward (under autocast for bf16), loss, backward. DDP averages
// the gradients across ranks during backward unless `sync` is false (accumulating).
MicroResult forward_backward(Job& j, const data::Batch& batch, bool sync) {
  std::optional<DistributedDataParallelBase::NoSyncGuard> no_sync;
  if (!sync) no_sync.emplace(*j.model);
  at::Tensor logits;
  timeline::Span forward("compute", "forward");
  {
    Autocast autocast(j.precision.precision);  // bf16: the forward pass only
    logits = (*j.model)(batch.data).to(at::kFloat);  // in NHWC already where the Task asks (set_up_data)
  }
  at::Tensor loss = j.loss(logits, batch.target);
  if (loss.numel() != 1)
    throw InvalidArgument("Trainer: the Task's loss gave " + std::to_string(loss.numel()) +
                          " values for a batch; it must return the batch's mean, one value");
  MicroResult r;
  if (is_classification(logits, batch.target))
    r.hits = logits.detach().argmax(1).eq(batch.target).sum().item<double>();
  forward.end();
  timeline::Span backward("compute", "backward");  // the buckets' reductions overlap it (tracks "bucket N")
  (loss / double(j.cfg.accumulate)).backward();
  r.loss = loss.item<double>();
  return r;
}

// --nan-check: after the gradients are reduced and before the step, so a NaN or inf never reaches the weights.
// The reduced gradients are the same on every rank, so every rank stops at the same step.
void check_finite_step(Job& j, const detail::LoopState& s, double window_loss) {
  if (!j.cfg.nan_check || detail::gradients_finite(*j.task.model.ptr())) return;
  auto bad = detail::first_non_finite(*j.task.model.ptr(), /*gradients=*/true);
  std::ostringstream loss;
  loss << window_loss;
  throw Error("the gradients are not finite at epoch " +
              std::to_string(s.epoch + 1) + ", step " + std::to_string(s.step + 1) + " (this rank's loss " +
              loss.str() + "); first non-finite gradient: " + (bad ? *bad : std::string("?")) +
              "; the weights were not updated and no checkpoint was written (the last: " +
              (j.last_checkpoint.empty() ? std::string("none") : j.last_checkpoint) +
              "). Lower --lr, check the data, or resume from that checkpoint; --no-nan-check trains on regardless");
}

// --timeline / DDP_TIMELINE: every rank writes its file, then rank 0 joins them (ddprun, when
// DDP_TIMELINE reached it, joins them again at the job's end, with anything recorded after this).
void finish_timeline(Job& j) {
  if (!timeline::enabled()) return;
  timeline::flush();
  j.group->barrier().wait();  // every rank's file is complete
  if (j.group->rank() != 0) return;
  const int ranks = timeline::merge(timeline::path(), j.group->size());
  std::cout << "timeline: " << timeline::path() << " (" << ranks << " of " << j.group->size()
            << " rank(s); open it in https://ui.perfetto.dev or chrome://tracing)" << std::endl;
}

// The weight average's update after `step`; lookahead puts the average back into the model, and at the
// last step the model ends as the average.
void update_average(Job& j, int64_t step) {
  if (!j.task.lookahead_rho) return j.ema->update(*j.task.model.ptr());
  j.ema->update(*j.task.model.ptr(), j.task.lookahead_rho(step, j.total_steps));
  j.ema->copy_to(*j.task.model.ptr());
}

// Seconds since 1970 (the system clock), so that a benchmark can time a run from its launch.
double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// An evaluation's scalars (TensorBoard, metrics.jsonl), and its text in the log lines.
std::vector<std::pair<std::string, double>> eval_values(const EvalResult& eval) {
  std::vector<std::pair<std::string, double>> values = {{"Loss/val", eval.loss}};
  if (eval.has_accuracy) values.insert(values.end(), {{"acc1/val", eval.acc1}, {"acc5/val", eval.acc5}});
  for (const auto& [name, v] : eval.metrics) values.emplace_back(name + "/val", v);
  return values;
}
std::string eval_text(const EvalResult& eval) {
  std::ostringstream line;
  line << "val_loss " << eval.loss;
  if (eval.has_accuracy) line << " | acc1 " << percent(eval.acc1) << " | acc5 " << percent(eval.acc5);
  for (const auto& [name, v] : eval.metrics) line << " | " << name << " " << v;
  return line.str();
}

// --eval-every: an evaluation between two steps (the epoch's last step has its own), logged as
// {"kind": "eval"} with the fraction of epochs done and the wall time, for time to accuracy.
void evaluate_within_epoch(Job& j, const detail::LoopState& s) {
  const auto t0 = Clock::now();
  const EvalResult eval = evaluate_epoch(j);
  const double epochs = double(s.epoch) + double(s.micro) / double(j.micro_per_epoch);
  const double wall_s = seconds_since(j.start);
  j.logs.scalars("eval", s.step, eval_values(eval),
                 {{"epoch", epochs}, {"wall_seconds", wall_s}, {"unix_time", unix_time()}});
  std::ostringstream line;
  line.setf(std::ios::fixed);
  line.precision(2);
  line << "step " << s.step << " (epoch " << epochs << ") | " << eval_text(eval) << " | " << wall_s
       << " s since the start";
  j.logs.note(line.str());
  j.eval_seconds += seconds_since(t0);
}

// One epoch from micro-batch s.micro on. Returns the mean training loss of this rank.
double train_epoch(Job& j, detail::LoopState& s) {
  const TrainConfig& c = j.cfg;
  j.loader->start_epoch(epoch_order(j, s.epoch), s.epoch, s.micro);
  j.logs.begin_epoch(s.epoch, *c.epochs, j.steps_per_epoch);
  double window_sum = 0;
  int64_t window = 0;
  double hits = 0, counted = 0;  // top-1 hits and samples since the last log point (classification)
  bool classification = true;
  const auto t0 = Clock::now();
  const int64_t first_micro = s.micro;
  detail::StopSchedule stop(*j.group);
  detail::LogWindow since_log{t0, s.micro, j.model->stats()};  // each rank's own numbers since the last log point
  while (s.micro < j.micro_per_epoch) {
    timeline::Span waiting("data", "data wait");
    auto batch = j.loader->next();
    waiting.end();
    if (!batch) break;
    const bool sync = (s.micro + 1) % c.accumulate == 0;  // the last micro-batch of a step reduces gradients
    const double lr = set_lr(j, s.step);
    if (s.micro % c.accumulate == 0) {
      j.opt->zero_grad();
      stop.begin(s.step, g_stop_signal.load());
    }
    const MicroResult micro = forward_backward(j, *batch, sync);
    ++s.micro;
    window_sum += micro.loss;
    ++window;
    classification = classification && micro.hits >= 0;
    hits += micro.hits;
    counted += double(batch->target.size(0));
    if (!sync) continue;
    check_finite_step(j, s, window_sum / double(window));
    {
      timeline::Span span("compute", "optimizer step");
      j.opt->step();
    }
    ++s.step;
    if (j.ema && s.step % *c.ema_every == 0) update_average(j, s.step);
    if (j.ema && j.task.lookahead_rho && s.step == j.total_steps) j.ema->copy_to(*j.task.model.ptr());

    const double rate = double((s.micro - first_micro) * *c.batch_size * j.group->size()) / seconds_since(t0);
    j.logs.step(s.micro / c.accumulate, window_sum / double(window), lr, rate);
    s.loss_sum += window_sum;
    s.loss_count += window;
    if (s.step % c.log_every == 0) {  // means over ranks of the loss and accuracy, and each rank's numbers
      const double acc = classification && counted > 0 ? hits / counted : -1;
      const auto ranks = detail::log_point(*j.group, window_sum / double(window), acc, since_log, s.micro,
                                           *c.batch_size, j.model->stats());
      std::vector<std::pair<std::string, double>> values = {{"Loss/train", ranks.mean_loss}};
      if (ranks.mean_accuracy >= 0) values.emplace_back("acc1/train", ranks.mean_accuracy);
      values.emplace_back("lr", lr);
      j.logs.scalars("train", s.step, values, ranks.fields);
      hits = counted = 0;
      classification = true;
    }
    window_sum = 0;
    window = 0;
    if (stop.requested()) {  // preemption: this step's state, saved where a restart resumes exactly
      save_checkpoint(j, s);
      s.preempted = true;
      break;
    }
    if (c.checkpoint_every > 0 && s.step % c.checkpoint_every == 0 && s.micro < j.micro_per_epoch)
      save_checkpoint(j, s);
    // Not within half an interval of the epoch's end, which has its own evaluation.
    if (*c.eval_every > 0 && (s.micro / c.accumulate) % *c.eval_every == 0 &&
        2 * (j.micro_per_epoch - s.micro) >= *c.eval_every * c.accumulate)
      evaluate_within_epoch(j, s);
  }
  stop.drain();  // a step begun but not finished (none with drop_last): keep the ranks in step
  return s.loss_count ? s.loss_sum / double(s.loss_count) : 0.0;
}

// The epoch's scalars (TensorBoard, metrics.jsonl) and its line on rank 0.
void log_epoch(Job& j, int64_t epoch, int64_t step, double train_loss, double throughput, double train_s,
               const EvalResult& eval, double wall_s) {
  std::vector<std::pair<std::string, double>> values = eval_values(eval);
  values.insert(values.end(), {{"throughput", throughput}, {"epoch", double(epoch + 1)}, {"Loss/train_epoch", train_loss}});
  j.logs.scalars("epoch", step, values, {{"train_seconds", train_s}, {"wall_seconds", wall_s}, {"unix_time", unix_time()}});
  j.logs.flush();
  std::ostringstream line;
  line << "epoch " << epoch + 1 << "/" << *j.cfg.epochs << " | train_loss " << train_loss << " | " << eval_text(eval);
  line << " | " << int64_t(throughput) << " samples/s | " << train_s << " s";
  j.logs.end_epoch(line.str());
}

// The on_epoch_end callbacks, in order, then the ranks agree (with or without callbacks: a callback added on some
// ranks only must not leave the others behind) whether a callback threw somewhere (then every rank throws) and
// whether any rank asked to stop. Returns why the run stops, if it does.
std::optional<std::string> run_callbacks(Job& j, int64_t epoch, int64_t step, double train_loss,
                                         const EvalResult& eval) {
  EpochEnd e;
  e.epoch = epoch;
  e.epochs = *j.cfg.epochs;
  e.step = step;
  e.train_loss = train_loss;
  e.eval = eval;
  std::exception_ptr error;
  try {
    for (auto& callback : j.callbacks) {
      callback(e);
      if (e.stop) break;
    }
  } catch (...) {
    error = std::current_exception();
  }
  const int failed = lowest_rank_where(error != nullptr, j.group);
  if (error) std::rethrow_exception(error);
  if (failed >= 0)
    throw Error("Trainer: an on_epoch_end callback threw on rank " + std::to_string(failed) + " after epoch " +
                std::to_string(epoch) + " (its error is in that rank's output)");
  if (lowest_rank_where(e.stop, j.group) < 0) return std::nullopt;
  if (!e.stop) return std::string("an on_epoch_end callback on another rank asked to stop");
  return "stopped by an on_epoch_end callback after epoch " + std::to_string(epoch) +
         (e.reason.empty() ? std::string() : ": " + e.reason);
}

// The run's last JSON line (finished, stopped, preempted or error, with the message) and the final report.
void log_end(Job& j, const std::string& status, const std::string& message, const TrainSummary& summary) {
  j.logs.event("end", {{"status", status}, {"message", message}, {"epochs_done", summary.epochs_done},
                       {"step", summary.steps}, {"seconds", summary.seconds}});
  j.logs.write_report();
}

void print_done(Job& j, const TrainSummary& summary) {
  if (j.group->rank() != 0) return;
  std::cout << "done: ";
  if (summary.eval.has_accuracy) std::cout << "acc1 " << percent(summary.eval.acc1);
  else std::cout << "val_loss " << summary.eval.loss;
  std::cout << " on " << summary.eval.count << " test samples after "
            << summary.epochs_done << " epoch(s), " << summary.seconds << " s\n"
            << "  logs: " << j.logs.tensorboard_dir() << " (tensorboard --logdir " << j.logs.tensorboard_dir() << "), "
            << j.logs.metrics_path() << "\n"
            << "  checkpoint: " << summary.checkpoint << "\n"
            << "  report: " << j.logs.report_path()
            << (j.logs.report_written() ? " (open it in a browser)"
                                        : " NOT written (see the warning above; `ddp-train report " + j.cfg.out_dir +
                                              "` rebuilds it)")
            << std::endl;
}

TrainSummary train_job(Job& j, Clock::time_point start) {
  j.start = start;
  detail::LoopState s = detail::resume_or_start(j);
  const TrainConfig& cfg = j.cfg;
  const int rank = j.group->rank(), world = j.group->size();

  TrainSummary summary;
  const int64_t first_epoch = s.epoch;
  if (s.epoch >= *cfg.epochs) {  // --resume of a finished run: its final model's metrics, nothing trained
    summary.eval = evaluate_epoch(j, /*last=*/true);
    if (rank == 0) {
      std::cout << "the run in " << cfg.out_dir << " is already finished: " << s.epoch << " of " << *cfg.epochs
                << " epoch(s) done (raise --epochs to train on); its final model: ";
      if (summary.eval.has_accuracy)
        std::cout << "acc1 " << percent(summary.eval.acc1) << ", acc5 " << percent(summary.eval.acc5) << ", ";
      std::cout << "val_loss " << summary.eval.loss << " on " << summary.eval.count << " test samples" << std::endl;
    }
  }
  while (s.epoch < *cfg.epochs) {
    const auto t0 = Clock::now();
    const int64_t micro0 = s.micro;
    j.eval_seconds = 0;
    const double train_loss = train_epoch(j, s);
    if (s.preempted) {
      if (rank == 0)
        std::cout << "preempted (SIGTERM): stopped after step " << s.step << " of epoch " << s.epoch + 1
                  << ", checkpoint " << j.last_checkpoint << "; exiting with code " << kExitPreempted
                  << " (--resume, or a restart by ddprun, goes on from here exactly)" << std::endl;
      summary.preempted = true;
      break;
    }
    const double train_s = seconds_since(t0) - j.eval_seconds;
    const double throughput = double((s.micro - micro0) * *cfg.batch_size * world) / train_s;
    summary.eval = evaluate_epoch(j, /*last=*/s.epoch + 1 == *cfg.epochs);
    log_epoch(j, s.epoch, s.step, train_loss, throughput, train_s, summary.eval, seconds_since(start));
    const auto asked_stop = run_callbacks(j, s.epoch + 1, s.step, train_loss, summary.eval);
    s.epoch += 1;
    s.micro = 0;
    s.loss_sum = 0;
    s.loss_count = 0;
    save_checkpoint(j, s);
    j.logs.write_report();  // after the checkpoint, so the page lists it
    if (asked_stop && s.epoch < *cfg.epochs) {
      summary.stopped = *asked_stop;
    } else if (cfg.stop_after > 0 && s.epoch - first_epoch >= cfg.stop_after && s.epoch < *cfg.epochs) {
      summary.stopped = "stopped after " + std::to_string(cfg.stop_after) + " epoch(s) as asked (--stop-after)";
    }
    if (!summary.stopped.empty()) {
      if (rank == 0) std::cout << summary.stopped << std::endl;
      break;
    }
  }
  summary.epochs_done = s.epoch;
  summary.steps = s.step;
  summary.checkpoint = j.last_checkpoint;
  summary.seconds = seconds_since(start);
  if (summary.preempted)
    log_end(j, "preempted", "SIGTERM: stopped after step " + std::to_string(s.step) + ", checkpoint " + j.last_checkpoint,
            summary);
  else
    log_end(j, summary.stopped.empty() ? "finished" : "stopped", summary.stopped, summary);
  finish_timeline(j);
  if (!summary.preempted) print_done(j, summary);
  return summary;
}

}  // namespace

struct Trainer::Impl {
  TrainConfig cfg;
  GroupPtr group;
  std::string backend_reason;
  bool precision_asked = false;
  std::vector<EpochCallback> callbacks;
  bool fitted = false;
};

Trainer::Trainer(TrainConfig settings, GroupPtr group) : impl_(std::make_unique<Impl>()) {
  Impl& t = *impl_;
  t.cfg = std::move(settings);
  if (!t.cfg.timeline.empty()) timeline::start(t.cfg.timeline);  // before the group: its set-up is on it too
  if (group) {
    t.group = std::move(group);
  } else if (is_initialized()) {
    t.group = default_group();
  } else {
    InitOptions init;
    init.backend = t.cfg.backend;
    if (t.cfg.timeout)  // else InitOptions reads DDP_TIMEOUT
      init.timeout = Milliseconds(std::max<int64_t>(1, static_cast<int64_t>(*t.cfg.timeout * 1000 + 0.5)));
    t.backend_reason = t.cfg.backend == "auto" ? choose_backend(init).reason : "--backend " + t.cfg.backend;
    t.group = init_process_group(init);
  }
  check_config_agreement(t.cfg, *t.group);  // before any collective whose size the settings decide
  t.precision_asked = !t.cfg.precision.empty();
  at::manual_seed(stream_seed(t.cfg.seed, Stream::Weights, t.group->rank()));  // DDP also broadcasts rank 0's
}

Trainer::~Trainer() = default;

TrainConfig& Trainer::settings() { return impl_->cfg; }
ProcessGroup& Trainer::group() { return *impl_->group; }

Trainer& Trainer::on_epoch_end(EpochCallback callback) {
  if (!callback) throw InvalidArgument("Trainer::on_epoch_end: the callback is empty");
  impl_->callbacks.push_back(std::move(callback));
  return *this;
}

TrainSummary Trainer::fit(Task task) {
  Impl& t = *impl_;
  if (t.fitted) throw InvalidArgument("Trainer::fit: this Trainer has trained already; make a new one for a new run");
  t.fitted = true;
  const auto start = Clock::now();
  const StopSignalHandler on_sigterm;
  if (const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT"); restarts && std::atoi(restarts) > 0) {
    if (!t.cfg.resume) std::cerr << "ddp-train: restart " << restarts << " by the launcher: resuming from the latest checkpoint" << std::endl;
    t.cfg.resume = true;
  }
  Job j;
  detail::fill_task_defaults(t.cfg, task);
  check_config_agreement(t.cfg, *t.group);  // again: settings() may have changed them, the Task fills some
  check_settings(t.cfg);
  j.precision = detail::decide_precision(t.cfg.precision, t.precision_asked, *t.group);
  t.cfg.precision = to_string(j.precision.precision);  // logs and checkpoints record what ran
  j.cfg = t.cfg;
  j.group = t.group;
  j.backend_reason = t.backend_reason;
  j.callbacks = t.callbacks;
  at::manual_seed(stream_seed(j.cfg.seed, Stream::Dropout, j.group->rank()));
  detail::set_up(j, std::move(task));
  try {
    return train_job(j, start);
  } catch (const std::exception& e) {  // rank 0's view of the failure, in the log and the report; then as before
    TrainSummary failed;
    failed.seconds = seconds_since(start);
    try {
      log_end(j, "error", e.what(), failed);
    } catch (const std::exception& also) {
      std::cerr << "ddp-train: warning: cannot log the error in " << j.logs.metrics_path() << ": " << also.what() << std::endl;
    }
    throw;
  }
}

TrainSummary run(TrainConfig cfg) {
  Trainer trainer(std::move(cfg));
  Task recipe = make_recipe(trainer.settings(), trainer.group());  // fills the settings' unset fields
  return trainer.fit(std::move(recipe));
}

}  // namespace ddp::train
