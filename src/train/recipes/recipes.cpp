// The recipes' table, and the mlp recipe. Each recipe sets its defaults, then builds
// (fashion.cpp, cifar10.cpp, imagefolder.cpp).
#include "common.h"

#include "ddp/data/synthetic.h"
#include "ddp/errors.h"
#include "ddp/train/models/mlp.h"

namespace ddp::train {
namespace detail {
// A 4-layer tanh MLP on a synthetic data set (make_classification, rand_state 0):
// 9000 training samples, the last 1000 for testing.
void defaults_mlp(TrainConfig& cfg) {
  fill<int64_t>(cfg.epochs, 5);
  fill<int64_t>(cfg.batch_size, 64);
  fill(cfg.lr, 0.1);
  fill(cfg.momentum, 0.0);
  fill(cfg.weight_decay, 0.0);
  fill(cfg.label_smoothing, 0.0);
  fill(cfg.schedule, "piecewise:0:1,1:0.3");  // linear decay to 0.3x
  fill<int64_t>(cfg.warmup, 0);
  fill(cfg.data_mode, "sampler");
  fill<int64_t>(cfg.cutout, 0);
  fill<int64_t>(cfg.ema_every, 0);
  fill(cfg.precision, "fp32");
  fill(cfg.data_dir, "(generated)");
}

Recipe make_mlp(TrainConfig& cfg, ProcessGroup& group) {
  Recipe r;
  r.name = cfg.recipe;
  ClassificationOptions d;
  d.n_samples = 10000;
  d.n_features = 1024;
  d.n_informative = 512;
  d.n_classes = 32;
  d.n_clusters_per_class = 10;
  d.seed = 0;
  auto data = make_classification(d);
  auto identity = [](const at::Tensor& x) { return x; };
  set_train_data(r, cfg, group, "mlp-train", "make_classification:10000:1024:512:32:10:0",
                 [&] { return std::make_pair(data.x.narrow(0, 0, 9000), data.y.narrow(0, 0, 9000)); }, identity);
  set_test_data(r, cfg, group, data.x.narrow(0, 9000, 1000), data.y.narrow(0, 9000, 1000));

  models::MLP net(models::MLPOptions{4, 1024, 256, 32});
  r.groups.push_back(all_parameters(*net, *cfg.weight_decay));
  r.model = torch::nn::AnyModule(net);
  return r;
}

}  // namespace detail

void fill_recipe_defaults(TrainConfig& cfg, int world_size) {
  if (cfg.out_dir.empty()) cfg.out_dir = "runs/" + cfg.recipe;
  if (cfg.optimizer != "sgd") detail::fill(cfg.lr, 1e-3);  // Adam's usual rate; the recipes' rates are SGD's
  if (cfg.recipe == "mlp") detail::defaults_mlp(cfg);
  else if (cfg.recipe == "fashion-mnist") detail::defaults_fashion_mnist(cfg);
  else if (cfg.recipe == "fashion-mnist-fast") detail::defaults_fashion_mnist_fast(cfg, world_size);
  else if (cfg.recipe == "cifar10-resnet9") detail::defaults_cifar10_resnet9(cfg, world_size);
  else if (cfg.recipe == "cifar10-resnet18") detail::defaults_cifar10_resnet18(cfg);
  else if (cfg.recipe == "cifar10-airbench") detail::defaults_cifar10_airbench(cfg, world_size);
  else if (cfg.recipe.rfind("imagefolder-", 0) == 0) detail::defaults_imagefolder(cfg, world_size);
  else throw InvalidArgument("ddp-train: unknown recipe '" + cfg.recipe + "'");
  detail::fill<int64_t>(cfg.eval_every, 0);  // after each epoch only, unless the recipe said otherwise
}

Recipe make_recipe(TrainConfig& cfg, ProcessGroup& group) {
  fill_recipe_defaults(cfg, group.size());
  Recipe r;
  if (cfg.recipe == "mlp") r = detail::make_mlp(cfg, group);
  else if (cfg.recipe == "fashion-mnist") r = detail::make_fashion_mnist(cfg, group);
  else if (cfg.recipe == "fashion-mnist-fast") r = detail::make_fashion_mnist_fast(cfg, group);
  else if (cfg.recipe == "cifar10-resnet9") r = detail::make_cifar10_resnet9(cfg, group);
  else if (cfg.recipe == "cifar10-resnet18") r = detail::make_cifar10_resnet18(cfg, group);
  else if (cfg.recipe == "cifar10-airbench") r = detail::make_cifar10_airbench(cfg, group);
  else if (cfg.recipe == "imagefolder-resnet18" || cfg.recipe == "imagefolder-resnet50")
    r = detail::make_imagefolder(cfg, group);
  else throw InvalidArgument("ddp-train: unknown recipe '" + cfg.recipe + "'");
  return r;
}

}  // namespace ddp::train
