#include "rank_metrics.h"

#include <ATen/ATen.h>

#include "ddp/dist/collectives.h"
#include "ddp/errors.h"
#include "dist/host_memory.h"

namespace ddp::train::detail {

constexpr int kShared = 2;  // the loss and the accuracy, then the per-rank slots

std::vector<std::pair<std::string, double>> rank_fields(const std::vector<double>& reduced, int world) {
  if (world < 1 || reduced.size() != size_t(kShared + 3 * world))
    throw InvalidArgument("rank_fields: " + std::to_string(reduced.size()) + " values for world " +
                          std::to_string(world) + "; expected 2 + 3 * world");
  std::vector<std::pair<std::string, double>> fields;
  const char* names[] = {"samples_per_s/rank", "comm_ms/rank", "exposed_ms/rank"};
  for (int k = 0; k < 3; ++k)
    for (int r = 0; r < world; ++r) fields.emplace_back(names[k] + std::to_string(r), reduced[kShared + k * world + r]);
  return fields;
}

LogPoint log_point(ProcessGroup& group, double loss, double accuracy, LogWindow& window, int64_t micro,
                   int64_t batch_size, const DDPStats& ddp_now) {
  const int world = group.size(), rank = group.rank();
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - window.time).count();
  const int64_t steps = ddp_now.iterations - window.ddp.iterations;
  std::vector<double> mine(size_t(kShared + 3 * world), 0.0);
  mine[0] = loss;
  mine[1] = accuracy;
  mine[kShared + rank] = seconds > 0 ? world * double((micro - window.micro) * batch_size) / seconds : 0.0;
  mine[kShared + world + rank] = steps > 0 ? world * (ddp_now.comm_ms - window.ddp.comm_ms) / double(steps) : 0.0;
  mine[kShared + 2 * world + rank] =
      steps > 0 ? world * (ddp_now.exposed_ms - window.ddp.exposed_ms) / double(steps) : 0.0;
  at::Tensor t = at::tensor(mine, at::kDouble);
  group.all_reduce(t, op(ReduceOp::AVG)).wait();
  const double* p = ddp::detail::host_data<double>(t, "the ranks' metrics");
  std::vector<double> reduced(p, p + t.numel());
  window = LogWindow{now, micro, ddp_now};
  return {reduced[0], reduced[1], rank_fields(reduced, world)};
}

}  // namespace ddp::train::detail
