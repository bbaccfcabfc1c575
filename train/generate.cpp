#include "train/generate.h"

#include <algorithm>

#include "core/error.h"

namespace dt {

std::vector<int32_t> generate(InferenceSession& session, std::span<const int32_t> prompt, const GenerateOptions& options,
                              const std::function<void(int32_t token)>& on_token) {
  Sampler sampler(options.sampling);
  const int V = session.config().vocab_size;
  if (options.max_new_tokens < 0)
    throw Error(str("max_new_tokens = ", options.max_new_tokens, " must be >= 0"));
  if (options.stop_token && (*options.stop_token < 0 || *options.stop_token >= V))
    throw Error(str("stop token ", *options.stop_token, " is outside the vocabulary [0, ", V,
                    "); pass an id of the model's tokenizer"));
  // The last token is sampled, never fed back, so it needs no room in the cache.
  const int64_t needed = static_cast<int64_t>(prompt.size()) + std::max(options.max_new_tokens - 1, 0);
  if (needed > session.max_tokens())
    throw Error(str("a prompt of ", prompt.size(), " tokens and ", options.max_new_tokens, " new tokens need ", needed,
                    " positions in the key/value cache, which holds max_tokens = ", session.max_tokens(),
                    "; shorten the prompt or lower max_new_tokens (the model's context is max_seq_len = ",
                    session.config().max_seq_len, ")"));

  session.reset();
  std::vector<int32_t> generated;
  if (options.max_new_tokens == 0) return generated;
  std::span<const float> logits = session.prefill(prompt);
  for (int i = 0; i < options.max_new_tokens; ++i) {
    const int32_t token = sampler.sample(logits, static_cast<uint64_t>(i));
    if (options.stop_token && token == *options.stop_token) break;
    generated.push_back(token);
    if (on_token) on_token(token);
    if (i + 1 < options.max_new_tokens) logits = session.next(token);
  }
  return generated;
}

}  // namespace dt
