// The run report where ddp was configured with -DDDP_WITH_REPORT=OFF (src/CMakeLists.txt builds this file
// instead of report.cpp): no page, and an error saying how to get one.
#include "ddp/errors.h"
#include "ddp/train/report.h"

namespace ddp::train {
namespace {
[[noreturn]] void not_built() {
  throw InvalidArgument(
      "this ddp was built without the run report (-DDDP_WITH_REPORT=OFF); reconfigure with "
      "-DDDP_WITH_REPORT=ON (it embeds Debian's Chart.js, libjs-chart.js), or read the run's "
      "metrics.jsonl");
}
}  // namespace

bool report_built() { return false; }
std::string render_report(const std::vector<std::string>&) { not_built(); }
void write_report(const std::vector<std::string>&, const std::string&) { not_built(); }

}  // namespace ddp::train
