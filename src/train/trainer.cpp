// The training loop of ddp-train: set_up, resume, epochs of train_epoch (one
// micro-batch is forward_backward), distributed evaluation, logs and checkpoints.
#include "ddp/train/trainer.h"

#include "ddp/train/precision.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <ctime>
#include <sstream>

#include "ddp/data/batch_loader.h"
#include "ddp/data/distributed_sampler.h"
#include "ddp/errors.h"
#include "ddp/dist/collectives.h"
#include "ddp/dist/backend_choice.h"
#include "ddp/dist/init.h"
#include "ddp/dist/timeline.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "ddp/parallel/sync_batch_norm.h"
#include "ddp/train/checkpoint.h"
#include "ddp/train/ema.h"
#include "ddp/train/losses.h"
#include "ddp/train/machine.h"
#include "ddp/train/recipe.h"
#include "config_agreement.h"
#include "finite_check.h"
#include "stop_check.h"
#include "rank_metrics.h"
#include "train_logs.h"
#include "train_state.h"

namespace ddp::train {
namespace {

using Clock = std::chrono::steady_clock;

// SIGTERM while training (preemption): noted here, acted on at the next step boundary.
std::atomic<int> g_stop_signal{0};
extern "C" void note_stop_signal(int sig) { g_stop_signal.store(sig); }

class StopSignalHandler {
 public:
  StopSignalHandler() {
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

// What DistributedDataParallel needs of a type-erased module: ptr() and ->forward(x).
struct Net {
  torch::nn::AnyModule any;
  std::shared_ptr<torch::nn::Module> ptr() const { return any.ptr(); }
  Net* operator->() { return this; }
  at::Tensor forward(const at::Tensor& x) { return any.forward(x); }
};

struct Job {
  TrainConfig cfg;
  GroupPtr group;
  Recipe recipe;
  std::unique_ptr<torch::optim::Optimizer> opt;
  std::unique_ptr<DistributedDataParallel<Net>> model;
  std::shared_ptr<CommHook> hook;  // --comm-hook's, if not the built-in path
  torch::nn::AnyModule shadow;  // the EMA's model, when the recipe averages weights
  std::unique_ptr<ModelEma> ema;
  std::unique_ptr<DistributedSampler> sampler;  // data mode "sampler"
  std::unique_ptr<data::BatchLoader> loader;
  std::unique_ptr<CheckpointManager> checkpoints;
  detail::TrainLogs logs;
  int64_t micro_per_epoch = 0, steps_per_epoch = 0, total_steps = 0;
  std::string last_checkpoint;
  PrecisionChoice precision;  // fp32 or bf16 and why (auto resolves by the CPU)
};

// Every random stream of a run, derived from --seed in one place.
enum class Stream { Weights, Dropout, ShardOrder, Augment };
uint64_t stream_seed(uint64_t seed, Stream stream, int rank, int64_t epoch = 0) {
  const uint64_t base = seed * 1000003, r = uint64_t(rank);
  switch (stream) {
    case Stream::Weights: return seed;                            // the same initial weights on every rank
    case Stream::Dropout: return base + 1 + r;                    // differs across ranks
    case Stream::ShardOrder: return base + uint64_t(epoch) * 7919 + r;  // a shard's shuffle, per epoch
    case Stream::Augment: return base + 17 * r + 5;               // the loader's crops and flips
  }
  return seed;
}

// This rank's sample order for an epoch: the DistributedSampler's, or a seeded shuffle of its shard.
std::vector<int64_t> epoch_order(Job& j, int64_t epoch) {
  if (j.sampler) {
    j.sampler->set_epoch(epoch);
    auto idx = j.sampler->indices();
    return std::vector<int64_t>(idx.begin(), idx.end());
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(stream_seed(j.cfg.seed, Stream::ShardOrder, j.group->rank(), epoch));
  at::Tensor perm = at::randperm(j.recipe.train_y.size(0), gen, at::kLong);
  return std::vector<int64_t>(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + perm.numel());
}

double set_lr(Job& j, int64_t step) {
  const double m = j.recipe.schedule(step, j.total_steps);
  const int64_t epoch = step / j.steps_per_epoch;
  for (size_t i = 0; i < j.opt->param_groups().size(); ++i) {
    const ParamGroup& g = j.recipe.groups[i];
    const bool frozen = g.train_epochs > 0 && epoch >= g.train_epochs;
    j.opt->param_groups()[i].options().set_lr(frozen ? 0.0 : *j.cfg.lr * g.lr_scale * m);
  }
  return *j.cfg.lr * m;
}

// Every rank checks (its weights are rank 0's): a non-finite model never becomes a checkpoint, so `latest` keeps
// naming the last finite one.
void check_finite_before_saving(Job& j, const detail::LoopState& s) {
  auto bad = detail::first_non_finite(*j.recipe.model.ptr(), /*gradients=*/false);
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
    c10::IValue c = detail::make_checkpoint(j.cfg, s, *j.recipe.model.ptr(), *j.opt,
                                            j.ema ? &j.ema->module() : nullptr, rng, loss_sums, j.group->size(),
                                            j.total_steps);
    detail::add_comm_hook_state(c, j.cfg.comm_hook, hook_states);
    return c;
  });
}

// The evaluated model: the EMA's average when it is separate from the trained one (lookahead's is the model).
EvalResult evaluate_epoch(Job& j, bool last = false) {
  timeline::Span span("compute", "evaluation");
  torch::nn::AnyModule& net = j.ema && !j.recipe.lookahead_rho ? j.shadow : j.recipe.model;
  const Tta tta = last ? std::max(j.recipe.final_tta, j.recipe.eval_tta) : j.recipe.eval_tta;
  const auto layout = j.recipe.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  net.ptr()->eval();
  auto logits = [&](const at::Tensor& x) { return net.forward(x.contiguous(layout)).to(at::kFloat); };
  auto forward = [&](const at::Tensor& x) {
    Autocast autocast(j.precision.precision);
    return tta_logits(logits, x, tta);
  };
  EvalResult r;
  if (j.recipe.test_fetch) {  // files: decoded by the loader's workers, this rank's share only
    data::BatchLoaderOptions lo;
    lo.batch_size = j.cfg.eval_batch;
    lo.workers = static_cast<int>(j.cfg.workers);
    lo.prefetch = lo.workers + 1;
    data::BatchLoader loader(j.recipe.test_total, j.recipe.test_fetch, lo);
    loader.start_epoch(j.recipe.test_indices, 0);
    r = evaluate_batches(forward, [&] { return loader.next(); }, *j.group);
  } else {
    r = evaluate(forward, j.recipe.test_x, j.recipe.test_y, j.cfg.eval_batch, *j.group);
  }
  net.ptr()->train();
  return r;
}

// One micro-batch: forward (under autocast for bf16), loss, backward. DDP averages
// the gradients across ranks during backward unless `sync` is false (accumulating).
at::Tensor forward_backward(Job& j, const data::Batch& batch, bool sync) {
  std::optional<DistributedDataParallelBase::NoSyncGuard> no_sync;
  if (!sync) no_sync.emplace(*j.model);
  at::Tensor logits;
  timeline::Span forward("compute", "forward");
  {
    Autocast autocast(j.precision.precision);  // bf16: the forward pass only
    logits = (*j.model)(j.recipe.channels_last ? batch.data.contiguous(at::MemoryFormat::ChannelsLast) : batch.data)
                 .to(at::kFloat);
  }
  at::Tensor loss = label_smoothing_cross_entropy(logits, batch.target, *j.cfg.label_smoothing).mean();
  forward.end();
  timeline::Span backward("compute", "backward");  // the buckets' reductions overlap it (tracks "bucket N")
  (loss / double(j.cfg.accumulate)).backward();
  return loss;
}

// --nan-check: after the gradients are reduced and before the step, so a NaN or inf never reaches the weights.
// The reduced gradients are the same on every rank, so every rank stops at the same step.
void check_finite_step(Job& j, const detail::LoopState& s, double window_loss) {
  if (!j.cfg.nan_check || detail::gradients_finite(*j.recipe.model.ptr())) return;
  auto bad = detail::first_non_finite(*j.recipe.model.ptr(), /*gradients=*/true);
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
  if (!j.recipe.lookahead_rho) return j.ema->update(*j.recipe.model.ptr());
  j.ema->update(*j.recipe.model.ptr(), j.recipe.lookahead_rho(step, j.total_steps));
  j.ema->copy_to(*j.recipe.model.ptr());
}

// One epoch from micro-batch s.micro on. Returns the mean training loss of this rank.
double train_epoch(Job& j, detail::LoopState& s) {
  const TrainConfig& c = j.cfg;
  j.loader->start_epoch(epoch_order(j, s.epoch), s.epoch, s.micro);
  j.logs.begin_epoch(s.epoch, *c.epochs, j.steps_per_epoch);
  double window_sum = 0;
  int64_t window = 0;
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
    at::Tensor loss = forward_backward(j, *batch, sync);
    ++s.micro;
    window_sum += loss.item<double>();
    ++window;
    if (!sync) continue;
    check_finite_step(j, s, window_sum / double(window));
    {
      timeline::Span span("compute", "optimizer step");
      j.opt->step();
    }
    ++s.step;
    if (j.ema && s.step % *c.ema_every == 0) update_average(j, s.step);
    if (j.ema && j.recipe.lookahead_rho && s.step == j.total_steps) j.ema->copy_to(*j.recipe.model.ptr());

    const double rate = double((s.micro - first_micro) * *c.batch_size * j.group->size()) / seconds_since(t0);
    j.logs.step(s.micro / c.accumulate, window_sum / double(window), lr, rate);
    s.loss_sum += window_sum;
    s.loss_count += window;
    if (s.step % c.log_every == 0) {  // the mean over ranks of the loss since the last log, and each rank's numbers
      const auto ranks = detail::log_point(*j.group, window_sum / double(window), since_log, s.micro,
                                           *c.batch_size, j.model->stats());
      j.logs.scalars("train", s.step, {{"Loss/train", ranks.mean_loss}, {"lr", lr}}, ranks.fields);
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
  }
  stop.drain();  // a step begun but not finished (none with drop_last): keep the ranks in step
  return s.loss_count ? s.loss_sum / double(s.loss_count) : 0.0;
}

// "auto" takes bf16 only where every rank's CPU has it natively: the ranks of a job compute alike.
PrecisionChoice decide_precision(const std::string& name, bool asked, ProcessGroup& group) {
  if (name != "auto") return {parse_precision(name), asked ? "as asked" : "the recipe's default"};
  Bf16Support cpu = bf16_support();
  at::Tensor native = at::tensor({cpu.native ? 1 : 0}, at::kInt);
  group.all_reduce(native, op(ReduceOp::MIN)).wait();
  if (cpu.native && native.item<int>() == 0) cpu = {false, "another rank's CPU has no native bfloat16"};
  return choose_precision(name, cpu);
}

std::string percent(double v) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(2);
  o << 100 * v << "%";
  return o.str();
}

// --optimizer over the recipe's parameter groups (each with its own lr scale and weight decay).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainConfig& cfg, const Recipe& recipe) {
  using namespace torch::optim;
  std::vector<OptimizerParamGroup> groups;
  for (const auto& g : recipe.groups) {
    const double lr = *cfg.lr * g.lr_scale;
    const auto betas = std::make_tuple(cfg.betas.first, cfg.betas.second);
    std::unique_ptr<OptimizerOptions> o;
    if (cfg.optimizer == "adam")
      o = std::make_unique<AdamOptions>(AdamOptions(lr).betas(betas).eps(cfg.eps).weight_decay(g.weight_decay));
    else if (cfg.optimizer == "adamw")
      o = std::make_unique<AdamWOptions>(AdamWOptions(lr).betas(betas).eps(cfg.eps).weight_decay(g.weight_decay));
    else
      o = std::make_unique<SGDOptions>(SGDOptions(lr).momentum(*cfg.momentum).weight_decay(g.weight_decay).nesterov(
          recipe.nesterov && *cfg.momentum > 0));
    groups.emplace_back(g.params, std::move(o));
  }
  if (cfg.optimizer == "adam") return std::make_unique<Adam>(std::move(groups), AdamOptions(*cfg.lr));
  if (cfg.optimizer == "adamw") return std::make_unique<AdamW>(std::move(groups), AdamWOptions(*cfg.lr));
  return std::make_unique<SGD>(std::move(groups), SGDOptions(*cfg.lr));
}

// The background loader and, in sampler mode, the DistributedSampler; the epoch's step counts.
void set_up_data(Job& j) {
  const TrainConfig& cfg = j.cfg;
  const int rank = j.group->rank();
  data::BatchLoaderOptions lo;
  lo.batch_size = *cfg.batch_size;
  lo.drop_last = true;
  lo.seed = stream_seed(cfg.seed, Stream::Augment, rank);
  lo.augment_epoch = j.recipe.augment;
  int64_t per_rank = j.recipe.train_total;
  if (j.recipe.train_fetch) {  // files: the workers decode this rank's samples only
    lo.workers = static_cast<int>(cfg.workers);
    lo.prefetch = lo.workers + 1;
    j.loader = std::make_unique<data::BatchLoader>(per_rank, j.recipe.train_fetch, lo);
  } else {
    j.loader = std::make_unique<data::BatchLoader>(j.recipe.train_x, j.recipe.train_y, lo);
    per_rank = j.recipe.train_y.size(0);
  }
  if (!j.recipe.train_sharded) {
    DistributedSamplerOptions so;
    so.num_replicas = j.group->size();
    so.rank = rank;
    so.seed = cfg.seed;
    j.sampler = std::make_unique<DistributedSampler>(static_cast<size_t>(per_rank), so);
    per_rank = static_cast<int64_t>(j.sampler->size());
  }
  j.micro_per_epoch = per_rank / *cfg.batch_size / cfg.accumulate * cfg.accumulate;
  j.steps_per_epoch = j.micro_per_epoch / cfg.accumulate;
  if (j.steps_per_epoch < 1)
    throw InvalidArgument("ddp-train: each rank has " + std::to_string(per_rank) + " training samples, fewer than " +
                          "one step of --batch-size " + std::to_string(*cfg.batch_size) + " x --accumulate " +
                          std::to_string(cfg.accumulate) + "; lower them or use more data");
  j.total_steps = j.steps_per_epoch * *cfg.epochs;
}

// --sync-bn: the model's BatchNorms become SyncBatchNorms over the job's group,
// keeping their tensors (those the optimizer holds), before DDP wraps the model.
void use_sync_batch_norm(Job& j) {
  auto& model = *convert_sync_batchnorm(j.recipe.model.ptr(), j.group);
  for (const auto& m : model.modules())
    if (dynamic_cast<const SyncBatchNormImpl*>(m.get())) return;
  throw InvalidArgument("ddp-train: --sync-bn: the " + j.cfg.recipe + " recipe's model has no BatchNorm layers to " +
                        "synchronize (mlp has none; cifar10-resnet9's GhostBatchNorm normalizes slices of each " +
                        "rank's batch on purpose)");
}

// The run's first JSON line: what, where and how it runs (for the report).
void log_start(Job& j) {
  if (j.group->rank() != 0) return;
  const CpuInfo cpu = cpu_info();
  std::string flags;
  for (const auto& f : cpu.flags) flags += (flags.empty() ? "" : " ") + f;
  char host[256] = "?";
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "?");
  j.logs.event("start", {{"recipe", j.cfg.recipe}, {"world", int64_t{j.group->size()}},
                         {"backend", j.group->backend()}, {"precision", j.cfg.precision},
                         {"epochs", *j.cfg.epochs}, {"steps_per_epoch", j.steps_per_epoch},
                         {"machine", describe(cpu)}, {"cores", int64_t{cpu.cores}}, {"cpu_flags", flags},
                         {"host", std::string(host)}, {"time", int64_t(std::time(nullptr))},
                         {"config", to_config_file(j.cfg)}});
}

// Everything before the first step: group, recipe (data, model), precision,
// optimizer, DDP, EMA, loader, logs, checkpoints.
Job set_up(TrainConfig cfg) {
  Job j;
  InitOptions init;
  init.backend = cfg.backend;
  if (cfg.timeout)  // else InitOptions reads DDP_TIMEOUT
    init.timeout = Milliseconds(std::max<int64_t>(1, static_cast<int64_t>(*cfg.timeout * 1000 + 0.5)));
  if (!cfg.timeline.empty()) timeline::start(cfg.timeline);  // before the group: its set-up is on it too
  std::string backend_reason;  // for the first line
  if (!is_initialized())
    backend_reason = cfg.backend == "auto" ? choose_backend(init).reason : "--backend " + cfg.backend;
  j.group = is_initialized() ? default_group() : init_process_group(init);
  check_config_agreement(cfg, *j.group);  // before any collective whose size the settings decide
  const int rank = j.group->rank();
  at::manual_seed(stream_seed(cfg.seed, Stream::Weights, rank));  // DDP also broadcasts rank 0's
  const bool precision_asked = !cfg.precision.empty();
  j.recipe = make_recipe(cfg, *j.group);  // fills cfg's unset fields with the recipe's defaults
  j.precision = decide_precision(cfg.precision, precision_asked, *j.group);
  cfg.precision = to_string(j.precision.precision);  // logs and checkpoints record what ran
  j.cfg = cfg;
  at::manual_seed(stream_seed(cfg.seed, Stream::Dropout, rank));

  j.opt = make_optimizer(cfg, j.recipe);
  if (cfg.sync_bn) use_sync_batch_norm(j);
  DDPOptions ddp_options;
  ddp_options.group = j.group;
  j.model = std::make_unique<DistributedDataParallel<Net>>(Net{j.recipe.model}, ddp_options);
  if (cfg.comm_hook != "allreduce") {  // else the built-in path
    j.hook = make_comm_hook(cfg.comm_hook);
    j.model->register_comm_hook(j.hook);
  }
  if (j.recipe.make_shadow && *cfg.ema_every > 0) {
    j.shadow = j.recipe.make_shadow();
    j.ema = std::make_unique<ModelEma>(j.shadow.ptr(), j.recipe.ema_rho);
    j.ema->copy_from(*j.recipe.model.ptr());  // rank 0's weights, after DDP's broadcast
  }
  set_up_data(j);

  j.logs.open(cfg.out_dir, rank == 0, cfg.progress);
  if (rank == 0) {
    std::cout << "ddp-train " << cfg.recipe << ": " << j.group->size() << " rank(s) on " << j.group->backend()
              << (backend_reason.empty() ? std::string() : " (" + backend_reason + ")") << ", "
              << j.recipe.train_total << " training samples (" << (j.recipe.train_sharded ? "shards" : "sampler")
              << "), " << j.recipe.test_total << " test samples, batch " << *cfg.batch_size << " per rank"
              << (cfg.sync_bn ? " (SyncBatchNorm)" : "") << ", "
              << j.steps_per_epoch << " steps per epoch, lr " << *cfg.lr << " (" << j.recipe.schedule.spec() << "), "
              << cfg.precision << " (" << j.precision.reason << ")"
              << (cfg.comm_hook != "allreduce" ? ", comm hook " + cfg.comm_hook : std::string()) << "\n  cpu: " << describe(cpu_info()) << std::endl;
  }
  log_start(j);
  CheckpointManagerOptions co;
  co.dir = cfg.out_dir + "/checkpoints";
  co.keep_last = cfg.keep_last;
  co.group = j.group;
  j.checkpoints = std::make_unique<CheckpointManager>(co);
  if (rank == 0) {
    const auto stale = j.checkpoints->remove_stale_temporaries();
    for (const auto& name : stale)
      std::cerr << "ddp-train: removed " << co.dir << "/" << name << ", left by a save that was interrupted" << std::endl;
  }
  return j;
}

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
  const int rank = j.group->rank();
  at::Tensor first_failed = at::tensor({error.empty() ? j.group->size() : rank}, at::kInt);
  j.group->all_reduce(first_failed, op(ReduceOp::MIN)).wait();
  if (first_failed.item<int>() == j.group->size()) return ckpt;
  if (first_failed.item<int>() == rank) std::cerr << "ddp-train: rank " << rank << ": " << error << std::endl;
  return c10::IValue();
}

// With --resume: the state of the newest checkpoint every rank can read (a corrupt one is reported by name
// and the one before it used), else a fresh start.
detail::LoopState resume_or_start(Job& j) {
  detail::LoopState s;
  if (!j.cfg.resume) return s;
  const bool leader = j.group->rank() == 0;
  const auto candidates = j.checkpoints->candidates();
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string& path = candidates[i];
    const c10::IValue ckpt = read_on_every_rank(j, path);
    if (ckpt.isNone()) {
      if (leader && i + 1 < candidates.size())
        std::cerr << "ddp-train: warning: checkpoint " << path << " is unusable; trying the one before it, "
                  << candidates[i + 1] << std::endl;
      continue;
    }
    s = detail::restore_checkpoint(ckpt, path, j.cfg, *j.group, *j.recipe.model.ptr(), *j.opt,
                                   j.ema ? &j.ema->module() : nullptr);
    if (j.hook) detail::restore_comm_hook(ckpt, path, j.cfg, *j.group, *j.hook);
    j.last_checkpoint = path;
    if (leader) {
      std::cout << "resumed from " << path << " at epoch " << s.epoch + 1 << ", step " << s.step
                << (i > 0 ? " (an older checkpoint: the newer ones are corrupt, see above)" : "") << std::endl;
    }
    return s;
  }
  if (!candidates.empty())
    throw Error("ddp-train: --resume: none of the " + std::to_string(candidates.size()) + " checkpoint(s) in " +
                j.checkpoints->options().dir + " is readable (see the errors above); move them away to start " +
                "from scratch, or restore a good copy");
  if (leader) std::cout << "no checkpoint in " << j.cfg.out_dir << "/checkpoints: starting from scratch" << std::endl;
  return s;
}

// The epoch's scalars (TensorBoard, metrics.jsonl) and its line on rank 0.
void log_epoch(Job& j, int64_t epoch, int64_t step, double train_loss, double throughput, double train_s,
               const EvalResult& eval, double wall_s) {
  j.logs.scalars("epoch", step,
                 {{"Loss/val", eval.loss}, {"acc1/val", eval.acc1}, {"acc5/val", eval.acc5},
                  {"throughput", throughput}, {"epoch", double(epoch + 1)}, {"Loss/train_epoch", train_loss}},
                 {{"train_seconds", train_s}, {"wall_seconds", wall_s}});
  j.logs.flush();
  std::ostringstream line;
  line << "epoch " << epoch + 1 << "/" << *j.cfg.epochs << " | train_loss " << train_loss << " | val_loss " << eval.loss
       << " | acc1 " << percent(eval.acc1) << " | acc5 " << percent(eval.acc5) << " | " << int64_t(throughput)
       << " samples/s | " << train_s << " s";
  j.logs.end_epoch(line.str());
}

// The run's last JSON line (finished, stopped, preempted or error, with the message) and the final report.
void log_end(Job& j, const std::string& status, const std::string& message, const TrainSummary& summary) {
  j.logs.event("end", {{"status", status}, {"message", message}, {"epochs_done", summary.epochs_done},
                       {"step", summary.steps}, {"seconds", summary.seconds}});
  j.logs.write_report();
}

void print_done(Job& j, const TrainSummary& summary) {
  if (j.group->rank() != 0) return;
  std::cout << "done: acc1 " << percent(summary.eval.acc1) << " on " << summary.eval.count << " test samples after "
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

TrainSummary train_job(Job& j, Clock::time_point start);

}  // namespace

TrainSummary run(TrainConfig config) {
  const auto start = Clock::now();
  const StopSignalHandler on_sigterm;
  if (const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT"); restarts && std::atoi(restarts) > 0) {
    if (!config.resume) std::cerr << "ddp-train: restart " << restarts << " by the launcher: resuming from the latest checkpoint" << std::endl;
    config.resume = true;
  }
  Job j = set_up(std::move(config));
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

namespace {

TrainSummary train_job(Job& j, Clock::time_point start) {
  detail::LoopState s = resume_or_start(j);
  const TrainConfig& cfg = j.cfg;
  const int rank = j.group->rank(), world = j.group->size();

  TrainSummary summary;
  std::string stopped;  // why the run ends early, if it does
  const int64_t first_epoch = s.epoch;
  if (s.epoch >= *cfg.epochs) {  // --resume of a finished run: its final model's metrics, nothing trained
    summary.eval = evaluate_epoch(j, /*last=*/true);
    if (rank == 0)
      std::cout << "the run in " << cfg.out_dir << " is already finished: " << s.epoch << " of " << *cfg.epochs
                << " epoch(s) done (raise --epochs to train on); its final model: acc1 " << percent(summary.eval.acc1)
                << ", acc5 " << percent(summary.eval.acc5) << ", val_loss " << summary.eval.loss << " on "
                << summary.eval.count << " test samples" << std::endl;
  }
  while (s.epoch < *cfg.epochs) {
    const auto t0 = Clock::now();
    const int64_t micro0 = s.micro;
    const double train_loss = train_epoch(j, s);
    if (s.preempted) {
      if (rank == 0)
        std::cout << "preempted (SIGTERM): stopped after step " << s.step << " of epoch " << s.epoch + 1
                  << ", checkpoint " << j.last_checkpoint << "; exiting with code " << kExitPreempted
                  << " (--resume, or a restart by ddprun, goes on from here exactly)" << std::endl;
      summary.preempted = true;
      break;
    }
    const double train_s = seconds_since(t0);
    const double throughput = double((s.micro - micro0) * *cfg.batch_size * world) / train_s;
    summary.eval = evaluate_epoch(j, /*last=*/s.epoch + 1 == *cfg.epochs);
    log_epoch(j, s.epoch, s.step, train_loss, throughput, train_s, summary.eval, seconds_since(start));
    s.epoch += 1;
    s.micro = 0;
    s.loss_sum = 0;
    s.loss_count = 0;
    save_checkpoint(j, s);
    j.logs.write_report();  // after the checkpoint, so the page lists it
    if (cfg.stop_after > 0 && s.epoch - first_epoch >= cfg.stop_after && s.epoch < *cfg.epochs) {
      if (rank == 0) std::cout << "stopping after " << cfg.stop_after << " epoch(s) as asked (--stop-after)" << std::endl;
      stopped = "stopped after " + std::to_string(cfg.stop_after) + " epoch(s) as asked (--stop-after)";
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
    log_end(j, stopped.empty() ? "finished" : "stopped", stopped, summary);
  finish_timeline(j);
  if (!summary.preempted) print_done(j, summary);
  return summary;
}

}  // namespace

}  // namespace ddp::train
