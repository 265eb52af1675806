// The run report: metrics.jsonl and the checkpoint list of each run as inline
// JSON in the embedded template; the page's script draws it with Chart.js.
#include "ddp/train/report.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ddp/errors.h"
#include "dist/atomic_file.h"
#include "train/logging/file_io.h"
#include "train/report/report_assets.h"

namespace ddp::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
const char* const kWho = "report";

// The run's checkpoints (name, bytes, modification time), oldest first, and which one `latest` names.
json checkpoint_list(const std::string& dir) {
  json list = json::array();
  std::error_code ec;
  const fs::path folder = fs::path(dir) / "checkpoints";
  if (!fs::is_directory(folder, ec)) return list;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0)
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());  // checkpoint-eEEEE-sSSSSSSS.pt: zero-padded, so by name is by time
  std::string latest;
  std::ifstream(folder / "latest") >> latest;
  for (const auto& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) continue;  // removed meanwhile (keep_last)
    const std::string name = f.filename().string();
    list.push_back({{"name", name},
                    {"bytes", static_cast<int64_t>(st.st_size)},
                    {"mtime", static_cast<int64_t>(st.st_mtime)},
                    {"latest", !latest.empty() && fs::path(latest).filename() == name}});
  }
  return list;
}

// One run: its metrics.jsonl lines (parsed), the lines that were not JSON objects, its checkpoints.
json load_run(const std::string& dir) {
  const std::string path = (fs::path(dir) / "metrics.jsonl").string();
  std::ifstream in(path);
  if (!in)
    throw InvalidArgument("report: " + dir + " has no readable metrics.jsonl (" + path +
                          "); give the --out-dir of a ddp-train run");
  json lines = json::array();
  int64_t bad = 0;
  std::string text;
  while (std::getline(in, text)) {
    if (text.empty()) continue;
    json line = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (line.is_object())
      lines.push_back(std::move(line));
    else
      ++bad;
  }
  std::string name = fs::path(dir).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(dir).lexically_normal().parent_path().filename().string();
  return {{"name", name.empty() ? dir : name},
          {"dir", dir},
          {"lines", std::move(lines)},
          {"bad_lines", bad},
          {"checkpoints", checkpoint_list(dir)}};
}

void replace_once(std::string& text, const std::string& placeholder, const std::string& value) {
  const auto at = text.find(placeholder);
  if (at == std::string::npos) throw Error("report: the embedded template lacks " + placeholder);
  text.replace(at, placeholder.size(), value);
}

}  // namespace

bool report_built() { return true; }

std::string render_report(const std::vector<std::string>& run_dirs) {
  if (run_dirs.empty()) throw InvalidArgument("report: no run directory given");
  json runs = json::array();
  for (const auto& dir : run_dirs) runs.push_back(load_run(dir));
  // Inside <script>, "</" could end the element: JSON allows "<\/" for it.
  std::string data = runs.dump(-1, ' ', false, json::error_handler_t::replace);
  for (size_t at = 0; (at = data.find("</", at)) != std::string::npos; at += 3) data.replace(at, 2, "<\\/");
  std::string page = detail::kReportTemplate;
  // Data first: Chart.js's text must not be searched for the data's placeholder.
  replace_once(page, "@@DATA@@", data);
  replace_once(page, "@@CHART_JS@@", detail::kChartJs);
  return page;
}

void write_report(const std::vector<std::string>& run_dirs, const std::string& out_path) {
  const std::string page = render_report(run_dirs);
  const std::string dir = detail::parent_dir(out_path);
  if (!dir.empty()) detail::make_dirs(dir, kWho);
  try {
    ddp::detail::write_file_atomic(out_path, page);
  } catch (const Error& e) {
    throw Error(std::string(kWho) + ": " + e.what());
  }
}

}  // namespace ddp::train
