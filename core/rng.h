// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// A Philox draw is a pure function of a 128-bit counter and a 64-bit key, so any element of
// any random stream can be computed directly, in any order, on any process. Parameter
// initialisation uses that: element i of parameter "h.3.mlp.fc.weight" gets
//     value = std * normal(key = seed, counter = (i, hash(name)))
// which depends only on the seed, the name and the index. A tensor-parallel rank that holds
// rows [a, b) of a matrix computes exactly those elements, with no communication and the same
// result as one process building the whole model.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace dt {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// 64-bit FNV-1a: a stable hash (std::hash is not stable across implementations).
uint64_t stable_hash(std::string_view text);

// The stream of one named tensor: draws are indexed by element.
class ElementRng {
 public:
  ElementRng(uint64_t seed, std::string_view stream_name);
  // A uniform in (0, 1) and a standard normal for element `index`, each a pure function of
  // (seed, stream_name, index).
  double uniform(uint64_t index) const;
  double normal(uint64_t index) const;

 private:
  PhiloxCounter counter(uint64_t index) const;
  PhiloxKey key_;
  uint64_t stream_;
};

// Fills out[k] = mean + std * normal(first_index + k) for k in [0, count).
void fill_normal(float* out, int64_t count, uint64_t first_index, const ElementRng& rng, float mean, float std);

}  // namespace dt
