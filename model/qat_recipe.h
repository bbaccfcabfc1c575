// Quantization-aware training's recipe (train.qat, train.qat_activations): the format each
// quantized linear layer's weight (model/quantized_weights.h) is fake-quantized in, and whether
// the layer's input is fake-quantized too, to int8 per token.
#pragma once

#include "kernels/weight_quant.h"

namespace dt {

struct QatRecipe {
  kernels::WeightFormat weights = kernels::WeightFormat::int8;
  // Each row (token) of the input in int8, symmetric, its scale the row's largest magnitude / 127
  // (kernels/weight_quant.h's int8 rule): what a runtime that quantizes activations dynamically
  // per token computes with. Forward only: the input's gradient passes unchanged.
  bool activations = false;
};

}  // namespace dt
