#include "ddp/train/schedule.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "ddp/errors.h"

namespace ddp::train {
namespace {

constexpr const char* kForms =
    "valid forms: constant, step:N:GAMMA, cosine[:FINAL], onecycle[:PCT[:FINAL]], piecewise:X0:Y0,X1:Y1,...";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);) out.push_back(part);
  return out;
}

double number(const std::string& spec, const std::string& text) {
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw InvalidArgument("learning-rate schedule '" + spec + "': '" + text + "' is not a finite number; " + kForms);
}

std::string fmt(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

LrSchedule LrSchedule::constant() {
  return LrSchedule("constant", [](int64_t, int64_t) { return 1.0; });
}

LrSchedule LrSchedule::step(int64_t step_size, double gamma) {
  if (step_size < 1) throw InvalidArgument("LrSchedule::step: step_size must be >= 1");
  return LrSchedule("step:" + std::to_string(step_size) + ":" + fmt(gamma),
                    [=](int64_t s, int64_t) { return std::pow(gamma, double(s / step_size)); });
}

LrSchedule LrSchedule::cosine(double final_fraction) {
  return LrSchedule("cosine:" + fmt(final_fraction), [=](int64_t s, int64_t total) {
    double t = total > 1 ? std::min(1.0, double(s) / double(total - 1)) : 1.0;
    return final_fraction + (1 - final_fraction) * 0.5 * (1 + std::cos(M_PI * t));
  });
}

LrSchedule LrSchedule::one_cycle(double pct_start, double final_fraction) {
  if (!(pct_start > 0 && pct_start < 1)) throw InvalidArgument("LrSchedule::one_cycle: pct_start must be in (0, 1)");
  LrSchedule p = piecewise_linear({{0, 0}, {pct_start, 1}, {1, final_fraction}});
  p.spec_ = "onecycle:" + fmt(pct_start) + ":" + fmt(final_fraction);
  return p;
}

LrSchedule LrSchedule::piecewise_linear(std::vector<std::pair<double, double>> knots) {
  if (knots.empty()) throw InvalidArgument("LrSchedule::piecewise_linear: needs at least one knot");
  std::string spec = "piecewise:";
  for (size_t i = 0; i < knots.size(); ++i) {
    if (knots[i].first < 0 || knots[i].first > 1 || (i > 0 && knots[i].first <= knots[i - 1].first))
      throw InvalidArgument("LrSchedule::piecewise_linear: knot positions must increase within [0, 1]");
    spec += (i ? "," : "") + fmt(knots[i].first) + ":" + fmt(knots[i].second);
  }
  return LrSchedule(spec, [knots](int64_t s, int64_t total) {
    double x = total > 1 ? double(s) / double(total - 1) : 1.0;
    if (x <= knots.front().first) return knots.front().second;
    for (size_t i = 1; i < knots.size(); ++i) {
      if (x <= knots[i].first) {
        double a = (x - knots[i - 1].first) / (knots[i].first - knots[i - 1].first);
        return knots[i - 1].second + a * (knots[i].second - knots[i - 1].second);
      }
    }
    return knots.back().second;
  });
}

LrSchedule LrSchedule::parse(const std::string& spec) {
  auto parts = split(spec, ':');
  const std::string kind = parts.empty() ? "" : parts[0];
  auto arg = [&](size_t i, double fallback) { return parts.size() > i ? number(spec, parts[i]) : fallback; };
  if (kind == "constant" && parts.size() == 1) return constant();
  if (kind == "step" && parts.size() == 3) return step(static_cast<int64_t>(arg(1, 1)), arg(2, 0.1));
  if (kind == "cosine" && parts.size() <= 2) return cosine(arg(1, 0));
  if (kind == "onecycle" && parts.size() <= 3) return one_cycle(arg(1, 0.25), arg(2, 0));
  if (kind == "piecewise" && spec.size() > 10) {
    std::vector<std::pair<double, double>> knots;
    for (const auto& knot : split(spec.substr(10), ',')) {
      auto xy = split(knot, ':');
      if (xy.size() != 2)
        throw InvalidArgument("learning-rate schedule '" + spec + "': knot '" + knot + "' is not X:Y");
      knots.emplace_back(number(spec, xy[0]), number(spec, xy[1]));
    }
    return piecewise_linear(knots);
  }
  throw InvalidArgument("learning-rate schedule '" + spec + "' is not understood; " + kForms);
}

LrSchedule LrSchedule::with_warmup(int64_t steps) const {
  if (steps <= 0) return *this;
  auto inner = f_;
  // The ramp, then this schedule over the steps left (HuggingFace's get_cosine_schedule_with_warmup, nanoGPT).
  return LrSchedule(spec_ + "+warmup:" + std::to_string(steps), [inner, steps](int64_t s, int64_t total) {
    if (s < steps) return double(s + 1) / double(steps) * inner(0, std::max<int64_t>(1, total - steps));
    return inner(s - steps, std::max<int64_t>(1, total - steps));
  });
}

double LrSchedule::operator()(int64_t step, int64_t total) const { return f_(step, total); }

}  // namespace ddp::train
