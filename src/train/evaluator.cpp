// The evaluator: the distributed evaluation of the model and what is logged of it (evaluator.h, fit_parts.h).
#include <ATen/ATen.h>

#include <sstream>

#include "ddp/dist/device.h"
#include "ddp/dist/timeline.h"
#include "dist/host_memory.h"
#include "fit_parts.h"

namespace ddp::train::detail {

Evaluator::Evaluator(const Task& task, const TrainConfig& cfg, const ProcessGroup& group)
    : options_{task.loss, task.metrics},
      forward_(task.eval_forward),
      prepare_(task.prepare_input),
      batch_(cfg.eval_batch),
      workers_(static_cast<int>(cfg.workers)) {
  check_data(task.test, "test");
  if (const auto* t = std::get_if<TensorData>(&task.test)) {
    if (t->sharded) {
      mine_ = *t;
      total_ = t->total;
      return;
    }
    total_ = t->y.size(0);  // every rank holds the whole set: keep this rank's exact share
    const at::Tensor mine = exact_shard(total_, group);
    mine_ = TensorData::shard(t->x.index_select(0, mine), t->y.index_select(0, mine), total_);
    return;
  }
  FetchData f = std::get<FetchData>(task.test);
  total_ = f.total;
  if (f.indices.empty()) {
    const at::Tensor mine = exact_shard(total_, group);
    const int64_t* p = ddp::detail::host_data<int64_t>(mine, "the test indices");
    f.indices.assign(p, p + mine.numel());
  }
  mine_ = std::move(f);
}

EvalResult Evaluator::run(torch::nn::AnyModule& net, const at::Device& device, Precision precision, ProcessGroup& group,
                          bool last) const {
  net.ptr()->eval();
  // On the model's device; the logits come back to the CPU, where the metrics are counted.
  const Forward logits = [&](const at::Tensor& x) {
    return net.forward((prepare_ ? prepare_(x) : x).to(device)).to(at::kCPU, at::kFloat);
  };
  const Forward forward = [&](const at::Tensor& x) {
    Autocast autocast(precision, device.type());
    return forward_ ? forward_(logits, x, last) : logits(x);
  };
  EvalResult r;
  if (const auto* f = std::get_if<FetchData>(&mine_)) {  // files: decoded by the loader's workers
    data::BatchLoaderOptions lo;
    lo.batch_size = batch_;
    lo.workers = workers_;
    lo.prefetch = lo.workers + 1;
    data::BatchLoader loader(f->total, f->fetch, lo);
    loader.start_epoch(f->indices, 0);
    r = evaluate_batches(
        forward, [&] { return loader.next(); }, group, options_);
  } else {
    const auto& t = std::get<TensorData>(mine_);
    r = evaluate(forward, t.x, t.y, batch_, group, options_);
  }
  net.ptr()->train();
  return r;
}

EvalResult evaluate_model(Job& j, bool last) {
  timeline::Span span("compute", "evaluation");
  const auto full = j.strategy->full_model(/*writeback=*/false);  // a sharded model's whole weights
  return j.evaluator.run(j.average.evaluated(j.task.model), j.device, j.precision.precision, *j.group, last);
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
void evaluate_within_epoch(Job& j, const LoopState& s) {
  synchronize(j.device);  // the steps a GPU still has queued run on the training's clock, not the evaluation's
  const auto t0 = Clock::now();
  const EvalResult eval = evaluate_model(j);
  const double epochs = double(s.epoch) + double(s.micro) / double(j.data.micro_per_epoch());
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

}  // namespace ddp::train::detail
