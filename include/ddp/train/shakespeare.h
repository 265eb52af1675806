// The character-level text of the shakespeare-char recipes: its vocabulary (the sorted distinct characters of
// the whole text, one token each), encoding and decoding, and the GPT configuration of each recipe.
//
//   auto text = ddp::train::load_char_text("../shared/data/tinyshakespeare");   // reads input.txt
//   at::Tensor prompt = text.encode("ROMEO:").unsqueeze(0);
//   std::string more = text.decode(ddp::models::generate(*gpt, prompt, 200, 0.8, 200, gen));
#pragma once
#include <ATen/ATen.h>

#include <string>

#include "ddp/train/models/gpt.h"

namespace ddp::train {

struct CharText {
  std::string text;
  std::string vocab;  // token i is the character vocab[i]
  // int64 tokens of `s`; InvalidArgument naming a character outside the vocabulary.
  at::Tensor encode(const std::string& s) const;
  std::string decode(const at::Tensor& tokens) const;
};

// dir/input.txt; InvalidArgument saying where to get it when it is missing or too short.
CharText load_char_text(const std::string& dir);

// The GPT of recipe shakespeare-char (nanoGPT's CPU configuration) or shakespeare-char-gpu (its full one).
models::GPTConfig shakespeare_gpt_config(const std::string& recipe, int64_t vocab_size);

}  // namespace ddp::train
