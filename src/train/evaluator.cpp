// The evaluator: the distributed evaluation of the model and what is logged of it (fit_parts.h).
#include <ATen/ATen.h>

#include <algorithm>
#include <sstream>

#include "ddp/dist/timeline.h"
#include "fit_parts.h"

namespace ddp::train::detail {

// The evaluated model: the EMA's average when it is separate from the trained one (lookahead's is the model).
EvalResult evaluate_model(Job& j, bool last) {
  timeline::Span span("compute", "evaluation");
  torch::nn::AnyModule& net = j.ema && !j.task.lookahead_rho ? j.shadow : j.task.model;
  const auto full = j.strategy->full_model(/*writeback=*/false);  // a sharded model's whole weights
  const Tta tta = last ? std::max(j.task.final_tta, j.task.eval_tta) : j.task.eval_tta;
  const auto layout = j.task.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  net.ptr()->eval();
  // On the model's device; the logits come back to the CPU, where the metrics are counted.
  auto logits = [&](const at::Tensor& x) {
    return net.forward(x.to(j.device).contiguous(layout)).to(at::kCPU, at::kFloat);
  };
  auto forward = [&](const at::Tensor& x) {
    Autocast autocast(j.precision.precision, j.device.type());
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
    r = evaluate_batches(
        forward, [&] { return loader.next(); }, *j.group, j.eval_options);
  } else {
    r = evaluate(forward, j.task.test_x, j.task.test_y, j.cfg.eval_batch, *j.group, j.eval_options);
  }
  net.ptr()->train();
  return r;
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
  const auto t0 = Clock::now();
  const EvalResult eval = evaluate_model(j);
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

}  // namespace ddp::train::detail
