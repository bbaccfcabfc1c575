#include "data/sample_order.h"

#include "core/error.h"
#include "core/rng.h"

namespace dt {

SampleOrder::SampleOrder(int64_t n, uint64_t seed, bool shuffle) : n_(n), seed_(seed), shuffle_(shuffle) {
  DT_CHECK(n >= 1, "a sample order needs at least one sample, got ", n);
  while ((uint64_t{1} << (2 * half_bits_)) < static_cast<uint64_t>(n)) ++half_bits_;
}

// A balanced Feistel network on 2 * half_bits bits: a bijection for any round function.
uint64_t SampleOrder::permute(uint64_t x, uint64_t key) const {
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  uint64_t left = x >> half_bits_, right = x & mask;
  for (uint32_t round = 0; round < 4; ++round) {
    const PhiloxCounter r = philox4x32_10({static_cast<uint32_t>(right), round, 0, 0},
                              {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
    const uint64_t next = left ^ (r[0] & mask);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

int64_t SampleOrder::sample_at(int64_t epoch, int64_t k) const {
  DT_CHECK(k >= 0 && k < n_ && epoch >= 0, "sample position ", k, " of epoch ", epoch, " outside [0, ", n_, ")");
  if (!shuffle_) return k;
  const uint64_t key = stable_hash(str("sample_order.", seed_, ".", epoch));
  // Cycle-walking: the permutation of the larger domain, applied until it lands in [0, n).
  uint64_t x = static_cast<uint64_t>(k);
  do x = permute(x, key);
  while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

}  // namespace dt
