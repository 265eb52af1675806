// Uses the installed headers and library: a world of one, one all_reduce, a schedule.
#include <ATen/ATen.h>
#include <ddp/ddp.h>
#include <ddp/train.h>

#include <cstdio>

int main() {
  auto g = ddp::init_process_group();
  at::Tensor t = at::full({4}, 3.0);
  g->all_reduce(t);
  std::printf("consumer: %s world %d, sum %.1f\n", g->backend().c_str(), g->size(), t.sum().item<double>());
  const double lr = ddp::train::LrSchedule::parse("cosine")(0, 10);  // the training layer links too
  return t.sum().item<double>() == 12.0 && lr == 1.0 ? 0 : 1;
}
