// ddp-train's --config files: TOML (tomlplusplus), one key per setting (the
// flag's name without "--"), read by --config and written by --print-config.
#pragma once
#include <string>

#include "ddp/train/config.h"

namespace ddp::train::detail {

// The settings a TOML file names, over TrainConfig's defaults; each checked as its
// flag is. InvalidArgument naming the file, line and key (unknown keys included).
TrainConfig read_config_file(const std::string& path);

}  // namespace ddp::train::detail
