#include "console.h"

#include "ddp/train/progress.h"

namespace ddp::train::detail {

void Console::line(const std::string& text) const {
  if (!leader_) return;
  if (progress_)
    progress_->note(text);
  else
    *out_ << text + "\n" << std::flush;  // one write: a launcher tags each write (mpirun --tag-output)
}

void Console::warning(const std::string& text) const {
  if (leader_) *err_ << "ddp-train: warning: " + text + "\n" << std::flush;
}

void Console::rank_message(const std::string& text) const { *err_ << "ddp-train: " + text + "\n" << std::flush; }

}  // namespace ddp::train::detail
