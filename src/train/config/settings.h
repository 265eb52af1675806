// ddp-train's settings as one table. Each entry names a TrainConfig field, its
// flag (and TOML key), help, range and role; the command line (command_line.cpp),
// the --config file and --print-config (config_file.cpp), the checks, describe()
// and the ranks' agreement (agreement.cpp) all walk it. Adding a setting is a
// field in TrainConfig (config.h) and one entry in settings.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "ddp/train/config.h"

namespace ddp::train::detail {

enum class Range { kAny, kPositive, kNonNegative, kUnit /* each in [0, 1) */ };

// What a setting's value takes part in.
enum Role : unsigned {
  kLocal = 0,
  kRecorded = 1,  // the job itself: describe(), the checkpoint's config, the resume warning
  kAgreed = 2,    // every rank must be given the same value
  kJob = kRecorded | kAgreed,
};

using Field = std::variant<std::optional<int64_t> TrainConfig::*, int64_t TrainConfig::*, int TrainConfig::*,
                           uint64_t TrainConfig::*, std::optional<double> TrainConfig::*, double TrainConfig::*,
                           std::string TrainConfig::*, bool TrainConfig::*,
                           std::optional<std::pair<double, double>> TrainConfig::*>;

struct Setting {
  std::string name;  // the flag without "--" and the TOML key; describe()'s key has '_' for '-'
  Field field;
  std::string help;
  Range range = Range::kAny;
  unsigned role = kJob;
  // What an unset value (empty optional or string) means, e.g. "the recipe's default";
  // empty: the setting is always set.
  std::string unset;
  std::vector<std::string> choices;  // text: the values allowed (an unset one aside)
  // text: checks a value further (throws InvalidArgument, the flag's name aside).
  std::function<void(const std::string&)> validate;
  bool positional = false;                                 // given as the first argument (the recipe), not as a flag
  std::function<std::vector<std::string>()> choices_from;  // text: the values allowed, from a registry
};

// Every setting, in the order --help and --print-config show them.
const std::vector<Setting>& settings();
// nullptr when no setting has that name.
const Setting* find_setting(const std::string& name);

// "--name", or the name of a positional setting.
std::string flag_of(const Setting& s);
// describe()'s key: the name with '_' for '-'.
std::string key_of(const Setting& s);
bool is_set(const Setting& s, const TrainConfig& c);
// The value as text, numbers in their shortest form that reads back exactly ("0.9,0.999" for a pair);
// "(<unset>)" when unset.
std::string value_text(const Setting& s, const TrainConfig& c);
// Sets the field from a flag's text (CLI11's conversion); InvalidArgument naming the flag.
void set_from_text(const Setting& s, TrainConfig& c, const std::string& text);
void copy_value(const Setting& s, const TrainConfig& from, TrainConfig& to);
// One setting's range, choices and validate; InvalidArgument naming the flag.
void check_value(const Setting& s, const TrainConfig& c);

// Shortest decimal text of v that reads back to v.
std::string shortest(double v);
std::string join(const std::vector<std::string>& v, const std::string& sep = ", ");

}  // namespace ddp::train::detail
