// Building Hugging Face models for the tests: the arguments of `hf_reference.py make` that
// describe a ModelConfig to transformers (tests/reference/hf_reference.py).
#pragma once

#include <string>

#include "model/config.h"

namespace dt::testing {

// "FAMILY n_layer=... d_model=... ...": every size hf_reference.py's make reads.
std::string hf_make_args(const ModelConfig& config);

}  // namespace dt::testing
