// Element types and their conversions.
//
// fp32 and fp64 are native. bf16 and fp16 are 16-bit storage types; fp8 e4m3 (the "fn"
// variant: no infinity, one NaN pattern per sign, max 448) and e5m2 (IEEE-like, max 57344)
// are 8-bit storage types for later use. Every conversion from fp32 rounds to nearest, ties
// to even, as PyTorch's `tensor.to(dtype)` does. Overflow follows PyTorch too: to infinity
// where the format has one (fp16, bf16, e5m2) and to NaN where it does not (e4m3fn).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace dt {

enum class DType : uint8_t { f32, f64, bf16, f16, f8e4m3, f8e5m2, i8, i32, i64, u16, u32 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", ...
// Parses a name written by dtype_name; throws dt::Error naming the valid names otherwise.
DType dtype_from_name(std::string_view name);
bool dtype_is_float(DType dtype);

// The precisions a model trains in (how its activations and the weights forward reads are
// stored): f32; bf16 and f16, with f32 master weights and gradients.
inline constexpr std::array kTrainingPrecisions{DType::f32, DType::bf16, DType::f16};
bool is_training_precision(DType dtype);
// Parses "f32", "bf16" or "f16"; throws dt::Error naming the valid precisions.
DType precision_from_name(std::string_view name);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::u32; }

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// bf16 is the top half of an fp32, so both directions are bit operations (the hot path).
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t h) { return float_from_bits(static_cast<uint32_t>(h) << 16); }

// fp16 and the fp8 formats go through one routine parameterised by the format's layout.
uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);
uint8_t float_to_f8e4m3(float f);
float f8e4m3_to_float(uint8_t b);
uint8_t float_to_f8e5m2(float f);
float f8e5m2_to_float(uint8_t b);

}  // namespace dt
