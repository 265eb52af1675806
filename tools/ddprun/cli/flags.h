// ddprun's flags, each declared once (flags.cpp) with its names, help, default and rule, as ddp-train's settings
// are in its schema: the command line, the defaults of Options and the help text are all made from this table.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cli/options.h"

namespace ddprun {

// A value a flag refuses: `expected` ends "invalid value 'V' for --flag: <expected>".
struct FlagError {
  std::string expected;
};

struct Flag {
  std::string names;         // "--nproc-per-node,--nproc_per_node": the first names it in messages
  std::string help;          // what it does (the help adds the default)
  std::string fallback;      // the default, as a user would give it; every Options starts from it ("": none)
  std::string default_note;  // the help's default when it is more than `fallback` ("the ranks' own, 600")
  bool is_switch = false;    // takes no value: set("") when given
  // Stores the value in `o`, or throws FlagError. `online_cpus` is what --nproc-per-node auto is.
  std::function<void(const std::string& value, Options& o, int online_cpus)> set;

  std::string name() const { return names.substr(0, names.find(',')); }
  std::string help_line() const;  // help + " [default ...]"
};

// Every flag, in the help's order.
const std::vector<Flag>& flags();

// The flag named `name` (any of its spellings); nullptr when there is none.
const Flag* find_flag(const std::string& name);

}  // namespace ddprun
