#include "ddp/dist/launch_env.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ddp/errors.h"

namespace ddp::launch_env {
namespace {

// 60, 0.5, 1073741824; powers of ten from 1e6 up as 1e7.
std::string number(double x) {
  char buf[32];
  const int exponent = x >= 1e6 ? static_cast<int>(std::lround(std::log10(x))) : 0;
  if (exponent > 0 && std::pow(10.0, exponent) == x)
    std::snprintf(buf, sizeof(buf), "1e%d", exponent);
  else if (x == std::floor(x) && std::fabs(x) < 1e15)
    std::snprintf(buf, sizeof(buf), "%.0f", x);
  else
    std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split_choices(const char* choices) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = choices; *p; ++p) {
    if (*p == '|') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += *p;
    }
  }
  out.push_back(cur);
  return out;
}

// "a number of seconds >= 0 (at most 60)", "a positive number of seconds (at most 1e7; 0 ...)".
std::string expected_seconds(const EnvVar& v) {
  std::string s = v.min == 0 && v.min_exclusive ? "a positive number of seconds"
                  : v.min == 0                  ? "a number of seconds >= 0"
                               : "a number of seconds " + std::string(v.min_exclusive ? "> " : ">= ") + number(v.min);
  std::string notes;
  if (std::isfinite(v.max)) notes = "at most " + number(v.max);
  if (*v.zero_means) notes += (notes.empty() ? "0 " : "; 0 ") + std::string(v.zero_means);
  return notes.empty() ? s : s + " (" + notes + ")";
}

std::string expected_choice(const EnvVar& v) {
  const auto all = split_choices(v.choices);
  std::string s = "one of";
  for (size_t i = 0; i < all.size(); ++i) s += (i == 0 ? " " : i + 1 == all.size() ? " or " : ", ") + all[i];
  return s + ": " + v.meaning;
}

// The declared spelling of a valid choice, or "".
std::string match_choice(const EnvVar& v, const std::string& text) {
  for (const std::string& c : split_choices(v.choices))
    if (lower(c) == lower(text)) return c;
  return "";
}

bool parse_number(const std::string& text, double* out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(*out);
}

bool in_range(const EnvVar& v, double x) { return (v.min_exclusive ? x > v.min : x >= v.min) && x <= v.max; }

[[noreturn]] void refuse(const EnvVar& v, const std::string& text) {
  throw InvalidArgument("[init] " + problem(v, text));
}

}  // namespace

const EnvVar* find(const std::string& name) {
  for (const EnvVar* v : kAll)
    if (name == v->name) return v;
  return nullptr;
}

EnvFn process() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

EnvFn fixed(std::vector<std::pair<std::string, std::string>> values) {
  return [values = std::move(values)](const std::string& name) -> std::optional<std::string> {
    for (const auto& kv : values)
      if (kv.first == name) return kv.second;
    return std::nullopt;
  };
}

std::string expected(const EnvVar& v) {
  switch (v.type) {
    case Type::kText:
      return "any text";
    case Type::kCount:
      return "an integer in [" + number(v.min) + ", " + number(v.max) + "] (" + v.meaning + ")";
    case Type::kSeconds:
      return expected_seconds(v);
    case Type::kChoice:
      return expected_choice(v);
  }
  return "";
}

std::string problem(const EnvVar& v, const std::string& text) {
  double x = 0;
  bool valid = true;
  switch (v.type) {
    case Type::kText:
      break;
    case Type::kCount:
      valid = parse_number(text, &x) && text.find_first_not_of("0123456789") == std::string::npos && in_range(v, x);
      break;
    case Type::kSeconds:
      valid = parse_number(text, &x) && in_range(v, x);
      break;
    case Type::kChoice:
      valid = !match_choice(v, text).empty();
      break;
  }
  return valid ? "" : std::string(v.name) + "='" + text + "' must be " + expected(v);
}

std::optional<std::string> text(const EnvVar& v, const EnvFn& env) {
  auto value = env(v.name);
  if (!value || value->empty()) return std::nullopt;
  return value;
}

std::optional<int> count(const EnvVar& v, const EnvFn& env) {
  auto value = text(v, env);
  if (!value) return std::nullopt;
  if (!problem(v, *value).empty()) refuse(v, *value);
  return static_cast<int>(std::strtol(value->c_str(), nullptr, 10));
}

std::optional<double> seconds(const EnvVar& v, const EnvFn& env) {
  auto value = text(v, env);
  if (!value) return std::nullopt;
  if (!problem(v, *value).empty()) refuse(v, *value);
  return std::strtod(value->c_str(), nullptr);
}

std::optional<std::string> choice(const EnvVar& v, const EnvFn& env) {
  auto value = text(v, env);
  if (!value) return std::nullopt;
  if (!problem(v, *value).empty()) refuse(v, *value);
  return match_choice(v, *value);
}

std::optional<int> first_count(std::initializer_list<const EnvVar*> vars, const EnvFn& env) {
  for (const EnvVar* v : vars)
    if (auto n = count(*v, env)) return n;
  return std::nullopt;
}

std::optional<int> first_valid_count(std::initializer_list<const EnvVar*> vars, const EnvFn& env) {
  for (const EnvVar* v : vars)
    if (auto value = text(*v, env); value && problem(*v, *value).empty())
      return static_cast<int>(std::strtol(value->c_str(), nullptr, 10));
  return std::nullopt;
}

double parse_seconds(const EnvVar& v, const std::string& text) {
  const std::string why = problem(v, text);
  if (!why.empty() || text.empty()) throw InvalidArgument(why.empty() ? std::string(v.name) + " is empty" : why);
  return std::strtod(text.c_str(), nullptr);
}

std::string format_seconds(double s) {
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, s);
    if (std::strtod(buf, nullptr) == s) break;
  }
  std::string out = buf;
  if (out.find('e') != std::string::npos) {  // no exponents: "%f" trimmed
    std::snprintf(buf, sizeof(buf), "%.6f", s);
    out = buf;
    while (out.size() > 1 && out.back() == '0') out.pop_back();
    if (out.back() == '.') out.pop_back();
  }
  return out;
}

}  // namespace ddp::launch_env
