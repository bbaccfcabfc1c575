#include "train/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/error.h"
#include "core/rng.h"

namespace dt {

void validate_sampling_config(const SamplingConfig& config) {
  std::string problems;
  if (!(config.temperature >= 0) || !std::isfinite(config.temperature))
    problems += str("\n  temperature = ", config.temperature, ": must be a finite value >= 0 (0 is greedy)");
  if (config.top_k < 0) problems += str("\n  top_k = ", config.top_k, ": must be >= 0 (0 keeps every token)");
  if (!(config.top_p > 0 && config.top_p <= 1))
    problems += str("\n  top_p = ", config.top_p, ": must be in (0, 1] (1 keeps every candidate)");
  if (!problems.empty()) throw Error("invalid sampling settings:" + problems);
}

namespace {

const SamplingConfig& validated(const SamplingConfig& config) {
  validate_sampling_config(config);
  return config;
}

}  // namespace

Sampler::Sampler(const SamplingConfig& config) : config_(validated(config)) {}

int32_t Sampler::sample(std::span<const float> logits, uint64_t step) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (V == 0) throw Error("sampling from empty logits; the model's vocabulary must hold at least one token");
  for (int64_t i = 0; i < V; ++i)
    if (std::isnan(logits[i]))
      throw Error(str("logit of token ", i, " is NaN: the model's weights or activations have diverged; check the "
                      "checkpoint (its training loss) before generating from it"));
  // Best first; among equal logits the lower id, so greedy and top_k = 1 agree and ties are
  // broken the same way on every platform.
  const auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (config_.temperature == 0) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; ++i) best = better(i, best) ? i : best;
    return best;
  }

  const int64_t k = config_.top_k == 0 ? V : std::min<int64_t>(config_.top_k, V);
  order_.resize(static_cast<size_t>(V));
  std::iota(order_.begin(), order_.end(), 0);
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), better);
  // Probabilities in double, relative to the largest logit: exp never overflows, and the
  // normalisation is left to the draw (it compares against a fraction of the kept total).
  probs_.resize(static_cast<size_t>(k));
  const double max_logit = logits[order_[0]], inv_temperature = 1.0 / config_.temperature;
  double total = 0;
  for (int64_t i = 0; i < k; ++i) total += probs_[i] = std::exp((logits[order_[i]] - max_logit) * inv_temperature);
  int64_t nucleus = 0;
  double kept = 0;
  while (nucleus < k && (nucleus == 0 || kept < config_.top_p * total)) kept += probs_[nucleus++];

  const double target = ElementRng(config_.seed, "sampling").uniform(step) * kept;
  double cumulative = 0;
  for (int64_t i = 0; i < nucleus; ++i) {
    cumulative += probs_[i];
    if (cumulative >= target) return order_[i];
  }
  return order_[nucleus - 1];  // target within rounding of kept
}

}  // namespace dt
