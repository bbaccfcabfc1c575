#include "tests/reference_io.h"

#include <cstdio>

namespace dt::testing {

void set_numeric_metadata(ckpt::SafetensorsWriter& writer, std::initializer_list<std::pair<const char*, double>> values) {
  for (const auto& [key, value] : values) {
    char text[64];
    std::snprintf(text, sizeof text, "%.17g", value);  // round-trips exactly
    writer.set_metadata(key, text);
  }
}

void set_model_metadata(ckpt::SafetensorsWriter& writer, const ModelConfig& c) {
  set_numeric_metadata(writer, {{"n_layer", c.n_layer},
                                {"d_model", c.d_model},
                                {"n_head", c.n_head},
                                {"n_kv_head", c.kv_heads()},
                                {"ffn_hidden", c.ffn_hidden()},
                                {"vocab_size", c.vocab_size},
                                {"max_seq_len", c.max_seq_len},
                                {"tied", c.tied_embeddings},
                                {"norm_eps", c.norm_eps},
                                {"rope_theta", c.rope_theta},
                                {"rope_scaling_factor", c.rope_scaling_factor},
                                {"rope_low_freq_factor", c.rope_low_freq_factor},
                                {"rope_high_freq_factor", c.rope_high_freq_factor},
                                {"rope_original_max_seq_len", c.rope_original_max_seq_len}});
  writer.set_metadata("family", std::string(model_family_name(c.family)));
}

}  // namespace dt::testing
