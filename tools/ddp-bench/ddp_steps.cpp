// ddp-bench ddp: training-step time of a model under DDP (or without it),
// with the communication time DDP spent and how much of it overlapped
// backward. Synthetic data, fixed per rank, so only compute and
// communication are measured.
//
// --pair: DDP's overhead measured in one process, free of the machine's
// drift between runs: the same model plain and wrapped in DDP (same initial
// weights) alternate in blocks of 10 steps; the medians of the block times
// are compared. --pair --sync-bn: DDP against DDP with SyncBatchNorm, likewise;
// --pair --join: DDP against DDP under a Join (even inputs: the join all_reduce's cost);
// --pair --guards stop|nan|both: DDP against DDP with ddp-train's per-step guards (the
// stop check's one-integer async all_reduce, the --nan-check pass over the gradients, read as --nan-check-at says).
#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "bench.h"
#include "ddp/ddp.h"
#include "ddp/dist/timeline.h"
#include "ddp/parallel/optimizer_state.h"
#include "ddp/parallel/zero.h"
#include "ddp/train/machine.h"
#include "ddp/train/models/fashion_cnn.h"
#include "ddp/train/models/mlp.h"
#include "dist/pending_read.h"
#include "train/finite_check.h"
#include "train/stop_check.h"

namespace ddp::bench {
namespace {

struct Options {
  std::string model = "mlp";  // mlp | wide | cnn
  std::string backend = "auto";
  std::string device = "cpu";  // cpu | cuda | cuda:N | auto (resolve_device)
  int steps = 300, warmup = 30, batch = 64;
  bool use_ddp = true, bucket_view = DDPOptions{}.gradient_as_bucket_view, pair = false;
  double bucket_cap_mb = 25, first_bucket_mb = 1;
  std::string comm_hook = "allreduce";  // allreduce: the built-in path (no hook registered)
  std::string optimizer = "sgd";        // sgd | adam
  bool zero = false;                    // ZeroRedundancyOptimizer over --optimizer
  bool sync_bn = false;                 // the DDP model's BatchNorms as SyncBatchNorms
  bool join = false;                    // --pair: the second DDP model under a Join
  std::string guards;                   // --pair: the second DDP model's steps with ddp-train's guards: stop|nan|both
  std::string nan_check_at;             // --guards nan|both: step | next-step (unset: ddp-train's default there)
  bool call_check = false;              // --pair: DDP with the group's call check off against it on (hash)
  std::string timeline;                 // Chrome trace of the steps (--pair: of the second model's only)
  std::string json;
};

// Whether --guards' nan check is read a step later (ddp-train's --nan-check-at, unset: on a GPU).
bool nan_next_step(const Options& o, const at::Device& device) {
  return o.nan_check_at == "next-step" || (o.nan_check_at.empty() && host_reads_wait(device));
}

// --guards as run: "both, nan check at next-step".
std::string guards_text(const Options& o, const at::Device& device) {
  if (o.guards == "stop") return o.guards;
  return o.guards + ", nan check at " + (nan_next_step(o, device) ? "next-step" : "step");
}

DDPOptions ddp_options(const Options& o, GroupPtr g) {
  DDPOptions d;
  d.group = std::move(g);
  d.gradient_as_bucket_view = o.bucket_view;
  d.bucket_cap_mb = o.bucket_cap_mb;
  d.first_bucket_cap_mb = o.first_bucket_mb;
  return d;
}

struct Run {
  double ms_per_step;
  DDPStats stats;
  int64_t params;
  double bytes_per_step;  // payload this rank handed to the backend per step
  int64_t state_bytes;    // optimizer state this rank holds
};

// --optimizer over `params` (lr 0.01; Adam's other settings PyTorch's defaults).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        std::vector<torch::optim::OptimizerParamGroup> groups) {
  if (name == "adam") return std::make_unique<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions(0.01));
  return std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(0.01));
}

int64_t count_params(torch::nn::Module& m) {
  int64_t n = 0;
  for (auto& p : m.parameters()) n += p.numel();
  return n;
}

// One optimizer step on the fixed batch; `forward` is the plain model or DDP.
template <typename Opt, typename Forward>
void sgd_step(Opt& opt, Forward&& forward, const at::Tensor& x, const at::Tensor& y) {
  opt.zero_grad();
  timeline::Span fwd("compute", "forward");
  at::Tensor loss = torch::nn::functional::cross_entropy(forward(x), y);
  fwd.end();
  {
    timeline::Span bwd("compute", "backward");
    loss.backward();
  }
  timeline::Span step("compute", "optimizer step");
  opt.step();
}

template <typename Net>
Run run(Net net, const at::Tensor& x, const at::Tensor& y, const Options& o, GroupPtr g) {
  auto factory = [&o](std::vector<torch::optim::OptimizerParamGroup> groups) {
    return make_optimizer(o.optimizer, std::move(groups));
  };
  const at::Device device = x.device();
  net->to(device);
  if (o.sync_bn) convert_sync_batchnorm(net.ptr(), g);
  std::unique_ptr<torch::optim::Optimizer> plain;
  std::unique_ptr<ZeroRedundancyOptimizer> zero;
  if (o.zero)
    zero = std::make_unique<ZeroRedundancyOptimizer>(net->parameters(), factory, ZeroOptions{g});
  else
    plain = factory({torch::optim::OptimizerParamGroup(net->parameters())});
  std::unique_ptr<DistributedDataParallel<Net>> model;
  if (o.use_ddp) model = std::make_unique<DistributedDataParallel<Net>>(net, ddp_options(o, g));
  if (model && o.comm_hook != "allreduce") model->register_comm_hook(make_comm_hook(o.comm_hook));
  auto forward = [&](const at::Tensor& in) { return model ? (*model)(in) : net->forward(in); };
  auto step = [&] {
    if (zero)
      sgd_step(*zero, forward, x, y);
    else
      sgd_step(*plain, forward, x, y);
  };
  for (int i = 0; i < o.warmup; ++i) step();
  DDPStats before = model ? model->stats() : DDPStats{};
  synchronize(device);
  g->barrier();
  const int64_t bytes_before = g->traffic().bytes;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) step();
  synchronize(device);  // a GPU's steps are timed once they have run, not once they are queued
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / o.steps;
  const double bytes = double(g->traffic().bytes - bytes_before) / o.steps;
  DDPStats after = model ? model->stats() : DDPStats{};
  DDPStats delta;
  delta.iterations = after.iterations - before.iterations;
  delta.comm_ms = after.comm_ms - before.comm_ms;
  delta.exposed_ms = after.exposed_ms - before.exposed_ms;
  return {ms, delta, count_params(*net), bytes, zero ? zero->local_state_bytes() : optimizer_state_bytes(*plain)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Pair {
  double plain_ms, ddp_ms;
  int64_t params;
};

// Two copies of the model with the same weights: one plain, one under DDP.
template <typename Net>
Pair run_pair(Net plain, Net wrapped, const at::Tensor& x, const at::Tensor& y, const Options& o, GroupPtr g) {
  const at::Device device = x.device();
  plain->to(device);
  wrapped->to(device);
  {
    at::NoGradGuard no_grad;
    auto src = plain->parameters(), dst = wrapped->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  // --sync-bn: both copies under DDP, the first with BatchNorm, the second with SyncBatchNorm.
  // --join: both under DDP, the second under a Join too.
  std::unique_ptr<DistributedDataParallel<Net>> base;
  if (o.sync_bn) convert_sync_batchnorm(wrapped.ptr(), g);
  if (o.sync_bn || o.join || !o.guards.empty() || !o.timeline.empty() || o.call_check)
    base = std::make_unique<DistributedDataParallel<Net>>(plain, ddp_options(o, g));
  torch::optim::SGD opt_plain(plain->parameters(), 0.01), opt_ddp(wrapped->parameters(), 0.01);
  DistributedDataParallel<Net> model(wrapped, ddp_options(o, g));
  std::unique_ptr<Join> join;
  if (o.join) join = std::make_unique<Join>(model);
  const bool tl = !o.timeline.empty();  // --timeline: the first model's steps unrecorded, the second's recorded
  auto step_plain = [&] {
    if (tl) timeline::set_recording(false);
    if (o.call_check) g->set_call_check(CallCheck::kOff);  // alike on every rank, between steps
    sgd_step(
        opt_plain, [&](const at::Tensor& in) { return base ? (*base)(in) : plain->forward(in); }, x, y);
  };
  train::detail::StopSchedule stop(*g);
  int64_t step = 0;
  const bool next_step = nan_next_step(o, device);
  train::detail::GradientSums sums;
  ddp::detail::PendingRead pending;
  auto step_ddp = [&] {
    if (tl) timeline::set_recording(true);
    if (o.call_check) g->set_call_check(CallCheck::kHash);
    if (o.guards.empty()) return sgd_step(opt_ddp, model, x, y);
    // ddp-train's step: the stop check started, forward/backward, the gradients checked, the step, the check read.
    const bool use_stop = o.guards != "nan", use_nan = o.guards != "stop";
    if (use_stop) stop.begin(step++, 0);
    opt_ddp.zero_grad();
    torch::nn::functional::cross_entropy(model(x), y).backward();
    if (use_nan && next_step) {  // the last step's sums read (long copied), this step's started
      if (pending.valid() && train::detail::first_non_finite_sum(pending.get(), sums.names))
        throw std::runtime_error("non-finite gradients");
      sums = train::detail::sum_gradients(wrapped.ptr()->named_parameters());
      pending = ddp::detail::PendingRead(sums.sums);
    } else if (use_nan && !train::detail::gradients_finite(*wrapped.ptr())) {
      throw std::runtime_error("non-finite gradients");
    }
    opt_ddp.step();
    if (use_stop && stop.requested()) throw std::runtime_error("a stop was requested");
  };
  for (int i = 0; i < o.warmup; ++i) step_plain(), step_ddp();
  constexpr int kBlock = 10;
  std::vector<double> t_plain, t_ddp;
  auto block = [&](auto& step) {
    synchronize(device);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBlock; ++i) step();
    synchronize(device);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kBlock;
  };
  g->barrier();
  for (int b = 0; b < std::max(1, o.steps / kBlock); ++b) {
    if (b % 2 == 0)
      t_plain.push_back(block(step_plain)), t_ddp.push_back(block(step_ddp));
    else
      t_ddp.push_back(block(step_ddp)), t_plain.push_back(block(step_plain));
  }
  if (join) join->finish();
  return {median(t_plain), median(t_ddp), count_params(*plain)};
}

// Calls fn with a factory of fresh models of --model.
template <typename Fn>
auto with_model(const Options& o, Fn fn) {
  if (o.model == "cnn") return fn([] { return models::FashionCNN(); });
  models::MLPOptions m;
  if (o.model == "wide") m.dim_hidden = 2048;
  return fn([m] { return models::MLP(m); });
}

// A fixed synthetic batch for --model, different per rank (seeded by the caller).
std::pair<at::Tensor, at::Tensor> make_batch(const Options& o) {
  if (o.model == "cnn") return {at::randn({o.batch, 1, 28, 28}), at::randint(10, {o.batch}, at::kLong)};
  models::MLPOptions m;
  return {at::randn({o.batch, m.dim_in}), at::randint(m.n_classes, {o.batch}, at::kLong)};
}

// --timeline: every rank's file written, then rank 0 joins them.
void finish_timeline(ProcessGroup& g) {
  if (timeline::path().empty()) return;
  timeline::set_recording(true);
  timeline::flush();
  g.barrier().wait();
  if (g.rank() == 0)
    std::printf("timeline: %s (%d rank(s))\n", timeline::path().c_str(), timeline::merge(timeline::path(), g.size()));
}

int pair_main(const Options& o, GroupPtr g, const at::Tensor& x, const at::Tensor& y) {
  Pair r = with_model(o, [&](auto make) { return run_pair(make(), make(), x, y, o, g); });
  if (g->rank() == 0) {
    print_machine_lines();
    std::printf(
        "ddp-bench ddp --pair: model %s (%.2fM parameters) on %s, batch %d per rank, %d ranks, DDP over %s%s, "
        "%d threads/rank\n",
        o.model.c_str(), r.params / 1e6, x.device().str().c_str(), o.batch, g->size(), g->backend().c_str(),
        o.sync_bn ? " with SyncBatchNorm" : "", at::get_num_threads());
    if (!o.timeline.empty())
      std::printf(
          "  DDP %.3f ms/step | DDP recording a timeline %.3f ms/step | ratio %.4f, +%.3f ms/step (medians of "
          "10-step blocks, alternating)\n",
          r.plain_ms, r.ddp_ms, r.ddp_ms / r.plain_ms, r.ddp_ms - r.plain_ms);
    else if (o.call_check)
      std::printf(
          "  DDP, no call check %.3f ms/step | DDP with the call check (hash) %.3f ms/step | ratio %.4f, %+.3f "
          "ms/step (medians of 10-step blocks, alternating)\n",
          r.plain_ms, r.ddp_ms, r.ddp_ms / r.plain_ms, r.ddp_ms - r.plain_ms);
    else if (!o.guards.empty())
      std::printf(
          "  DDP %.3f ms/step | DDP with ddp-train's guards (%s) %.3f ms/step | ratio %.4f, +%.3f ms/step (medians "
          "of 10-step blocks, alternating)\n",
          r.plain_ms, guards_text(o, x.device()).c_str(), r.ddp_ms, r.ddp_ms / r.plain_ms, r.ddp_ms - r.plain_ms);
    else if (o.join)
      std::printf(
          "  DDP %.3f ms/step | DDP under Join %.3f ms/step | ratio %.4f, +%.3f ms/step (medians of 10-step "
          "blocks, alternating)\n",
          r.plain_ms, r.ddp_ms, r.ddp_ms / r.plain_ms, r.ddp_ms - r.plain_ms);
    else if (o.sync_bn)
      std::printf(
          "  DDP %.3f ms/step | DDP with SyncBatchNorm %.3f ms/step | ratio %.4f (medians of 10-step blocks, "
          "alternating)\n",
          r.plain_ms, r.ddp_ms, r.ddp_ms / r.plain_ms);
    else
      std::printf("  plain %.3f ms/step | DDP %.3f ms/step | DDP/plain %.4f (medians of 10-step blocks, alternating)\n",
                  r.plain_ms, r.ddp_ms, r.ddp_ms / r.plain_ms);
    if (!o.json.empty())
      write_json(o.json, {{"tool", "ddp-bench ddp --pair"},
                          {"cpu", train::describe(train::cpu_info())},
                          {"model", o.model},
                          {"device", x.device().str()},
                          {"world", g->size()},
                          {"backend", g->backend()},
                          {"batch", o.batch},
                          {"params", r.params},
                          {"sync_bn", o.sync_bn},
                          {"join", o.join},
                          {"guards", o.guards.empty() ? o.guards : guards_text(o, x.device())},
                          {"call_check", o.call_check},
                          {"timeline", !o.timeline.empty()},
                          {"plain_ms_per_step", r.plain_ms},
                          {"ddp_ms_per_step", r.ddp_ms}});
  }
  finish_timeline(*g);
  destroy_process_group();
  return 0;
}

}  // namespace

int run_ddp(const Options& o) {
  if (o.pair && !o.use_ddp) throw std::invalid_argument("--pair already runs the plain loop; drop --no-ddp");
  if (o.pair && (o.zero || o.optimizer != "sgd")) throw std::invalid_argument("--pair times SGD without ZeRO");
  if (o.sync_bn && o.model != "cnn") throw std::invalid_argument("--sync-bn: only --model cnn has BatchNorm layers");
  if (o.sync_bn && !o.use_ddp) throw std::invalid_argument("--sync-bn synchronizes DDP's model; drop --no-ddp");
  if (o.join && (!o.pair || o.sync_bn)) throw std::invalid_argument("--join: with --pair, without --sync-bn");
  if (!o.guards.empty() && (!o.pair || o.sync_bn || o.join))
    throw std::invalid_argument("--guards: with --pair, without --sync-bn or --join");
  if (!o.nan_check_at.empty() && o.guards != "nan" && o.guards != "both")
    throw std::invalid_argument("--nan-check-at: with --guards nan or both");
  if (o.call_check && (!o.pair || o.sync_bn || o.join || !o.guards.empty() || !o.timeline.empty()))
    throw std::invalid_argument("--call-check: with --pair, without --sync-bn, --join, --guards or --timeline");
  if (!o.timeline.empty() && o.pair && (o.sync_bn || o.join || !o.guards.empty()))
    throw std::invalid_argument("--timeline with --pair: without --sync-bn, --join or --guards");
  if (!o.timeline.empty()) timeline::start(o.timeline);
  InitOptions init;
  init.backend = o.backend;
  init.device = o.device;  // backend auto: nccl for a GPU
  auto g = init_process_group(init);
  const at::Device device = resolve_device(o.device);
  torch::manual_seed(1 + g->rank());  // different data per rank, as in training (drawn on the CPU)
  auto [x_cpu, y_cpu] = make_batch(o);
  const at::Tensor x = x_cpu.to(device), y = y_cpu.to(device);
  if (o.pair) return pair_main(o, g, x, y);
  Run r = with_model(o, [&](auto make) { return run(make(), x, y, o, g); });
  double ms = r.ms_per_step;
  const DDPStats& s = r.stats;
  const int64_t params = r.params;
  // Memory per rank: the largest over ranks of the optimizer state held and of the peak RSS.
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  at::Tensor memory = at::tensor({double(r.state_bytes), double(usage.ru_maxrss) * 1024.0}, at::kDouble);
  g->all_reduce(memory, ddp::op(ReduceOp::MAX));
  const double state_mb = memory[0].item<double>() / 1e6, rss_mb = memory[1].item<double>() / 1e6;
  at::Tensor worst = at::full({1}, ms, at::kDouble);  // the slowest rank sets the pace
  g->all_reduce(worst, ddp::op(ReduceOp::MAX));
  ms = worst.item<double>();
  const double n = std::max<int64_t>(1, s.iterations);
  if (g->rank() == 0) {
    print_machine_lines();
    std::printf(
        "ddp-bench ddp: model %s (%.2fM parameters) on %s, batch %d per rank, %d ranks, %s%s, %d threads/rank\n",
        o.model.c_str(), params / 1e6, device.str().c_str(), o.batch, g->size(),
        o.use_ddp ? ("DDP over " + g->backend()).c_str() : "no DDP", o.sync_bn ? ", SyncBatchNorm" : "",
        at::get_num_threads());
    std::printf(
        "  step %.3f ms | %.0f samples/s | comm %.3f ms/step, %.3f ms exposed, %.0f%% overlapped | "
        "%.0f bytes/step (hook %s)\n",
        ms, 1000.0 * o.batch * g->size() / ms, s.comm_ms / n, s.exposed_ms / n,
        s.comm_ms > 0 ? 100.0 * (s.comm_ms - s.exposed_ms) / s.comm_ms : 0.0, r.bytes_per_step, o.comm_hook.c_str());
    std::printf("  memory per rank (max): parameters %.1f MB, optimizer state %.1f MB (%s%s), peak RSS %.1f MB\n",
                params * 4 / 1e6, state_mb, o.zero ? "ZeRO-1 over " : "", o.optimizer.c_str(), rss_mb);
    if (!o.json.empty())
      write_json(o.json, {{"tool", "ddp-bench ddp"},
                          {"cpu", train::describe(train::cpu_info())},
                          {"model", o.model},
                          {"device", device.str()},
                          {"world", g->size()},
                          {"ddp", o.use_ddp},
                          {"backend", g->backend()},
                          {"batch", o.batch},
                          {"params", params},
                          {"ms_per_step", ms},
                          {"comm_ms_per_step", s.comm_ms / n},
                          {"exposed_ms_per_step", s.exposed_ms / n},
                          {"comm_hook", o.comm_hook},
                          {"bytes_per_step", r.bytes_per_step},
                          {"optimizer", o.optimizer},
                          {"zero", o.zero},
                          {"sync_bn", o.sync_bn},
                          {"state_bytes_max", state_mb * 1e6},
                          {"peak_rss_bytes_max", rss_mb * 1e6}});
  }
  finish_timeline(*g);
  destroy_process_group();
  return 0;
}

void add_ddp_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("ddp", "training-step time under DDP, communication and overlap");
  sub->add_option("--model", o->model, "mlp | wide (hidden 2048) | cnn (FashionCNN)")
      ->check(CLI::IsMember({"mlp", "wide", "cnn"}))
      ->capture_default_str();
  sub->add_option("--backend", o->backend, "gloo | mpi | nccl | auto")->capture_default_str();
  sub->add_option("--device", o->device,
                  "where the model and batch live: cpu | cuda (LOCAL_RANK's GPU) | cuda:N | auto")
      ->check(refused_by([](const std::string& spec) { check_device_spec(spec); }))
      ->capture_default_str();
  sub->add_option("--steps", o->steps, "timed steps")->check(CLI::PositiveNumber)->capture_default_str();
  sub->add_option("--warmup", o->warmup, "untimed steps first")->check(CLI::NonNegativeNumber)->capture_default_str();
  sub->add_option("--batch", o->batch, "samples per rank")->check(CLI::PositiveNumber)->capture_default_str();
  sub->add_flag("--ddp,!--no-ddp", o->use_ddp, "wrap the model in DDP (--no-ddp: the plain loop)");
  sub->add_flag("--pair", o->pair, "plain and DDP alternating in one process; their ratio");
  sub->add_flag("--bucket-view,!--no-bucket-view", o->bucket_view, "gradients as views into the buckets");
  sub->add_option("--bucket-cap-mb", o->bucket_cap_mb, "bucket size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--first-bucket-mb", o->first_bucket_mb, "first bucket's size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option(
         "--comm-hook", o->comm_hook,
         "how buckets are reduced: allreduce | fp16 | bf16 | powersgd[:rank=R,start=S,...] | batched_powersgd[:...]")
      ->check(refused_by([](const std::string& spec) { make_comm_hook(spec); }))
      ->capture_default_str();
  sub->add_option("--optimizer", o->optimizer, "sgd | adam (lr 0.01)")
      ->check(CLI::IsMember({"sgd", "adam"}))
      ->capture_default_str();
  sub->add_flag("--zero", o->zero, "ZeRO-1: ZeroRedundancyOptimizer over --optimizer");
  sub->add_flag("--sync-bn", o->sync_bn,
                "the DDP model's BatchNorms as SyncBatchNorms (--model cnn); with --pair: DDP against DDP with them");
  sub->add_flag("--call-check", o->call_check,
                "with --pair: DDP with the group's call check off against DDP with it on (a hash of each collective "
                "compared first, the default on gloo and mpi)");
  sub->add_flag("--join", o->join, "with --pair: DDP against DDP under a Join (even inputs)");
  sub->add_option("--guards", o->guards,
                  "with --pair: DDP against DDP with ddp-train's per-step guards: stop (the preemption check's "
                  "async all_reduce), nan (--nan-check's pass over the gradients) or both")
      ->check(CLI::IsMember({"stop", "nan", "both"}));
  sub->add_option("--nan-check-at", o->nan_check_at,
                  "with --guards nan|both: when the check is read, as ddp-train's --nan-check-at: step | next-step "
                  "(unset: next-step on a GPU, step on the CPU)")
      ->check(CLI::IsMember({"step", "next-step"}));
  sub->add_option("--timeline", o->timeline,
                  "write a Chrome trace of the steps (FILE.rank{N}, merged into FILE); with --pair: DDP against "
                  "the same DDP recording it, its cost");
  sub->add_option("--json", o->json, "also write the result to this JSON file");
  sub->callback([o, &run] { run = [o] { return run_ddp(*o); }; });
}

}  // namespace ddp::bench
