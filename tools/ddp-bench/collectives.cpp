// ddp-bench collectives: time, algorithm bandwidth and bus bandwidth of each
// collective per message size, like nccl-tests. "size" is the larger of the
// operation's input and output (all_gather: the gathered result).
// busbw = algbw * factor: all_reduce 2(W-1)/W, all_gather and reduce_scatter
// (W-1)/W, broadcast 1. A time is the maximum over ranks of the mean per
// call over `iters` calls; the best of --rounds such measurements is kept.
// --device cuda: the buffers on the rank's GPU (auto: nccl), each timing ends once the GPU ran the calls.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench.h"
#include "ddp/dist.h"
#include "ddp/dist/device.h"
#include "ddp/dist/launch_env.h"
#include "ddp/train/machine.h"

namespace ddp::bench {

void write_json(const std::string& path, const nlohmann::ordered_json& doc) {
  std::ofstream f(path);
  f << doc.dump(1) << "\n";
  if (!f) throw Error("cannot write " + path);
}

void spin_ms(double ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
  while (std::chrono::steady_clock::now() < until) {
  }
}

namespace {

struct Options {
  std::string backend = "auto";
  std::string device = "cpu";  // where the buffers live: cpu | cuda | cuda:N | auto
  long long min_bytes = 4, max_bytes = 64ll << 20;
  std::vector<std::string> ops = {"all_reduce", "all_gather", "broadcast", "reduce_scatter"};
  std::string json;
  bool raw_mpi = false;
  bool raw_c10d = false;
  int rounds = 3;           // per size, ours and the raw peer alternate; the best round counts
  bool call_check = false;  // rounds alternate the group's call check off and on (hash): its cost per call
  double gap_ms = 0;        // busy time before each timed call, as a training step's compute between reductions
};

// "4", "64K", "16M", "1G": bytes.
long long parse_bytes(const std::string& flag, const std::string& v) {
  size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (...) {
    used = 0;
  }
  std::string unit = v.substr(used);
  long long mult = unit == "" || unit == "B" ? 1
                   : unit == "K"             ? 1 << 10
                   : unit == "M"             ? 1 << 20
                   : unit == "G"             ? 1 << 30
                                             : 0;
  if (used == 0 || mult == 0 || n <= 0)
    throw CLI::ValidationError(flag + " '" + v + "' must be a positive size like 4, 64K or 16M",
                               CLI::ExitCodes::ValidationError);
  return n * mult;
}

// Same on every rank: enough iterations for small sizes, a few for large ones.
int iterations(long long bytes) { return static_cast<int>(std::max(5LL, std::min(200LL, (1LL << 26) / bytes))); }

double bus_factor(const std::string& op, int w) {
  if (op == "all_reduce") return 2.0 * (w - 1) / w;
  if (op == "broadcast") return 1.0;
  return double(w - 1) / w;
}

struct Row {
  std::string op;
  long long bytes;
  double us, algbw, busbw, raw_us;
};

double time_op(ProcessGroup& g, const std::string& op, long long count, int iters, double gap_ms, at::Tensor& in,
               at::Tensor& out) {
  const int w = g.size();
  std::vector<at::Tensor> parts;
  if (op == "all_gather") parts = out.chunk(w);
  if (op == "reduce_scatter") parts = in.chunk(w);
  auto once = [&] {
    if (op == "all_reduce")
      g.all_reduce(out);
    else if (op == "broadcast")
      g.broadcast(out);
    else if (op == "all_gather")
      g.all_gather(parts, in.narrow(0, 0, count / w));
    else if (op == "reduce_scatter") {
      at::Tensor o = out.narrow(0, 0, count / w);
      g.reduce_scatter(o, parts);
    }
  };
  const at::Device device = out.device();
  once();  // warm-up
  synchronize(device);
  double us = 0;
  if (gap_ms > 0) {
    // Each call alone: the ranks spin (touching no memory), meet, then time one call.
    for (int i = 0; i < iters; ++i) {
      spin_ms(gap_ms);
      g.barrier();
      auto t0 = std::chrono::steady_clock::now();
      once();
      synchronize(device);  // a GPU's: the host returned once the call was queued
      us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    }
  } else {
    g.barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) once();
    synchronize(device);
    us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  }
  at::Tensor t = at::full({1}, us, at::kDouble);
  g.all_reduce(t, ddp::op(ReduceOp::MAX));
  return t.item<double>();
}

}  // namespace

int run_collectives(const Options& o) {
  if (o.min_bytes > o.max_bytes) throw std::invalid_argument("--min-bytes is larger than --max-bytes");
  InitOptions init;
  init.backend = o.backend;
  init.device = o.device;
  std::shared_ptr<RawGloo> raw_gloo;
#ifdef DDP_HAVE_GLOO
  if (o.raw_c10d) {
    // One store for both: ours rendezvous on it, the raw peer under a prefix.
    if (o.backend != "gloo") throw std::invalid_argument("--raw-c10d needs --backend gloo");
    namespace le = launch_env;
    auto need = [](auto value, const le::EnvVar& v) {
      if (!value) throw std::invalid_argument(std::string("--raw-c10d runs under ddprun: ") + v.name + " is not set");
      return *value;
    };
    init.rank = need(le::count(le::kRank), le::kRank);
    init.world_size = need(le::count(le::kWorldSize), le::kWorldSize);
    init.store = make_tcp_store(need(le::text(le::kMasterAddr), le::kMasterAddr),
                                need(le::count(le::kMasterPort), le::kMasterPort), init.rank == 0, init.world_size,
                                std::chrono::minutes(2));
  }
#endif
  auto g = init_process_group(init);
  const at::Device device = resolve_device(o.device);
  if ((o.raw_mpi || o.raw_c10d) && !device.is_cpu())
    throw std::invalid_argument("--raw-mpi and --raw-c10d time CPU buffers: leave --device at cpu");
  const int w = g->size();
  const bool lead = g->rank() == 0;
  if (o.raw_mpi && g->backend() != "mpi")
    throw std::invalid_argument("--raw-mpi needs --backend mpi (it times MPI_COMM_WORLD directly)");
#ifdef DDP_HAVE_GLOO
  if (o.raw_c10d) raw_gloo = make_raw_gloo(init.store, g->rank(), w);
#else
  if (o.raw_c10d) throw std::invalid_argument("--raw-c10d: this build has no gloo");
#endif
  if (lead) {
    std::printf("# ddp-bench collectives: backend %s, %d ranks, float32 on %s, time = max over ranks",
                g->backend().c_str(), w, device.str().c_str());
    if (o.gap_ms > 0) std::printf(", each call after %g ms of busy time and a barrier", o.gap_ms);
    std::printf("\n");
    print_machine_lines();
    std::printf("# %-14s %12s %10s %12s %12s%s\n", "op", "size(B)", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                o.raw_mpi      ? "  mpi-raw(us)   ours/raw"
                : o.raw_c10d   ? " c10d-raw(us)   ours/raw"
                : o.call_check ? " no-check(us)  check/none"
                               : "");
  }
  std::vector<Row> rows;
  for (const auto& op : o.ops) {
    for (long long bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
      long long count = bytes / 4;
      if (count < w || (op != "all_reduce" && op != "broadcast" && count % w != 0)) continue;
      at::Tensor in = at::ones({count}, at::TensorOptions(device));
      at::Tensor out = at::ones({count}, at::TensorOptions(device));
      int iters = o.gap_ms > 0 ? std::min(iterations(bytes), 20) : iterations(bytes);
      // Rounds alternate ours and the raw peer, so both see the same machine.
      const bool peer = o.raw_mpi || (raw_gloo && op != "reduce_scatter") || o.call_check;
      double us = 1e300, raw = peer ? 1e300 : -1;
      for (int round = 0; round < o.rounds; ++round) {
        if (o.call_check) g->set_call_check(CallCheck::kHash);  // alike on every rank, between calls
        us = std::min(us, time_op(*g, op, count, iters, o.gap_ms, in, out));
        if (o.call_check) {
          g->set_call_check(CallCheck::kOff);
          raw = std::min(raw, time_op(*g, op, count, iters, o.gap_ms, in, out));
        }
#ifdef DDP_HAVE_MPI
        if (o.raw_mpi) raw = std::min(raw, raw_mpi_time_us(op, in.data_ptr(), out.data_ptr(), count, iters, o.gap_ms));
#endif
        if (peer && raw_gloo) raw = std::min(raw, raw_gloo_time_us(*raw_gloo, op, in, out, count, iters));
      }
      double algbw = bytes / us / 1e3;
      Row r{op, bytes, us, algbw, algbw * bus_factor(op, w), raw};
      rows.push_back(r);
      if (lead) {
        std::printf("  %-14s %12lld %10.1f %12.3f %12.3f", op.c_str(), bytes, us, r.algbw, r.busbw);
        if (raw > 0) std::printf("  %11.1f %10.3f", raw, us / raw);
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  if (lead && !o.json.empty()) {
    nlohmann::ordered_json doc = {{"tool", "ddp-bench collectives"},
                                  {"cpu", train::describe(train::cpu_info())},
                                  {"backend", g->backend()},
                                  {"device", device.str()},
                                  {"world", w},
                                  {"dtype", "float32"},
                                  {"gap_ms", o.gap_ms}};
    auto& results = doc["results"] = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::ordered_json row = {
          {"op", r.op}, {"bytes", r.bytes}, {"time_us", r.us}, {"algbw_gbps", r.algbw}, {"busbw_gbps", r.busbw}};
      if (r.raw_us > 0)
        row[o.call_check ? "no_check_time_us" : o.raw_c10d ? "raw_c10d_time_us" : "raw_mpi_time_us"] = r.raw_us;
      results.push_back(row);
    }
    write_json(o.json, doc);
  }
  destroy_process_group();
  return 0;
}

void add_collectives_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("collectives", "time, algbw and busbw of each collective per message size");
  sub->add_option("--backend", o->backend, "gloo | mpi | nccl | auto")->capture_default_str();
  sub->add_option("--device", o->device, "cpu | cuda (the rank's GPU) | cuda:N | auto: where the buffers live")
      ->check(refused_by([](const std::string& spec) { check_device_spec(spec); }))
      ->capture_default_str();
  sub->add_option_function<std::string>(
      "--min-bytes", [o](const std::string& v) { o->min_bytes = parse_bytes("--min-bytes", v); },
      "smallest message (4, 64K, 16M) [default 4]");
  sub->add_option_function<std::string>(
      "--max-bytes", [o](const std::string& v) { o->max_bytes = parse_bytes("--max-bytes", v); },
      "largest message [default 64M]");
  sub->add_option("--ops", o->ops, "comma-separated collectives")
      ->delimiter(',')
      ->check(CLI::IsMember({"all_reduce", "all_gather", "broadcast", "reduce_scatter"}))
      ->capture_default_str();
  sub->add_option("--json", o->json, "also write the results to this JSON file");
  auto* raw_mpi = sub->add_flag("--raw-mpi", o->raw_mpi, "time plain MPI calls beside ours (--backend mpi)");
  auto* raw_c10d = sub->add_flag("--raw-c10d", o->raw_c10d, "time c10d's ProcessGroupGloo beside ours (--backend gloo)")
                       ->excludes(raw_mpi);
  sub->add_flag(
         "--call-check", o->call_check,
         "time each call with the group's call check on (hash, the default on gloo and mpi) and off; their ratio")
      ->excludes(raw_mpi)
      ->excludes(raw_c10d);
  sub->add_option("--rounds", o->rounds, "rounds per size, ours and the peer alternating; the best counts")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--gap-ms", o->gap_ms,
                  "spin this long before each timed call (a step's compute between reductions: the buffers "
                  "leave the cache); 0: calls back to back")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->callback([o, &run] { run = [o] { return run_collectives(*o); }; });
}

}  // namespace ddp::bench
