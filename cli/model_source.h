// Where the weights of eval, generate and export come from, as flags:
//   --checkpoint DIR   a training checkpoint: a step directory, or a checkpoint root (its latest)
//   --hf DIR           a Hugging Face model directory: config.json and model.safetensors
// Exactly one must be given.
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
