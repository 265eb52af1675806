#include "train_logs.h"

#include <unistd.h>

#include <iostream>

#include "ddp/train/report.h"

namespace ddp::train::detail {

void TrainLogs::open(const std::string& out_dir, bool leader, bool progress) {
  leader_ = leader;
  console_.set_leader(leader);
  if (!leader) return;
  out_dir_ = out_dir;
  tb_dir_ = out_dir + "/tb";
  report_path_ = out_dir + "/report.html";
  jsonl_path_ = out_dir + "/metrics.jsonl";
  tb_ = std::make_unique<SummaryWriter>(tb_dir_);
  jsonl_ = std::make_unique<JsonlWriter>(jsonl_path_, /*append=*/true);
  if (progress) {
    progress_ =
        std::make_unique<Progress>(console_.out(), &console_.out() == &std::cout && Progress::live_stdout(), 50);
    console_.set_progress(progress_.get());
  }
}

void TrainLogs::begin_epoch(int64_t epoch, int64_t epochs, int64_t steps) {
  if (progress_)
    progress_->begin("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs), steps, epoch * steps,
                     epochs * steps);
}

// `loss`: the last log point's (none before the first): read there, not at every step (running_loss.h).
void TrainLogs::step(int64_t step_in_epoch, std::optional<double> loss, double lr, double samples_per_s) {
  if (!progress_) return;
  std::vector<std::pair<std::string, double>> fields;
  if (loss) fields.emplace_back("loss", *loss);
  fields.insert(fields.end(), {{"lr", lr}, {"samples/s", samples_per_s}});
  progress_->update(step_in_epoch, fields);
}

void TrainLogs::end_epoch(const std::string& summary) {
  if (progress_)
    progress_->end(summary);
  else
    console_.line(summary);
}

void TrainLogs::note(const std::string& line) { console_.line(line); }

void TrainLogs::scalars(const std::string& kind, int64_t step,
                        const std::vector<std::pair<std::string, double>>& values,
                        const std::vector<std::pair<std::string, double>>& extra) {
  if (!leader_) return;
  std::vector<std::pair<std::string, JsonlWriter::Value>> fields = {{"kind", kind}, {"step", step}};
  for (const auto& [tag, v] : values) {
    tb_->add_scalar(tag, v, step);
    fields.emplace_back(tag, v);
  }
  for (const auto& [key, v] : extra) fields.emplace_back(key, v);
  jsonl_->write(fields);
}

void TrainLogs::event(const std::string& kind, const std::vector<std::pair<std::string, JsonlWriter::Value>>& fields) {
  if (!leader_) return;
  std::vector<std::pair<std::string, JsonlWriter::Value>> line = {{"kind", kind}};
  line.insert(line.end(), fields.begin(), fields.end());
  jsonl_->write(line);
}

void TrainLogs::write_report() {
  if (!leader_ || !report_built()) return;
  try {
    ddp::train::write_report({out_dir_}, report_path_);
    report_written_ = true;
  } catch (const std::exception& e) {
    report_written_ = false;
    if (!report_warned_)
      console_.warning("cannot write the report (training goes on; rebuild it later with `ddp-train report " +
                       out_dir_ + "`): " + e.what());
    report_warned_ = true;
  }
}

void TrainLogs::flush() {
  if (tb_) tb_->flush();
}

}  // namespace ddp::train::detail
