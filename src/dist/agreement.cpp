#include "dist/agreement.h"

#include "ddp/dist/launch_env.h"
#include "dist/hook_waits.h"
#include "dist/host_memory.h"
#include "dist/wait_report.h"

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
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    case at::kShort:
      return "int16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(static_cast<at::ScalarType>(code));
  }
}

// FNV-1a over the fingerprint's bytes.
int64_t hash_of(const int64_t* f) {
  uint64_t h = 14695981039346656037ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(f);
  for (size_t i = 0; i < kFingerprintLength * sizeof(int64_t); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return static_cast<int64_t>(h);
}

// Throws, naming every rank whose fingerprint differs from rank 0's, if any does. `all`: world rows.
void compare(const Call& c, const int64_t* all, CallCheck level) {
  const int world = c.ctx.size;
  auto row = [&](int r) { return all + r * kFingerprintLength; };
  std::ostringstream views;
  bool differ = false;
  for (int r = 1; r < world; ++r) {
    if (std::memcmp(row(r), row(0), kFingerprintLength * sizeof(int64_t)) == 0) continue;
    if (!differ) views << "rank 0: " << describe_fingerprint(row(0));
    views << "; rank " << r << ": " << describe_fingerprint(row(r));
    differ = true;
  }
  if (!differ) return;
  const std::string how = level == CallCheck::kDetail
                              ? "DDP_DEBUG=DETAIL compares every collective"
                              : "ranks compare a hash of every collective first; DDP_DEBUG=OFF turns that off";
  throw Error(c.ctx.prefix() + "ranks disagree on collective #" + std::to_string(c.seq) + ": " + views.str() + " (" +
              how +
              "; every rank must call the same collectives, with the same dtypes and shapes, in the "
              "same order)");
}

// Gathers `mine` (int64, n values) from every rank over `b`, waiting like the call itself: a long wait here is
// the call's own (a late peer), reported as such.
at::Tensor gather(Backend& b, const Call& c, const at::Tensor& mine) {
  at::Tensor all = at::empty({c.ctx.size * mine.numel()}, at::kLong);
  Call inner = c;
  inner.async = false;
  WaitScope waiting(inner);
  b.all_gather(all, mine, inner).wait(inner.timeout);
  return all;
}

}  // namespace

CallCheck default_call_check(bool host_gathers) {
  for (const launch_env::EnvVar* v : {&launch_env::kDebug, &launch_env::kTorchDebug}) {
    const auto level = launch_env::choice(*v);
    if (!level) continue;
    if (*level == "DETAIL") return CallCheck::kDetail;
    if (*level == "OFF") return CallCheck::kOff;
    break;  // INFO
  }
  return host_gathers ? CallCheck::kHash : CallCheck::kOff;
}

at::Tensor fingerprint(const Call& c, const at::Tensor& t, int reduce_op, int root) {
  const bool shape = c.op != OpType::kAllToAll;
  at::Tensor f = at::full({kFingerprintLength}, -1, at::kLong);
  int64_t* p = host_data<int64_t>(f, "the call check");
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
        if (d < kMaxDims)
          s << f[kDims + d];
        else {
          s << "...";
          break;
        }
      }
      s << "]";
    }
  }
  if (f[kReduceOp] >= 0) s << " " << to_string(static_cast<ReduceOp>(f[kReduceOp]));
  if (f[kRoot] >= 0) s << " root " << f[kRoot];
  return s.str();
}

void check_agreement(Backend& b, const Call& c, const at::Tensor& t, int reduce_op, int root, CallCheck level) {
  if (level == CallCheck::kOff || c.ctx.size <= 1) return;
  AllowHookWait exempt;  // a debug aid's exchange, synchronous by design (hook_waits.h)
  at::Tensor mine = fingerprint(c, t, reduce_op, root);
  if (level == CallCheck::kHash) {
    const int64_t hash = hash_of(host_data<int64_t>(mine, "the call check"));
    at::Tensor hashes = gather(b, c, at::full({1}, hash, at::kLong));
    const int64_t* h = host_data<int64_t>(hashes, "the call check");
    if (std::all_of(h, h + c.ctx.size, [&](int64_t x) { return x == h[0]; })) return;
  }
  // Every rank gets here alike: all saw the same hashes.
  at::Tensor all = gather(b, c, mine);
  compare(c, host_data<int64_t>(all, "the call check"), level);
}

}  // namespace ddp::detail

namespace ddp {
const char* to_string(CallCheck c) {
  switch (c) {
    case CallCheck::kOff:
      return "off";
    case CallCheck::kHash:
      return "hash";
    case CallCheck::kDetail:
      return "detail";
  }
  return "?";
}
}  // namespace ddp
