// FP8 training's recipe: how each linear layer of a block quantizes the operands of its three
// GEMMs (kernels/float8_linear.h), chosen by train.fp8 and the [fp8] keys (docs/training.md).
//
//   tensorwise  one scale per tensor from its amax now (current scaling: torchao's float8
//               tensorwise, Transformer Engine's Float8CurrentScaling)
//   delayed     one scale per tensor from the amaxes of the last `amax_history` steps
//               (Transformer Engine's DelayedScaling): the step's amaxes are recorded, agreed on
//               by every rank holding the layer, and the next step's scales made from them
//   blockwise   a power-of-two scale per tile of `block` elements: 1 x block tiles of the
//               activations and gradients along the dimension their product sums over (block x 1
//               for the weight gradient), block x block tiles of the weights (DeepSeek-V3's,
//               Transformer Engine's Float8BlockScaling)
//
// Formats: "hybrid" quantizes inputs and weights as e4m3 and gradients as e5m2 (more range,
// less precision); "e4m3" all three (DeepSeek-V3).
//
// What stays in bf16, and why: the embedding (a lookup, no GEMM), the output projection (the
// logits feed a softmax over the vocabulary, the most precision-sensitive product), attention's
// scores and values (flash attention's own products), the norms and the MoE router (small and
// sensitive). f32 master weights, gradients and moments are unchanged: FP8 is the GEMMs' input
// format only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "kernels/float8_math.h"
#include "model/config.h"
#include "model/linear_state.h"

namespace dt {

enum class Float8Scaling { none, tensorwise, delayed, blockwise };
std::string_view float8_scaling_name(Float8Scaling scaling);
// Parses "none", "tensorwise", "delayed" or "blockwise"; throws dt::Error naming them otherwise.
Float8Scaling float8_scaling_from_name(std::string_view name);

struct Float8Recipe {
  Float8Scaling scaling = Float8Scaling::none;
  std::string format = "hybrid";      // "hybrid" or "e4m3"
  int amax_history = 16;              // delayed: steps whose amaxes a scale is made from
  std::string amax_compute = "max";   // delayed: "max" over the history, or "most_recent"
  int margin = 0;                     // delayed and tensorwise: binades left free below the largest value
  // tensorwise and delayed: scales rounded down to a power of two (always so for blockwise), so
  // that scaling is exact and a scale does not move with its amax's last bits.
  bool pow2_scales = false;
  int block = 128;                    // blockwise: the tile's side

  bool enabled() const { return scaling != Float8Scaling::none; }
  // The format of each operand of a GEMM.
  kernels::float8_math::Format input_format() const { return kernels::float8_math::Format::e4m3; }
  kernels::float8_math::Format gradient_format() const {
    return format == "e4m3" ? kernels::float8_math::Format::e4m3 : kernels::float8_math::Format::e5m2;
  }
};

// What is wrong with the recipe's own keys: (key, what is wrong and the fix) each; empty when
// nothing is.
std::vector<std::pair<std::string, std::string>> float8_recipe_problems(const Float8Recipe& recipe);

// The linear layers FP8 quantizes: every linear layer a block declares (model/block_declaration.h)
// except the MoE router and the shared expert's gate; the experts' grouped products too
// (model/float8_grouped_linear.h).
bool float8_quantizes(std::string_view linear);

// The per-linear state a recipe keeps (model/linear_state.h) on every linear layer of `config`'s
// blocks it quantizes: for delayed scaling, per operand (input, weight, output gradient) the
// step's amax so far ("fp8_amax", 3), the last steps' amaxes, newest first
// ("fp8_amax_history", 3 x amax_history) and the scale ("fp8_scale", 3, starting at 1);
// nothing for the others, which keep no state.
std::vector<LinearStateDeclaration> float8_state_declarations(const Float8Recipe& recipe, const ModelConfig& config);

// How one model trains in FP8: its recipe, and the groups over which the pieces of one tensor
// lie, whose amaxes a tensorwise scale takes the max over — the tensor-parallel group (pieces of
// a weight, of a row-parallel layer's input, of a column-parallel layer's output gradient) and
// the context-parallel group (rows of every activation). None on one rank.
struct Float8Training {
  Float8Recipe recipe;
  Communicator* tp = nullptr;
  Communicator* cp = nullptr;
  // Under context parallelism, the stage's dp × cp ranks (ProcessGroups::dp_cp), over which the
  // experts' tensorwise amaxes are agreed on (model/float8_grouped_linear.h); else none.
  Communicator* replicas = nullptr;
};

}  // namespace dt
