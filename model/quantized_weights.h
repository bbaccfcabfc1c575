// Which weights quantization applies to, and post-training quantization of them: every linear
// layer's weight — each block's projections, and the output projection when it is its own
// (lm_head) — in the format's values (kernels/weight_quant.h). Embeddings, norms and biases stay
// as they are (f16 in a quantized GGUF file, as llama.cpp's own converter leaves token and
// position embeddings unquantized in its pure types). The exporter writes exactly these in a
// quantized format, and quantization-aware training fake-quantizes exactly these, so a QAT model
// exports with no change. Experts' weights are not quantized yet: a model with experts is
// refused where a format is asked for.
#pragma once

#include <string>

#include "kernels/weight_quant.h"
#include "model/parameters.h"

namespace dt {

bool is_quantized_weight(const ParamInfo& p);

// The quantized weights whose rows `format`'s blocks do not divide, as "name (rows x cols)",
// comma-separated; "" when every one fits.
std::string weights_not_in_blocks(const ParameterLayout& layout, kernels::WeightFormat format);

// Throws dt::Error unless every quantized weight of `layout` can be written in `format`: naming
// the weights whose rows the format's blocks do not divide, or saying that the model has experts.
void check_quantizable(const ParameterLayout& layout, kernels::WeightFormat format);

// Replaces every quantized weight of `params` (whole, f32, on the host) by its values in
// `format`: what eval and generate run to measure post-training quantization. Checks first
// (check_quantizable).
void fake_quantize_weights(FlatTensors& params, kernels::WeightFormat format);

}  // namespace dt
