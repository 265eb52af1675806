// The training loop of ddp-train: set-up, resume, epochs (the step itself is
// train_epoch), distributed evaluation, logs and checkpoints.
#include "ddp/train/trainer.h"

#include "ddp/train/precision.h"

#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <sstream>

#include "ddp/data/batch_loader.h"
#include "ddp/data/distributed_sampler.h"
#include "ddp/dist/errors.h"
#include "ddp/dist/init.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "ddp/train/checkpoint.h"
#include "ddp/train/ema.h"
#include "ddp/train/losses.h"
#include "ddp/train/recipe.h"
#include "train_logs.h"
#include "train_state.h"

namespace ddp::train {
namespace {

using Clock = std::chrono::steady_clock;
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
  std::unique_ptr<torch::optim::SGD> opt;
  std::unique_ptr<DistributedDataParallel<Net>> model;
  torch::nn::AnyModule shadow;  // the EMA's model, when the recipe averages weights
  std::unique_ptr<ModelEma> ema;
  std::unique_ptr<DistributedSampler> sampler;  // data mode "sampler"
  std::unique_ptr<data::BatchLoader> loader;
  std::unique_ptr<CheckpointManager> checkpoints;
  detail::TrainLogs logs;
  int64_t micro_per_epoch = 0, steps_per_epoch = 0, total_steps = 0;
  std::string last_checkpoint;
};

// This rank's sample order for an epoch: the DistributedSampler's, or a seeded shuffle of its shard.
std::vector<int64_t> epoch_order(Job& j, int64_t epoch) {
  if (j.sampler) {
    j.sampler->set_epoch(epoch);
    auto idx = j.sampler->indices();
    return std::vector<int64_t>(idx.begin(), idx.end());
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(j.cfg.seed * 1000003 + uint64_t(epoch) * 7919 +
                                                      uint64_t(j.group->rank()));
  at::Tensor perm = at::randperm(j.recipe.train_y.size(0), gen, at::kLong);
  return std::vector<int64_t>(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + perm.numel());
}

double set_lr(Job& j, int64_t step) {
  const double m = j.recipe.schedule(step, j.total_steps);
  for (size_t i = 0; i < j.opt->param_groups().size(); ++i)
    static_cast<torch::optim::SGDOptions&>(j.opt->param_groups()[i].options())
        .lr(j.cfg.lr * j.recipe.groups[i].lr_scale * m);
  return j.cfg.lr * m;
}

void save_checkpoint(Job& j, const detail::LoopState& s) {
  auto rng = detail::gather_rng_states(*j.group);  // a collective: every rank
  j.last_checkpoint = j.checkpoints->save(s.epoch, s.step, [&] {
    return detail::make_checkpoint(j.cfg, s, *j.recipe.model.ptr(), *j.opt, j.ema ? &j.ema->module() : nullptr, rng,
                                   j.group->size(), j.total_steps);
  });
}

EvalResult evaluate_epoch(Job& j) {
  torch::nn::AnyModule& net = j.ema ? j.shadow : j.recipe.model;
  const bool flip = j.recipe.eval_flip;
  net.ptr()->eval();
  const Precision precision = parse_precision(j.cfg.precision);
  auto forward = [&](const at::Tensor& x) {
    Autocast autocast(precision);
    at::Tensor logits = net.forward(x).to(at::kFloat);
    return flip ? (logits + net.forward(x.flip(3)).to(at::kFloat)) / 2 : logits;
  };
  EvalResult r = evaluate(forward, j.recipe.test_x, j.recipe.test_y, j.cfg.eval_batch, *j.group);
  net.ptr()->train();
  return r;
}

// One epoch from micro-batch s.micro on. Returns the mean training loss of this rank.
double train_epoch(Job& j, detail::LoopState& s) {
  const TrainConfig& c = j.cfg;
  j.loader->start_epoch(epoch_order(j, s.epoch), s.epoch, s.micro);
  j.logs.begin_epoch(s.epoch, c.epochs, j.steps_per_epoch);
  double loss_sum = 0, window_sum = 0;
  int64_t counted = 0, window = 0;
  const auto t0 = Clock::now();
  const int64_t first_micro = s.micro;
  const Precision precision = parse_precision(c.precision);
  while (s.micro < j.micro_per_epoch) {
    auto batch = j.loader->next();
    if (!batch) break;
    const bool sync = (s.micro + 1) % c.accumulate == 0;  // the last micro-batch of a step reduces gradients
    const double lr = set_lr(j, s.step);
    if (s.micro % c.accumulate == 0) j.opt->zero_grad();
    at::Tensor loss;
    {
      std::optional<DistributedDataParallelBase::NoSyncGuard> no_sync;
      if (!sync) no_sync.emplace(*j.model);
      at::Tensor logits;
      {
        Autocast autocast(precision);  // bf16: the forward pass only
        logits = (*j.model)(batch->data).to(at::kFloat);
      }
      loss = label_smoothing_cross_entropy(logits, batch->target, c.label_smoothing).mean();
      (loss / double(c.accumulate)).backward();  // gradients averaged across ranks here when sync
    }
    ++s.micro;
    window_sum += loss.item<double>();
    ++window;
    if (!sync) continue;
    j.opt->step();
    ++s.step;
    if (j.ema && s.step % c.ema_every == 0) j.ema->update(*j.recipe.model.ptr());

    const double rate = double((s.micro - first_micro) * c.batch_size * j.group->size()) / seconds_since(t0);
    j.logs.step(s.micro / c.accumulate, window_sum / double(window), lr, rate);
    loss_sum += window_sum;
    counted += window;
    if (s.step % c.log_every == 0) {  // the mean over ranks of the loss since the last log
      at::Tensor mean = at::tensor({window_sum / double(window)}, at::kDouble);
      j.group->all_reduce(mean, op(ReduceOp::AVG)).wait();
      j.logs.scalars("train", s.step, {{"Loss/train", mean.item<double>()}, {"lr", lr}});
    }
    window_sum = 0;
    window = 0;
    if (c.checkpoint_every > 0 && s.step % c.checkpoint_every == 0 && s.micro < j.micro_per_epoch)
      save_checkpoint(j, s);
  }
  return counted ? loss_sum / double(counted) : 0.0;
}

std::string percent(double v) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(2);
  o << 100 * v << "%";
  return o.str();
}

}  // namespace

TrainSummary run(TrainConfig cfg) {
  const auto start = Clock::now();
  InitOptions init;
  init.backend = cfg.backend;
  Job j;
  j.group = is_initialized() ? default_group() : init_process_group(init);
  const int rank = j.group->rank(), world = j.group->size();
  at::manual_seed(cfg.seed);  // the same initial weights everywhere (DDP also broadcasts rank 0's)
  j.recipe = make_recipe(cfg, *j.group);  // fills cfg's unset fields with the recipe's defaults
  j.cfg = cfg;
  at::manual_seed(cfg.seed * 1000003 + 1 + uint64_t(rank));  // dropout differs across ranks

  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const auto& g : j.recipe.groups)
    groups.emplace_back(g.params, std::make_unique<torch::optim::SGDOptions>(
                                      torch::optim::SGDOptions(cfg.lr * g.lr_scale)
                                          .momentum(cfg.momentum)
                                          .weight_decay(g.weight_decay)
                                          .nesterov(j.recipe.nesterov && cfg.momentum > 0)));
  j.opt = std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(cfg.lr));
  DDPOptions ddp_options;
  ddp_options.group = j.group;
  j.model = std::make_unique<DistributedDataParallel<Net>>(Net{j.recipe.model}, ddp_options);
  if (j.recipe.make_shadow && cfg.ema_every > 0) {
    j.shadow = j.recipe.make_shadow();
    j.ema = std::make_unique<ModelEma>(j.shadow.ptr(), j.recipe.ema_rho);
    j.ema->copy_from(*j.recipe.model.ptr());  // rank 0's weights, after DDP's broadcast
  }

  data::BatchLoaderOptions lo;
  lo.batch_size = cfg.batch_size;
  lo.drop_last = true;
  lo.seed = cfg.seed * 1000003 + 17 * uint64_t(rank) + 5;
  lo.augment = j.recipe.augment;
  j.loader = std::make_unique<data::BatchLoader>(j.recipe.train_x, j.recipe.train_y, lo);
  int64_t per_rank = j.recipe.train_y.size(0);
  if (!j.recipe.train_sharded) {
    DistributedSamplerOptions so;
    so.num_replicas = world;
    so.rank = rank;
    so.seed = cfg.seed;
    j.sampler = std::make_unique<DistributedSampler>(static_cast<size_t>(per_rank), so);
    per_rank = static_cast<int64_t>(j.sampler->size());
  }
  j.micro_per_epoch = per_rank / cfg.batch_size / cfg.accumulate * cfg.accumulate;
  j.steps_per_epoch = j.micro_per_epoch / cfg.accumulate;
  if (j.steps_per_epoch < 1)
    throw InvalidArgument("ddp-train: each rank has " + std::to_string(per_rank) + " training samples, fewer than " +
                          "one step of --batch-size " + std::to_string(cfg.batch_size) + " x --accumulate " +
                          std::to_string(cfg.accumulate) + "; lower them or use more data");
  j.total_steps = j.steps_per_epoch * cfg.epochs;

  CheckpointManagerOptions co;
  co.dir = cfg.out_dir + "/checkpoints";
  co.keep_last = cfg.keep_last;
  co.group = j.group;
  j.checkpoints = std::make_unique<CheckpointManager>(co);
  detail::LoopState s;
  if (cfg.resume) {
    if (auto path = j.checkpoints->latest()) {
      s = detail::restore_checkpoint(load_checkpoint(*path), *path, cfg, *j.group, *j.recipe.model.ptr(), *j.opt,
                                     j.ema ? &j.ema->module() : nullptr);
      if (rank == 0)
        std::cout << "resumed from " << *path << " at epoch " << s.epoch + 1 << ", step " << s.step << std::endl;
    } else if (rank == 0) {
      std::cout << "no checkpoint in " << co.dir << ": starting from scratch" << std::endl;
    }
  }

  j.logs.open(cfg.out_dir, rank == 0, cfg.progress);
  if (rank == 0) {
    std::cout << "ddp-train " << cfg.recipe << ": " << world << " rank(s) on " << j.group->backend() << ", "
              << j.recipe.train_total << " training samples (" << (j.recipe.train_sharded ? "shards" : "sampler")
              << "), " << j.recipe.test_total << " test samples, batch " << cfg.batch_size << " per rank, "
              << j.steps_per_epoch << " steps per epoch, lr " << cfg.lr << " (" << j.recipe.schedule.spec() << ")"
              << std::endl;
  }

  TrainSummary summary;
  const int64_t first_epoch = s.epoch;
  while (s.epoch < cfg.epochs) {
    const auto t0 = Clock::now();
    const int64_t micro0 = s.micro;
    const double train_loss = train_epoch(j, s);
    const double train_s = seconds_since(t0);
    const double throughput = double((s.micro - micro0) * cfg.batch_size * world) / train_s;
    summary.eval = evaluate_epoch(j);
    const int64_t epoch = s.epoch;
    j.logs.scalars("epoch", s.step,
                   {{"Loss/val", summary.eval.loss}, {"acc1/val", summary.eval.acc1}, {"acc5/val", summary.eval.acc5},
                    {"throughput", throughput}, {"epoch", double(epoch + 1)}, {"Loss/train_epoch", train_loss}},
                   {{"train_seconds", train_s}, {"wall_seconds", seconds_since(start)}});
    j.logs.flush();
    std::ostringstream line;
    line << "epoch " << epoch + 1 << "/" << cfg.epochs << " | train_loss " << train_loss << " | val_loss "
         << summary.eval.loss << " | acc1 " << percent(summary.eval.acc1) << " | acc5 " << percent(summary.eval.acc5)
         << " | " << int64_t(throughput) << " samples/s | " << train_s << " s";
    j.logs.end_epoch(line.str());
    s.epoch += 1;
    s.micro = 0;
    save_checkpoint(j, s);
    if (cfg.stop_after > 0 && s.epoch - first_epoch >= cfg.stop_after && s.epoch < cfg.epochs) {
      if (rank == 0) std::cout << "stopping after " << cfg.stop_after << " epoch(s) as asked (--stop-after)" << std::endl;
      break;
    }
  }
  summary.epochs_done = s.epoch;
  summary.steps = s.step;
  summary.checkpoint = j.last_checkpoint;
  summary.seconds = seconds_since(start);
  if (rank == 0) {
    std::cout << "done: acc1 " << percent(summary.eval.acc1) << " on " << summary.eval.count << " test samples after "
              << summary.epochs_done << " epoch(s), " << summary.seconds << " s\n"
              << "  logs: " << j.logs.tensorboard_dir() << " (tensorboard --logdir " << j.logs.tensorboard_dir()
              << "), " << j.logs.metrics_path() << "\n"
              << "  checkpoint: " << summary.checkpoint << std::endl;
  }
  return summary;
}

}  // namespace ddp::train
