// A 4-layer tanh MLP on synthetic data, single-process or data-parallel with DDP.
//
//   build/bin/mlp                                                        # one process
//   build/bin/ddprun --nproc-per-node 2 --standalone build/bin/mlp --data skip
//   build/bin/ddprun --nproc-per-node 2 --standalone build/bin/mlp --data sampler
//   build/bin/mlp --help                                                 # every flag
//
// --data skip: rank r trains on the batches i with i % world == r;
// --data sampler: each rank draws its batches through a DistributedSampler.
// Prints the config, then every 100 steps:
//   step 100 | train_loss 2.9051 | test_loss 3.1213 | step time 1.62 ms
// and at the end the largest parameter difference between ranks (0 when in sync).
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "ddp/data/synthetic.h"
#include "ddp/ddp.h"
#include "ddp/dist/error_file.h"
#include "ddp/train/models/mlp.h"

namespace {

struct Config {
  int64_t n_layers = 4, dim_in = 1024, n_classes = 32, dim_hidden = 256, train_size = 10000, batch_size = 64;
  double learning_rate = 0.1;
  int64_t niters = 1000;
  std::string data = "skip";
};

Config parse(int argc, char** argv) {
  Config c;
  CLI::App app("A 4-layer tanh MLP on synthetic data, single-process or with DDP under ddprun", "mlp");
  app.add_option("--n-layers", c.n_layers)->check(CLI::Range(1, 1 << 30))->capture_default_str();
  app.add_option("--dim-in", c.dim_in)->check(CLI::Range(2, 1 << 20))->capture_default_str();
  app.add_option("--n-classes", c.n_classes)->check(CLI::Range(2, 1 << 20))->capture_default_str();
  app.add_option("--dim-hidden", c.dim_hidden)->check(CLI::Range(1, 1 << 30))->capture_default_str();
  app.add_option("--train-size", c.train_size, "samples generated; the first 10% train, the last 10% test")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app.add_option("--batch-size", c.batch_size)->check(CLI::Range(1, 1 << 30))->capture_default_str();
  const CLI::Validator positive_finite(
      [](std::string& text) {
        double v = 0;
        return CLI::detail::lexical_cast(text, v) && std::isfinite(v) && v > 0
                   ? std::string()
                   : "expected a positive finite number, got '" + text + "'";
      },
      "POSITIVE");
  app.add_option("--learning-rate", c.learning_rate)->check(positive_finite)->capture_default_str();
  app.add_option("--niters", c.niters)->check(CLI::Range(1, 1 << 30))->capture_default_str();
  app.add_option("--data", c.data, "skip: batch i on rank i % world; sampler: a DistributedSampler")
      ->check(CLI::IsMember({"skip", "sampler"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));  // prints the help, or the error and where to look
  }
  if (c.train_size / 10 < c.batch_size)
    throw std::invalid_argument("--batch-size " + std::to_string(c.batch_size) + " is larger than the training set (" +
                                std::to_string(c.train_size / 10) + " samples, 10% of --train-size)");
  return c;
}

// Mean cross-entropy over a data set, each rank evaluating its exact shard;
// sums over ranks count every sample once.
double evaluate(ddp::models::MLP& model, const at::Tensor& x, const at::Tensor& y, ddp::ProcessGroup& g) {
  torch::NoGradGuard no_grad;
  ddp::DistributedSamplerOptions o;
  o.num_replicas = g.size();
  o.rank = g.rank();
  o.shuffle = false;
  o.exact = true;
  auto idx = ddp::DistributedSampler(x.size(0), o).indices();
  at::Tensor index = at::tensor(std::vector<int64_t>(idx.begin(), idx.end()), at::kLong);
  at::Tensor sums = at::zeros({2}, at::kDouble);
  if (index.numel() > 0) {
    at::Tensor loss =
        torch::nn::functional::cross_entropy(model(x.index_select(0, index)), y.index_select(0, index),
                                             torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    sums[0] = loss.item<double>();
    sums[1] = static_cast<double>(index.numel());
  }
  g.all_reduce(sums);
  return sums[0].item<double>() / sums[1].item<double>();
}

}  // namespace

int main(int argc, char** argv) try {
  Config c = parse(argc, argv);
  auto g = ddp::init_process_group();
  const int rank = g->rank(), world = g->size();
  if (rank == 0)
    std::printf(
        "{'n_layers': %lld, 'dim_in': %lld, 'n_classes': %lld, 'dim_hidden': %lld, 'train_size': %lld, "
        "'batch_size': %lld, 'learning_rate': %g, 'niters': %lld, 'world_size': %d, 'data': '%s'}\n",
        (long long)c.n_layers, (long long)c.dim_in, (long long)c.n_classes, (long long)c.dim_hidden,
        (long long)c.train_size, (long long)c.batch_size, c.learning_rate, (long long)c.niters, world, c.data.c_str());

  // The same data set on every rank (rand_state 0): the first 10% is the
  // training set; the last 10%, never trained on, is the test set.
  ddp::ClassificationOptions d;
  d.n_samples = c.train_size;
  d.n_features = c.dim_in;
  d.n_informative = c.dim_in / 2;
  d.n_classes = c.n_classes;
  d.n_clusters_per_class = 10;
  d.seed = 0;
  auto data = ddp::make_classification(d);
  const int64_t split = c.train_size / 10, n_train = split;
  at::Tensor x_train = data.x.narrow(0, 0, split), y_train = data.y.narrow(0, 0, split);
  at::Tensor x_test = data.x.narrow(0, c.train_size - split, split),
             y_test = data.y.narrow(0, c.train_size - split, split);

  torch::manual_seed(0);
  ddp::models::MLP net(ddp::models::MLPOptions{c.n_layers, c.dim_in, c.dim_hidden, c.n_classes});
  ddp::DistributedDataParallel model(net);  // rank 0's weights everywhere
  torch::optim::SGD optimizer(net->parameters(), c.learning_rate);

  // The batches this rank trains on, in order.
  const int64_t batches = n_train / c.batch_size;
  ddp::DistributedSamplerOptions so;
  so.drop_last = true;
  ddp::DistributedSampler sampler(n_train, so);
  int64_t epoch = 0, next_batch = 0;
  auto next = [&]() -> std::pair<at::Tensor, at::Tensor> {
    if (c.data == "skip") {  // global batch i belongs to rank i % world
      int64_t i = (next_batch++ * world + rank) % batches;
      return {x_train.narrow(0, i * c.batch_size, c.batch_size), y_train.narrow(0, i * c.batch_size, c.batch_size)};
    }
    auto ids = sampler.next(c.batch_size);
    if (!ids || static_cast<int64_t>(ids->size()) < c.batch_size) {
      sampler.set_epoch(++epoch);
      ids = sampler.next(c.batch_size);
    }
    at::Tensor index = at::tensor(std::vector<int64_t>(ids->begin(), ids->end()), at::kLong);
    return {x_train.index_select(0, index), y_train.index_select(0, index)};
  };

  double step_ms = 0;
  int64_t timed = 0;
  for (int64_t step = 0; step < c.niters; ++step) {
    auto [x, y] = next();
    auto t0 = std::chrono::steady_clock::now();
    optimizer.zero_grad();
    at::Tensor loss = torch::nn::functional::cross_entropy(model(x), y);
    loss.backward();  // gradients are averaged across ranks here
    optimizer.step();
    step_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++timed;
    // Linear decay of the learning rate to 0.3x over niters.
    double factor = 1.0 - 0.7 * double(step + 1) / double(c.niters);
    for (auto& group : optimizer.param_groups())
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(c.learning_rate * factor);
    if (step % 100 == 0 || step + 1 == c.niters) {
      double train_loss = evaluate(net, x_train, y_train, *g), test_loss = evaluate(net, x_test, y_test, *g);
      if (rank == 0)
        std::printf("step %lld | train_loss %.4f | test_loss %.4f | step time %.2f ms\n", (long long)step, train_loss,
                    test_loss, step_ms / timed);
      step_ms = 0;
      timed = 0;
    }
  }
  double worst = 0;
  for (const auto& diff : ddp::check_parameter_consistency(*net, g)) worst = std::max(worst, diff.max_abs_diff);
  if (rank == 0) std::printf("largest parameter difference between ranks: %g\n", worst);
  ddp::destroy_process_group();
  return worst == 0 ? 0 : 1;
} catch (const std::exception& e) {
  ddp::record_error(e);  // for ddprun's summary (TORCHELASTIC_ERROR_FILE)
  std::fprintf(stderr, "mlp: %s\n", e.what());
  return 1;
}
