// PowerSGD gradient compression (Vogels et al. 2019), PyTorch's powerSGD_hook
// and batched_powerSGD_hook with PowerSGDState's options and semantics.
//
//   ddp::PowerSGDOptions o;
//   o.matrix_approximation_rank = 4;
//   o.start_powerSGD_iter = 10;          // plain all_reduce for the first 10 steps
//   model.register_comm_hook(std::make_shared<ddp::PowerSGDHook>(o));
//
// Each gradient with n rows and m columns (a conv weight is viewed as
// [out, in*kh*kw]) is sent as two rank-r factors P (n x r) and Q (m x r)
// instead of n*m values: two all_reduces per bucket (P, then Q), plus one of
// the tensors not worth compressing (biases, small matrices). Error feedback
// adds what compression lost in the last step to this step's gradients.
// The random initial Q comes from PyTorch's stream: a NumPy RandomState(seed)
// draws one seed per bucket, which seeds a CPU generator for randn, so a run
// equals python3-torch's given the same model, buckets and data.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ddp/parallel/comm_hook.h"

namespace ddp {

struct PowerSGDOptions {  // PyTorch's PowerSGDState arguments, same defaults
  int64_t matrix_approximation_rank = 1;
  int64_t start_powerSGD_iter = 1000;  // must be > 1 with error feedback or warm start
  double min_compression_rate = 2;     // compress only if (n + m) * r * rate < n * m
  bool use_error_feedback = true;
  bool warm_start = true;  // reuse last step's Q (re-orthogonalized)
  double orthogonalization_epsilon = 0;
  uint32_t random_seed = 0;
  bool batch_tensors_with_same_shape = false;  // one bmm per shape instead of per tensor
};

// NumPy's legacy np.random.RandomState: MT19937 seeded by init_genrand, and
// randint(high) by masked rejection over 32-bit draws.
class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed = 0);
  uint32_t next_uint32();
  int64_t randint(int64_t high);  // uniform in [0, high), 0 < high <= 2^32
  at::Tensor state() const;       // 625 int64: the 624 words, then the position
  void set_state(const at::Tensor& s);

 private:
  uint32_t mt_[624];
  int pos_ = 624;
};

// What the hook keeps between steps, per bucket index (PyTorch's dicts).
struct PowerSGDState {
  explicit PowerSGDState(PowerSGDOptions options);
  PowerSGDOptions options;
  NumpyRandomState rng;
  std::map<size_t, at::Tensor> error, p, q;
  std::map<size_t, at::Tensor> scratch, padded;  // memory reused across steps (not state)
  int64_t iter = 0;                              // completed steps (the last bucket counts them)
  int64_t numel_before_compression = 0, numel_after_compression = 0;
  double compression_rate() const;  // before / after, 0 before compression starts
};

class PowerSGDHook final : public CommHook {
 public:
  // batched: PyTorch's batched_powerSGD_hook, the whole bucket as one square
  // matrix (faster, less accurate unless rank 1). Python 1.13's version of it
  // fails an assertion in _orthogonalize; this one does what it documents.
  explicit PowerSGDHook(PowerSGDOptions options, bool batched = false);
  std::string name() const override { return batched_ ? "batched_powersgd" : "powersgd"; }
  Work run(ProcessGroup& group, GradBucket& bucket) override;
  // {"iter", "rng", "p": {bucket: P}, "q": {bucket: Q}, "error": {bucket: this rank's error}}.
  c10::IValue state_dict() const override;
  void load_state_dict(const c10::IValue& state) override;
  const PowerSGDState& state() const { return *state_; }

 private:
  Work run_layerwise(ProcessGroup& group, GradBucket& bucket);
  Work run_batched(ProcessGroup& group, GradBucket& bucket);
  std::shared_ptr<PowerSGDState> state_;
  bool batched_;
};

// "powersgd[:rank=R[,start=S][,min_rate=X][,seed=N][,batched=0|1][,warm_start=0|1][,error_feedback=0|1]]"
// as ddp-train's --comm-hook takes it; InvalidArgument names what is wrong.
PowerSGDOptions parse_powersgd_spec(const std::string& spec, bool* batched = nullptr);

}  // namespace ddp
