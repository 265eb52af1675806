// ddp-bench save: ddp's torch.save writer against LibTorch's own torch::jit::pickle_save, on one model's state dict.
//
//   build/bin/ddp-bench save --model resnet18 --repeats 5 --out-dir /tmp/save
//
// Times, best of --repeats: the bytes of the file in memory (ddp: torch_save_bytes, the writer every checkpoint
// uses; LibTorch: pickle_save), reading them back (ddp: read_torch_file, with its pickle rewrite; LibTorch:
// pickle_load), and ddp's whole save_state_dict to --out-dir (write, fsync, rename). Both files stay in --out-dir
// (ddp.pt, pickle_save.pt) so Python's torch.load can be tried on each (bench/save.sh).
#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "bench.h"
#include "ddp/errors.h"
#include "ddp/train/models/fashion_net.h"
#include "ddp/train/models/resnet.h"
#include "ddp/train/state_dict.h"
#include "train/checkpoint/torch_format.h"

namespace ddp::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct SaveOptions {
  std::string model = "resnet18";
  int repeats = 5;
  std::string out_dir = "build/bench/save";
  std::string json;
};

train::StateDict model_state(const std::string& name) {
  if (name == "resnet18") return train::state_dict(*models::ResNet18(models::ResNet18Options{10, false}));
  if (name == "fashionnet") return train::state_dict(*models::FashionNet());
  throw InvalidArgument("ddp-bench save: --model " + name + ": expected resnet18 or fashionnet");
}

template <class F>
double best_ms(int repeats, F&& f) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto t = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t).count());
  }
  return best;
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

int run_save(const SaveOptions& o) {
  print_machine_lines();
  std::filesystem::create_directories(o.out_dir);
  const train::StateDict sd = model_state(o.model);
  const c10::IValue value = train::state_dict_to_ivalue(sd);
  size_t tensor_bytes = 0;
  for (const auto& [name, t] : sd) tensor_bytes += t.nbytes();

  std::vector<char> ours, theirs;
  const double ours_write = best_ms(o.repeats, [&] { ours = train::detail::torch_save_bytes(value, "bench"); });
  const double theirs_write = best_ms(o.repeats, [&] { theirs = torch::jit::pickle_save(value); });
  const std::string ours_path = o.out_dir + "/ddp.pt", theirs_path = o.out_dir + "/pickle_save.pt";
  write_bytes(theirs_path, theirs);
  const double ours_file = best_ms(o.repeats, [&] { train::save_state_dict(sd, ours_path); });
  const double ours_read = best_ms(o.repeats, [&] { train::detail::read_torch_file(ours_path); });
  const double theirs_read = best_ms(o.repeats, [&] { torch::jit::pickle_load(theirs); });

  std::printf("ddp-bench save: %s, %zu tensors, %.1f MB of tensor data; best of %d\n", o.model.c_str(), sd.size(),
              tensor_bytes / 1e6, o.repeats);
  std::printf("%-44s %10s %10s\n", "", "ms", "MB/s");
  auto row = [&](const char* what, double ms) {
    std::printf("%-44s %10.2f %10.0f\n", what, ms, tensor_bytes / 1e3 / ms);
  };
  row("ddp torch_save_bytes (to memory)", ours_write);
  row("LibTorch pickle_save (to memory)", theirs_write);
  row("ddp save_state_dict (file: write, fsync, rename)", ours_file);
  row("ddp read_torch_file (file)", ours_read);
  row("LibTorch pickle_load (memory)", theirs_read);
  std::printf("file sizes: ddp %zu bytes, pickle_save %zu bytes\n", ours.size(), theirs.size());
  if (!o.json.empty())
    write_json(o.json, {{"model", o.model},
                        {"tensor_bytes", tensor_bytes},
                        {"repeats", o.repeats},
                        {"ddp_save_bytes_ms", ours_write},
                        {"pickle_save_ms", theirs_write},
                        {"ddp_save_file_ms", ours_file},
                        {"ddp_read_ms", ours_read},
                        {"pickle_load_ms", theirs_read},
                        {"ddp_file_bytes", ours.size()},
                        {"pickle_save_bytes", theirs.size()}});
  return 0;
}

}  // namespace

void add_save_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<SaveOptions>();
  CLI::App* c = app.add_subcommand("save", "ddp's torch.save writer against LibTorch's pickle_save, one state dict");
  c->add_option("--model", o->model, "resnet18 or fashionnet")
      ->capture_default_str()
      ->check(CLI::IsMember({"resnet18", "fashionnet"}));
  c->add_option("--repeats", o->repeats, "timed runs of each; the best counts")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--out-dir", o->out_dir, "where ddp.pt and pickle_save.pt are written")->capture_default_str();
  c->add_option("--json", o->json, "also write the results as JSON");
  c->callback([&run, o] { run = [o] { return run_save(*o); }; });
}

}  // namespace ddp::bench
