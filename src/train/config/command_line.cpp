// ddp-train's command line on CLI11, one flag per entry of the settings table:
// the recipe, then flags; --config FILE first, the flags given win over it.
#include <CLI/CLI.hpp>

#include <algorithm>

#include "config_file.h"
#include "ddp/errors.h"
#include "ddp/train/config.h"
#include "ddp/train/recipe.h"
#include "settings.h"

namespace ddp::train {
namespace {
using detail::Setting;

std::string type_name(const Setting& s) {
  return std::visit(
      [](auto member) -> std::string {
        using T = std::decay_t<decltype(TrainConfig{}.*member)>;
        if constexpr (std::is_same_v<T, std::string>)
          return "TEXT";
        else if constexpr (std::is_same_v<T, std::optional<std::pair<double, double>>>)
          return "B1,B2";
        else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, std::optional<double>>)
          return "X";
        else
          return "N";
      },
      s.field);
}

// The help line: the table's text, a registry's choices, and the default.
std::string help_of(const Setting& s) {
  if (s.positional) return s.help + detail::join(recipe_names());
  const std::string help = s.help + (s.choices_from ? ": " + detail::join(s.choices_from(), " | ") : "");
  const TrainConfig defaults;
  if (!detail::is_set(s, defaults))
    return help + (s.unset == "the recipe's default" ? " [the recipe's default]" : " [default: " + s.unset + "]");
  if (std::holds_alternative<bool TrainConfig::*>(s.field))
    return help + (defaults.*std::get<bool TrainConfig::*>(s.field) ? " [on by default]" : "");
  return help + " [default: " + detail::value_text(s, defaults) + "]";
}

// "Recipes:" and each one's name and summary, one a line.
std::string recipe_list() {
  size_t width = 0;
  for (const RecipeInfo& r : registered_recipes()) width = std::max(width, r.name.size());
  std::string out = "Recipes:\n";
  for (const RecipeInfo& r : registered_recipes())
    out += "  " + r.name + std::string(width + 2 - r.name.size(), ' ') + r.summary + "\n";
  return out;
}

// Every setting as a flag writing into `c`, and --config / --print-config.
void define(CLI::App& app, TrainConfig& c, std::string& config_file, bool& print_config) {
  app.description("Trains a recipe, single-process or under ddprun (one process per rank).");
  app.footer(recipe_list() +
             "\nUnset settings take the recipe's defaults; --print-config shows them all.\n"
             "Each run writes OUT/report.html; `ddp-train report RUN_DIR [RUN_DIR...] [-o page.html]` rebuilds it\n"
             "or puts several runs side by side (ddp-train report --help).\n"
             "Exit status: 0 done, 1 failed, 2 bad flags.");
  app.set_help_flag("-h,--help", "show this help");
  app.add_option("--config", config_file,
                 "read settings from a TOML file (keys: the flags without --, e.g. batch-size = 64); "
                 "flags given win over it")
      ->type_name("FILE");
  app.add_flag("--print-config", print_config, "print every setting, recipe defaults resolved, as a --config file");
  for (const Setting& s : detail::settings()) {
    if (std::holds_alternative<bool TrainConfig::*>(s.field)) {
      auto member = std::get<bool TrainConfig::*>(s.field);
      app.add_flag_function(
          "--" + s.name + ",!--no-" + s.name, [&c, member](int64_t n) { c.*member = n > 0; }, help_of(s));
      continue;
    }
    auto* option = app.add_option_function<std::string>(
        detail::flag_of(s), [&c, &s](const std::string& v) { detail::set_from_text(s, c, v); }, help_of(s));
    if (!s.positional) option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->type_name(type_name(s));
  }
}

}  // namespace

std::string usage() {
  TrainConfig ignored;
  std::string file;
  bool print = false;
  CLI::App app("", "ddp-train");
  define(app, ignored, file, print);
  return app.help();
}

CommandLine parse_command_line(int argc, const char* const* argv) {
  CommandLine out;
  TrainConfig given;
  std::string config_file;
  bool print_config = false;
  CLI::App app("", "ddp-train");
  define(app, given, config_file, print_config);
  try {
    std::vector<std::string> args;
    for (int i = argc - 1; i >= 1; --i) args.emplace_back(argv[i]);  // CLI11 takes them last first
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    out.action = CommandLine::Action::kHelp;
    out.config.recipe = "help";
    return out;
  } catch (const CLI::ParseError& e) {
    throw InvalidArgument(std::string("ddp-train: ") + e.what() + " (see ddp-train --help)");
  }
  // The file's settings, then the flags given over them.
  if (!config_file.empty()) out.config = detail::read_config_file(config_file);
  for (const Setting& s : detail::settings())
    if (app.get_option(detail::flag_of(s))->count() > 0) detail::copy_value(s, given, out.config);
  if (out.config.recipe.empty())
    throw InvalidArgument("ddp-train: missing the recipe (one of " + detail::join(recipe_names()) +
                          "), as the first argument or `recipe = ...` in --config; see ddp-train --help");
  if (!find_recipe(out.config.recipe))
    throw InvalidArgument("ddp-train: unknown recipe '" + out.config.recipe +
                          "'; valid: " + detail::join(recipe_names()));
  check_settings(out.config);
  if (print_config) out.action = CommandLine::Action::kPrintConfig;
  return out;
}

TrainConfig parse_args(int argc, const char* const* argv) { return parse_command_line(argc, argv).config; }

void check_settings(const TrainConfig& c) {
  for (const Setting& s : detail::settings()) detail::check_value(s, c);
}

std::vector<std::pair<std::string, std::string>> describe(const TrainConfig& c) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Setting& s : detail::settings())
    if (s.role & detail::kRecorded) out.emplace_back(detail::key_of(s), detail::value_text(s, c));
  return out;
}

}  // namespace ddp::train
