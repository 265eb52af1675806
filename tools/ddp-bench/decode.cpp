// ddp-bench decode DIR: images decoded per second on one thread (the work of
// one loader worker), over an ImageFolder's files: decode only, or decode plus
// the training or evaluation transforms. bench/decode.sh runs it beside PIL.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>

#include "bench.h"
#include "ddp/data/image_decode.h"
#include "ddp/data/image_folder.h"
#include "ddp/data/image_transforms.h"
#include "ddp/train/machine.h"

namespace ddp::bench {

void add_decode_command(CLI::App& app, std::function<int()>& run) {
  auto* cmd = app.add_subcommand("decode", "images decoded per second on one thread, over an ImageFolder's files");
  auto dir = std::make_shared<std::string>();
  auto repeats = std::make_shared<int>(3);
  auto mode = std::make_shared<std::string>("decode");
  auto size = std::make_shared<int64_t>(224);
  cmd->add_option("dir", *dir, "root/<class>/<images>")->required();
  cmd->add_option("--repeats", *repeats, "passes over the files; the best is reported [default 3]");
  cmd->add_option("--mode", *mode, "decode | train (+ RandomResizedCrop, flip) | eval (+ Resize, CenterCrop)");
  cmd->add_option("--size", *size, "crop size of the train and eval modes [default 224]");
  cmd->callback([=, &run] {
    run = [=] {
      at::set_num_threads(1);
      data::ImageFolder folder(*dir);
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(uint64_t(0));
      const int64_t resize = (*size * 256 + 112) / 224;
      print_machine_lines();
      double best = 0;
      int64_t pixels = 0;
      for (int r = 0; r < *repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        pixels = 0;
        for (int64_t i = 0; i < folder.size(); ++i) {
          at::Tensor img = data::decode_image(folder.path(i));
          pixels += img.size(1) * img.size(2);
          if (*mode == "train")
            img = data::random_horizontal_flip_image(data::random_resized_crop(img, *size, gen), 0.5, gen);
          else if (*mode == "eval")
            img = data::center_crop(data::resize_shorter(img, resize), *size);
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, double(folder.size()) / s);
      }
      std::printf("ours %s: %lld images (%.0f kpixels each on average), best of %d: %.1f images/s on 1 thread\n",
                  mode->c_str(), static_cast<long long>(folder.size()), double(pixels) / folder.size() / 1000, *repeats,
                  best);
      return 0;
    };
  });
}

}  // namespace ddp::bench
