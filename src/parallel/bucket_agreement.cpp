#include "parallel/bucket_agreement.h"

#include <ATen/ATen.h>

#include <functional>
#include <sstream>

#include "ddp/dist/collectives.h"
#include "ddp/dist/errors.h"
#include "dist/error_context.h"

namespace ddp::detail {

std::string describe_buckets(const std::vector<at::Tensor>& flats) {
  std::ostringstream s;
  s << flats.size() << (flats.size() == 1 ? " bucket: " : " buckets: ");
  for (size_t i = 0; i < flats.size(); ++i)
    s << (i ? ", " : "") << c10::toString(flats[i].scalar_type()) << "[" << flats[i].numel() << "]";
  return s.str();
}

void check_bucket_agreement(ProcessGroup& group, const std::vector<at::Tensor>& flats, const char* where) {
  const int world = group.size();
  if (world <= 1) return;
  const std::string mine = describe_buckets(flats);
  // Rank 0 gathers the hashes and scatters its verdict: gather and scatter are not
  // counted in ProcessGroup::traffic(), which measures the gradients' reduction.
  at::Tensor hash = at::full({1}, static_cast<int64_t>(std::hash<std::string>{}(mine)), at::kLong);
  std::vector<at::Tensor> all, verdicts;
  if (group.rank() == 0)
    for (int r = 0; r < world; ++r) all.push_back(at::empty({1}, at::kLong));
  group.gather(hash, all);
  if (group.rank() == 0) {
    bool same = true;
    for (int r = 1; r < world; ++r) same = same && all[r].item<int64_t>() == all[0].item<int64_t>();
    for (int r = 0; r < world; ++r) verdicts.push_back(at::full({1}, same ? 1 : 0, at::kLong));
  }
  at::Tensor verdict = at::empty({1}, at::kLong);
  group.scatter(verdict, verdicts);
  if (verdict.item<int64_t>() == 1) return;
  std::vector<std::string> views = all_gather_bytes(mine, group.shared_from_this());
  std::ostringstream s;
  s << "rank 0: " << views[0];
  for (int r = 1; r < world; ++r)
    if (views[r] != views[0]) s << "; rank " << r << ": " << views[r];
  ErrorContext ctx{group.backend(), group.rank(), group.size(), where};
  throw Error(ctx.prefix() + "ranks disagree on the gradient buckets: " + s.str() +
              " (every rank must construct DDP with the same model, dtypes and bucket_cap_mb / "
              "first_bucket_cap_mb)");
}

}  // namespace ddp::detail
