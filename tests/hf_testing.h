// Models for the tests against Hugging Face transformers (tests/reference/hf_reference.py): the
// cases they run over, the arguments of `hf_reference.py make` that describe a ModelConfig, and
// the token ids both sides run.
#pragma once

#include <ostream>
#include <string>

#include "model/config.h"
#include "model/transformer.h"
#include "tests/gradcheck.h"

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

// The test sequence of `seq` token ids, (t · 37 + 11) mod vocab_size: comma-separated, as
// hf_reference.py's logits and pretrained take it; and `model`'s logits for it, (1, seq, V).
std::string hf_token_list(int vocab_size, int seq);
OwnedTensor hf_test_logits(Transformer& model, int seq);

}  // namespace dt::testing
