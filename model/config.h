// Model description: the family and the sizes that determine every parameter's shape.
//
// A ModelConfig is plain data; validate_model_config() checks it and is called by everything
// that builds a model from one, before anything is allocated. Describing a model never
// allocates it, so a 1.5B (or later 405B) preset can be inspected on a laptop.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dt {

enum class ModelFamily { gpt2 };
std::string_view model_family_name(ModelFamily family);

struct ModelConfig {
  ModelFamily family = ModelFamily::gpt2;
  int n_layer = 0;
  int d_model = 0;      // C
  int n_head = 0;       // NH; head size HS = d_model / n_head
  int vocab_size = 0;   // V: the tokenizer's vocabulary; what logits, loss and saved tensors use
  int max_seq_len = 0;  // rows of the learned position embedding
  // The embedding is stored with Vp = vocab_size rounded up to this multiple, for GEMM speed
  // (llm.c pads 50257 to 50304). The padding rows are zero, get zero gradient, and are never
  // shown: not in logits, loss, gradients, saved tensors or parameter counts.
  int vocab_pad_multiple = 128;

  int head_size() const { return d_model / n_head; }
  int padded_vocab_size() const;  // Vp
  int ffn_hidden() const { return 4 * d_model; }
};

// Throws dt::Error listing every invalid field with its value and valid range.
void validate_model_config(const ModelConfig& config);

// Published GPT-2 sizes (gpt2-124m, gpt2-355m, gpt2-774m, gpt2-1558m) and small test sizes.
// Throws dt::Error naming the valid presets for an unknown name.
ModelConfig model_preset(std::string_view name);
std::vector<std::string> model_preset_names();

}  // namespace dt
