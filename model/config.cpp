#include "model/config.h"

#include "core/error.h"

namespace dt {

namespace {

struct Preset {
  std::string_view name;
  ModelConfig config;
};

constexpr ModelConfig gpt2(int n_layer, int d_model, int n_head, int vocab_size = 50257, int max_seq_len = 1024) {
  return {.family = ModelFamily::gpt2,
          .n_layer = n_layer,
          .d_model = d_model,
          .n_head = n_head,
          .vocab_size = vocab_size,
          .max_seq_len = max_seq_len};
}

constexpr Preset kPresets[] = {
    {"gpt2-124m", gpt2(12, 768, 12)},
    {"gpt2-355m", gpt2(24, 1024, 16)},
    {"gpt2-774m", gpt2(36, 1280, 20)},
    {"gpt2-1558m", gpt2(48, 1600, 25)},
    // Small sizes for tests and the quickstart: an odd head count and a vocabulary that is not
    // a multiple of 64, so padding and head splitting are always exercised.
    {"gpt2-tiny", gpt2(2, 48, 3, 997, 64)},
    {"gpt2-mini", gpt2(4, 192, 6, 50257, 256)},
};

}  // namespace

std::string_view model_family_name(ModelFamily family) {
  switch (family) {
    case ModelFamily::gpt2:
      return "gpt2";
  }
  return "?";
}

int ModelConfig::padded_vocab_size() const {
  const int m = vocab_pad_multiple;
  return (vocab_size + m - 1) / m * m;
}

void validate_model_config(const ModelConfig& c) {
  std::string problems;
  auto require = [&](bool ok, std::string_view field, long long value, std::string_view valid) {
    if (!ok) problems += str("\n  model.", field, " = ", value, ": ", valid);
  };
  require(c.n_layer >= 1, "n_layer", c.n_layer, "must be at least 1");
  require(c.d_model >= 1, "d_model", c.d_model, "must be at least 1");
  require(c.n_head >= 1, "n_head", c.n_head, "must be at least 1");
  if (c.n_head >= 1 && c.d_model >= 1)
    require(c.d_model % c.n_head == 0, "d_model", c.d_model,
            str("must be divisible by n_head = ", c.n_head, " (head size = d_model / n_head)"));
  require(c.vocab_size >= 1, "vocab_size", c.vocab_size, "must be at least 1");
  require(c.max_seq_len >= 1, "max_seq_len", c.max_seq_len, "must be at least 1");
  require(c.vocab_pad_multiple >= 1 && c.vocab_pad_multiple <= 4096, "vocab_pad_multiple", c.vocab_pad_multiple,
          "must be in [1, 4096] (1 disables padding)");
  // Sizes are multiplied together for buffer offsets; keep every product inside int64 and
  // every single dimension inside int32 for BLAS.
  require(c.d_model <= (1 << 20), "d_model", c.d_model, "must be at most 1048576");
  require(c.vocab_size <= (1 << 30), "vocab_size", c.vocab_size, "must be at most 2^30");
  require(c.max_seq_len <= (1 << 24), "max_seq_len", c.max_seq_len, "must be at most 2^24");
  require(c.n_layer <= 4096, "n_layer", c.n_layer, "must be at most 4096");
  if (!problems.empty()) throw Error(str("invalid model description:", problems));
}

ModelConfig model_preset(std::string_view name) {
  for (const auto& p : kPresets)
    if (p.name == name) return p.config;
  std::string valid;
  for (const auto& p : kPresets) valid += str(valid.empty() ? "" : ", ", p.name);
  throw Error(str("unknown model preset '", name, "'; valid presets are ", valid));
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

}  // namespace dt
