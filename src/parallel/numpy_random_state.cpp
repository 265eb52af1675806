// NumPy's legacy RandomState, as far as PowerSGD needs it: MT19937 seeded with
// init_genrand (numpy/random/src/mt19937/mt19937.c, mt19937_seed), randint by
// masked rejection (numpy/random/src/distributions/distributions.c,
// buffered_bounded_masked_uint32; 32-bit draws are not buffered).
#include <ATen/ATen.h>

#include "ddp/errors.h"
#include "ddp/parallel/powersgd.h"
#include "dist/host_memory.h"

namespace ddp {

namespace {
constexpr int kN = 624, kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfU, kUpper = 0x80000000U, kLower = 0x7fffffffU;
}  // namespace

NumpyRandomState::NumpyRandomState(uint32_t seed) {
  mt_[0] = seed;
  for (int i = 1; i < kN; ++i) mt_[i] = 1812433253U * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  pos_ = kN;
}

uint32_t NumpyRandomState::next_uint32() {
  if (pos_ >= kN) {  // regenerate the 624 words
    for (int i = 0; i < kN; ++i) {
      const uint32_t y = (mt_[i] & kUpper) | (mt_[(i + 1) % kN] & kLower);
      mt_[i] = mt_[(i + kM) % kN] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    }
    pos_ = 0;
  }
  uint32_t y = mt_[pos_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= y >> 18;
  return y;
}

int64_t NumpyRandomState::randint(int64_t high) {
  if (high <= 0 || high > (int64_t(1) << 32))
    throw InvalidArgument("NumpyRandomState::randint: high must be in [1, 2^32], got " + std::to_string(high));
  const uint64_t rng = static_cast<uint64_t>(high - 1);  // the largest value, as NumPy's "rng"
  if (rng == 0) return 0;
  uint64_t mask = rng;  // the smallest 2^k - 1 >= rng
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  uint64_t v;
  while ((v = (next_uint32() & mask)) > rng) {
  }
  return static_cast<int64_t>(v);
}

at::Tensor NumpyRandomState::state() const {
  at::Tensor s = at::empty({kN + 1}, at::kLong);
  int64_t* d = detail::host_data<int64_t>(s, "NumpyRandomState");
  for (int i = 0; i < kN; ++i) d[i] = mt_[i];
  d[kN] = pos_;
  return s;
}

void NumpyRandomState::set_state(const at::Tensor& s) {
  if (s.scalar_type() != at::kLong || s.dim() != 1 || s.numel() != kN + 1)
    throw InvalidArgument("NumpyRandomState: a state is 625 int64 values (624 MT19937 words, then the position)");
  at::Tensor c = s.contiguous();
  const int64_t* d = detail::host_data<int64_t>(c, "NumpyRandomState");
  if (d[kN] < 0 || d[kN] > kN)
    throw InvalidArgument("NumpyRandomState: position " + std::to_string(d[kN]) + " out of [0, 624]");
  for (int i = 0; i < kN; ++i) mt_[i] = static_cast<uint32_t>(d[i]);
  pos_ = static_cast<int>(d[kN]);
}

}  // namespace ddp
