// Models for the tests against Hugging Face transformers (tests/reference/hf_reference.py): the
// cases they run over, and the arguments of `hf_reference.py make` that describe a ModelConfig.
#pragma once

#include <ostream>
#include <string>

#include "model/config.h"

namespace dt::testing {

// A named model for parameterized tests.
struct HfCase {
  const char* name;
  ModelConfig model;
};
void PrintTo(const HfCase& c, std::ostream* os);

// A preset with its vocabulary and context shrunk for a test.
ModelConfig sized(const char* preset, int vocab_size, int max_seq_len);

// "FAMILY n_layer=... d_model=... ...": every size hf_reference.py's make reads.
std::string hf_make_args(const ModelConfig& config);

}  // namespace dt::testing
