#include "core/rng.h"

#include <cmath>
#include <numbers>

namespace dt {

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

uint64_t stable_hash(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

ElementRng::ElementRng(uint64_t seed, std::string_view stream_name)
    : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}, stream_(stable_hash(stream_name)) {}

PhiloxCounter ElementRng::counter(uint64_t index) const {
  return {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), static_cast<uint32_t>(stream_),
          static_cast<uint32_t>(stream_ >> 32)};
}

namespace {
// 32 random bits to a uniform in (0, 1): never 0, so log() below is finite.
double to_open_unit(uint32_t bits) { return (static_cast<double>(bits) + 0.5) * 0x1p-32; }
}  // namespace

double ElementRng::uniform(uint64_t index) const { return to_open_unit(philox4x32_10(counter(index), key_)[0]); }

double ElementRng::normal(uint64_t index) const {
  // Box-Muller on two uniforms of 53 bits each (two words each), so the tails are not clipped
  // at the resolution of a 32-bit uniform.
  const PhiloxCounter r = philox4x32_10(counter(index), key_);
  const double u1 = (static_cast<double>((static_cast<uint64_t>(r[0]) << 21) | (r[1] >> 11)) + 0.5) * 0x1p-53;
  const double u2 = (static_cast<double>((static_cast<uint64_t>(r[2]) << 21) | (r[3] >> 11)) + 0.5) * 0x1p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void fill_normal(float* out, int64_t count, uint64_t first_index, const ElementRng& rng, float mean, float std) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < count; ++k)
    out[k] = static_cast<float>(mean + std * rng.normal(first_index + static_cast<uint64_t>(k)));
}

}  // namespace dt
