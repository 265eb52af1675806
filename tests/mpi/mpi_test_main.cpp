// The mpi backend tests, run under mpirun with 1 to 4 ranks. Every rank runs
// every test and prints its own gtest summary; the ranks then agree on the
// outcome so that all exit non-zero when any rank failed.
#include <cstdio>
#include <cstdlib>

#include "ddp/dist/backend.h"
#include "mpi_test_util.h"

namespace ddp::mpitest {
namespace {
GroupPtr g_world;
}  // namespace

ProcessGroup& world() { return *g_world; }
GroupPtr world_ptr() { return g_world; }

const std::vector<at::ScalarType>& all_dtypes() {
  static const std::vector<at::ScalarType> types = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                                    at::kInt,   at::kLong,   at::kByte};
  return types;
}

bool is_float(at::ScalarType t) { return at::isFloatingType(t); }

std::string where(const ProcessGroup& g, const std::string& what) {
  return "rank " + std::to_string(g.rank()) + "/" + std::to_string(g.size()) + " " + what;
}

void expect_values(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  at::Tensor a = actual.to(at::kDouble).reshape({-1});
  at::Tensor e = expected.to(at::kDouble).reshape({-1});
  if (a.numel() != e.numel()) {
    ADD_FAILURE() << what << ": " << a.numel() << " elements, expected " << e.numel();
    return;
  }
  if (!at::equal(a, e)) {
    at::Tensor bad = (a != e).nonzero();
    int64_t i = bad[0][0].item<int64_t>();
    ADD_FAILURE() << what << ": element " << i << " is " << a[i].item<double>() << ", expected " << e[i].item<double>()
                  << " (" << bad.size(0) << " wrong)";
  }
}

at::Tensor pattern(int64_t n) { return at::arange(n, at::kLong).remainder(5).add(1).to(at::kDouble); }

std::string prefix(const ProcessGroup& g, const std::string& op) {
  return "[mpi] rank " + std::to_string(g.rank()) + "/" + std::to_string(g.size()) + " " + op + ": ";
}

}  // namespace ddp::mpitest

int main(int argc, char** argv) {
  ::testing::GTEST_FLAG(color) = "no";  // mpirun's pty would turn colours on
  ::testing::InitGoogleTest(&argc, argv);
  ddp::BackendOptions opts;
  opts.rank = -1;  // take rank and size from MPI
  opts.world_size = -1;
  opts.timeout = std::chrono::seconds(60);
  ddp::mpitest::g_world = ddp::create_backend("mpi", opts);
  auto& g = *ddp::mpitest::g_world;

  int rc = RUN_ALL_TESTS();
  // To check the plumbing below by hand: DDP_MPI_TEST_FAIL_RANK=1 fails rank 1.
  if (const char* f = std::getenv("DDP_MPI_TEST_FAIL_RANK"); f && std::atoi(f) == g.rank()) {
    std::printf("[rank %d/%d] failing on request (DDP_MPI_TEST_FAIL_RANK)\n", g.rank(), g.size());
    rc = 1;
  }

  // Agree on the outcome: every rank exits 1 when any rank failed.
  at::Tensor failed = at::full({1}, rc != 0 ? 1 : 0, at::kInt);
  try {
    ddp::AllReduceOptions o;
    o.op = ddp::ReduceOp::MAX;
    g.all_reduce(failed, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "could not agree on the outcome: %s\n", e.what());
    failed.fill_(1);
  }
  const bool any_failed = failed.item<int>() != 0;
  std::printf("[rank %d/%d] this rank %s; %s\n", g.rank(), g.size(), rc ? "FAILED" : "passed",
              any_failed ? "some rank FAILED" : "all ranks passed");
  std::fflush(stdout);
  ddp::mpitest::g_world.reset();
  return any_failed ? 1 : 0;
}
