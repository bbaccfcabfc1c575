// Where the weights of eval, generate and export come from, as flags:
//   --checkpoint DIR   a training checkpoint: a step directory, or a checkpoint root (its latest)
//   --hf DIR           a Hugging Face model directory: config.json and model.safetensors
// Exactly one must be given. And:
//   --quantize FORMAT  the linear layers' weights replaced by their values in int8, q8_0 or q4_0
//                      (model/quantized_weights.h): post-training quantization, dequantized into
//                      the f32 kernels, so eval and generate measure what it costs
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "cli/args.h"
#include "model/parameters.h"

namespace dt::cli {

void declare_model_source_flags(Args& args);

struct ModelWeights {
  std::string origin;  // for messages: "checkpoint DIR (step N)" or "Hugging Face model DIR"
  std::unique_ptr<ParameterLayout> layout;
  std::unique_ptr<FlatTensors> params;  // f32
};

// Reads the description and the weights (each checksummed or checked against the description).
ModelWeights model_weights_from_flags(const Args& args);
ModelWeights weights_from_checkpoint(const std::filesystem::path& step_or_root);
ModelWeights weights_from_hf(const std::filesystem::path& directory);

}  // namespace dt::cli
