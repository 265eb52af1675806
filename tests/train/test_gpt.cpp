// The GPT of the shakespeare-char recipes: nanoGPT's size, causality, the tied embedding, generation, and
// the character text's vocabulary. (Its training under every strategy: train_strategy_*_gpt_*; PyTorch's
// nanoGPT on the same weights: gpt_interop_with_pytorch.)
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "ddp/errors.h"
#include "ddp/torch_compat.h"
#include "ddp/train/models/gpt.h"
#include "ddp/train/shakespeare.h"

namespace {

using ddp::models::GPT;
using ddp::models::GPTConfig;

at::Tensor tokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(vocab, {b, t}, gen);
}

TEST(Gpt, ParametersAreNanoGptsCount) {
  // Per block: two LayerNorm weights (2C), c_attn 3C x C, attn's c_proj C x C, c_fc 4C x C, mlp's c_proj C x 4C
  // (12 C^2); then the tied embedding V x C and ln_f's C; nanoGPT's count leaves out the positions (0.80M).
  const GPTConfig c;  // 4 layers, 128 dims, 65 characters
  GPT gpt(c);
  const int64_t C = c.n_embd;
  EXPECT_EQ(gpt->num_parameters(), c.n_layer * (2 * C + 12 * C * C) + c.vocab_size * C + C);
  EXPECT_EQ(gpt->num_parameters(), 795904);
  for (const auto& p : gpt->named_parameters()) EXPECT_EQ(p.key().find("lm_head"), std::string::npos) << p.key();
  EXPECT_EQ(gpt->named_parameters().size(), size_t(3 + 6 * c.n_layer));  // wte, wpe, ln_f; 6 tensors a block
}

TEST(Gpt, LogitsAreCausal) {
  GPTConfig c;
  c.n_layer = 2, c.block_size = 16, c.n_embd = 32;
  GPT gpt(c);
  gpt->eval();
  at::Tensor x = tokens(2, 16, c.vocab_size, 1), y = x.clone();
  y.select(1, 9).copy_(x.select(1, 9).add(1).remainder(c.vocab_size));  // another token at position 9
  at::Tensor a = gpt(x), b = gpt(y);
  ASSERT_EQ(a.sizes(), (std::vector<int64_t>{2, 16, c.vocab_size}));
  EXPECT_TRUE(at::equal(a.narrow(1, 0, 9), b.narrow(1, 0, 9))) << "a later token changed an earlier logit";
  EXPECT_FALSE(at::equal(a.narrow(1, 9, 1), b.narrow(1, 9, 1)));
}

TEST(Gpt, AttentionEqualsItsComposition) {
  // softmax(q k^T / sqrt(D) + causal mask) v in float64 against causal_attention: at T = 12 its own composition,
  // at T = 136 (past fused_attention's bound for a CPU) 2.x's fused kernel; sums of D = 16 and T products, so a
  // few ulps of float64.
  for (const int64_t t : {12, 136}) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    at::Tensor q = at::randn({2, 3, t, 16}, gen).to(at::kDouble), k = at::randn({2, 3, t, 16}, gen).to(at::kDouble),
               v = at::randn({2, 3, t, 16}, gen).to(at::kDouble);
    EXPECT_EQ(ddp::compat::fused_attention(q), TORCH_VERSION_MAJOR >= 2 && t > 128) << "T " << t;
    at::Tensor att = at::matmul(q, k.transpose(-2, -1)) / 4.0;
    att = at::softmax(att.masked_fill(at::ones({t, t}, at::kBool).triu(1), -INFINITY), -1);
    at::Tensor want = at::matmul(att, v);
    EXPECT_LE((ddp::compat::causal_attention(q, k, v, 0) - want).abs().max().item<double>(), 1e-13) << "T " << t;
  }
}

TEST(Gpt, TheOutputProjectionIsTheTokenEmbedding) {
  // A token absent from the input still gets a gradient in wte: through the logits, which use wte's weights.
  GPTConfig c;
  c.n_layer = 1, c.block_size = 8, c.n_embd = 16, c.vocab_size = 10;
  GPT gpt(c);
  at::Tensor x = at::zeros({1, 8}, at::kLong), y = at::ones({1, 8}, at::kLong);
  ddp::models::next_token_loss(gpt(x), y).backward();
  const at::Tensor g = gpt->wte->weight.grad();
  for (int64_t token = 1; token < 10; ++token) EXPECT_GT(g[token].abs().sum().item<double>(), 0) << token;
}

TEST(Gpt, FirstLossIsNearUniform) {
  // Initial logits: unit-variance LayerNorm outputs times N(0, 0.02^2) weights over 128 dims, std 0.02 sqrt(128)
  // = 0.23; the cross-entropy then exceeds ln V by about their variance / 2 (0.03): 0.1 is 3x that.
  torch::manual_seed(0);
  GPT gpt(GPTConfig{});
  at::Tensor x = tokens(4, 64, 65, 2), y = tokens(4, 64, 65, 3);
  const double loss = ddp::models::next_token_loss(gpt(x), y).item<double>();
  EXPECT_NEAR(loss, std::log(65.0), 0.1);
}

TEST(Gpt, GenerateContinuesThePrompt) {
  GPTConfig c;
  c.n_layer = 1, c.block_size = 8, c.n_embd = 16, c.vocab_size = 12;
  GPT gpt(c);
  at::Tensor prompt = at::tensor({3, 4, 5}, at::kLong).unsqueeze(0);
  auto g1 = at::make_generator<at::CPUGeneratorImpl>(5), g2 = at::make_generator<at::CPUGeneratorImpl>(5);
  at::Tensor a = ddp::models::generate(*gpt, prompt, 20, 0.8, 0, g1),
             b = ddp::models::generate(*gpt, prompt, 20, 0.8, 0, g2);
  ASSERT_EQ(a.sizes(), (std::vector<int64_t>{1, 23}));  // past block_size: the context is cropped
  EXPECT_TRUE(at::equal(a.narrow(1, 0, 3), prompt));
  EXPECT_TRUE(at::equal(a, b)) << "the same seed drew other tokens";
  EXPECT_TRUE(gpt->is_training()) << "generate left the model in evaluation mode";
  // top_k = 1 is the argmax of each step.
  at::Tensor greedy = ddp::models::generate(*gpt, prompt, 4, 1.0, 1, g1);
  at::Tensor ctx = prompt;
  {
    torch::NoGradGuard no_grad;
    gpt->eval();
    for (int i = 0; i < 4; ++i) ctx = at::cat({ctx, gpt(ctx).select(1, ctx.size(1) - 1).argmax(-1, true)}, 1);
  }
  EXPECT_TRUE(at::equal(greedy, ctx));
  EXPECT_THROW(ddp::models::generate(*gpt, prompt, 1, 0, 0, g1), ddp::InvalidArgument);
}

TEST(Gpt, BadConfigurationsAreRefused) {
  GPTConfig c;
  c.n_head = 3;  // 128 dims do not split in 3 heads
  EXPECT_THROW(GPT{c}, ddp::InvalidArgument);
  GPT gpt(GPTConfig{});
  EXPECT_THROW(gpt(at::zeros({1, 65}, at::kLong)), ddp::InvalidArgument);  // past the context of 64
}

TEST(CharText, VocabularyEncodeDecode) {
  const std::string dir = ::testing::TempDir() + "/chartext";
  std::filesystem::create_directories(dir);
  std::string body;
  for (int i = 0; i < 100; ++i) body += "To be, or not to be: that is the question.\n";
  std::ofstream(dir + "/input.txt") << body;
  auto t = ddp::train::load_char_text(dir);
  EXPECT_EQ(t.vocab, std::string("\n ,.:Tabehinoqrstu"));  // sorted distinct characters
  at::Tensor e = t.encode("to be");
  EXPECT_TRUE(at::equal(e, at::tensor({16, 12, 1, 7, 8}, at::kLong)));
  EXPECT_EQ(t.decode(e), "to be");
  EXPECT_THROW(t.encode("z"), ddp::InvalidArgument);
  try {
    ddp::train::load_char_text(dir + "/missing");
    FAIL() << "no error for a missing input.txt";
  } catch (const ddp::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("input.txt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--data-dir"), std::string::npos) << e.what();
  }
}

}  // namespace
