// The Trainer's set-up: the task's defaults and checks, optimizer, DDP, EMA, loader, logs, checkpoints, and
// the resume from a checkpoint.
#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <unistd.h>

#include <ctime>
#include <functional>
#include <iostream>
#include <sstream>

#include "ddp/dist/collectives.h"
#include "ddp/dist/device.h"
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

template <typename T>
void fill(std::optional<T>& field, T value) {
  if (!field) field = value;
}

// The built-in optimizer (cfg.optimizer) over the task's parameter groups, each with its lr scale and decay.
std::unique_ptr<torch::optim::Optimizer> builtin_optimizer(const TrainConfig& cfg, const Task& task) {
  using namespace torch::optim;
  std::vector<OptimizerParamGroup> groups;
  for (const auto& g : task.groups) {
    const double lr = *cfg.lr * g.lr_scale;
    const auto betas = std::make_tuple(cfg.betas.first, cfg.betas.second);
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

// The strategy (--strategy) over the Task's model and optimizer; the schedule's base learning rates.
// Checkpoints must be able to hold the optimizer's state: an unsupported type fails here, not at the
// first checkpoint.
void set_up_strategy(Job& j) {
  Task& t = j.task;
  const bool averaged = t.make_shadow && *j.cfg.ema_every > 0;
  j.strategy = make_strategy(j.cfg.strategy,
                             {t.model, j.group, j.hook, [&j] { return task_optimizer(j); }, averaged, j.cfg.recipe});
  torch::optim::Optimizer& opt = j.strategy->optimizer();
  if (t.make_optimizer)
    j.train_epochs.assign(opt.param_groups().size(), 0);
  else
    for (const auto& g : t.groups) j.train_epochs.push_back(g.train_epochs);
  for (auto& g : opt.param_groups()) j.base_lrs.push_back(g.options().get_lr());
  if (j.base_lrs.empty()) throw InvalidArgument("Trainer: the optimizer has no parameter groups");
  if (t.make_optimizer) {  // the logged lr is the first group's
    if (j.cfg.lr && *j.cfg.lr != j.base_lrs[0]) {
      std::ostringstream o;
      o << "Trainer: settings.lr is " << *j.cfg.lr << " but the Task's make_optimizer sets lr " << j.base_lrs[0]
        << " (its first group's); the optimizer's learning rates are used: leave settings.lr unset";
      throw InvalidArgument(o.str());
    }
    j.cfg.lr = j.base_lrs[0];
  }
  optimizer_state_dict(opt);  // InvalidArgument naming the supported types
}

// The background loader and, unless the data is this rank's shard, the DistributedSampler; the epoch's steps.
void set_up_data(Job& j) {
  const TrainConfig& cfg = j.cfg;
  Task& t = j.task;
  const int rank = j.group->rank();
  data::BatchLoaderOptions lo;
  lo.batch_size = *cfg.batch_size;
  lo.drop_last = true;
  lo.pin_memory = wants_pinned_host(j.device);  // the step's copies to a GPU then wait for nothing
  lo.seed = stream_seed(cfg.seed, Stream::kAugment, rank);
  lo.augment_epoch = t.augment;
  data::FetchBatch fetch = t.train_fetch;
  if (t.channels_last) {  // batches leave the loader's thread in NHWC: no conversion in the step
    constexpr auto nhwc = at::MemoryFormat::ChannelsLast;
    if (fetch) {
      fetch = [inner = t.train_fetch](const std::vector<int64_t>& idx, at::Generator& gen) {
        data::Batch b = inner(idx, gen);
        b.data = b.data.contiguous(nhwc);
        return b;
      };
    } else {
      lo.augment_epoch = [augment = t.augment](const at::Tensor& b, at::Generator& gen, int64_t epoch) {
        return (augment ? augment(b, gen, epoch) : b).contiguous(nhwc);
      };
    }
  }
  int64_t per_rank = t.train_total;
  if (fetch) {  // made per batch: the workers fetch this rank's samples only
    lo.workers = static_cast<int>(cfg.workers);
    lo.prefetch = lo.workers + 1;
    j.loader = std::make_unique<data::BatchLoader>(per_rank, fetch, lo);
  } else {
    j.loader = std::make_unique<data::BatchLoader>(t.train_x, t.train_y, lo);
    per_rank = t.train_y.size(0);
  }
  if (!t.train_sharded) {
    DistributedSamplerOptions so;
    so.num_replicas = j.group->size();
    so.rank = rank;
    so.seed = cfg.seed;
    j.sampler = std::make_unique<DistributedSampler>(static_cast<size_t>(per_rank), so);
    per_rank = static_cast<int64_t>(j.sampler->size());
  }
  j.micro_per_epoch = per_rank / *cfg.batch_size / cfg.accumulate * cfg.accumulate;
  // Every rank must train as many micro-batches per epoch (a rank with more would wait forever in DDP's
  // all_reduce): equal unless a Task's own shards differ in size.
  at::Tensor range = at::tensor({j.micro_per_epoch, -j.micro_per_epoch}, at::kLong);
  j.group->all_reduce(range, op(ReduceOp::MAX)).wait();
  const int64_t most = range[0].item<int64_t>(), fewest = -range[1].item<int64_t>();
  if (most != fewest)
    throw InvalidArgument("Trainer: the ranks' training shards give " + std::to_string(fewest) + " to " +
                          std::to_string(most) + " batches per epoch (this rank: " + std::to_string(j.micro_per_epoch) +
                          "); with train_sharded every rank's shard must give the same number of batches");
  j.steps_per_epoch = j.micro_per_epoch / cfg.accumulate;
  if (j.steps_per_epoch < 1)
    throw InvalidArgument("ddp-train: each rank has " + std::to_string(per_rank) + " training samples, fewer than " +
                          "one step of --batch-size " + std::to_string(*cfg.batch_size) + " x --accumulate " +
                          std::to_string(cfg.accumulate) + "; lower them or use more data");
  j.total_steps = j.steps_per_epoch * *cfg.epochs;
}

// Which kind of data a Task gives for `split` ("train" or "test"): tensors (true) or a fetch function (false).
// InvalidArgument unless exactly one kind is set, and tensors are x and y with the same first dimension.
bool tensor_data(const at::Tensor& x, const at::Tensor& y, bool fetch, const std::string& split) {
  const bool tensors = x.defined() || y.defined();
  const std::string what = split == "train" ? "training" : "evaluation";
  if (tensors == fetch)
    throw InvalidArgument("Trainer: the Task needs one kind of " + what + " data: " +
                          (tensors ? split + "_x/" + split + "_y and " + split + "_fetch are both set"
                                   : "set " + split + "_x and " + split + "_y, or " + split + "_fetch and " + split +
                                         "_total (set_" + split + "_dataset)"));
  if (tensors && (!x.defined() || !y.defined() || x.dim() == 0 || y.dim() == 0 || x.size(0) != y.size(0)))
    throw InvalidArgument("Trainer: the Task's " + split + "_x and " + split +
                          "_y must both be tensors with the "
                          "same first dimension (samples)");
  return tensors;
}

// The task's data, checked; its evaluation set narrowed to this rank's exact share.
void check_task(Job& j) {
  Task& t = j.task;
  if (t.model.is_empty()) throw InvalidArgument("Trainer: the Task has no model");
  if (tensor_data(t.train_x, t.train_y, bool(t.train_fetch), "train")) {
    if (!t.train_sharded) t.train_total = t.train_y.size(0);
  } else if (t.train_total < 1) {
    throw InvalidArgument("Trainer: the Task's train_fetch needs train_total > 0 samples");
  } else if (t.train_sharded) {
    throw InvalidArgument(
        "Trainer: train_sharded is for train_x/train_y holding this rank's shard; with "
        "train_fetch the DistributedSampler picks each rank's samples: leave it false");
  }
  if (tensor_data(t.test_x, t.test_y, bool(t.test_fetch), "test")) {
    if (!t.test_sharded) {  // every rank holds the whole set: keep this rank's exact share
      t.test_total = t.test_y.size(0);
      at::Tensor mine = exact_shard(t.test_total, *j.group);
      t.test_x = t.test_x.index_select(0, mine);
      t.test_y = t.test_y.index_select(0, mine);
      t.test_sharded = true;
    }
  } else {
    if (t.test_total < 1) throw InvalidArgument("Trainer: the Task's test_fetch needs test_total > 0 samples");
    if (t.test_indices.empty()) {
      at::Tensor mine = exact_shard(t.test_total, *j.group);
      const int64_t* p = ddp::detail::host_data<int64_t>(mine, "the test indices");
      t.test_indices.assign(p, p + mine.numel());
    }
  }
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
                         {"steps_per_epoch", j.steps_per_epoch},
                         {"machine", describe(cpu)},
                         {"cores", int64_t{cpu.cores}},
                         {"cpu_flags", flags},
                         {"host", std::string(host)},
                         {"malloc", j.malloc_note},
                         {"time", int64_t(std::time(nullptr))},
                         {"config", to_config_file(j.cfg)}});
}

}  // namespace

uint64_t stream_seed(uint64_t seed, Stream stream, int rank, int64_t epoch) {
  const uint64_t base = seed * 1000003, r = uint64_t(rank);
  switch (stream) {
    case Stream::kWeights:
      return seed;  // the same initial weights on every rank
    case Stream::kDropout:
      return base + 1 + r;  // differs across ranks
    case Stream::kShardOrder:
      return base + uint64_t(epoch) * 7919 + r;  // a shard's shuffle, per epoch
    case Stream::kAugment:
      return base + 17 * r + 5;  // the loader's crops and flips
  }
  return seed;
}

void fill_task_defaults(TrainConfig& cfg, const Task& task) {
  if (cfg.recipe.empty()) cfg.recipe = task.name.empty() ? "custom" : task.name;
  if (cfg.out_dir.empty()) cfg.out_dir = "runs/" + cfg.recipe;
  fill<int64_t>(cfg.epochs, 1);
  fill<int64_t>(cfg.batch_size, 32);
  if (!task.make_optimizer) fill(cfg.lr, cfg.optimizer == "sgd" ? 0.01 : 1e-3);
  fill(cfg.momentum, 0.0);
  fill(cfg.weight_decay, 0.0);
  fill(cfg.label_smoothing, 0.0);
  if (cfg.schedule.empty()) cfg.schedule = "constant";
  fill<int64_t>(cfg.warmup, 0);
  if (cfg.data_mode.empty()) cfg.data_mode = task.train_sharded ? "shards" : "sampler";
  fill<int64_t>(cfg.cutout, 0);
  fill<int64_t>(cfg.ema_every, 0);
  fill<int64_t>(cfg.eval_every, 0);
  if (cfg.precision.empty()) cfg.precision = "fp32";
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
  on_every_rank(j, "checking the Task", [&] { check_task(j); });
  j.schedule = LrSchedule::parse(cfg.schedule).with_warmup(*cfg.warmup);
  const double smoothing = *cfg.label_smoothing;
  j.loss = j.task.loss ? j.task.loss : LossFn([smoothing](const at::Tensor& logits, const at::Tensor& target) {
    return label_smoothing_cross_entropy(logits, target, smoothing).mean();
  });
  j.eval_options.loss = j.task.loss;
  j.eval_options.metrics = j.task.metrics;

  if (cfg.sync_bn) use_sync_batch_norm(j);
  j.task.model.ptr()->to(j.device);  // before DDP: its buckets live where the gradients do
  if (cfg.comm_hook != "allreduce") j.hook = make_comm_hook(cfg.comm_hook);            // else the built-in path
  on_every_rank(j, "making the strategy and optimizer", [&] { set_up_strategy(j); });  // rank 0's weights
  if (j.task.make_shadow && *cfg.ema_every > 0) {
    j.shadow = j.task.make_shadow();
    j.shadow.ptr()->to(j.device);
    j.ema = std::make_unique<ModelEma>(j.shadow.ptr(), j.task.ema_rho);
    j.ema->copy_from(*j.task.model.ptr());  // rank 0's weights, after DDP's broadcast
  }
  set_up_data(j);

  j.logs.open(cfg.out_dir, rank == 0, cfg.progress);
  {
    std::ostringstream o;
    o << "ddp-train " << cfg.recipe << ": " << j.group->size() << " rank(s) on " << j.group->backend()
      << (j.backend_reason.empty() ? std::string() : " (" + j.backend_reason + ")")
      << (j.device.is_cpu() ? std::string() : ", device " + j.device.str()) << ", strategy " << j.strategy->describe()
      << ", " << j.task.train_total << " training samples (" << (j.task.train_sharded ? "shards" : "sampler") << "), "
      << j.task.test_total << " test samples, batch " << *cfg.batch_size << " per rank"
      << (cfg.sync_bn ? " (SyncBatchNorm)" : "") << ", " << j.steps_per_epoch << " steps per epoch, lr " << *cfg.lr
      << " (" << j.schedule.spec() << "), " << cfg.precision << " (" << j.precision.reason << ")"
      << (cfg.comm_hook != "allreduce" ? ", comm hook " + cfg.comm_hook : std::string())
      << "\n  cpu: " << describe(cpu_info()) << "\n  " << j.malloc_note;
    j.logs.console().line(o.str());
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
      j.logs.console().rank_message("removed " + co.dir + "/" + name + ", left by a save that was interrupted");
  }
}

}  // namespace ddp::train::detail
