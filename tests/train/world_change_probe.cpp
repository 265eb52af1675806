// A Trainer with an on_world_change callback, run under ddprun --recovery inplace (world_change_test.sh): the mlp
// recipe at a constant learning rate; the rank launched as VICTIM SIGKILLs itself at the end of epoch 2 (from an
// on_epoch_end callback); every survivor's callback prints what it was told and halves the learning rate.
// usage: world_change_probe OUT_DIR VICTIM
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ddp/train/recipe.h"
#include "ddp/train/trainer.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: world_change_probe OUT_DIR VICTIM\n");
    return 2;
  }
  const char* launch_rank = std::getenv("RANK");
  const bool victim = launch_rank && std::string(launch_rank) == argv[2];
  ddp::train::TrainConfig cfg;
  cfg.recipe = "mlp";
  cfg.epochs = 5;
  cfg.schedule = "constant";
  cfg.out_dir = argv[1];
  cfg.progress = false;
  cfg.log_every = 1;
  try {
    ddp::train::Trainer trainer(cfg);
    ddp::train::Task task = ddp::train::make_recipe(trainer.settings(), trainer.group());
    trainer.on_epoch_end([victim](ddp::train::EpochEnd& e) {
      if (victim && e.epoch == 2) std::raise(SIGKILL);
    });
    trainer.on_world_change([](ddp::train::WorldChange& c) {
      std::printf("world change %d -> %d, generation %d, at step %lld, global batch %lld\n", c.from, c.to, c.generation,
                  static_cast<long long>(c.step), static_cast<long long>(c.global_batch));
      std::fflush(stdout);
      c.lr_scale = 0.5;
    });
    trainer.fit(std::move(task));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "world_change_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
