// Writing the inputs of the PyTorch reference scripts (tests/reference/).
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "ckpt/safetensors.h"
#include "model/config.h"

namespace dt::testing {

// Metadata values written so that they round-trip exactly through text.
void set_numeric_metadata(ckpt::SafetensorsWriter& writer, std::initializer_list<std::pair<const char*, double>> values);
// The model description that transformer_reference.py's Description reads.
void set_model_metadata(ckpt::SafetensorsWriter& writer, const ModelConfig& config);

}  // namespace dt::testing
