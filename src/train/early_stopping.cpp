// EarlyStopping: an on_epoch_end callback that stops when a metric stalls.
#include <cmath>
#include <limits>
#include <sstream>

#include "ddp/errors.h"
#include "ddp/train/trainer.h"

namespace ddp::train {

EarlyStopping::EarlyStopping(std::string metric, int patience, double min_delta, std::string mode)
    : metric_(std::move(metric)), patience_(patience), min_delta_(min_delta) {
  if (patience < 1)
    throw InvalidArgument("EarlyStopping: patience must be >= 1 epoch, not " + std::to_string(patience));
  if (min_delta < 0) throw InvalidArgument("EarlyStopping: min_delta must be >= 0");
  if (mode == "auto")
    maximize_ = metric_.find("loss") == std::string::npos;
  else if (mode == "min" || mode == "max")
    maximize_ = mode == "max";
  else
    throw InvalidArgument("EarlyStopping: mode '" + mode + "' is not one of auto, min, max");
  best_ = maximize_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
}

void EarlyStopping::operator()(EpochEnd& e) {
  double value = 0;
  if (metric_ == "loss") {
    value = e.eval.loss;
  } else if (metric_ == "acc1" || metric_ == "acc5") {
    if (!e.eval.has_accuracy)
      throw InvalidArgument("EarlyStopping: '" + metric_ +
                            "' needs a classification (outputs [B, C], integer "
                            "targets); monitor \"loss\" or a Task metric");
    value = metric_ == "acc1" ? e.eval.acc1 : e.eval.acc5;
  } else {
    bool found = false;
    std::string names = "loss, acc1, acc5";
    for (const auto& [name, v] : e.eval.metrics) {
      names += ", " + name;
      if (name == metric_) value = v, found = true;
    }
    if (!found) throw InvalidArgument("EarlyStopping: no metric '" + metric_ + "'; the evaluation has " + names);
  }
  const bool better = maximize_ ? value > best_ + min_delta_ : value < best_ - min_delta_;
  if (better || std::isinf(best_)) {
    best_ = value;
    bad_epochs_ = 0;
    return;
  }
  if (++bad_epochs_ < patience_) return;
  std::ostringstream why;
  why << "EarlyStopping: " << metric_ << " " << value << " has not improved on " << best_ << " (by more than "
      << min_delta_ << ") for " << patience_ << " epoch(s)";
  e.stop = true;
  e.reason = why.str();
}

}  // namespace ddp::train
