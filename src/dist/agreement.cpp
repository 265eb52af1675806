#include "dist/agreement.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace ddp::detail {
namespace {

constexpr int kMaxDims = 8;

// Layout of a fingerprint.
enum Field { kSeq, kOp, kDtype, kReduceOp, kRoot, kNdim, kNumel, kDims };
static_assert(kDims + kMaxDims <= kFingerprintLength, "fingerprint too short");

// PyTorch's names: float32, int64, ...
std::string dtype_name(int64_t code) {
  switch (static_cast<at::ScalarType>(code)) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(static_cast<at::ScalarType>(code));
  }
}

bool is_detail(const char* v) {
  if (!v) return false;
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::toupper(ch); });
  return s == "DETAIL";
}

}  // namespace

bool agreement_checks_enabled() {
  return is_detail(std::getenv("DDP_DEBUG")) || is_detail(std::getenv("TORCH_DISTRIBUTED_DEBUG"));
}

at::Tensor fingerprint(const Call& c, const at::Tensor& t, int reduce_op, int root) {
  const bool shape = c.op != OpType::kAllToAll;
  at::Tensor f = at::full({kFingerprintLength}, -1, at::kLong);
  int64_t* p = f.data_ptr<int64_t>();
  p[kSeq] = c.seq;
  p[kOp] = static_cast<int64_t>(c.op);
  p[kReduceOp] = reduce_op;
  p[kRoot] = root;
  if (t.defined()) {
    p[kDtype] = static_cast<int64_t>(t.scalar_type());
    if (shape) {
      p[kNdim] = t.dim();
      p[kNumel] = t.numel();
      for (int64_t d = 0; d < std::min<int64_t>(t.dim(), kMaxDims); ++d) p[kDims + d] = t.size(d);
    }
  }
  return f;
}

std::string describe_fingerprint(const int64_t* f) {
  std::ostringstream s;
  s << "#" << f[kSeq] << " " << (f[kOp] >= 0 && f[kOp] < kNumOpTypes ? to_string(static_cast<OpType>(f[kOp])) : "?");
  if (f[kDtype] >= 0) {
    s << " " << dtype_name(f[kDtype]);
    if (f[kNdim] >= 0) {
      s << "[";
      for (int64_t d = 0; d < f[kNdim]; ++d) {
        if (d) s << ", ";
        if (d < kMaxDims) s << f[kDims + d];
        else { s << "..."; break; }
      }
      s << "]";
    }
  }
  if (f[kReduceOp] >= 0) s << " " << to_string(static_cast<ReduceOp>(f[kReduceOp]));
  if (f[kRoot] >= 0) s << " root " << f[kRoot];
  return s.str();
}

void check_agreement(Backend& b, const Call& c, const at::Tensor& t, int reduce_op, int root) {
  const int world = c.ctx.size;
  if (world <= 1) return;
  at::Tensor mine = fingerprint(c, t, reduce_op, root);
  at::Tensor all = at::empty({world * kFingerprintLength}, at::kLong);
  Call inner = c;
  inner.async = false;
  b.all_gather(all, mine, inner).wait(inner.timeout);
  const int64_t* p = all.data_ptr<int64_t>();
  auto row = [&](int r) { return p + r * kFingerprintLength; };
  std::ostringstream views;
  bool differ = false;
  for (int r = 1; r < world; ++r) {
    if (std::memcmp(row(r), row(0), kFingerprintLength * sizeof(int64_t)) == 0) continue;
    if (!differ) views << "rank 0: " << describe_fingerprint(row(0));
    views << "; rank " << r << ": " << describe_fingerprint(row(r));
    differ = true;
  }
  if (!differ) return;
  throw Error(c.ctx.prefix() + "ranks disagree on collective #" + std::to_string(c.seq) + ": " + views.str() +
              " (DDP_DEBUG=DETAIL compares every collective; every rank must call the same collectives, "
              "with the same dtypes and shapes, in the same order)");
}

}  // namespace ddp::detail
