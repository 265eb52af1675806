// The Trainer and its fit loop: set_up (trainer_setup.cpp), resume, then epochs of
// train_epoch (epoch_loop.cpp), each evaluated (evaluator.cpp), logged, its
// callbacks run and checkpointed (checkpoint_policy.cpp); the run's end.
#include "ddp/train/trainer.h"
#include "ddp/train/report.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <optional>
#include <sstream>

#include "config/agreement.h"
#include "ddp/dist/backend_choice.h"
#include "ddp/dist/collectives.h"
#include "ddp/dist/errors.h"
#include "ddp/dist/init.h"
#include "ddp/dist/launch_env.h"
#include "ddp/dist/tensor_memory.h"
#include "ddp/dist/timeline.h"
#include "ddp/errors.h"
#include "ddp/train/recipe.h"
#include "fit_parts.h"
#include "inplace.h"
#include "requeue.h"
#include "trainer_job.h"

namespace ddp::train {
namespace {

using detail::Clock;
using detail::eval_text;
using detail::eval_values;
using detail::evaluate_model;
using detail::Job;
using detail::percent;
using detail::save_checkpoint;
using detail::seconds_since;
using detail::Stream;
using detail::stream_seed;
using detail::train_epoch;
using detail::unix_time;

// --timeline / DDP_TIMELINE: every rank writes its file, then rank 0 joins them (ddprun, when
// DDP_TIMELINE reached it, joins them again at the job's end, with anything recorded after this).
void finish_timeline(Job& j) {
  if (!timeline::enabled()) return;
  timeline::flush();
  j.group->barrier().wait();  // every rank's file is complete
  if (j.group->rank() != 0) return;
  const int ranks = timeline::merge(timeline::path(), j.group->size());
  j.logs.console().line("timeline: " + timeline::path() + " (" + std::to_string(ranks) + " of " +
                        std::to_string(j.group->size()) +
                        " rank(s); open it in https://ui.perfetto.dev or chrome://tracing)");
}

// Each rank's peak tensor memory (MB, from the allocator) over an epoch's training steps; empty where nothing
// counts it (the CPU without count_tensor_memory()). Every rank.
std::vector<double> peak_memory_mb(Job& j) {
  const TensorMemory m = tensor_memory(j.device);
  if (!m.counted) return {};
  std::vector<double> mb;
  for (const auto& v : all_gather_object(c10::IValue(m.peak), j.group)) mb.push_back(double(v.toInt()) / 1e6);
  return mb;
}

// The epoch's scalars (TensorBoard, metrics.jsonl) and its line on rank 0.
void log_epoch(Job& j, int64_t epoch, int64_t step, double train_loss, double throughput, double train_s,
               const EvalResult& eval, double wall_s, const std::vector<double>& peak_mb) {
  std::vector<std::pair<std::string, double>> values = eval_values(eval);
  values.insert(values.end(),
                {{"throughput", throughput}, {"epoch", double(epoch + 1)}, {"Loss/train_epoch", train_loss}});
  std::vector<std::pair<std::string, double>> extra = {
      {"train_seconds", train_s}, {"wall_seconds", wall_s}, {"unix_time", unix_time()}};
  const double peak = peak_mb.empty() ? 0 : *std::max_element(peak_mb.begin(), peak_mb.end());
  if (!peak_mb.empty()) extra.emplace_back("peak_tensor_mb", peak);
  for (size_t r = 0; r < peak_mb.size(); ++r) extra.emplace_back("peak_tensor_mb_rank" + std::to_string(r), peak_mb[r]);
  j.logs.scalars("epoch", step, values, extra);
  j.logs.flush();
  std::ostringstream line;
  line << "epoch " << epoch + 1 << "/" << *j.cfg.epochs << " | train_loss " << train_loss << " | " << eval_text(eval);
  line << " | " << int64_t(throughput) << " samples/s | " << train_s << " s";
  if (!peak_mb.empty()) line << " | peak tensors " << std::fixed << std::setprecision(1) << peak << " MB";
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
    throw PeerFailed<Error>("Trainer: an on_epoch_end callback threw on rank " + std::to_string(failed) +
                                " after epoch " + std::to_string(epoch) + " (its error is in that rank's output)",
                            failed);
  if (lowest_rank_where(e.stop, j.group) < 0) return std::nullopt;
  if (!e.stop) return std::string("an on_epoch_end callback on another rank asked to stop");
  return "stopped by an on_epoch_end callback after epoch " + std::to_string(epoch) +
         (e.reason.empty() ? std::string() : ": " + e.reason);
}

// The run's last JSON line (finished, stopped, preempted or error, with the message) and the final report.
void log_end(Job& j, const std::string& status, const std::string& message, const TrainSummary& summary) {
  j.logs.event("end", {{"status", status},
                       {"message", message},
                       {"epochs_done", summary.epochs_done},
                       {"step", summary.steps},
                       {"seconds", summary.seconds}});
  j.logs.write_report();
}

void print_done(Job& j, const TrainSummary& summary) {
  std::ostringstream o;
  o << "done: ";
  if (summary.eval.has_accuracy)
    o << "acc1 " << percent(summary.eval.acc1);
  else
    o << "val_loss " << summary.eval.loss;
  o << " on " << summary.eval.count << " test samples after " << summary.epochs_done << " epoch(s), " << summary.seconds
    << " s\n"
    << "  logs: " << j.logs.tensorboard_dir() << " (tensorboard --logdir " << j.logs.tensorboard_dir() << "), "
    << j.logs.metrics_path() << "\n"
    << "  checkpoint: " << summary.checkpoint << "\n"
    << "  report: "
    << (!report_built()           ? std::string("none (ddp was built with -DDDP_WITH_REPORT=OFF)")
        : j.logs.report_written() ? j.logs.report_path() + " (open it in a browser)"
                                  : j.logs.report_path() + " NOT written (see the warning above; `ddp-train report " +
                                        j.cfg.out_dir + "` rebuilds it)");
  j.logs.console().line(o.str());
}

// One epoch from s: training, evaluation, logs, callbacks, the epoch's checkpoint. True when the run stops here
// (preempted, or stopped by a callback or --stop-after).
bool fit_epoch(Job& j, detail::LoopState& s, TrainSummary& summary, int64_t first_epoch, Clock::time_point start) {
  const int world = j.launch_world > 0 ? j.launch_world : j.group->size();  // the global batch's ranks
  const auto t0 = Clock::now();
  const int64_t micro0 = s.micro;
  j.eval_seconds = 0;
  reset_peak_tensor_memory(j.device);
  const double train_loss = train_epoch(j, s);
  if (s.admit) return false;  // ranks wait to join: the fit loop admits them and the epoch goes on
  const std::vector<double> peak_mb = peak_memory_mb(j);  // the training steps' (and --eval-every's)
  if (s.preempted) {
    j.checkpoints.wait();  // the preemption's checkpoint on disk before anything says so
    j.logs.console().line("preempted (" + detail::stop_signal_name(s.stop_signal) + "): stopped after step " +
                          std::to_string(s.step) + " of epoch " + std::to_string(s.epoch + 1) + ", checkpoint " +
                          j.checkpoints.last() + "; exiting with code " + std::to_string(kExitPreempted) +
                          " (--resume, or a restart by ddprun, goes on from here exactly)");
    summary.preempted = true;
    return true;
  }
  const double train_s = seconds_since(t0) - j.eval_seconds;
  const double throughput = double((s.micro - micro0) * *j.cfg.batch_size * world) / train_s;
  summary.eval = evaluate_model(j, /*last=*/s.epoch + 1 == *j.cfg.epochs);
  log_epoch(j, s.epoch, s.step, train_loss, throughput, train_s, summary.eval, seconds_since(start), peak_mb);
  std::optional<std::string> asked_stop;
  {
    const auto full = j.callbacks.empty() ? nullptr : j.strategy->full_model(/*writeback=*/false);
    asked_stop = run_callbacks(j, s.epoch + 1, s.step, train_loss, summary.eval);
  }
  s.epoch += 1;
  s.micro = 0;
  s.loss_sum = 0;
  s.loss_count = 0;
  if (j.checkpoints.due(s, detail::Moment::kEpochEnd)) save_checkpoint(j, s);
  j.logs.write_report();  // after the checkpoint, so the page lists it
  if (asked_stop && s.epoch < *j.cfg.epochs) {
    summary.stopped = *asked_stop;
  } else if (j.cfg.stop_after > 0 && s.epoch - first_epoch >= j.cfg.stop_after && s.epoch < *j.cfg.epochs) {
    summary.stopped = "stopped after " + std::to_string(j.cfg.stop_after) + " epoch(s) as asked (--stop-after)";
  }
  if (!summary.stopped.empty()) {
    j.logs.console().line(summary.stopped);
    return true;
  }
  return false;
}

TrainSummary train_job(Job& j, Clock::time_point start) {
  j.start = start;
  detail::LoopState s = j.joining ? detail::LoopState() : detail::resume_or_start(j);
  if (j.joining && !detail::join_in_place(j, s)) {  // the running job's state, at its members' next step boundary
    TrainSummary none;
    none.stopped = "the job finished before this rank could join it";
    j.logs.console().rank_message(none.stopped);
    return none;
  }
  const TrainConfig& cfg = j.cfg;

  TrainSummary summary;
  const int64_t first_epoch = s.epoch;
  if (s.epoch >= *cfg.epochs) {  // --resume of a finished run: its final model's metrics, nothing trained
    summary.eval = evaluate_model(j, /*last=*/true);
    std::ostringstream o;
    o << "the run in " << cfg.out_dir << " is already finished: " << s.epoch << " of " << *cfg.epochs
      << " epoch(s) done (raise --epochs to train on); its final model: ";
    if (summary.eval.has_accuracy)
      o << "acc1 " << percent(summary.eval.acc1) << ", acc5 " << percent(summary.eval.acc5) << ", ";
    o << "val_loss " << summary.eval.loss << " on " << summary.eval.count << " test samples";
    j.logs.console().line(o.str());
  }
  while (s.epoch < *cfg.epochs) {
    try {
      if (s.admit) {  // ranks wait to join (in-place recovery): admitted at this step boundary
        s.admit = false;
        detail::admit_in_place(j, s);
      }
      if (fit_epoch(j, s, summary, first_epoch, start)) break;
    } catch (const CommError& e) {  // under ddprun --recovery inplace a lost rank is survived: the others go on
      if (!j.membership) throw;
      s.admit = false;
      detail::recover_in_place(j, s, e.what());
    }
  }
  if (j.checkpoints.manager().wait()) j.logs.write_report();  // the last save written, and on the page
  summary.epochs_done = s.epoch;
  summary.steps = s.step;
  summary.checkpoint = j.checkpoints.last();
  summary.seconds = seconds_since(start);
  if (summary.preempted)
    log_end(j, "preempted",
            detail::stop_signal_name(s.stop_signal) + ": stopped after step " + std::to_string(s.step) +
                ", checkpoint " + j.checkpoints.last(),
            summary);
  else
    log_end(j, summary.stopped.empty() ? "finished" : "stopped", summary.stopped, summary);
  if (j.membership && j.membership->generation() > 0) detail::check_replicas(j);
  if (j.membership) try {
      j.membership->finish();            // a replacement still waiting to join gives up
    } catch (const std::exception& e) {  // the store's node ended first: no joiner can be waiting on it
      j.logs.console().rank_message("note: could not tell joiners the job is done: " + std::string(e.what()));
    }
  j.strategy->finish();  // a sharded model's trained weights back in the Task's model
  finish_timeline(j);
  if (!summary.preempted) print_done(j, summary);
  // Preempted: every rank exits 75 right after this, and under mpirun the first exit ends the others (ddprun's
  // DDP_EXIT_LINGER is their only slack): rank 0's last log lines are written before anyone leaves.
  if (summary.preempted) j.group->barrier().wait();
  if (summary.preempted && cfg.requeue && s.stop_signal == detail::stop_signal_number(cfg.stop_signal) &&
      j.group->rank() == 0) {  // Slurm's warning, not SIGTERM: the job comes back under its id and resumes
    const std::string failed = detail::requeue_slurm_job();
    j.logs.console().line(failed.empty() ? "requeued the Slurm job: its next run resumes from " + j.checkpoints.last()
                                         : "requeue FAILED: " + failed + "; resume by hand with --resume");
  }
  return summary;
}

}  // namespace

struct Trainer::Impl {
  TrainConfig cfg;
  std::unique_ptr<Membership> membership;  // ddprun --recovery inplace: the group is its generation's
  bool joining = false;                    // a replacement: a world of its own until fit joins the job
  GroupPtr group;
  std::string backend_reason, placement;
  bool precision_asked = false;
  std::vector<EpochCallback> callbacks;
  std::vector<WorldChangeCallback> world_callbacks;
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
  } else if (detail::joining_from_launcher()) {  // set up alone, then join the running job (inplace.h)
    t.joining = true;
    BackendOptions alone;
    alone.store = make_hash_store();
    t.group = create_backend("local", alone);
    t.backend_reason = "ddprun --recovery inplace: a replacement that joins the running job";
    if (t.cfg.data_mode.empty()) t.cfg.data_mode = "sampler";
  } else if ((t.membership = detail::membership_from_launcher())) {
    t.group = t.membership->group();
    t.backend_reason = "ddprun --recovery inplace: a group that survives a lost rank";
    if (t.cfg.data_mode.empty()) t.cfg.data_mode = "sampler";  // every rank holds the whole set: any can take over
  } else {
    InitOptions init;
    init.backend = t.cfg.backend;
    init.device = t.cfg.device;  // a GPU device makes backend auto nccl
    if (t.cfg.timeout)           // else InitOptions reads DDP_TIMEOUT
      init.timeout = Milliseconds(std::max<int64_t>(1, static_cast<int64_t>(*t.cfg.timeout * 1000 + 0.5)));
    const BackendChoice choice = choose_backend(init);
    t.backend_reason = t.cfg.backend == "auto" ? choice.reason : "--backend " + t.cfg.backend;
    t.placement = choice.placement;
    t.group = init_process_group(init);
  }
  check_config_agreement(t.cfg, *t.group);  // before any collective whose size the settings decide
  t.precision_asked = !t.cfg.precision.empty();
  at::manual_seed(stream_seed(t.cfg.seed, Stream::kWeights, t.group->rank()));  // DDP also broadcasts rank 0's
}

Trainer::~Trainer() = default;

TrainConfig& Trainer::settings() { return impl_->cfg; }
ProcessGroup& Trainer::group() { return *impl_->group; }

Trainer& Trainer::on_epoch_end(EpochCallback callback) {
  if (!callback) throw InvalidArgument("Trainer::on_epoch_end: the callback is empty");
  impl_->callbacks.push_back(std::move(callback));
  return *this;
}

Trainer& Trainer::on_world_change(WorldChangeCallback callback) {
  if (!callback) throw InvalidArgument("Trainer::on_world_change: the callback is empty");
  impl_->world_callbacks.push_back(std::move(callback));
  return *this;
}

TrainSummary Trainer::fit(Task task) {
  Impl& t = *impl_;
  if (t.fitted) throw InvalidArgument("Trainer::fit: this Trainer has trained already; make a new one for a new run");
  t.fitted = true;
  const auto start = Clock::now();
  const detail::StopSignalHandler on_stop(t.cfg.stop_signal);
  Job j;
  j.logs.console().set_leader(t.group->rank() == 0 && !t.joining);
  for (const auto* restarts : {&launch_env::kRestartCount, &launch_env::kSlurmRestartCount}) {
    const int n = launch_env::count(*restarts).value_or(0);
    if (n == 0) continue;
    if (!t.cfg.resume)
      j.logs.console().rank_message((restarts == &launch_env::kRestartCount ? "restart " : "requeue ") +
                                    std::to_string(n) + " by " +
                                    (restarts == &launch_env::kRestartCount ? "the launcher" : "Slurm") +
                                    ": resuming from the latest checkpoint");
    t.cfg.resume = true;
    break;
  }
  detail::fill_task_defaults(t.cfg, task);
  check_config_agreement(t.cfg, *t.group);  // again: settings() may have changed them, the Task fills some
  check_settings(t.cfg);
  if (t.membership || t.joining) detail::check_recoverable(t.cfg);
  if (const std::string why = t.cfg.requeue ? detail::requeue_problem(t.cfg.stop_signal) : ""; !why.empty())
    throw InvalidArgument("ddp-train: " + why);
  j.device = detail::resolve_job_device(t.cfg.device, *t.group);
  j.precision = detail::decide_precision(t.cfg.precision, t.precision_asked, *t.group, j.device);
  t.cfg.precision = to_string(j.precision.precision);  // logs and checkpoints record what ran
  if (t.cfg.nan_check_at.empty())
    t.cfg.nan_check_at = detail::default_nan_check_at(j.device, t.membership || t.joining);
  j.cfg = t.cfg;
  j.group = t.group;
  j.backend_reason = t.backend_reason;
  j.placement = t.placement;
  j.callbacks = t.callbacks;
  if (t.membership || t.joining) {  // the Job holds the group alone: a recovery must be able to destroy it
    j.owned_membership = std::move(t.membership);
    j.membership = j.owned_membership.get();
    j.joining = t.joining;
    j.launch_world = j.membership ? j.membership->first_world() : 0;
    j.on_world_change = t.world_callbacks;
    t.group.reset();
  }
  at::manual_seed(stream_seed(j.cfg.seed, Stream::kDropout, j.group->rank()));
  const detail::DeterministicScope deterministic(j.cfg.deterministic);
  detail::set_up(j, std::move(task));
  try {
    TrainSummary summary = train_job(j, start);
    if (j.membership) t.group = j.group;
    return summary;
  } catch (const std::exception& e) {  // rank 0's view of the failure, in the log and the report; then as before
    if (j.membership) try {
        j.membership->finish();  // a replacement waiting to join gives up
      } catch (const std::exception&) {
      }
    TrainSummary failed;
    failed.seconds = seconds_since(start);
    try {
      log_end(j, "error", e.what(), failed);
    } catch (const std::exception& also) {
      j.logs.console().warning("cannot log the error in " + j.logs.metrics_path() + ": " + also.what());
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
