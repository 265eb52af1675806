// --config files read and --print-config files written, by the settings table,
// with tomlplusplus (Debian's libtomlplusplus-dev, header-only; only this file
// includes it).
#include "config_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ddp/errors.h"
#include "settings.h"

namespace ddp::train {
namespace detail {
namespace {

std::string shown(const toml::node& n) {
  std::ostringstream o;
  n.visit([&](const auto& v) { o << v; });
  o << " (a TOML " << n.type() << ")";
  return o.str();
}

void set_from_node(const Setting& s, TrainConfig& c, const toml::node& n) {
  auto wrong = [&](const std::string& expected) {
    throw InvalidArgument("ddp-train: " + s.name + " expects " + expected + ", got " + shown(n));
  };
  std::visit(
      [&](auto member) {
        using T = std::decay_t<decltype(c.*member)>;
        auto& v = c.*member;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!n.is_string()) wrong("a string");
          v = *n.value<std::string>();
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!n.is_boolean()) wrong("true or false");
          v = *n.value<bool>();
        } else if constexpr (std::is_same_v<T, std::optional<std::pair<double, double>>>) {
          if (n.is_string()) return set_from_text(s, c, *n.value<std::string>());  // "B1,B2", as flags and old files
          const toml::array* a = n.as_array();
          if (!a || a->size() != 2 || !(*a)[0].is_number() || !(*a)[1].is_number()) wrong("two numbers, [B1, B2]");
          v = std::make_pair(*(*a)[0].value<double>(), *(*a)[1].value<double>());
        } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, std::optional<double>>) {
          if (!n.is_number() || !std::isfinite(*n.value<double>())) wrong("a finite number");
          v = *n.value<double>();
        } else {
          if (!n.is_integer()) wrong("an integer");
          const int64_t x = *n.value_exact<int64_t>();
          if constexpr (std::is_same_v<T, uint64_t>) {
            if (x < 0) throw InvalidArgument("ddp-train: " + s.name + " must be >= 0, got " + std::to_string(x));
            v = static_cast<uint64_t>(x);
          } else if constexpr (std::is_same_v<T, int>) {
            if (x < INT_MIN || x > INT_MAX) wrong("an integer of 32 bits");
            v = static_cast<int>(x);
          } else {
            v = x;
          }
        }
      },
      s.field);
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// " (did you mean 'epochs'?)" for a near miss, else "".
std::string suggestion(const std::string& key) {
  const Setting* best = nullptr;
  size_t best_distance = 3;
  for (const auto& s : settings()) {
    const size_t d = edit_distance(key, s.name);
    if (d < best_distance) best = &s, best_distance = d;
  }
  return best ? " (did you mean '" + best->name + "'?)" : "";
}

std::string without_tool(const std::string& what) {
  const std::string prefix = "ddp-train: ";
  return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
}

// A setting's value as TOML: strings quoted as TOML needs, a pair as an array.
std::string toml_text(const Setting& s, const TrainConfig& c) {
  std::ostringstream o;
  if (auto text = std::get_if<std::string TrainConfig::*>(&s.field)) {
    // A basic string ("..."), as people write them, escaped where needed.
    o << toml::toml_formatter(toml::value<std::string>(c.**text),
                              toml::toml_formatter::default_flags & ~toml::format_flags::allow_literal_strings);
  } else if (auto pair = std::get_if<std::optional<std::pair<double, double>> TrainConfig::*>(&s.field);
             pair && (c.**pair)) {
    o << "[" << shortest((c.**pair)->first) << ", " << shortest((c.**pair)->second) << "]";
  } else {
    o << value_text(s, c);
  }
  return o.str();
}

}  // namespace

TrainConfig read_config_file(const std::string& path) {
  if (!std::ifstream(path))
    throw InvalidArgument("ddp-train: --config " + path + ": cannot read it (" + std::strerror(errno) + ")");
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw InvalidArgument("ddp-train: --config " + path + ":" + std::to_string(e.source().begin.line) + ":" +
                          std::to_string(e.source().begin.column) +
                          ": not valid TOML: " + std::string(e.description()));
  }
  TrainConfig c;
  for (auto&& [key, node] : doc) {
    const std::string name(key.str());
    const std::string at = "ddp-train: --config " + path + ":" + std::to_string(node.source().begin.line) + ": ";
    const Setting* s = find_setting(name);
    if (!s)
      throw InvalidArgument(at + "unknown setting '" + name + "'" + suggestion(name) +
                            "; keys are ddp-train's flags without -- (ddp-train --help)");
    try {
      set_from_node(*s, c, node);
      check_value(*s, c);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(at + without_tool(e.what()));
    }
  }
  return c;
}

}  // namespace detail

std::string to_config_file(const TrainConfig& c) {
  std::ostringstream out;
  out << "# ddp-train settings; run them with: ddp-train --config FILE\n";
  for (const auto& s : detail::settings()) {
    if (!detail::is_set(s, c))
      out << "# " << s.name << " = (" << s.unset << ")\n";
    else
      out << s.name << " = " << detail::toml_text(s, c) << "\n";
  }
  return out.str();
}

}  // namespace ddp::train
