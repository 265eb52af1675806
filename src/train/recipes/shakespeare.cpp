// The GPT recipes: nanoGPT's character-level Shakespeare (shakespeare-char: its CPU configuration;
// shakespeare-char-gpu: its full one). The text's first 90% trains, the last 10% validates; a token is a
// character, the vocabulary the sorted distinct characters of the whole text.
//
// Training samples are windows of block_size + 1 characters at random offsets, as nanoGPT draws them: an
// "epoch" is 2,000 iterations of every rank (nanoGPT's max_iters of the CPU configuration), so a world of W
// ranks sees W times the tokens per iteration, as nanoGPT under DDP. Validation: every non-overlapping
// window of the last 10%, the loss per character over all of them (nanoGPT estimates it on random batches).
#include <ATen/CPUGeneratorImpl.h>

#include <fstream>
#include <sstream>

#include "common.h"
#include "ddp/errors.h"
#include "ddp/train/models/gpt.h"
#include "ddp/train/shakespeare.h"

namespace ddp::train {

CharText load_char_text(const std::string& dir) {
  const std::string path = dir + "/input.txt";
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InvalidArgument("shakespeare-char: cannot read " + path +
                          ": put Tiny Shakespeare's input.txt there (https://raw.githubusercontent.com/karpathy/"
                          "char-rnn/master/data/tinyshakespeare/input.txt), or give its folder with --data-dir");
  std::stringstream ss;
  ss << in.rdbuf();
  CharText t;
  t.text = ss.str();
  if (t.text.size() < 1000)
    throw InvalidArgument("shakespeare-char: " + path + " has " + std::to_string(t.text.size()) +
                          " characters; the recipe needs at least 1000 (90% to train, 10% to validate)");
  bool seen[256] = {};
  for (unsigned char c : t.text) seen[c] = true;
  for (int c = 0; c < 256; ++c)
    if (seen[c]) t.vocab.push_back(static_cast<char>(c));
  return t;
}

at::Tensor CharText::encode(const std::string& s) const {
  int16_t code[256];
  std::fill(std::begin(code), std::end(code), int16_t(-1));
  for (size_t i = 0; i < vocab.size(); ++i) code[static_cast<unsigned char>(vocab[i])] = static_cast<int16_t>(i);
  at::Tensor out = at::empty({static_cast<int64_t>(s.size())}, at::kLong);
  auto* p = out.data_ptr<int64_t>();
  for (size_t i = 0; i < s.size(); ++i) {
    const int16_t k = code[static_cast<unsigned char>(s[i])];
    if (k < 0)
      throw InvalidArgument("shakespeare-char: the character '" + std::string(1, s[i]) + "' (code " +
                            std::to_string(static_cast<unsigned char>(s[i])) + ") is not in the text's vocabulary");
    p[i] = k;
  }
  return out;
}

std::string CharText::decode(const at::Tensor& tokens) const {
  at::Tensor t = tokens.reshape({-1}).to(at::kCPU, at::kLong).contiguous();  // read here: from a GPU too
  std::string s;
  for (int64_t i = 0; i < t.numel(); ++i) s += vocab.at(static_cast<size_t>(t.data_ptr<int64_t>()[i]));
  return s;
}

models::GPTConfig shakespeare_gpt_config(const std::string& recipe, int64_t vocab_size) {
  models::GPTConfig c;
  c.vocab_size = vocab_size;
  if (recipe == "shakespeare-char-gpu")
    c.block_size = 256, c.n_layer = 6, c.n_head = 6, c.n_embd = 384, c.dropout = 0.2;
  return c;
}

namespace detail {
namespace {

constexpr int64_t kIterationsPerEpoch = 2000;

// nanoGPT's settings for both: AdamW lr 1e-3, 100 warm-up iterations and cosine decay to 1e-4, weight decay
// 0.1 on the matrices, gradient clipping at 1, an evaluation every 250 iterations.
void defaults_shakespeare(TrainConfig& cfg, bool gpu) {
  fill<int64_t>(cfg.epochs, 1);
  fill<int64_t>(cfg.batch_size, gpu ? 64 : 12);
  fill(cfg.optimizer, "adamw");
  fill(cfg.lr, 1e-3);
  fill(cfg.betas, std::make_pair(0.9, 0.99));
  fill(cfg.weight_decay, 0.1);
  fill(cfg.clip_grad, 1.0);
  fill(cfg.schedule, "cosine:0.1");
  fill<int64_t>(cfg.warmup, 100);
  fill<int64_t>(cfg.eval_every, 250);
  fill(cfg.data_mode, "sampler");
  fill<int64_t>(cfg.cutout, 0);
  fill<int64_t>(cfg.ema_every, 0);
  fill(cfg.label_smoothing, 0.0);
  fill(cfg.momentum, 0.0);
  fill(cfg.precision, "auto");
  fill(cfg.data_dir, default_data_dir("tinyshakespeare"));
}

// `count` windows [count, block+1] of `tokens` at offsets drawn from `seed`, as uint8 (65 characters).
at::Tensor random_windows(const at::Tensor& tokens, int64_t block, int64_t count, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor offsets = at::randint(tokens.size(0) - block, {count, 1}, gen);
  return tokens.to(at::kByte).index({offsets + at::arange(block + 1)});
}

Recipe make_shakespeare(TrainConfig& cfg, ProcessGroup& group) {
  const CharText text = load_char_text(cfg.data_dir);
  if (text.vocab.size() > 256) throw InvalidArgument("shakespeare-char: more than 256 distinct characters");
  const models::GPTConfig c = shakespeare_gpt_config(cfg.recipe, static_cast<int64_t>(text.vocab.size()));
  const at::Tensor tokens = text.encode(text.text);
  const int64_t n = tokens.size(0), split = n * 9 / 10;
  const int64_t samples = kIterationsPerEpoch * *cfg.batch_size * group.size();
  at::Tensor train = random_windows(tokens.narrow(0, 0, split), c.block_size, samples, cfg.seed);
  at::Tensor val = tokens.narrow(0, split, n - split);
  const int64_t windows = (val.size(0) - 1) / c.block_size;
  at::Tensor val_x = val.narrow(0, 0, windows * c.block_size).view({windows, c.block_size});
  at::Tensor val_y = val.narrow(0, 1, windows * c.block_size).view({windows, c.block_size});

  Recipe r;
  r.name = cfg.recipe;
  auto [x, y] = limit({train.narrow(1, 0, c.block_size), train.narrow(1, 1, c.block_size)}, cfg.limit_train);
  r.train = TensorData{x.contiguous(), y.contiguous()};
  set_test_data(r, cfg, group, val_x.to(at::kByte), val_y.to(at::kByte));
  r.prepare_input = [](const at::Tensor& b) { return b.to(at::kLong); };
  r.loss = [](const at::Tensor& logits, const at::Tensor& target) {
    return models::next_token_loss(logits, target.to(at::kLong));
  };
  models::GPT gpt(c);
  // nanoGPT's groups: decay on every tensor of two or more dimensions (matrices, embeddings), none on the rest.
  ParamGroup decay{"decay", {}, 1, *cfg.weight_decay}, no_decay{"no_decay", {}, 1, 0};
  for (auto& p : gpt->parameters()) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  r.groups = {decay, no_decay};
  r.model = torch::nn::AnyModule(gpt);
  return r;
}

[[maybe_unused]] const bool registered =
    register_recipe({"shakespeare-char",
                     "nanoGPT's character-level GPT on Tiny Shakespeare (4 layers, 4 heads, 128 dims, context 64: "
                     "its CPU configuration)",
                     [](TrainConfig& c, int) { defaults_shakespeare(c, false); }, make_shakespeare}) &&
    register_recipe({"shakespeare-char-gpu",
                     "the same with nanoGPT's full configuration (6 layers, 6 heads, 384 dims, context 256, batch "
                     "64, dropout 0.2): for GPUs",
                     [](TrainConfig& c, int) { defaults_shakespeare(c, true); }, make_shakespeare});

}  // namespace
}  // namespace detail
}  // namespace ddp::train
