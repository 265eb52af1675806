// Your own model and data, trained data-parallel by ddp::train::Trainer.
//
//   ddprun --nproc-per-node 2 --standalone build/bin/custom_training [epochs]
//
// Prints the run's first line, one line per epoch (loss, acc1, acc5, the Brier
// score) and "done: acc1 ..." with the paths of the logs, checkpoint and report
// (runs/spirals/); exits 1 below 90%. `custom_training 30 --resume` goes on from
// the last checkpoint to epoch 30.
#include <ddp/train/trainer.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <string>

// Three interleaved spirals in the plane: 1000 points per class, the same on every rank.
std::pair<at::Tensor, at::Tensor> spirals(int64_t per_class, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor r = at::rand({3, per_class}, gen);
  at::Tensor angle = r * 4 + at::arange(3).unsqueeze(1) * (2 * M_PI / 3) + at::randn({3, per_class}, gen) * 0.2;
  at::Tensor x = at::stack({r * at::cos(angle), r * at::sin(angle)}, 2).reshape({-1, 2});
  return {x, at::arange(3).repeat_interleave(per_class)};
}

struct NetImpl : torch::nn::Module {
  torch::nn::Linear l1{2, 64}, l2{64, 64}, l3{64, 3};
  NetImpl() { register_module("l1", l1), register_module("l2", l2), register_module("l3", l3); }
  at::Tensor forward(at::Tensor x) { return l3(at::relu(l2(at::relu(l1(x))))); }
};
TORCH_MODULE(Net);

int main(int argc, char** argv) {
  ddp::train::TrainConfig settings;
  settings.recipe = "spirals";  // the job's name: runs/spirals
  settings.epochs = argc > 1 ? std::stoi(argv[1]) : 20;
  settings.batch_size = 32;  // per rank
  settings.schedule = "cosine";
  settings.resume = argc > 2 && std::string(argv[2]) == "--resume";
  ddp::train::Trainer trainer(settings);  // joins ddprun's group (or a world of 1)

  ddp::train::Task task;
  task.model = torch::nn::AnyModule(Net());
  auto [x, y] = spirals(1000, 1);
  auto [tx, ty] = spirals(300, 2);
  task.train = ddp::train::TensorData{x, y};   // every rank's copy: the DistributedSampler picks each rank's
  task.test = ddp::train::TensorData{tx, ty};  // the whole set: each rank evaluates its share
  task.make_optimizer = [](torch::nn::Module& m) {
    return std::make_unique<torch::optim::AdamW>(m.parameters(), torch::optim::AdamWOptions(0.01));
  };
  task.metrics.push_back({"brier", [](const at::Tensor& out, const at::Tensor& y) {  // a batch's sum
                            return (out.softmax(1) - at::one_hot(y, 3)).pow(2).sum();
                          }});
  trainer.on_epoch_end(ddp::train::EarlyStopping("loss", /*patience=*/3));
  auto done = trainer.fit(std::move(task));
  return done.eval.acc1 > 0.9 ? 0 : 1;
}
