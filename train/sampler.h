// Picking the next token from a model's logits: greedy, or a draw from the softmax at a
// temperature, narrowed to the top k tokens and then to the nucleus of probability top_p
// (Holtzman et al., "The Curious Case of Neural Text Degeneration").
//
//   temperature 0:  argmax of the logits, the lowest id among equal maxima.
//   otherwise:      candidates = the top_k largest logits (all when top_k = 0), ties to the lower id;
//                   p_i = softmax_i(logit_i / temperature) over the candidates;
//                   nucleus = the fewest leading candidates whose p sums to at least top_p;
//                   draw i from the nucleus with probability p_i / sum_nucleus p.
//
// A draw is a pure function of (seed, step, logits): the uniform of step s is Philox element s
// of the stream (seed, "sampling") (core/rng.h), so a generation is reproducible token for
// token, and any step can be replayed alone.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dt {

struct SamplingConfig {
  float temperature = 1;  // >= 0; 0 is greedy; below 1 sharpens the distribution, above 1 flattens it
  int top_k = 0;          // >= 0; 0 keeps every token; 1 is greedy
  float top_p = 1;        // in (0, 1]; 1 keeps every candidate; smaller keeps only the likeliest
  uint64_t seed = 0;      // the draws' stream; the same seed and logits give the same tokens
};

// Throws dt::Error naming every invalid field with its value and valid range.
void validate_sampling_config(const SamplingConfig& config);

class Sampler {
 public:
  explicit Sampler(const SamplingConfig& config);  // validates config

  const SamplingConfig& config() const { return config_; }
  // The token for generation step `step` from logits (V) f32. Throws dt::Error for empty logits
  // or a NaN (a model that has diverged).
  int32_t sample(std::span<const float> logits, uint64_t step);

 private:
  SamplingConfig config_;
  std::vector<int32_t> order_;  // candidate ids, best first (reused across steps)
  std::vector<double> probs_;   // their probabilities
};

}  // namespace dt
