#include "ddp/train/models/gpt.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/nn/options/embedding.h>

#include <cmath>
#include <string>

#include "ddp/errors.h"
#include "ddp/torch_compat.h"

namespace ddp::models {
namespace {

torch::nn::Linear linear(int64_t in, int64_t out, bool bias, double std) {
  torch::nn::Linear l(torch::nn::LinearOptions(in, out).bias(bias));
  torch::NoGradGuard no_grad;
  l->weight.normal_(0, std);
  if (bias) l->bias.zero_();
  return l;
}

double residual_std(const GPTConfig& c) { return 0.02 / std::sqrt(2.0 * double(c.n_layer)); }

}  // namespace

GPTLayerNormImpl::GPTLayerNormImpl(int64_t dim, bool with_bias) {
  weight = register_parameter("weight", at::ones({dim}));
  if (with_bias) bias = register_parameter("bias", at::zeros({dim}));
}

at::Tensor GPTLayerNormImpl::forward(const at::Tensor& x) {
  return at::layer_norm(x, {weight.size(0)}, weight, bias, 1e-5);
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GPTConfig& c) : n_head_(c.n_head), dropout_(c.dropout) {
  if (c.n_embd % c.n_head != 0)
    throw InvalidArgument("GPT: n_embd (" + std::to_string(c.n_embd) + ") must be a multiple of n_head (" +
                          std::to_string(c.n_head) + ")");
  c_attn = register_module("c_attn", linear(c.n_embd, 3 * c.n_embd, c.bias, 0.02));
  c_proj = register_module("c_proj", linear(c.n_embd, c.n_embd, c.bias, residual_std(c)));
  resid_dropout = register_module("resid_dropout", torch::nn::Dropout(c.dropout));
}

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2);
  auto qkv = c_attn(x).split(c, 2);  // each [B, T, C] -> [B, H, T, C/H]
  auto heads = [&](const at::Tensor& y) { return y.view({b, t, n_head_, c / n_head_}).transpose(1, 2); };
  at::Tensor y = compat::causal_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), is_training() ? dropout_ : 0);
  return resid_dropout(c_proj(y.transpose(1, 2).contiguous().view({b, t, c})));
}

GPTMlpImpl::GPTMlpImpl(const GPTConfig& c) {
  c_fc = register_module("c_fc", linear(c.n_embd, 4 * c.n_embd, c.bias, 0.02));
  c_proj = register_module("c_proj", linear(4 * c.n_embd, c.n_embd, c.bias, residual_std(c)));
  dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
}

at::Tensor GPTMlpImpl::forward(const at::Tensor& x) { return dropout(c_proj(at::gelu(c_fc(x)))); }

GPTBlockImpl::GPTBlockImpl(const GPTConfig& c) {
  ln_1 = register_module("ln_1", GPTLayerNorm(c.n_embd, c.bias));
  attn = register_module("attn", CausalSelfAttention(c));
  ln_2 = register_module("ln_2", GPTLayerNorm(c.n_embd, c.bias));
  mlp = register_module("mlp", GPTMlp(c));
}

at::Tensor GPTBlockImpl::forward(const at::Tensor& x) {
  at::Tensor y = x + attn(ln_1(x));
  return y + mlp(ln_2(y));
}

GPTImpl::GPTImpl(const GPTConfig& c) : config_(c) {
  if (c.vocab_size < 1 || c.block_size < 1 || c.n_layer < 1 || c.n_head < 1 || c.n_embd < 1)
    throw InvalidArgument("GPT: vocab_size, block_size, n_layer, n_head and n_embd must be positive");
  wte = register_module("wte", torch::nn::Embedding(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", torch::nn::Embedding(c.block_size, c.n_embd));
  {
    torch::NoGradGuard no_grad;
    wte->weight.normal_(0, 0.02);
    wpe->weight.normal_(0, 0.02);
  }
  drop = register_module("drop", torch::nn::Dropout(c.dropout));
  for (int64_t i = 0; i < c.n_layer; ++i) h.emplace_back(register_module("h" + std::to_string(i), GPTBlock(c)));
  ln_f = register_module("ln_f", GPTLayerNorm(c.n_embd, c.bias));
}

at::Tensor GPTImpl::forward(const at::Tensor& tokens) {
  const int64_t t = tokens.size(1);
  if (tokens.dim() != 2 || t > config_.block_size)
    throw InvalidArgument("GPT: tokens must be [batch, T] with T <= block_size " + std::to_string(config_.block_size) +
                          " (got " + std::to_string(t) + ")");
  at::Tensor pos = at::arange(t, tokens.options().dtype(at::kLong));
  at::Tensor x = drop(wte(tokens) + wpe(pos));
  for (auto& block : h) x = block(x);
  return at::linear(ln_f(x), wte->weight);  // the logits through the tied embedding
}

int64_t GPTImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n - wpe->weight.numel();
}

at::Tensor next_token_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape({-1}));
}

at::Tensor generate(GPTImpl& model, const at::Tensor& tokens, int64_t count, double temperature, int64_t top_k,
                    at::Generator& gen) {
  if (!(temperature > 0)) throw InvalidArgument("generate: the temperature must be > 0");
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  at::Tensor idx = tokens.to(model.wte->weight.device());  // the prompt where the model is
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = idx.size(1), keep = std::min(t, model.config().block_size);
    at::Tensor logits = model.forward(idx.narrow(1, t - keep, keep)).select(1, keep - 1).to(at::kFloat) / temperature;
    if (top_k > 0 && top_k < logits.size(-1)) {
      at::Tensor kth = std::get<0>(logits.topk(top_k, -1)).narrow(-1, top_k - 1, 1);
      logits = logits.masked_fill(logits < kth, -INFINITY);
    }
    // Drawn where `gen` draws (a CPU generator for a GPU model: the probabilities come to it).
    const at::Tensor next = at::multinomial(at::softmax(logits, -1).to(gen.device()), 1, false, gen);
    idx = at::cat({idx, next.to(idx.device())}, 1);
  }
  model.train(was_training);
  return idx;
}

}  // namespace ddp::models
