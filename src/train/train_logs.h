// Rank 0's logs for the trainer: the console (console.h) with its progress line,
// TensorBoard events, JSON lines and the report page. On other ranks every call
// does nothing.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "console.h"
#include "ddp/train/metrics_log.h"
#include "ddp/train/progress.h"
#include "ddp/train/tensorboard.h"

namespace ddp::train::detail {

class TrainLogs {
 public:
  TrainLogs() = default;
  // Opens out_dir/tb and out_dir/metrics.jsonl on rank 0.
  void open(const std::string& out_dir, bool leader, bool progress);
  bool leader() const { return leader_; }
  // Every line the run prints goes through it (set_leader() before open() for the first lines).
  Console& console() { return console_; }

  void begin_epoch(int64_t epoch, int64_t epochs, int64_t steps);
  void step(int64_t step_in_epoch, std::optional<double> loss, double lr, double samples_per_s);
  void end_epoch(const std::string& summary);
  // A line of its own within an epoch (the progress bar goes on below it).
  void note(const std::string& line);
  // Scalars into TensorBoard and, with the same step, a JSON line (plus `extra`, JSON only).
  void scalars(const std::string& kind, int64_t step, const std::vector<std::pair<std::string, double>>& values,
               const std::vector<std::pair<std::string, double>>& extra = {});
  // A JSON line {"kind": kind, fields...}: the run's "start" and "end" lines.
  void event(const std::string& kind, const std::vector<std::pair<std::string, JsonlWriter::Value>>& fields);
  // Rewrites out_dir/report.html from the run directory. A failure is a warning on stderr (once), not the end
  // of the training: the report can be rebuilt later with `ddp-train report`.
  void write_report();
  void flush();
  std::string tensorboard_dir() const { return tb_dir_; }
  std::string metrics_path() const { return jsonl_path_; }
  std::string report_path() const { return report_path_; }
  bool report_written() const { return report_written_; }  // the latest write_report() succeeded

 private:
  bool leader_ = false;
  std::string out_dir_, tb_dir_, jsonl_path_, report_path_;
  bool report_warned_ = false, report_written_ = false;
  Console console_;
  std::unique_ptr<SummaryWriter> tb_;
  std::unique_ptr<JsonlWriter> jsonl_;
  std::unique_ptr<Progress> progress_;
};

}  // namespace ddp::train::detail
