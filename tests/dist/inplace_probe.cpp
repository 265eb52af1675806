// A program for in-place recovery tests, run under ddprun --recovery inplace:
//   inplace_probe STEPS R:S[:stop|:rebuild|:slow],...
// Rank R SIGKILLs itself (":stop": SIGSTOPs itself) before step S (":rebuild": when a loss makes it rebuild at or
// after step S, before it does: a second loss while the others rebuild; ":slow": it stays alive and sleeps before
// step S for 3 heartbeat timeouts, as a long save would, so that it comes late to a rebuild). Every step all-reduces
// (id + 1) * (step + 1) over 4096 doubles, checks the sum against the current members, then sleeps 20 ms. After a
// rebuild the members go on from the highest step any of them completed (a member may have completed the failed one).
// Prints "member I: STEPS steps checked, generation G, members A,B" and exits 0; a wrong sum exits 3; a ddp::Error out
// of the membership (too few left, counted lost) is printed and exits 1.
#include <ATen/ATen.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "ddp/dist.h"
#include "ddp/dist/membership.h"

namespace {

struct Fault {
  int step = -1;
  std::string how;  // kill, stop, rebuild, slow; "" once a slow one has slept
};

std::map<int, Fault> parse_faults(const std::string& spec) {
  std::map<int, Fault> out;
  std::istringstream s(spec);
  for (std::string item; std::getline(s, item, ',');) {
    Fault f;
    const auto a = item.find(':'), b = item.find(':', a + 1);
    f.step = std::stoi(item.substr(a + 1, b - a - 1));
    f.how = b == std::string::npos ? "kill" : item.substr(b + 1);
    if (f.how != "kill" && f.how != "stop" && f.how != "rebuild" && f.how != "slow")
      throw std::invalid_argument("unknown fault '" + f.how + "' in " + item);
    out[std::stoi(item.substr(0, a))] = f;
  }
  return out;
}

std::string join(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

int run(int steps, const std::map<int, Fault>& faults) {
  auto m = ddp::Membership::from_environment();
  const int id = m->id();
  Fault fault = faults.count(id) ? faults.at(id) : Fault{};
  int step = 0;
  while (step < steps) {
    if (fault.step == step && fault.how == "slow") {
      const char* h = std::getenv("DDP_HEARTBEAT_TIMEOUT");  // ddprun sets it
      const double s = 3 * (h ? std::stod(h) : 30.0);
      std::printf("member %d: sleeps %g s before step %d\n", id, s, step);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::duration<double>(s));
      fault.how.clear();  // once: the step may come again after the rebuild
    } else if (fault.step == step && (fault.how == "kill" || fault.how == "stop")) {
      std::printf("member %d: %s itself before step %d\n", id, fault.how == "stop" ? "stops" : "kills", step);
      std::fflush(stdout);
      std::raise(fault.how == "stop" ? SIGSTOP : SIGKILL);
    }
    try {
      at::Tensor t = at::full({4096}, static_cast<double>((id + 1) * (step + 1)), at::kDouble);
      m->group()->all_reduce(t);
      double want = 0;
      for (int member : m->members()) want += (member + 1) * (step + 1);
      if (t[4095].item<double>() != want) {
        std::printf("member %d: step %d: sum %g, expected %g for members %s\n", id, step, t[4095].item<double>(), want,
                    join(m->members()).c_str());
        return 3;
      }
      ++step;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } catch (const ddp::CommError& e) {
      if (fault.how == "rebuild" && step >= fault.step) {
        std::printf("member %d: kills itself as the others rebuild, at step %d\n", id, step);
        std::fflush(stdout);
        std::raise(SIGKILL);
      }
      m->rebuild(e.what());
      at::Tensor s = at::full({1}, step, at::kLong);
      ddp::AllReduceOptions max;
      max.op = ddp::ReduceOp::MAX;
      m->group()->all_reduce(s, max);
      step = static_cast<int>(s.item<int64_t>());
    }
  }
  std::printf("member %d: %d steps checked, generation %d, members %s\n", id, steps, m->generation(),
              join(m->members()).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: inplace_probe STEPS R:S[:stop|:rebuild|:slow],...\n");
    return 2;
  }
  try {
    return run(std::stoi(argv[1]), parse_faults(argv[2]));
  } catch (const ddp::Error& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "inplace_probe: %s; usage: inplace_probe STEPS R:S[:stop|:rebuild|:slow],...\n", e.what());
    return 2;
  }
}
