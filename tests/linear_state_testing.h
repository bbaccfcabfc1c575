// What the per-linear state's tests share (model/linear_state_test.cpp,
// train/training_checkpoint_test.cpp): FP8-like kinds and a model of three blocks.
#pragma once

#include <vector>

#include "model/config.h"
#include "model/linear_state.h"

namespace dt::testing {

// An amax history on every linear layer and a scale, starting at 1, on two of them.
inline std::vector<LinearStateDeclaration> fp8_like_states() {
  return {{.name = "amax_history", .count = 16, .linears = {}, .initial = 0},
          {.name = "scale", .count = 2, .linears = {"mlp.proj", "attn.qkv"}, .initial = 1}};
}

inline ModelConfig three_blocks(const char* preset) {
  ModelConfig c = model_preset(preset);
  c.n_layer = 3;
  return c;
}

}  // namespace dt::testing
