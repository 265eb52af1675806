// The Trainer's set-up: the task's defaults and checks, optimizer, DDP, EMA, loader, logs, checkpoints, and
// the resume from a checkpoint.
#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <functional>
#include <iostream>
#include <sstream>

#include "config/defaults.h"
#include "ddp/dist/collectives.h"
#include "ddp/dist/device.h"
#include "ddp/dist/launch_env.h"
#include "ddp/errors.h"
#include "ddp/parallel/optimizer_state.h"
#include "ddp/parallel/sync_batch_norm.h"
#include "ddp/train/allocator.h"
#include "ddp/train/losses.h"
#include "ddp/train/machine.h"
#include "dist/host_memory.h"
#include "trainer_job.h"

namespace ddp::train::detail {
namespace {

// The built-in optimizer (cfg.optimizer) over the task's parameter groups, each with its lr scale and decay.
std::unique_ptr<torch::optim::Optimizer> builtin_optimizer(const TrainConfig& cfg, const Task& task) {
  using namespace torch::optim;
  std::vector<OptimizerParamGroup> groups;
  for (const auto& g : task.groups) {
    const double lr = *cfg.lr * g.lr_scale;
    const auto betas = std::make_tuple(cfg.betas->first, cfg.betas->second);
    std::unique_ptr<OptimizerOptions> o;
    if (cfg.optimizer == "adam")
      o = std::make_unique<AdamOptions>(AdamOptions(lr).betas(betas).eps(cfg.eps).weight_decay(g.weight_decay));
    else if (cfg.optimizer == "adamw")
      o = std::make_unique<AdamWOptions>(AdamWOptions(lr).betas(betas).eps(cfg.eps).weight_decay(g.weight_decay));
    else
      o = std::make_unique<SGDOptions>(SGDOptions(lr)
                                           .momentum(*cfg.momentum)
                                           .weight_decay(g.weight_decay)
                                           .nesterov(task.nesterov && *cfg.momentum > 0));
    groups.emplace_back(g.params, std::move(o));
  }
  if (cfg.optimizer == "adam") return std::make_unique<Adam>(std::move(groups), AdamOptions(*cfg.lr));
  if (cfg.optimizer == "adamw") return std::make_unique<AdamW>(std::move(groups), AdamWOptions(*cfg.lr));
  return std::make_unique<SGD>(std::move(groups), SGDOptions(*cfg.lr));
}

// The task's optimizer, or the built-in one over its groups (all parameters when it names none).
std::unique_ptr<torch::optim::Optimizer> task_optimizer(Job& j) {
  Task& t = j.task;
  if (t.make_optimizer) {
    auto opt = t.make_optimizer(*t.model.ptr());
    if (!opt) throw InvalidArgument("Trainer: the Task's make_optimizer returned no optimizer");
    return opt;
  }
  if (t.groups.empty()) {
    ParamGroup all;
    all.name = "all";
    for (auto& p : t.model.ptr()->parameters())
      if (p.requires_grad()) all.params.push_back(p);
    all.weight_decay = *j.cfg.weight_decay;
    t.groups.push_back(std::move(all));
  }
  return builtin_optimizer(j.cfg, t);
}

// The strategy (--strategy) over the Task's model and optimizer; the learning rates from its groups.
// Checkpoints must be able to hold the optimizer's state: an unsupported type fails here, not at the
// first checkpoint.
void set_up_strategy(Job& j) {
  Task& t = j.task;
  const bool averaged = Averager::wanted(t.average, *j.cfg.ema_every);
  StrategyParts parts{t.model, j.group, j.hook, [&j] { return task_optimizer(j); }, averaged, {}, j.cfg.recipe};
  parts.hsdp_shard_size = j.cfg.hsdp_shard_size;
  j.strategy = make_strategy(j.cfg.strategy, std::move(parts));
  torch::optim::Optimizer& opt = j.strategy->optimizer();
  std::vector<int64_t> train_epochs;  // the built-in optimizer's groups are the Task's
  if (!t.make_optimizer)
    for (const auto& g : t.groups) train_epochs.push_back(g.train_epochs);
  if (t.make_optimizer && !opt.param_groups().empty()) {  // the logged lr is the first group's
    const double first = opt.param_groups()[0].options().get_lr();
    if (j.cfg.lr && *j.cfg.lr != first) {
      std::ostringstream o;
      o << "Trainer: settings.lr is " << *j.cfg.lr << " but the Task's make_optimizer sets lr " << first
        << " (its first group's); the optimizer's learning rates are used: leave settings.lr unset";
      throw InvalidArgument(o.str());
    }
    j.cfg.lr = first;
  }
  j.lr = LearningRates(LrSchedule::parse(j.cfg.schedule).with_warmup(*j.cfg.warmup), opt, train_epochs,
                       j.cfg.lr.value_or(0));  // InvalidArgument when the optimizer has no groups
  optimizer_state_dict(opt);                   // InvalidArgument naming the supported types
}

// The Task's model and training data, checked on every rank before any of it is used (the Evaluator checks
// the test data).
void check_task(const Task& t) {
  if (t.model.is_empty()) throw InvalidArgument("Trainer: the Task has no model");
  check_data(t.train, "train");
}

// --sync-bn: the model's BatchNorms become SyncBatchNorms over the job's group, keeping their tensors, before
// DDP wraps the model and the optimizer takes its parameters.
void use_sync_batch_norm(Job& j) {
  auto& model = *convert_sync_batchnorm(j.task.model.ptr(), j.group);
  for (const auto& m : model.modules())
    if (dynamic_cast<const SyncBatchNormImpl*>(m.get())) return;
  throw InvalidArgument("ddp-train: --sync-bn: the " + j.cfg.recipe + " recipe's model has no BatchNorm layers to " +
                        "synchronize (of the built-in recipes, mlp has none and cifar10-resnet9's GhostBatchNorm " +
                        "normalizes slices of each rank's batch on purpose)");
}

// Runs a set-up step on every rank; if it threw on any rank, every rank throws (the lowest rank that failed
// rethrows its own error, the others name it), so none is left waiting in the next collective.
void on_every_rank(Job& j, const std::string& what, const std::function<void()>& step) {
  std::exception_ptr error;
  try {
    step();
  } catch (...) {
    error = std::current_exception();
  }
  const int failed = lowest_rank_where(error != nullptr, j.group);
  if (failed < 0) return;
  if (error) std::rethrow_exception(error);
  throw PeerFailed<InvalidArgument>(
      "Trainer: " + what + " failed on rank " + std::to_string(failed) + " (its error is in that rank's output)",
      failed);
}

// The run's first lines on rank 0: where and how it runs, its data and its steps.
void print_start(Job& j) {
  const TrainConfig& cfg = j.cfg;
  std::ostringstream o;
  o << "ddp-train " << cfg.recipe << ": " << j.group->size() << " rank(s) on " << j.group->backend()
    << (j.backend_reason.empty() ? std::string() : " (" + j.backend_reason + ")")
    << (j.device.is_cpu() ? std::string() : ", device " + j.device.str()) << ", strategy " << j.strategy->describe()
    << ", " << j.data.total() << " training samples (" << (j.data.sharded() ? "shards" : "sampler") << "), "
    << j.evaluator.total() << " test samples, batch " << *cfg.batch_size << " per rank"
    << (cfg.sync_bn ? " (SyncBatchNorm)" : "") << ", " << j.data.steps_per_epoch() << " steps per epoch, lr " << *cfg.lr
    << " (" << j.lr.schedule().spec() << "), " << cfg.precision << " (" << j.precision.reason << ")"
    << (cfg.comm_hook != "allreduce" ? ", comm hook " + cfg.comm_hook : std::string())
    << (j.placement.empty() ? std::string() : "\n  placed by srun: " + j.placement)
    << "\n  cpu: " << describe(cpu_info()) << "\n  " << j.malloc_note;
  j.logs.console().line(o.str());
}

// The run's first JSON line: what, where and how it runs (for the report).
void log_start(Job& j) {
  if (j.group->rank() != 0) return;
  const CpuInfo cpu = cpu_info();
  std::string flags;
  for (const auto& f : cpu.flags) flags += (flags.empty() ? "" : " ") + f;
  char host[256] = "?";
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "?");
  j.logs.event("start", {{"recipe", j.cfg.recipe},
                         {"world", int64_t{j.group->size()}},
                         {"backend", j.group->backend()},
                         {"strategy", j.cfg.strategy},
                         {"precision", j.cfg.precision},
                         {"epochs", *j.cfg.epochs},
                         {"steps_per_epoch", j.data.steps_per_epoch()},
                         {"machine", describe(cpu)},
                         {"cores", int64_t{cpu.cores}},
                         {"cpu_flags", flags},
                         {"host", std::string(host)},
                         {"malloc", j.malloc_note},
                         {"time", int64_t(std::time(nullptr))},
                         {"config", to_config_file(j.cfg)}});
}

// The training data over j.group (after in-place recovery: the launch world's epochs and global batches, split
// over the group's ranks), and the schedule's steps.
void set_up_data(Job& j) {
  TrainDataOptions data;
  data.batch_size = *j.cfg.batch_size;
  data.accumulate = j.cfg.accumulate;
  data.epochs = *j.cfg.epochs;
  data.workers = j.cfg.workers;
  data.seed = j.cfg.seed;
  data.pin_memory = wants_pinned_host(j.device);
  if (j.membership) data.launch_world = j.launch_world;
  j.data = TrainData(j.task, data, *j.group);
  j.lr.set_steps(j.data.steps_per_epoch(), j.data.total_steps());
}

}  // namespace

void set_up_data_parts(Job& j) {
  set_up_data(j);
  j.checkpoints = Checkpoints(j.cfg, j.group, j.data.micro_per_epoch());
}

void set_up_group_parts(Job& j) {
  j.evaluator = Evaluator(j.task, j.cfg, *j.group);
  if (j.cfg.comm_hook != "allreduce") j.hook = make_comm_hook(j.cfg.comm_hook);
  set_up_strategy(j);
  set_up_data_parts(j);
}

void fill_task_defaults(TrainConfig& cfg, const Task& task) {
  if (cfg.recipe.empty()) cfg.recipe = task.name.empty() ? "custom" : task.name;
  fill<int64_t>(cfg.epochs, 1);
  fill<int64_t>(cfg.batch_size, 32);
  fill_general_defaults(cfg);
  if (!task.make_optimizer) fill(cfg.lr, cfg.optimizer == "sgd" ? 0.01 : 1e-3);
  fill(cfg.momentum, 0.0);
  fill(cfg.weight_decay, 0.0);
  fill(cfg.label_smoothing, 0.0);
  fill(cfg.schedule, "constant");
  fill<int64_t>(cfg.warmup, 0);
  if (cfg.data_mode.empty()) {
    const auto* tensors = std::get_if<TensorData>(&task.train);
    cfg.data_mode = tensors && tensors->sharded ? "shards" : "sampler";
  }
  fill<int64_t>(cfg.cutout, 0);
  fill<int64_t>(cfg.ema_every, 0);
  fill(cfg.precision, "fp32");
}

std::string default_nan_check_at(const at::Device& device, bool in_place) {
  return host_reads_wait(device) && !in_place ? "next-step" : "step";
}

at::Device resolve_job_device(const std::string& spec, ProcessGroup& group) {
  at::Device device(at::kCPU);
  std::string error;
  try {
    device = resolve_device(spec);
  } catch (const std::exception& e) {
    error = e.what();
  }
  // The lowest failing rank's message, on every rank.
  at::Tensor failed = at::tensor({error.empty() ? group.size() : group.rank()}, at::kInt);
  group.all_reduce(failed, op(ReduceOp::MIN)).wait();
  const int first = failed.item<int>();
  if (first == group.rank())
    throw InvalidArgument("ddp-train: --device " + spec + " on rank " + std::to_string(first) + ": " + error);
  if (first < group.size())
    throw PeerFailed<InvalidArgument>(
        "ddp-train: --device " + spec + " failed on rank " + std::to_string(first) + " (its log says why)", first);
  return device;
}

DeterministicScope::DeterministicScope(bool on) : on_(on) {
  if (!on_) return;
  auto& ctx = at::globalContext();
  algorithms_ = ctx.deterministicAlgorithms();
  warn_only_ = ctx.deterministicAlgorithmsWarnOnly();
  cudnn_deterministic_ = ctx.deterministicCuDNN();
  cudnn_benchmark_ = ctx.benchmarkCuDNN();
  ::setenv(launch_env::kCublasWorkspaceConfig.name, ":4096:8", /*overwrite=*/0);  // read at cuBLAS's first handle
  ctx.setDeterministicAlgorithms(true, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(true);
  ctx.setBenchmarkCuDNN(false);
}

DeterministicScope::~DeterministicScope() {
  if (!on_) return;
  auto& ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(algorithms_, warn_only_);
  ctx.setDeterministicCuDNN(cudnn_deterministic_);
  ctx.setBenchmarkCuDNN(cudnn_benchmark_);
}

PrecisionChoice decide_precision(const std::string& name, bool asked, ProcessGroup& group, const at::Device& device) {
  if (name != "auto") return {parse_precision(name), asked ? "as asked" : "the recipe's default"};
  Bf16Support cpu = device.is_cuda() ? gpu_bf16_support(device) : bf16_support();
  at::Tensor native = at::tensor({cpu.native ? 1 : 0}, at::kInt);
  group.all_reduce(native, op(ReduceOp::MIN)).wait();
  if (cpu.native && native.item<int>() == 0) cpu = {false, "another rank's device has no native bfloat16"};
  return choose_precision(name, cpu);
}

std::string percent(double v) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(2);
  o << 100 * v << "%";
  return o.str();
}

void set_up(Job& j, Task task) {
  j.malloc_note = keep_freed_memory().description;
  j.task = std::move(task);
  const TrainConfig& cfg = j.cfg;
  const int rank = j.group->rank();
  on_every_rank(j, "checking the Task", [&] {
    check_task(j.task);
    j.evaluator = Evaluator(j.task, cfg, *j.group);  // this rank's share of the test data
  });
  const double smoothing = *cfg.label_smoothing;
  j.loss = j.task.loss ? j.task.loss : LossFn([smoothing](const at::Tensor& logits, const at::Tensor& target) {
    return label_smoothing_cross_entropy(logits, target, smoothing).mean();
  });

  if (cfg.sync_bn) use_sync_batch_norm(j);
  j.task.model.ptr()->to(j.device);  // before DDP: its buckets live where the gradients do
  if (cfg.comm_hook != "allreduce") j.hook = make_comm_hook(cfg.comm_hook);             // else the built-in path
  on_every_rank(j, "making the strategy and optimizer", [&] { set_up_strategy(j); });   // rank 0's weights
  j.average = Averager(j.task.average, *cfg.ema_every, *j.task.model.ptr(), j.device);  // from rank 0's weights
  set_up_data(j);
  if (!j.membership && !j.joining) j.task.train = j.task.test = DataSource();  // the loader and evaluator hold them

  j.logs.open(cfg.out_dir, rank == 0 && !j.joining, cfg.progress);  // a joiner is no job's rank 0 yet
  print_start(j);
  if (!j.joining) log_start(j);
  j.checkpoints = Checkpoints(cfg, j.group, j.data.micro_per_epoch());
  if (rank == 0 && !j.joining) {
    const auto stale = j.checkpoints.manager().remove_stale_temporaries();
    for (const auto& name : stale)
      j.logs.console().rank_message("removed " + j.checkpoints.manager().options().dir + "/" + name +
                                    ", left by a save that was interrupted");
  }
}

}  // namespace ddp::train::detail
