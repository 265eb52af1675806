#include "dist/validate.h"

#include <sstream>

namespace ddp::detail {

namespace {
std::string describe(const at::Tensor& t) {
  std::ostringstream s;
  s << t.scalar_type() << t.sizes();
  return s.str();
}
}  // namespace

bool is_supported_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
    case at::kDouble:
    case at::kBFloat16:
    case at::kHalf:
    case at::kInt:
    case at::kLong:
    case at::kByte:
      return true;
    default:
      return false;
  }
}

void check_tensor(const ErrorContext& ctx, const at::Tensor& t, const std::string& name) {
  if (!t.defined()) throw_invalid(ctx, name + " is an undefined tensor");
  // Meta tensors (shapes, no data) reach the backend's staging, which refuses them unless the backend runs there
  // (local: the device-path tests, test_no_host_reads.cpp).
  if (!t.device().is_cpu() && !t.device().is_cuda() && !t.device().is_meta())
    throw_invalid(ctx, name + " is on " + t.device().str() + "; process groups take CPU and CUDA tensors");
  if (t.is_sparse() || t.layout() != at::kStrided) throw_invalid(ctx, name + " must be a dense (strided) tensor");
  if (!is_supported_dtype(t.scalar_type())) {
    std::ostringstream s;
    s << name << " has dtype " << t.scalar_type() << "; supported: Float, Double, BFloat16, Half, Int, Long, Byte";
    throw_invalid(ctx, s.str());
  }
  if (!t.is_contiguous())
    throw_invalid(ctx, name + " (" + describe(t) + ") is not contiguous; pass tensor.contiguous() and copy back");
}

void check_op(const ErrorContext& ctx, ReduceOp op, at::ScalarType dtype) {
  bool bitwise = op == ReduceOp::BAND || op == ReduceOp::BOR || op == ReduceOp::BXOR;
  bool integral = at::isIntegralType(dtype, /*includeBool=*/false);
  std::ostringstream s;
  if (bitwise && !integral) {
    s << to_string(op) << " needs an integer dtype (Int, Long, Byte); got " << dtype;
    throw_invalid(ctx, s.str());
  }
  if (op == ReduceOp::AVG && integral) {
    s << "AVG needs a floating dtype; got " << dtype << " (use SUM and divide)";
    throw_invalid(ctx, s.str());
  }
}

void check_rank(const ErrorContext& ctx, int r, const std::string& name) {
  if (r < 0 || r >= ctx.size)
    throw_invalid(ctx, name + " " + std::to_string(r) + " is out of range [0, " + std::to_string(ctx.size) + ")");
}

void check_same_device(const ErrorContext& ctx, const at::Tensor& t, const std::string& name, const at::Tensor& like,
                       const std::string& like_name) {
  if (t.device() != like.device())
    throw_invalid(ctx, name + " is on " + t.device().str() + " but " + like_name + " is on " + like.device().str() +
                           "; one call's tensors must be on one device");
}

void check_like(const ErrorContext& ctx, const at::Tensor& t, const std::string& name, const at::Tensor& like,
                const std::string& like_name) {
  check_tensor(ctx, t, name);
  if (t.scalar_type() != like.scalar_type() || t.sizes() != like.sizes())
    throw_invalid(ctx, name + " is " + describe(t) + " but " + like_name + " is " + describe(like) +
                           "; they must match in dtype and shape");
  check_same_device(ctx, t, name, like, like_name);
}

void check_list(const ErrorContext& ctx, const std::vector<at::Tensor>& list, const std::string& name, size_t count,
                const at::Tensor& like, const std::string& like_name) {
  if (list.size() != count)
    throw_invalid(ctx, name + " has " + std::to_string(list.size()) + " tensors; expected " + std::to_string(count) +
                           " (one per rank)");
  for (size_t i = 0; i < list.size(); ++i)
    check_like(ctx, list[i], name + "[" + std::to_string(i) + "]", like, like_name);
}

void check_list_dtype(const ErrorContext& ctx, const std::vector<at::Tensor>& list, const std::string& name,
                      size_t count, const at::Tensor& dtype_from, const std::string& dtype_from_name) {
  const at::ScalarType dtype = dtype_from.scalar_type();
  if (list.size() != count)
    throw_invalid(ctx, name + " has " + std::to_string(list.size()) + " tensors; expected " + std::to_string(count) +
                           " (one per rank)");
  for (size_t i = 0; i < list.size(); ++i) {
    std::string n = name + "[" + std::to_string(i) + "]";
    check_tensor(ctx, list[i], n);
    check_same_device(ctx, list[i], n, dtype_from, dtype_from_name);
    if (list[i].scalar_type() != dtype) {
      std::ostringstream s;
      s << n << " has dtype " << list[i].scalar_type() << " but " << dtype_from_name << " has " << dtype;
      throw_invalid(ctx, s.str());
    }
  }
}

void check_group_ranks(const ErrorContext& ctx, const std::vector<int>& ranks) {
  if (ranks.empty()) throw_invalid(ctx, "ranks is empty; a group needs at least one rank");
  for (size_t i = 0; i < ranks.size(); ++i) {
    check_rank(ctx, ranks[i], "ranks[" + std::to_string(i) + "]");
    if (i > 0 && ranks[i] <= ranks[i - 1])
      throw_invalid(ctx, "ranks must be sorted and unique; ranks[" + std::to_string(i) +
                             "] = " + std::to_string(ranks[i]) + " follows " + std::to_string(ranks[i - 1]));
  }
}

int index_in(const std::vector<int>& ranks, int rank) {
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == rank) return static_cast<int>(i);
  return -1;
}

void reduce_into(at::Tensor& acc, const at::Tensor& x, ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:
      acc.add_(x);
      break;
    case ReduceOp::PRODUCT:
      acc.mul_(x);
      break;
    case ReduceOp::MIN:
      at::minimum_out(acc, acc, x);
      break;
    case ReduceOp::MAX:
      at::maximum_out(acc, acc, x);
      break;
    case ReduceOp::BAND:
      acc.bitwise_and_(x);
      break;
    case ReduceOp::BOR:
      acc.bitwise_or_(x);
      break;
    case ReduceOp::BXOR:
      acc.bitwise_xor_(x);
      break;
  }
}

}  // namespace ddp::detail
