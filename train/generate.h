// Text generation: a prompt through a KV-cached model (model/inference.h), then one sampled
// token at a time (train/sampler.h), each handed to a callback as soon as it exists, so that a
// command line can print text while the model is still writing it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "model/inference.h"
#include "train/sampler.h"

namespace dt {

struct GenerateOptions {
  int max_new_tokens = 0;  // >= 0; generation stops after this many tokens
  SamplingConfig sampling = {};  // greedy when sampling.temperature = 0
  std::optional<int32_t> stop_token = std::nullopt;  // ends generation when sampled (usually end-of-text)
};

// Empties `session`, prefills `prompt` (at least one token; to start from nothing, pass the
// tokenizer's end-of-text token, as GPT-2 does) and samples up to max_new_tokens tokens, step i
// drawn with Sampler::sample(logits, i). Each token is passed to on_token (may be empty) before
// the next is computed, and returned in order. The stop token ends generation and is neither
// passed on nor returned.
// Throws dt::Error before generating anything for invalid options, an id outside the vocabulary,
// or when the prompt and max_new_tokens - 1 fed-back tokens exceed session.max_tokens().
std::vector<int32_t> generate(InferenceSession& session, std::span<const int32_t> prompt, const GenerateOptions& options,
                              const std::function<void(int32_t token)>& on_token = {});

}  // namespace dt
