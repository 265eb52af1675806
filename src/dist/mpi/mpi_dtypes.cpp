#include "dist/mpi/mpi_dtypes.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <climits>
#include <type_traits>

#include "ddp/dist/half.h"

namespace ddp::mpi {
namespace {

// Reductions of 2-byte floats: computed in float, rounded back to nearest-even.
struct Prod {
  float operator()(float a, float b) const { return a * b; }
};
struct Min {
  // NaN propagates like torch.minimum.
  float operator()(float a, float b) const { return (a != a || a < b) ? a : b; }
};
struct Max {
  float operator()(float a, float b) const { return (a != a || a > b) ? a : b; }
};

// MPI_User_function: inout[i] = in[i] (op) inout[i].
template <typename T, typename F>
void reduce_2byte(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  F f;
  const int n = *len;
  for (int i = 0; i < n; ++i) b[i] = T(f(static_cast<float>(a[i]), static_cast<float>(b[i])));
}

// SUM, the reduction gradients take, runs on fast kernels (ddp/dist/half.h).
void sum_half(void* in, void* inout, int* len, MPI_Datatype*) {
  detail::add_half(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), *len);
}
void sum_bfloat16(void* in, void* inout, int* len, MPI_Datatype*) {
  detail::add_bfloat16(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), *len);
}

// [dtype: 0 half, 1 bfloat16][op: SUM, PRODUCT, MIN, MAX]
MPI_Op custom_ops[2][4] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                           {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};

template <typename T>
void create_ops_for(MPI_Op* ops) {
  MPI_Op_create(std::is_same_v<T, c10::Half> ? &sum_half : &sum_bfloat16, /*commute=*/1, &ops[0]);
  MPI_Op_create(&reduce_2byte<T, Prod>, 1, &ops[1]);
  MPI_Op_create(&reduce_2byte<T, Min>, 1, &ops[2]);
  MPI_Op_create(&reduce_2byte<T, Max>, 1, &ops[3]);
}

int op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:
      return 0;
    case ReduceOp::PRODUCT:
      return 1;
    case ReduceOp::MIN:
      return 2;
    case ReduceOp::MAX:
      return 3;
    default:
      return -1;
  }
}

}  // namespace

MPI_Datatype datatype_of(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kInt:
      return MPI_INT32_T;
    case at::kLong:
      return MPI_INT64_T;
    case at::kByte:
      return MPI_UINT8_T;
    case at::kHalf:
    case at::kBFloat16:
      return MPI_UINT16_T;
    default:
      return MPI_DATATYPE_NULL;  // rejected by detail::check_tensor
  }
}

MPI_Op op_of(ReduceOp op, at::ScalarType dtype) {
  if (dtype == at::kHalf || dtype == at::kBFloat16) {
    int i = op_index(op);
    return i < 0 ? MPI_OP_NULL : custom_ops[dtype == at::kHalf ? 0 : 1][i];
  }
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:
      return MPI_SUM;
    case ReduceOp::PRODUCT:
      return MPI_PROD;
    case ReduceOp::MIN:
      return MPI_MIN;
    case ReduceOp::MAX:
      return MPI_MAX;
    case ReduceOp::BAND:
      return MPI_BAND;
    case ReduceOp::BOR:
      return MPI_BOR;
    case ReduceOp::BXOR:
      return MPI_BXOR;
  }
  return MPI_OP_NULL;
}

void create_custom_ops() {
  create_ops_for<c10::Half>(custom_ops[0]);
  create_ops_for<c10::BFloat16>(custom_ops[1]);
}

int to_count(const ErrorContext& ctx, int64_t n, const std::string& name) {
  if (n > INT_MAX)
    throw_invalid(ctx, name + " has " + std::to_string(n) + " elements; MPI counts are limited to INT_MAX (" +
                           std::to_string(INT_MAX) + "); split it into smaller tensors");
  return static_cast<int>(n);
}

std::string error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(std::max(len, 0)));
}

void check(const ErrorContext& ctx, int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  throw CommError(ctx.prefix() + call + " failed: " + error_string(rc));
}

}  // namespace ddp::mpi
