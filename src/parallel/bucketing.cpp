#include "parallel/bucketing.h"

#include <map>
#include <set>

namespace ddp::detail {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<at::Tensor>& params, const std::vector<size_t>& order,
                                                size_t first_cap, size_t cap) {
  std::vector<std::vector<size_t>> buckets;
  std::map<at::ScalarType, size_t> open;   // dtype -> index of its open bucket
  std::map<at::ScalarType, size_t> bytes;  // bytes in that bucket
  std::set<at::ScalarType> closed_once;    // dtypes whose first bucket is closed
  for (size_t i : order) {
    const at::ScalarType dtype = params[i].scalar_type();
    if (!open.count(dtype)) {
      buckets.emplace_back();
      open[dtype] = buckets.size() - 1;
      bytes[dtype] = 0;
    }
    buckets[open[dtype]].push_back(i);
    bytes[dtype] += params[i].numel() * params[i].element_size();
    if (bytes[dtype] >= (closed_once.count(dtype) ? cap : first_cap)) {
      open.erase(dtype);
      closed_once.insert(dtype);
    }
  }
  return buckets;
}

}  // namespace ddp::detail
