// Learning-rate schedules: a multiplier of the base learning rate as a function
// of the optimizer step, so a resumed run only needs the step count.
//
//   auto s = ddp::train::LrSchedule::parse("onecycle").with_warmup(100);
//   double lr = base_lr * s(step, total_steps);
//
// Specs (`parse`, and the trainer's --schedule flag):
//   constant                   1
//   step:N:G                   G^floor(step / N)
//   cosine[:F]                 from 1 to F (default 0) along half a cosine
//   onecycle[:P[:F]]           linear 0 -> 1 over the first fraction P (0.25), then -> F (0)
//   piecewise:x0:y0,x1:y1,...  linear between knots at fractions x of the run (the
//                              cifar10-resnet9 schedule is piecewise:0:0,0.25:1,1:0.1)
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace ddp::train {

class LrSchedule {
 public:
  static LrSchedule constant();
  static LrSchedule step(int64_t step_size, double gamma);
  static LrSchedule cosine(double final_fraction = 0);
  static LrSchedule one_cycle(double pct_start = 0.25, double final_fraction = 0);
  // Knots (fraction of total steps in [0, 1], increasing; multiplier); constant outside.
  static LrSchedule piecewise_linear(std::vector<std::pair<double, double>> knots);
  // InvalidArgument naming the spec and listing the valid forms.
  static LrSchedule parse(const std::string& spec);

  // A linear ramp over the first `steps` steps up to this schedule's start, then this schedule over the steps
  // left (step - steps of total - steps): nanoGPT's and HuggingFace's warm-up.
  LrSchedule with_warmup(int64_t steps) const;

  // Multiplier at optimizer step `step` (0-based) of a run of `total` steps.
  double operator()(int64_t step, int64_t total) const;
  const std::string& spec() const { return spec_; }

 private:
  LrSchedule(std::string spec, std::function<double(int64_t, int64_t)> f) : spec_(std::move(spec)), f_(std::move(f)) {}
  std::string spec_;
  std::function<double(int64_t, int64_t)> f_;
};

}  // namespace ddp::train
