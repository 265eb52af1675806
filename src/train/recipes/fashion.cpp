// The Fashion-MNIST recipes: the course's FashionCNN (fashion-mnist), and a
// smaller network trained for time to accuracy (fashion-mnist-fast, the demo's).
#include <algorithm>
#include <cmath>

#include "common.h"
#include "ddp/data/idx.h"
#include "ddp/data/transforms.h"
#include "ddp/train/models/fashion_cnn.h"
#include "ddp/train/models/fashion_net.h"

namespace ddp::train::detail {
namespace {
// The training set (shards or sampler) and this rank's share of the test set, normalized with the
// training set's mean and std.
void load_fashion_mnist(Recipe& r, const TrainConfig& cfg, ProcessGroup& group) {
  require_data_dir(cfg.data_dir, "fashion-mnist",
                   "install Debian's dataset-fashion-mnist (it puts the set in /usr/share/datasets/fashion-mnist), "
                   "or put the four *-ubyte.gz files of https://github.com/zalandoresearch/fashion-mnist there");
  auto finish = [](const at::Tensor& images) { return data::normalize(images, {0.2860}, {0.3530}); };
  const std::string id =
      file_id(cfg.data_dir + "/train-images-idx3-ubyte.gz") + ";" + file_id(cfg.data_dir + "/train-images-idx3-ubyte");
  set_train_data(
      r, cfg, group, "fashion-mnist-train", id,
      [&] {
        auto ds = data::load_mnist_format(cfg.data_dir, true, /*num_classes=*/10);
        return std::make_pair(ds.images, ds.labels);
      },
      finish);
  auto test = data::load_mnist_format(cfg.data_dir, false, /*num_classes=*/10);
  set_test_data(r, cfg, group, finish(test.images), test.labels);
}

// What both recipes share: the data, one parameter group, Nesterov momentum, --cutout.
Recipe fashion_recipe(TrainConfig& cfg, ProcessGroup& group, torch::nn::AnyModule net) {
  Recipe r;
  r.name = cfg.recipe;
  load_fashion_mnist(r, cfg, group);
  r.groups.push_back(all_parameters(*net.ptr(), *cfg.weight_decay));
  r.nesterov = *cfg.momentum > 0;
  r.model = std::move(net);
  if (*cfg.cutout > 0) {
    const int64_t size = *cfg.cutout;
    r.augment = [size](const at::Tensor& b, at::Generator& gen, int64_t) { return data::cutout(b, size, gen); };
  }
  return r;
}

// FashionCNN on Fashion-MNIST, normalized with the training set's mean and std.
void defaults_fashion_mnist(TrainConfig& cfg) {
  fill<int64_t>(cfg.epochs, 3);
  fill<int64_t>(cfg.batch_size, 64);
  // 0.02, not the course's 0.05: FashionCNN's three linear layers have no activation between them, and at 0.05
  // a one-cycle peak reached in few steps (--limit-train, or a large world's few steps) diverged: NaN at world 1
  // on 8000 samples, 4-15% at world 2 with --sync-bn. bench/recipe_grid.sh runs the grid; 0.02 costs 0.6 points
  // after one full epoch at world 2 (89.2% against 89.75%, docs/training.md).
  fill(cfg.lr, 0.02);
  fill(cfg.momentum, 0.9);
  fill(cfg.weight_decay, 5e-4);
  fill(cfg.label_smoothing, 0.0);
  fill(cfg.schedule, "onecycle:0.2:0");
  fill<int64_t>(cfg.warmup, 0);
  fill(cfg.data_mode, "shards");
  fill<int64_t>(cfg.cutout, 0);
  fill<int64_t>(cfg.ema_every, 0);
  fill(cfg.precision, "auto");  // native bf16: 1.29x per epoch, same accuracy (docs/benchmarks.md)
  fill(cfg.data_dir, default_data_dir("fashion-mnist", "/usr/share/datasets/fashion-mnist"));  // Debian's package
}

Recipe make_fashion_mnist(TrainConfig& cfg, ProcessGroup& group) {
  return fashion_recipe(cfg, group, torch::nn::AnyModule(models::FashionCNN()));
}

// FashionNet (width 16, 38k parameters) for time to accuracy: global batch 128 whatever the world,
// SGD Nesterov lr 0.2, one-cycle over 2 epochs, and an average of the weights (rho 0.98 after every
// step) as the evaluated model, which is good long before the schedule anneals; an evaluation every
// eighth of an epoch sees 90% when it is reached (docs/benchmarks.md has the search behind these).
// The rest as fashion-mnist.
void defaults_fashion_mnist_fast(TrainConfig& cfg, int world_size) {
  fill<int64_t>(cfg.epochs, 2);
  fill<int64_t>(cfg.batch_size, std::max(1, 128 / world_size));
  fill(cfg.lr, 0.2);
  fill<int64_t>(cfg.ema_every, 1);
  fill<int64_t>(cfg.eval_every, std::max<int64_t>(1, 60000 / 8 / (*cfg.batch_size * world_size)));
  defaults_fashion_mnist(cfg);
}

Recipe make_fashion_mnist_fast(TrainConfig& cfg, ProcessGroup& group) {
  Recipe r = fashion_recipe(cfg, group, torch::nn::AnyModule(models::FashionNet()));
  r.average.make_shadow = [] { return torch::nn::AnyModule(models::FashionNet()); };
  r.average.rho = std::pow(0.98, double(*cfg.ema_every));
  return r;
}

[[maybe_unused]] const bool registered =
    register_recipe({"fashion-mnist", "FashionCNN (2 convolutions with BatchNorm, 3 linear layers) on Fashion-MNIST",
                     [](TrainConfig& c, int) { defaults_fashion_mnist(c); }, make_fashion_mnist}) &&
    register_recipe({"fashion-mnist-fast",
                     "FashionNet (4 small convolutions, 38k parameters) with weight averaging on Fashion-MNIST: the "
                     "demo's job to 91%",
                     defaults_fashion_mnist_fast, make_fashion_mnist_fast});

}  // namespace
}  // namespace ddp::train::detail
