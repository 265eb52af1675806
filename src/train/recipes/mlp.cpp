// The mlp recipe: the course's MLP on a synthetic data set.
#include "common.h"

#include "ddp/data/synthetic.h"
#include "ddp/train/models/mlp.h"

namespace ddp::train::detail {
namespace {

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
  set_train_data(
      r, cfg, group, "mlp-train", "make_classification:10000:1024:512:32:10:0",
      [&] { return std::make_pair(data.x.narrow(0, 0, 9000), data.y.narrow(0, 0, 9000)); }, identity);
  set_test_data(r, cfg, group, data.x.narrow(0, 9000, 1000), data.y.narrow(0, 9000, 1000));

  // A Sequential, so that every strategy (FSDP's too) trains it; MLP's weights for the seed.
  models::SequentialNet net = models::mlp_sequential(models::MLPOptions{4, 1024, 256, 32});
  r.groups.push_back(all_parameters(*net, *cfg.weight_decay));
  r.model = torch::nn::AnyModule(net);
  return r;
}

[[maybe_unused]] const bool registered = register_recipe(
    {"mlp", "a 4-layer tanh MLP on a synthetic 32-class data set (scikit-learn's make_classification): a quick check",
     [](TrainConfig& c, int) { defaults_mlp(c); }, make_mlp});

}  // namespace
}  // namespace ddp::train::detail
