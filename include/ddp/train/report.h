// The run report: one self-contained HTML page (Chart.js and the data inline, no
// network) with a run's curves, configuration, machine, checkpoints and end.
//
//   ddp::train::write_report({"runs/fashion"}, "runs/fashion/report.html");
//   ddp::train::write_report({"runs/w1", "runs/w2"}, "compare.html");  // overlaid, one colour per run
//
// Everything comes from each run directory: metrics.jsonl (the "start", "train",
// "epoch" and "end" lines ddp-train writes) and the checkpoints/ folder.
// See docs/logging.md.
#pragma once
#include <string>
#include <vector>

namespace ddp::train {

// The page for `run_dirs` (at least one). Throws ddp::InvalidArgument when a
// directory has no metrics.jsonl; lines that are not JSON objects are counted
// and shown on the page, not fatal (a run killed mid-write leaves half a line).
std::string render_report(const std::vector<std::string>& run_dirs);

// render_report written to `out_path` atomically (a temporary file in the same
// directory, then rename): a reader never sees half a page. Throws ddp::Error
// with the path and errno text when it cannot write.
void write_report(const std::vector<std::string>& run_dirs, const std::string& out_path);

// False where ddp was configured with -DDDP_WITH_REPORT=OFF (no Chart.js to embed): then the two
// functions above throw ddp::InvalidArgument saying so, and runs write no report.html.
bool report_built();

}  // namespace ddp::train
