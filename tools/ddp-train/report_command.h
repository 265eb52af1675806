// The `report` subcommand of ddp-train (see report_command.cpp).
#pragma once

namespace ddp_train_tool {

// argv[0] is "report". Returns the exit code; errors are thrown as ddp::Error/InvalidArgument.
int report_main(int argc, char** argv);
// argv[0] is "sample": text from a shakespeare-char checkpoint (sample_command.cpp).
int sample_main(int argc, char** argv);

}  // namespace ddp_train_tool
