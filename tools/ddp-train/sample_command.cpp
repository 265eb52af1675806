// `ddp-train sample RUN_DIR|CHECKPOINT [--prompt TEXT] [--tokens N] ...`: text from a shakespeare-char
// checkpoint (nanoGPT's sample.py): the GPT of the checkpoint's recipe with its weights, the vocabulary of
// its data (the run's --data-dir unless given), tokens drawn one at a time after the prompt.
#include <ATen/CPUGeneratorImpl.h>
#include <sys/stat.h>
#include <CLI/CLI.hpp>

#include <iostream>

#include "ddp/errors.h"
#include "ddp/train/checkpoint.h"
#include "ddp/train/shakespeare.h"
#include "report_command.h"

namespace ddp_train_tool {
namespace {

// A checkpoint file as given, or the newest of RUN_DIR/checkpoints.
std::string checkpoint_of(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw ddp::InvalidArgument("ddp-train sample: " + path + " does not exist");
  if (!S_ISDIR(st.st_mode)) return path;
  for (const std::string dir : {path + "/checkpoints", path}) {
    if (auto latest = ddp::train::CheckpointManager({dir}).latest()) return *latest;
  }
  throw ddp::InvalidArgument("ddp-train sample: no checkpoint in " + path + " or " + path +
                             "/checkpoints: give a run's --out-dir or a checkpoint file");
}

// The entry `key` of the checkpoint's "config" (what describe() recorded: text).
std::string config_text(const c10::impl::GenericDict& ckpt, const std::string& key, const std::string& file) {
  auto config = ckpt.find("config");
  if (config != ckpt.end() && config->value().isGenericDict()) {
    auto d = config->value().toGenericDict();
    auto it = d.find(key);
    if (it != d.end() && it->value().isString()) return it->value().toStringRef();
  }
  throw ddp::InvalidArgument("ddp-train sample: " + file + " records no " + key + " (not a ddp-train checkpoint)");
}

}  // namespace

int sample_main(int argc, char** argv) {
  CLI::App app{"ddp-train sample: text from a shakespeare-char run's checkpoint (nanoGPT's sample.py)",
               "ddp-train sample"};
  std::string from, prompt = "\n", data_dir;
  int64_t tokens = 500, top_k = 200;
  double temperature = 0.8;
  uint64_t seed = 1337;
  app.add_option("checkpoint", from, "a run's --out-dir (its newest checkpoint) or a checkpoint file")->required();
  app.add_option("--prompt", prompt, "the text to continue [default: a newline]");
  app.add_option("--tokens", tokens, "characters to generate [default: 500]")->check(CLI::PositiveNumber);
  app.add_option("--temperature", temperature, "divides the logits: < 1 surer, > 1 wilder [default: 0.8]")
      ->check(CLI::PositiveNumber);
  app.add_option("--top-k", top_k, "draw among the k likeliest characters (0: all) [default: 200]")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "the sampling generator's seed [default: 1337]");
  app.add_option("--data-dir", data_dir, "the folder of the run's input.txt (its vocabulary) [default: the run's]");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::string file = checkpoint_of(from);
  const c10::IValue ckpt = ddp::train::load_checkpoint(file);
  if (!ckpt.isGenericDict() || ckpt.toGenericDict().find("model") == ckpt.toGenericDict().end())
    throw ddp::InvalidArgument("ddp-train sample: " + file + " holds no model (not a ddp-train checkpoint)");
  const auto c = ckpt.toGenericDict();
  const std::string recipe = config_text(c, "recipe", file);
  if (recipe.rfind("shakespeare-char", 0) != 0)
    throw ddp::InvalidArgument("ddp-train sample: " + file + " is a checkpoint of recipe " + recipe +
                               "; sampling needs a shakespeare-char one");
  const auto text = ddp::train::load_char_text(data_dir.empty() ? config_text(c, "data_dir", file) : data_dir);
  ddp::models::GPT gpt(ddp::train::shakespeare_gpt_config(recipe, static_cast<int64_t>(text.vocab.size())));
  ddp::train::load_state_dict(*gpt, ddp::train::state_dict_from_ivalue(c.at("model"), file + " [model]"));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor out = ddp::models::generate(*gpt, text.encode(prompt).unsqueeze(0), tokens, temperature, top_k, gen);
  std::cout << text.decode(out) << std::endl;
  return 0;
}

}  // namespace ddp_train_tool
