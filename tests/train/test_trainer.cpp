// ddp::train::Trainer with a user's Task in a world of one (no launcher): equal to a hand-written loop, the
// same through tensors and a LibTorch dataset, custom loss and metrics, callbacks and EarlyStopping, resume,
// and the errors a bad Task gets. Ranks as threads (gloo): world 3 equals world 1 with 3x the batch, and what
// differs between ranks ends every rank with an error instead of a hang. As processes under ddprun:
// example_custom_training_* (tests/examples/CMakeLists.txt).
#include <gtest/gtest.h>

#include <torch/data/datasets/base.h>
#include <torch/data/example.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <fstream>
#include <map>
#include <sstream>

#include "ddp/data/distributed_sampler.h"
#include "ddp/dist/device.h"
#include "ddp/errors.h"
#include "ddp/train/losses.h"
#include "ddp/train/models/sequential_net.h"
#include "ddp/train/trainer.h"
#include "support/blobs.h"
#include "support/rank_threads.h"
#include "train/test_files.h"

namespace ddp::train {
namespace {

using testing::blobs;

// A pair of tensors (x, y) as a Task's data, and a Task's tensors.
TensorData tensors(std::pair<at::Tensor, at::Tensor> xy) { return {std::move(xy.first), std::move(xy.second)}; }
TensorData& tensors(DataSource& d) { return std::get<TensorData>(d); }

TrainConfig quiet(const test::TempDir& dir, int64_t epochs) {
  TrainConfig s;
  s.recipe = "blobs";
  s.out_dir = dir / "run";
  s.epochs = epochs;
  s.batch_size = 16;
  s.progress = false;
  s.log_every = 5;
  return s;
}

Task blob_task(uint64_t seed = 0) {
  Task t;
  at::manual_seed(seed);
  t.model = torch::nn::AnyModule(torch::nn::Linear(8, 4));
  t.train = tensors(blobs(200, 1));
  t.test = tensors(blobs(50, 2));
  return t;
}

at::Tensor flat_weights(torch::nn::Module& m) {
  std::vector<at::Tensor> ps;
  for (auto& p : m.parameters()) ps.push_back(p.detach().flatten());
  return at::cat(ps);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A LibTorch dataset over tensors, read by the loader's workers.
struct TensorPairs : torch::data::datasets::Dataset<TensorPairs> {
  at::Tensor x, y;
  TensorPairs(at::Tensor x_, at::Tensor y_) : x(std::move(x_)), y(std::move(y_)) {}
  torch::data::Example<> get(size_t i) override { return {x[int64_t(i)], y[int64_t(i)]}; }
  c10::optional<size_t> size() const override { return size_t(x.size(0)); }
};

TEST(Trainer, EqualsAHandWrittenLoopOverTheSamplersOrder) {
  test::TempDir dir;
  Task task = blob_task();
  auto net = std::dynamic_pointer_cast<torch::nn::LinearImpl>(task.model.ptr());
  torch::nn::Linear ref(8, 4);
  {
    at::NoGradGuard g;
    ref->weight.copy_(net->weight);
    ref->bias.copy_(net->bias);
  }
  task.make_optimizer = [](torch::nn::Module& m) {
    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  };
  const at::Tensor x = tensors(task.train).x, y = tensors(task.train).y;
  Trainer trainer(quiet(dir, 3));
  const TrainSummary done = trainer.fit(std::move(task));
  EXPECT_EQ(done.epochs_done, 3);
  EXPECT_EQ(done.steps, 3 * (200 / 16));

  // The same steps by hand: the sampler's order for each epoch, batches of 16 (the last partial one dropped),
  // the default loss (mean cross-entropy), SGD with momentum. Same operations in the same order: the weights are equal
  // exactly.
  torch::optim::SGD opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  DistributedSamplerOptions so;
  so.num_replicas = 1;
  so.rank = 0;
  so.seed = 0;
  DistributedSampler sampler(200, so);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    sampler.set_epoch(epoch);
    auto idx = sampler.indices();
    for (size_t b = 0; b + 16 <= idx.size(); b += 16) {
      at::Tensor pick = at::tensor(std::vector<int64_t>(idx.begin() + b, idx.begin() + b + 16), at::kLong);
      opt.zero_grad();
      label_smoothing_cross_entropy(ref(x.index_select(0, pick)), y.index_select(0, pick), 0).mean().backward();
      opt.step();
    }
  }
  EXPECT_TRUE(at::equal(flat_weights(*net), flat_weights(*ref)))
      << (flat_weights(*net) - flat_weights(*ref)).abs().max().item<double>();
  // The evaluation is over every test sample, and its accuracy is the model's.
  auto [tx, ty] = blobs(50, 2);
  EXPECT_EQ(done.eval.count, 50);
  EXPECT_DOUBLE_EQ(done.eval.acc1, ref(tx).argmax(1).eq(ty).sum().item<double>() / 50);
}

TEST(Trainer, TensorsAndALibTorchDatasetTrainTheSameWeights) {
  test::TempDir a, b;
  Task by_tensors = blob_task(7);
  Task by_dataset = blob_task(7);
  by_dataset.train = FetchData::of(TensorPairs(tensors(by_tensors.train).x, tensors(by_tensors.train).y));
  by_dataset.test = FetchData::of(TensorPairs(tensors(by_tensors.test).x, tensors(by_tensors.test).y));
  auto m1 = by_tensors.model.ptr(), m2 = by_dataset.model.ptr();
  ASSERT_TRUE(at::equal(flat_weights(*m1), flat_weights(*m2)));
  const auto r1 = Trainer(quiet(a, 2)).fit(std::move(by_tensors));
  const auto r2 = Trainer(quiet(b, 2)).fit(std::move(by_dataset));
  EXPECT_TRUE(at::equal(flat_weights(*m1), flat_weights(*m2)));
  EXPECT_EQ(r1.eval.count, 50);
  EXPECT_EQ(r2.eval.count, 50);
  EXPECT_DOUBLE_EQ(r1.eval.acc1, r2.eval.acc1);
  EXPECT_DOUBLE_EQ(r1.eval.loss, r2.eval.loss);
}

TEST(Trainer, CustomLossAndMetricsAreExactMeansOverTheTestSet) {
  test::TempDir dir;
  Task t;
  at::manual_seed(3);
  t.model = torch::nn::AnyModule(torch::nn::Linear(8, 1));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const at::Tensor x = at::randn({128, 8}, gen);
  t.train = TensorData{x, x.sum(1, true) * 0.5};  // a regression: float targets [N, 1]
  const at::Tensor tx = at::randn({37, 8}, gen);  // 37: not a multiple of the evaluation batch
  const at::Tensor ty = tx.sum(1, true) * 0.5;
  t.test = TensorData{tx, ty};
  t.loss = [](const at::Tensor& out, const at::Tensor& y) { return (out - y).pow(2).mean(); };
  t.metrics.push_back({"mae", [](const at::Tensor& out, const at::Tensor& y) { return (out - y).abs().sum(); }});
  auto model = t.model.ptr();
  TrainConfig s = quiet(dir, 2);
  s.lr = 0.05;
  s.eval_batch = 10;
  const auto done = Trainer(s).fit(std::move(t));
  EXPECT_FALSE(done.eval.has_accuracy);
  at::NoGradGuard g;
  at::Tensor out = model->as<torch::nn::Linear>()->forward(tx);
  // float32 sums of 37 terms in batches of 10, then float64: a few float32 roundings (6e-8) of values below 10.
  EXPECT_NEAR(done.eval.loss, (out - ty).pow(2).mean().item<double>(), 1e-5);
  ASSERT_EQ(done.eval.metrics.size(), 1u);
  EXPECT_EQ(done.eval.metrics[0].first, "mae");
  EXPECT_NEAR(done.eval.metrics[0].second, (out - ty).abs().mean().item<double>(), 1e-5);
  EXPECT_LT(done.eval.loss, 0.5 * ty.pow(2).mean().item<double>());  // it learned something
  const std::string log = read_file(dir / "run/metrics.jsonl");
  EXPECT_EQ(count(log, "\"mae/val\""), 2);
  EXPECT_EQ(count(log, "acc1/"), 0);  // neither a training nor a validation accuracy for a regression
}

TEST(Trainer, TrainingAccuracyIsLoggedAtEachLogPoint) {
  test::TempDir dir;
  Trainer(quiet(dir, 2)).fit(blob_task());
  const std::string log = read_file(dir / "run/metrics.jsonl");
  // 12 steps per epoch, a log point every 5 steps: steps 5, 10, 15, 20.
  EXPECT_EQ(count(log, "\"kind\":\"train\""), 4);
  EXPECT_EQ(count(log, "\"acc1/train\""), 4);
}

// A checkpoint between log points (--checkpoint-every 3, log points every 5 steps) changes no logged value:
// the running sums it reads stay as they were.
TEST(Trainer, CheckpointsBetweenLogPointsChangeNoLoggedValue) {
  test::TempDir plain, saving;
  Trainer(quiet(plain, 2)).fit(blob_task());
  TrainConfig s = quiet(saving, 2);
  s.checkpoint_every = 3;
  Trainer(s).fit(blob_task());
  auto train_lines = [](const std::string& log) {
    std::string out;
    std::istringstream in(log);
    for (std::string line; std::getline(in, line);)
      if (line.find("\"kind\":\"train\"") != std::string::npos) {
        // without the timing fields (samples/s, communication), which differ between runs
        out += line.substr(0, line.find("\"lr\"")) + "\n";
      }
    return out;
  };
  const std::string a = train_lines(read_file(plain / "run/metrics.jsonl"));
  EXPECT_EQ(count(a, "acc1/train"), 4);
  EXPECT_EQ(train_lines(read_file(saving / "run/metrics.jsonl")), a);
}

// --eval-every: evaluations within the epoch at its steps 4 and 8 of 12 (the 12th is the epoch's own),
// each the accuracy of the model at that step, and they change nothing in the training.
TEST(Trainer, EvaluationsWithinAnEpochSeeTheModelThenAndChangeNothing) {
  test::TempDir a, b;
  auto sgd = [](torch::nn::Module& m) {
    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  };
  Task plain = blob_task(3), evaluated = blob_task(3);
  plain.make_optimizer = evaluated.make_optimizer = sgd;
  auto m1 = plain.model.ptr(), m2 = evaluated.model.ptr();
  torch::nn::Linear ref(8, 4);
  {
    at::NoGradGuard g;
    for (size_t i = 0; i < ref->parameters().size(); ++i) ref->parameters()[i].copy_(m2->parameters()[i]);
  }
  const at::Tensor x = tensors(evaluated.train).x, y = tensors(evaluated.train).y;
  TrainConfig settings = quiet(b, 2);
  settings.eval_every = 4;
  Trainer(quiet(a, 2)).fit(std::move(plain));
  Trainer(settings).fit(std::move(evaluated));
  EXPECT_TRUE(at::equal(flat_weights(*m1), flat_weights(*m2)));

  // The log's evaluations: steps 4, 8, 16, 20 at epochs 4/12, 8/12, 1 + 4/12, 1 + 8/12; then the hand-written
  // loop's model after 4 steps has the first one's accuracy.
  std::vector<std::pair<int64_t, double>> evals;  // step, acc1
  std::istringstream lines(read_file(b / "run/metrics.jsonl"));
  for (std::string l; std::getline(lines, l);) {
    if (l.find("\"kind\":\"eval\"") == std::string::npos) continue;
    auto number_after = [&](const std::string& key) { return std::stod(l.substr(l.find(key) + key.size())); };
    evals.emplace_back(int64_t(number_after("\"step\":")), number_after("\"acc1/val\":"));
    const double epoch = number_after("\"epoch\":");
    EXPECT_NEAR(epoch, double((evals.back().first - 1) / 12) + double(evals.back().first % 12) / 12, 1e-12) << l;
    EXPECT_NE(l.find("\"unix_time\":"), std::string::npos) << l;
  }
  ASSERT_EQ(evals.size(), 4u);
  EXPECT_EQ(evals[0].first, 4);
  EXPECT_EQ(evals[1].first, 8);
  EXPECT_EQ(evals[2].first, 16);
  EXPECT_EQ(evals[3].first, 20);
  torch::optim::SGD opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  DistributedSamplerOptions so;
  so.num_replicas = 1;
  so.rank = 0;
  DistributedSampler sampler(200, so);
  sampler.set_epoch(0);
  auto idx = sampler.indices();
  for (size_t b0 = 0; b0 < 4 * 16; b0 += 16) {
    at::Tensor pick = at::tensor(std::vector<int64_t>(idx.begin() + b0, idx.begin() + b0 + 16), at::kLong);
    opt.zero_grad();
    label_smoothing_cross_entropy(ref(x.index_select(0, pick)), y.index_select(0, pick), 0).mean().backward();
    opt.step();
  }
  auto [tx, ty] = blobs(50, 2);
  EXPECT_DOUBLE_EQ(evals[0].second, ref(tx).argmax(1).eq(ty).sum().item<double>() / 50);
}

TEST(Trainer, ACallbackStopsTheRunAfterItsEpochWithACheckpoint) {
  test::TempDir dir;
  Trainer trainer(quiet(dir, 5));
  std::vector<int64_t> seen;
  trainer.on_epoch_end([&](EpochEnd& e) { seen.push_back(e.epoch); });
  trainer.on_epoch_end([](EpochEnd& e) {
    if (e.epoch == 2) e.stop = true, e.reason = "enough";
  });
  const auto done = trainer.fit(blob_task());
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(done.epochs_done, 2);
  EXPECT_EQ(done.stopped, "stopped by an on_epoch_end callback after epoch 2: enough");
  EXPECT_NE(done.checkpoint.find("checkpoint-e0002"), std::string::npos) << done.checkpoint;
  EXPECT_NE(read_file(dir / "run/metrics.jsonl").find("\"status\":\"stopped\""), std::string::npos);
}

TEST(EarlyStopping, StopsAfterPatienceEpochsWithoutImprovement) {
  EarlyStopping stop("loss", 2, 0.01);
  auto epoch = [&](double loss) {
    EpochEnd e;
    e.eval.loss = loss;
    stop(e);
    return e.stop;
  };
  EXPECT_FALSE(epoch(1.0));
  EXPECT_FALSE(epoch(0.5));    // better
  EXPECT_FALSE(epoch(0.495));  // within min_delta: 1 bad epoch
  EXPECT_FALSE(epoch(0.4));    // better: the count starts again
  EXPECT_FALSE(epoch(0.41));
  EXPECT_TRUE(epoch(0.42));  // 2 bad epochs
  EXPECT_DOUBLE_EQ(stop.best(), 0.4);

  EarlyStopping acc("acc1", 1);  // auto: higher is better
  EpochEnd e;
  e.eval.acc1 = 0.5;
  acc(e);
  e.eval.acc1 = 0.4;
  acc(e);
  EXPECT_TRUE(e.stop);
  EXPECT_NE(e.reason.find("acc1 0.4 has not improved on 0.5"), std::string::npos) << e.reason;

  EarlyStopping missing("f1", 1);
  EXPECT_THROW(missing(e), InvalidArgument);
  EXPECT_THROW(EarlyStopping("loss", 0), InvalidArgument);
  EXPECT_THROW(EarlyStopping("loss", 1, 0, "lowest"), InvalidArgument);
}

TEST(Trainer, ResumedRunEqualsAnUninterruptedOne) {
  test::TempDir a, b;
  auto adamw = [](torch::nn::Module& m) {
    return std::make_unique<torch::optim::AdamW>(m.parameters(), torch::optim::AdamWOptions(0.01));
  };
  Task straight = blob_task(4);
  straight.make_optimizer = adamw;
  auto m1 = straight.model.ptr();
  Trainer(quiet(a, 3)).fit(std::move(straight));

  TrainConfig first = quiet(b, 3);
  first.stop_after = 1;
  Task part = blob_task(4);
  part.make_optimizer = adamw;
  EXPECT_EQ(Trainer(first).fit(std::move(part)).epochs_done, 1);
  TrainConfig second = quiet(b, 3);
  second.resume = true;
  Task rest = blob_task(99);  // other initial weights: the checkpoint's replace them
  rest.make_optimizer = adamw;
  auto m2 = rest.model.ptr();
  EXPECT_EQ(Trainer(second).fit(std::move(rest)).epochs_done, 3);
  EXPECT_TRUE(at::equal(flat_weights(*m1), flat_weights(*m2)));
}

void expect_error(Task t, const std::string& part, TrainConfig s = {}) {
  test::TempDir dir;
  if (s.out_dir.empty()) s = quiet(dir, 1);
  try {
    Trainer(s).fit(std::move(t));
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Trainer, BadTasksGetErrorsNamingTheProblem) {
  Task no_model = blob_task();
  no_model.model = torch::nn::AnyModule();
  expect_error(std::move(no_model), "the Task has no model");

  Task no_test = blob_task();
  no_test.test = DataSource();
  expect_error(std::move(no_test), "the Task's test data is not set: task.test = TensorData{x, y}");

  Task mismatched = blob_task();
  tensors(mismatched.train).y = tensors(mismatched.train).y.narrow(0, 0, 10);
  expect_error(std::move(mismatched),
               "the Task's train data: TensorData's x and y must both be tensors with the same first dimension");

  Task on_a_device = blob_task();  // meta: as a GPU's tensors, not the CPU's
  tensors(on_a_device.train).x = tensors(on_a_device.train).x.to(at::kMeta);
  expect_error(std::move(on_a_device), "the Task's train data: TensorData's x is on meta; give it on the CPU");

  Task small_total = blob_task();
  small_total.train = TensorData::shard(tensors(small_total.train).x, tensors(small_total.train).y, 100);
  expect_error(std::move(small_total), "a shard of 200 samples with total 100");

  Task picked = blob_task();
  picked.train = FetchData::of(TensorPairs(tensors(picked.train).x, tensors(picked.train).y));
  std::get<FetchData>(picked.train).indices = {0, 1, 2};
  expect_error(std::move(picked), "FetchData's indices are for evaluation");

  Task no_fetch = blob_task();
  no_fetch.test = FetchData{};
  expect_error(std::move(no_fetch), "the Task's test data: FetchData needs a fetch function and total > 0 samples");

  Task rmsprop = blob_task();
  rmsprop.make_optimizer = [](torch::nn::Module& m) {
    return std::make_unique<torch::optim::RMSprop>(m.parameters(), torch::optim::RMSpropOptions(0.01));
  };
  expect_error(std::move(rmsprop), "SGD");  // the checkpointable optimizers are named

  test::TempDir dir;
  TrainConfig lr_twice = quiet(dir, 1);
  lr_twice.lr = 0.5;
  Task with_opt = blob_task();
  with_opt.make_optimizer = [](torch::nn::Module& m) {
    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.1));
  };
  expect_error(std::move(with_opt), "settings.lr is 0.5 but the Task's make_optimizer sets lr 0.1", lr_twice);

  Task vector_loss = blob_task();
  vector_loss.loss = [](const at::Tensor& out, const at::Tensor& y) {
    return at::cross_entropy_loss(out, y, {}, at::Reduction::None);
  };
  expect_error(std::move(vector_loss), "the Task's loss gave 16 values for a batch");

  TrainConfig once = quiet(dir, 1);
  Trainer trainer(once);
  trainer.fit(blob_task());
  EXPECT_THROW(trainer.fit(blob_task()), InvalidArgument);
}

// World 3 with batch 16 per rank takes, at each step, the same 48 samples as world 1 with batch 48 (the
// DistributedSampler deals rank r the permutation's positions r, r + 3, ...; 192 samples: no padding), and the
// mean of the ranks' mean gradients is the global mean: the weights agree up to float32 summation order.
TEST(TrainerRanks, WorldThreeEqualsWorldOneWithThreeTimesTheBatch) {
  test::TempDir one, three;
  auto task = [] {
    Task t = blob_task(11);
    tensors(t.train).x = tensors(t.train).x.narrow(0, 0, 192);
    tensors(t.train).y = tensors(t.train).y.narrow(0, 0, 192);
    return t;
  };
  Task single = task();
  auto reference = single.model.ptr();
  TrainConfig s1 = quiet(one, 3);
  s1.batch_size = 48;
  s1.lr = 0.1;
  const auto r1 = Trainer(s1).fit(std::move(single));
  std::vector<at::Tensor> weights(3);
  std::vector<TrainSummary> results(3);
  std::vector<Task> tasks;  // built here: task() seeds the global generator, which the rank threads share
  for (int r = 0; r < 3; ++r) tasks.push_back(task());
  testing::run_ranks("gloo", 3, [&](ProcessGroup& g) {
    Task t = std::move(tasks[size_t(g.rank())]);
    auto model = t.model.ptr();
    TrainConfig s3 = quiet(three, 3);
    s3.lr = 0.1;
    results[size_t(g.rank())] = Trainer(s3, g.shared_from_this()).fit(std::move(t));
    weights[size_t(g.rank())] = flat_weights(*model);
  });
  const at::Tensor w1 = flat_weights(*reference);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(at::equal(weights[size_t(r)], weights[0])) << "rank " << r << " differs from rank 0";
    EXPECT_EQ(results[size_t(r)].steps, 12);
    EXPECT_EQ(results[size_t(r)].eval.count, 50);
  }
  // 12 SGD steps of a linear model on O(1) data: the sums of 3 per-rank means against one 48-term mean
  // differ by a few float32 roundings (6e-8 relative) per step; 1e-5 leaves room for 12 steps of them, and
  // a wrong average (e.g. a sum instead of a mean) is off by O(1).
  EXPECT_TRUE(at::allclose(weights[0], w1, 1e-5, 1e-6)) << (weights[0] - w1).abs().max().item<double>();
  EXPECT_DOUBLE_EQ(results[0].eval.acc1, r1.eval.acc1);
}

// Every strategy trains a Sequential Task to the same weights at world 2 (two-term sums and elementwise updates:
// bit for bit), and leaves them in the Task's model after fit, also where they were sharded (fsdp-*). A callback
// sees the whole model at each epoch's end.
TEST(TrainerRanks, EveryStrategyLeavesTheSameTrainedWeightsInTheTasksModel) {
  std::map<std::string, std::vector<at::Tensor>> weights;
  std::map<std::string, double> acc;
  for (const std::string strategy : {"ddp", "zero1", "fsdp-full", "fsdp-grad"}) {
    test::TempDir dir;
    std::vector<at::Tensor> mine(2);
    std::vector<int64_t> seen(2, 0);
    // Built here: the ranks' threads share the global generator, which each Trainer seeds.
    std::vector<Task> tasks;
    std::vector<models::SequentialNet> nets;
    for (int r = 0; r < 2; ++r) {
      tasks.push_back(blob_task());
      at::manual_seed(5);
      nets.emplace_back(torch::nn::Linear(8, 6), torch::nn::Tanh(), torch::nn::Linear(6, 4));
      tasks.back().model = torch::nn::AnyModule(nets.back());
    }
    testing::run_ranks("gloo", 2, [&](ProcessGroup& g) {
      Task t = std::move(tasks[size_t(g.rank())]);
      models::SequentialNet net = nets[size_t(g.rank())];
      TrainConfig s = quiet(dir, 2);
      s.lr = 0.1;
      s.momentum = 0.9;
      s.strategy = strategy;
      Trainer trainer(s, g.shared_from_this());
      trainer.on_epoch_end([&, r = g.rank()](EpochEnd&) { seen[size_t(r)] = flat_weights(*net).numel(); });
      const auto summary = trainer.fit(std::move(t));
      mine[size_t(g.rank())] = flat_weights(*net);
      if (g.rank() == 0) acc[strategy] = summary.eval.acc1;
    });
    EXPECT_TRUE(at::equal(mine[1], mine[0])) << strategy << ": rank 1 differs from rank 0";
    EXPECT_EQ(seen, (std::vector<int64_t>{82, 82})) << strategy << ": the callback's model";
    weights[strategy] = mine;
  }
  for (const auto& [strategy, w] : weights) {
    ASSERT_EQ(w[0].numel(), 82) << strategy;
    EXPECT_TRUE(at::equal(w[0], weights["ddp"][0]))
        << strategy << " differs from ddp by " << (w[0] - weights["ddp"][0]).abs().max().item<double>();
    EXPECT_DOUBLE_EQ(acc[strategy], acc["ddp"]) << strategy;
  }
}

// --device cuda where no GPU is visible: every rank stops before training, rank 0 saying why and what to use.
TEST(TrainerRanks, ADeviceThatIsNotThereStopsEveryRankBeforeTraining) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: the cuda tests train on it";
  test::TempDir dir;
  std::vector<std::string> errors(2);
  testing::run_ranks("gloo", 2, [&](ProcessGroup& g) {
    TrainConfig s = quiet(dir, 1);
    s.device = "cuda";
    try {
      Trainer(s, g.shared_from_this()).fit(blob_task());
      ADD_FAILURE() << "rank " << g.rank() << " trained";
    } catch (const InvalidArgument& e) {
      errors[size_t(g.rank())] = e.what();
    }
  });
  const std::string why = cuda_built() ? "no GPU is visible" : "this ddp was built against a LibTorch without CUDA";
  EXPECT_NE(errors[0].find("--device cuda on rank 0: device 'cuda': " + why), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("use --device cpu or auto"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("--device cuda failed on rank 0"), std::string::npos) << errors[1];
  // auto is the CPU here, and trains.
  testing::run_ranks("gloo", 2, [&](ProcessGroup& g) {
    TrainConfig s = quiet(dir, 1);
    s.device = "auto";
    EXPECT_EQ(Trainer(s, g.shared_from_this()).fit(blob_task()).epochs_done, 1);
  });
}

TEST(TrainerRanks, ACallbackOnOneRankOnlyNeitherHangsNorStops) {
  test::TempDir dir;
  std::vector<int> calls(2, 0);
  testing::run_ranks("gloo", 2, [&](ProcessGroup& g) {
    Trainer trainer(quiet(dir, 3), g.shared_from_this());
    if (g.rank() == 0) trainer.on_epoch_end([&](EpochEnd&) { calls[0] += 1; });
    EXPECT_EQ(trainer.fit(blob_task()).epochs_done, 3);
  });
  EXPECT_EQ(calls, (std::vector<int>{3, 0}));
}

TEST(TrainerRanks, ACallbackThatThrowsOnOneRankEndsEveryRank) {
  test::TempDir dir;
  std::vector<std::string> errors(3);
  testing::run_ranks("gloo", 3, [&](ProcessGroup& g) {
    Trainer trainer(quiet(dir, 3), g.shared_from_this());
    trainer.on_epoch_end([&](EpochEnd& e) {
      if (g.rank() == 1 && e.epoch == 2) throw std::runtime_error("disk full");
    });
    try {
      trainer.fit(blob_task());
    } catch (const std::exception& e) {
      errors[size_t(g.rank())] = e.what();
    }
  });
  EXPECT_EQ(errors[1], "disk full");
  for (int r : {0, 2})
    EXPECT_EQ(errors[size_t(r)],
              "Trainer: an on_epoch_end callback threw on rank 1 after epoch 2 (its error is in "
              "that rank's output)");
}

TEST(TrainerRanks, WhatDiffersBetweenRanksIsAnErrorOnEveryRank) {
  test::TempDir a, b;
  // Rank 1's Task has no evaluation data: it says why, the others name it.
  std::vector<std::string> errors(2);
  testing::run_ranks("gloo", 2, [&](ProcessGroup& g) {
    Task t = blob_task();
    if (g.rank() == 1) t.test = DataSource();
    try {
      Trainer(quiet(a, 1), g.shared_from_this()).fit(std::move(t));
    } catch (const InvalidArgument& e) {
      errors[size_t(g.rank())] = e.what();
    }
  });
  EXPECT_NE(errors[1].find("the Task's test data is not set"), std::string::npos) << errors[1];
  EXPECT_EQ(errors[0], "Trainer: checking the Task failed on rank 1 (its error is in that rank's output)");

  // Shards of different sizes would leave a rank waiting in DDP's all_reduce: refused on every rank.
  std::vector<std::string> shard_errors(2);
  testing::run_ranks("gloo", 2, [&](ProcessGroup& g) {
    Task t = blob_task();
    const int64_t n = g.rank() == 0 ? 96 : 64;
    t.train = TensorData::shard(tensors(t.train).x.narrow(0, 0, n), tensors(t.train).y.narrow(0, 0, n), 160);
    try {
      Trainer(quiet(b, 1), g.shared_from_this()).fit(std::move(t));
    } catch (const InvalidArgument& e) {
      shard_errors[size_t(g.rank())] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(shard_errors[size_t(r)].find("the ranks' training shards give 4 to 6 batches per epoch"),
              std::string::npos)
        << "rank " << r << ": " << shard_errors[size_t(r)];
}

}  // namespace
}  // namespace ddp::train
