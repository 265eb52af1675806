// `ddp-train report RUN_DIR [RUN_DIR...] [-o out.html]`: the run report rebuilt
// from run directories; several runs go side by side (one colour each) in one page.
#include "report_command.h"

#include <CLI/CLI.hpp>

#include <iostream>

#include "ddp/errors.h"
#include "ddp/train/report.h"

namespace ddp_train_tool {

int report_main(int argc, char** argv) {
  CLI::App app{
      "ddp-train report: rebuilds the HTML report of ddp-train runs from their directories "
      "(metrics.jsonl, checkpoints/). One self-contained file: open it in any browser, offline.",
      "ddp-train report"};
  std::vector<std::string> dirs;
  std::string out;
  app.add_option("run_dirs", dirs, "the --out-dir of each run (several: overlaid, one colour per run)")->required();
  app.add_option("-o,--output", out,
                 "the page to write (default: RUN_DIR/report.html for one run; required for several)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (out.empty()) {
    if (dirs.size() > 1)
      throw ddp::InvalidArgument("ddp-train report: " + std::to_string(dirs.size()) +
                                 " runs given: name the page to write with -o, e.g. -o compare.html");
    out = dirs[0] + "/report.html";
  }
  ddp::train::write_report(dirs, out);
  std::cout << "wrote " << out << " (" << dirs.size() << " run" << (dirs.size() > 1 ? "s" : "") << ")" << std::endl;
  return 0;
}

}  // namespace ddp_train_tool
