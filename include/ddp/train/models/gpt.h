// A decoder-only transformer: nanoGPT's GPT (Karpathy), for character-level language modelling.
//
// Token and position embeddings, n_layer pre-LayerNorm blocks of causal self-attention and a GELU MLP, a final
// LayerNorm, and logits through the token embedding's own weights (weight tying: one parameter, wte.weight).
// nanoGPT's layout and initialisation: normal(0, 0.02) weights, zero biases, the residual projections
// (attn.c_proj, mlp.c_proj) normal(0, 0.02 / sqrt(2 n_layer)); LayerNorms and Linears without biases unless
// `bias`. Each block is a unit of its own when the model is sharded (ddp::Sharded<Block>).
//
//   ddp::models::GPT gpt(ddp::models::GPTConfig{});       // nanoGPT's CPU configuration, 65 characters
//   at::Tensor logits = gpt(tokens);                       // tokens int64 [B, T] -> [B, T, vocab]
//   at::Tensor more = ddp::models::generate(*gpt, prompt, 200, 0.8, 200, gen);
#pragma once
#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "ddp/parallel/fully_shard.h"

namespace ddp::models {

struct GPTConfig {
  int64_t vocab_size = 65;
  int64_t block_size = 64;  // context length
  int64_t n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0;
  bool bias = false;  // biases in the Linears and LayerNorms
};

// LayerNorm over the last dimension with an optional bias (LibTorch's has both or neither).
class GPTLayerNormImpl : public torch::nn::Module {
 public:
  GPTLayerNormImpl(int64_t dim, bool bias);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight, bias;
};
TORCH_MODULE(GPTLayerNorm);

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GPTConfig& c);
  at::Tensor forward(const at::Tensor& x);  // [B, T, C]
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};

 private:
  int64_t n_head_;
  double dropout_;
  torch::nn::Dropout resid_dropout{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class GPTMlpImpl : public torch::nn::Module {
 public:
  explicit GPTMlpImpl(const GPTConfig& c);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};

 private:
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(GPTMlp);

class GPTBlockImpl : public torch::nn::Module {
 public:
  explicit GPTBlockImpl(const GPTConfig& c);
  at::Tensor forward(const at::Tensor& x);  // x + attn(ln_1(x)), then + mlp(ln_2(.))
  GPTLayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  GPTMlp mlp{nullptr};
};
TORCH_MODULE(GPTBlock);

class GPTImpl : public torch::nn::Module {
 public:
  explicit GPTImpl(const GPTConfig& c = {});
  at::Tensor forward(const at::Tensor& tokens);  // int64 [B, T <= block_size] -> logits [B, T, vocab_size]
  const GPTConfig& config() const { return config_; }
  // Parameters without those of the position embedding (nanoGPT's count: the tied wte is counted once).
  int64_t num_parameters() const;

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<ddp::Sharded<GPTBlock>> h;  // units of their own when the model is sharded
  GPTLayerNorm ln_f{nullptr};

 private:
  GPTConfig config_;
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(GPT);

// Mean cross-entropy of logits [B, T, V] against next tokens [B, T] (int64).
at::Tensor next_token_loss(const at::Tensor& logits, const at::Tensor& targets);

// `tokens` [1, T] followed by `count` tokens sampled one at a time from the model's last logits (the context
// cropped to block_size), divided by `temperature`, kept to the `top_k` largest (0: all). In evaluation mode,
// without gradients; the model must hold its full weights.
at::Tensor generate(GPTImpl& model, const at::Tensor& tokens, int64_t count, double temperature, int64_t top_k,
                    at::Generator& gen);

}  // namespace ddp::models
